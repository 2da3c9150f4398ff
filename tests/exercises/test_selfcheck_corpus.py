"""The book's self-check logic (selfcheck.js, run by Node) and the grader agree on a corpus.

Every exercise of every set, with the book's numbers: the right answer, each listed mistake,
two mistakes at once, slips in writing a size, the same answers in fullwidth digits and with a
non-breaking space, and malformed answers. For each text the page gives the grader's verdict:
the same status (correct, incorrect, invalid, unanswered) and the same mistakes named. The
page's documented narrowing (a count followed by words, a count of bytes given as a size, which
:mod:`memtheory.exercises.selfcheck` lists) is not in the corpus.
"""

import json
import shutil
import subprocess
from importlib import resources

import pytest
import sympy as sp

from memtheory.exercises import load_sets
from memtheory.exercises.grading import grade_variant
from memtheory.exercises.selfcheck import selfcheck_data
from memtheory.units import unit_bytes

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js runs the page's script here")

MALFORMED = ("zzz", "224,69", "12k", "~", "(3 +", "3 parsecs", "", "   ", "nan", "1/0")
FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")

HARNESS = """
const fs = require("fs");
global.window = {};
global.document = { readyState: "complete", querySelectorAll: () => [] };
eval(fs.readFileSync(process.argv[1], "utf8"));
const input = JSON.parse(fs.readFileSync(0, "utf8"));
const out = input.cases.map(([index, raw]) => {
  try {
    const r = window.memtheorySelfCheck.feedback(raw, input.data[index]);
    return [r.status, (r.mistakes || []).slice().sort()];
  } catch (e) {
    return ["crashed", [String(e && e.message || e)]];
  }
});
process.stdout.write(JSON.stringify(out));
"""


def written(variant, value):
    """Write ``value`` as a learner would (it parses back to the value)."""
    if variant.kind.name == "expression":
        return sp.sstr(value)
    return variant.kind.solution_text(value)


def texts_for(variant):
    """Texts to check: right, mistakes, pairs, slips, fullwidth and spaced forms, malformed."""
    kind = variant.kind
    texts = [written(variant, variant.expected)]
    texts += [written(variant, m.value) for m in variant.mistaken_answers()]
    texts += [written(variant, pair[0].value) for pair in variant._pairs]
    if kind.name == "quantity":
        number = written(variant, variant.expected).split()[0]
        twin = {"MiB": "MB", "MB": "MiB", "GiB": "GB", "GB": "GiB", "KiB": "kB", "kB": "KiB"}
        texts += [f"{number} {twin.get(kind.unit, 'B')}", f"about {number} {kind.unit}"]
        texts.append(str(int(variant.expected * unit_bytes(kind.unit))))
        texts.append(written(variant, variant.expected * sp.Rational(1001, 1000)))
    if kind.name == "number":
        texts += [str(float(variant.expected / 100)), f"~{float(variant.expected)}%"]
    if kind.name == "integer":
        texts += [f"{variant.expected:,}".replace(",", " "), f"~{variant.expected}", "12.5"]
    if kind.name == "choice":
        texts += ["(a)", "B.", "z"]
    numeric = [t for t in texts if any(c.isdigit() for c in t)]
    texts += [t.translate(FULLWIDTH) for t in numeric]  # the grader reads fullwidth digits
    texts += [f"\u00a0{t}\u3000" for t in texts[:2]]  # spaces Python strips, as JavaScript does
    return [*dict.fromkeys(texts), *MALFORMED]


@pytest.fixture(scope="module")
def corpus():
    """Every exercise's data for the page, and (exercise, text) pairs: at least 2,000."""
    variants = [v for s in load_sets().values() for v in s.variants()]
    data = [selfcheck_data(v) for v in variants]
    cases = [(i, text) for i, v in enumerate(variants) for text in texts_for(v)]
    return variants, data, cases


def page_verdicts(data, cases):
    """Run the page's script in Node on every case; return [status, sorted mistakes] each."""
    script = resources.files("memtheory.exercises").joinpath("selfcheck.js")
    payload = json.dumps({"data": data, "cases": cases})
    done = subprocess.run(
        [NODE, "-e", HARNESS, str(script)],
        input=payload,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout)


def test_the_page_and_the_grader_agree_on_every_answer_of_the_corpus(corpus):
    """Same status and the same named mistakes for each of >= 2,000 answers."""
    variants, data, cases = corpus
    assert len(cases) >= 2000
    page = page_verdicts(data, cases)
    disagreements = []
    for (index, text), (status, mistakes) in zip(cases, page, strict=True):
        result = grade_variant(variants[index], text)
        mine = (result.status, sorted(result.misconceptions))
        if mine != (status, mistakes):
            disagreements.append((variants[index].id, text, mine, (status, mistakes)))
    assert not disagreements, f"{len(disagreements)} disagree, e.g. {disagreements[:8]}"


def test_fullwidth_digits_are_read_by_both():
    """The issue's case: a right count in fullwidth digits is correct on the page too."""
    variant = load_sets()["ch02"].variant("q1")
    text = written(variant, variant.expected).translate(FULLWIDTH)
    assert grade_variant(variant, text).status == "correct"
    assert page_verdicts([selfcheck_data(variant)], [(0, text)]) == [["correct", []]]
