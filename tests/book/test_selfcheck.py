"""The self-check boxes under the book's exercises, in headless Chromium, against the grader.

Two pages: one this test writes (every exercise of every set, as the book embeds
it, with the script the book pastes), which needs no book build; and the built
book's chapters (``book/_build/html``), opened from ``file://``. In both, the
browser's feedback is compared with the grader's own
(:func:`memtheory.exercises.grading.grade_variant`) for the same text: a right
answer, each listed mistake, slips in writing a size or a percentage, two mistakes
at once, and malformed answers.
"""

import json
import re

import pytest
import sympy as sp

from memtheory.exercises import load_sets
from memtheory.exercises.book import label
from memtheory.exercises.grading import grade_variant
from memtheory.exercises.selfcheck import selfcheck_html, selfcheck_script
from memtheory.units import unit_bytes
from tests.book.chromium import Browser, find_chromium
from tests.book.test_rendering import CHAPTERS, HTML

# These tests read book/_build/html: `make test` runs them after it builds the book.
pytestmark = pytest.mark.built_book

MALFORMED = ("zzz", "224,69", "12k", "~", "(3 +", "3 parsecs")

# chapters of the built book, and the exercises typed into on each (several kinds)
BOOK_EXERCISES = {
    "chapters/02_counting_parameters": ("ch02.q1", "ch02.q6", "ch02.q7", "ch02.q9"),
    "chapters/06_batch_size": ("ch06.q2", "ch06.q7"),
    "chapters/07_precision": ("ch07.q3", "ch07.q5"),
    "chapters/13_memory_techniques": None,  # every exercise the chapter shows
}


def written(variant, value):
    """Write ``value`` as a learner would (it parses back to the value)."""
    if variant.kind.name == "expression":
        return sp.sstr(value)
    return variant.kind.solution_text(value)


def answers_for(variant):
    """Texts to type: the right answer, each mistake, slips, pairs, and malformed answers."""
    texts = [written(variant, variant.expected)]
    texts += [written(variant, m.value) for m in variant.mistaken_answers()]
    texts += [written(variant, pair[0].value) for pair in variant._pairs]
    kind = variant.kind
    if kind.name == "quantity":
        number = written(variant, variant.expected).split()[0]
        twin = {"MiB": "MB", "MB": "MiB", "GiB": "GB", "GB": "GiB", "KiB": "kB", "kB": "KiB"}
        texts += [f"{number} {twin.get(kind.unit, 'B')}", f"about {number} {kind.unit}"]
        texts.append(str(int(variant.expected * unit_bytes(kind.unit))))  # bytes, no unit
        texts.append(written(variant, variant.expected * sp.Rational(1001, 1000)))
    if kind.name == "number":
        texts += [str(float(variant.expected / 100)), str(float(variant.expected * 100))]
        texts.append(f"~{float(variant.expected)}%")
    if kind.name == "integer":
        texts += [f"{variant.expected:,}".replace(",", " "), f"~{variant.expected}", "12.5"]
        texts.append(f"{variant.expected}%")
    if kind.name == "choice":
        texts += ["(a)", "B.", kind.options_text().splitlines()[0].split(") ", 1)[1].upper()]
    if kind.name == "expression":
        texts.append(sp.sstr(variant.expected).replace("*", " "))  # juxtaposition
    return [*dict.fromkeys(texts), *MALFORMED]


def grader(variant, text):
    """The grader's verdict on ``text``: its status and feedback."""
    result = grade_variant(variant, text)
    return result.status, result.feedback, sorted(result.misconceptions)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium, skipping when there is none."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("Chromium not found: install Debian's 'chromium' (make test does) to run this")
    with Browser(binary, width=1280, height=900) as chromium:
        yield chromium


def type_answer(browser, exercise_id, text):
    """Type ``text`` into the exercise's box, press Check, and read the feedback shown."""
    box = f"document.querySelector('div.mt-selfcheck[data-exercise=\"{exercise_id}\"]')"
    focused = browser.evaluate(
        f"(() => {{ const i = {box}.querySelector('input'); i.value = ''; i.focus();"
        " return document.activeElement === i; })()"
    )
    assert focused, exercise_id
    browser.call("Input.insertText", {"text": text}, session=True)  # typed, as a reader would
    return browser.evaluate(
        f"(() => {{ const b = {box}; b.querySelector('button').click();"
        " const o = b.querySelector('.mt-selfcheck-feedback');"
        " return [o.dataset.status, o.textContent,"
        " o.dataset.mistakes ? o.dataset.mistakes.split(' ').sort() : []]; })()"
    )


def agrees(shown, expected):
    """The browser's verdict is the grader's: same status; same text unless it is malformed."""
    status, text, mistakes = shown
    if expected[0] == "invalid":
        return status == "invalid" and text.startswith("Cannot grade this answer: ")
    return [status, text, mistakes] == list(expected)


@pytest.mark.slow
def test_every_exercise_checks_in_the_browser_as_the_grader_does(browser, tmp_path):
    """On a page of every exercise, each answer's feedback is the grader's, word for word."""
    variants = [v for s in load_sets().values() for v in s.variants()]
    page = tmp_path / "selfcheck.html"
    boxes = "\n".join(selfcheck_html(v) for v in variants)
    page.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"></head><body>{boxes}\n'
        f"{selfcheck_script()}</body></html>",
        encoding="utf-8",
    )
    browser.open(page)
    assert browser.evaluate("document.querySelectorAll('form.mt-selfcheck-form').length") == len(
        variants
    )
    cases = [(v, text) for v in variants for text in answers_for(v)]
    script = json.dumps([[v.id, text] for v, text in cases])
    shown = browser.evaluate(
        f"{script}.map(([id, text]) => {{"
        ' const box = document.querySelector(`div.mt-selfcheck[data-exercise="${id}"]`);'
        " const data = JSON.parse(box.querySelector('script').textContent);"
        " const r = window.memtheorySelfCheck.feedback(text, data);"
        " return [r.status, r.text, (r.mistakes || []).slice().sort()]; })",
        timeout=120,
    )
    verdicts = [grader(v, text) for v, text in cases]
    wrong = [
        (v.id, text, got, verdict)
        for (v, text), got, verdict in zip(cases, shown, verdicts, strict=True)
        if not agrees(got, verdict)
    ]
    assert not wrong, wrong[:5]
    statuses = {got[0] for got in shown}
    assert statuses == {"correct", "incorrect", "invalid"}
    assert sum(1 for got in shown if got[2]) > len(variants)  # named mistakes, many of them
    # typed into three boxes for real: a right answer, a named mistake, a malformed answer
    q1 = next(v for v in variants if v.id == "ch02.q1")
    assert type_answer(browser, "ch02.q1", "78,500") == ["correct", "Correct.", []]
    mistake = type_answer(browser, "ch02.q1", "78400")
    assert agrees(mistake, grader(q1, "78400")) and mistake[2] == ["forgot_bias"]
    assert type_answer(browser, "ch02.q1", "78.5k")[0] == "invalid"


def test_the_built_book_checks_answers_on_the_page(browser):
    """In the built book, opened from file://, typed answers get the grader's feedback."""
    if not (HTML / "intro.html").exists():
        pytest.skip("book/_build/html is missing: run 'make book' first (make test does)")
    sets = load_sets()
    checked = 0
    for page, chosen in BOOK_EXERCISES.items():
        browser.open(HTML / f"{page}.html")
        on_page = browser.evaluate(
            "[...document.querySelectorAll('div.mt-selfcheck form')]"
            ".map(f => f.parentElement.dataset.exercise)"
        )
        source = (HTML.parents[1] / f"{page}.md").read_text(encoding="utf-8")
        glued = re.findall(r"^:label: (ex-ch\d+-q\w+)$", source, re.M)
        assert glued and sorted(label(i) for i in on_page) == sorted(glued), page  # one each
        for exercise_id in chosen or on_page:
            assert exercise_id in on_page, (page, exercise_id)
            set_id, short = exercise_id.split(".")
            variant = sets[set_id].variant(short)
            texts = [written(variant, variant.expected), MALFORMED[0]]
            texts += [written(variant, m.value) for m in variant.mistaken_answers()][:2]
            for text in texts:
                shown = type_answer(browser, exercise_id, text)
                assert agrees(shown, grader(variant, text)), (exercise_id, text, shown)
                checked += 1
            # the box sits inside the exercise, under its question
            inside = browser.evaluate(
                f"!!document.querySelector('div.mt-selfcheck[data-exercise=\"{exercise_id}\"]')"
                ".closest('.exercise')"
            )
            assert inside, exercise_id
    assert checked >= 20


def test_every_chapter_with_exercises_has_working_boxes(browser):
    """Every chapter page with exercises from the sets shows a working box under each one."""
    if not (HTML / "intro.html").exists():
        pytest.skip("book/_build/html is missing: run 'make book' first (make test does)")
    for chapter in CHAPTERS:
        browser.open(HTML / f"{chapter}.html")
        boxes = browser.evaluate("document.querySelectorAll('div.mt-selfcheck').length")
        forms = browser.evaluate("document.querySelectorAll('div.mt-selfcheck form').length")
        assert boxes == forms, chapter  # the script ran on every box
        text = browser.evaluate("document.body.innerText")
        if boxes:
            assert re.search(r"checks your answer in this page", text), chapter
