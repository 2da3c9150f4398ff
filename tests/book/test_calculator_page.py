"""The book's live calculator in headless Chromium: the numbers it shows are memtheory estimate's.

The test opens book/_build/html/calculator.html as a file (no server; without a
built book, the page memtheory.calculator_page writes, in a file of its own),
sets the inputs as a reader would (selects, number fields, change events), and
compares every number on the page (each component's bytes, the total, the
peak, whether it fits, the largest batch) with memtheory.estimate.estimate
under the same recipe, and the page's behaviour on bad input: an error clears
the verdict beside it, and a step PyTorch refuses is refused.
"""

import json
import re

import pytest
import sympy as sp

from memtheory.calculator import CALCULATOR_MODELS, assumptions, footprint, setup
from memtheory.estimate import estimate
from memtheory.gpus import GPUS
from tests.book.chromium import Browser, find_chromium
from tests.book.test_rendering import HTML

# These tests read book/_build/html: `make test` runs them after it builds the book.
pytestmark = pytest.mark.built_book

PAGE = HTML / "calculator.html"

_SET = """
((values) => {
  const set = (id, value) => {
    const el = document.getElementById(id);
    el.value = String(value);
    el.dispatchEvent(new Event('change'));
  };
  set('mt-model', values.model);
  for (const id of ['recipe', 'attention', 'optimizer', 'convention', 'batch', 'size', 'gpu',
                    'reserve']) {
    if (id in values) set('mt-' + id, values[id]);
  }
})
"""

_READ = """
(() => {
  const bytes = cell => ({text: cell.textContent, exact: cell.dataset.bytes});
  const rows = [...document.querySelectorAll('#mt-components tr')].map(
    row => [row.dataset.component, bytes(row.querySelector('.mt-bytes'))]);
  const largest = document.getElementById('mt-largest');
  return {components: rows,
          total: bytes(document.querySelector('#mt-total .mt-bytes')),
          peak: bytes(document.querySelector('#mt-peak .mt-bytes')),
          fits: document.getElementById('mt-fit').dataset.fits || null,
          fitText: document.getElementById('mt-fit').textContent,
          largest: largest.dataset.value || null, largestText: largest.textContent,
          error: document.getElementById('mt-error').textContent,
          hidden: document.getElementById('mt-result').hidden,
          assumed: [...document.querySelectorAll('#mt-assumed li')].map(li => li.textContent),
          command: document.getElementById('mt-command').textContent,
          moment: document.getElementById('mt-peak-moment').textContent};
})()
"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The calculator page, loaded and ready, in a 1280 px Chromium."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("Chromium not found: install Debian's 'chromium' (make test does) to run this")
    path = PAGE
    if not path.exists():
        from memtheory.calculator_page import page_html

        path = tmp_path_factory.mktemp("calculator") / "calculator.html"
        path.write_text(f"<!DOCTYPE html><html><body>{page_html()}</body></html>")
    with Browser(binary, width=1280, height=900) as chromium:
        chromium.open(path)
        chromium.evaluate(
            "new Promise(done => { const t = setInterval(() => { if (window.memtheoryCalculator)"
            " { clearInterval(t); done(); } }, 50); })",
            timeout=120,
        )
        yield chromium


def shown_bytes(cell: dict) -> sp.Rational:
    """Return the bytes a cell shows; its text (no separators) must equal its exact value."""
    numerator, denominator = cell["exact"].split("/")
    value = sp.Rational(int(numerator), int(denominator))
    assert sp.Rational(cell["text"].replace(",", "")) == value, cell
    return value


def show(page, **values) -> dict:
    """Set the page's inputs and return what it shows."""
    page.evaluate(_SET + "(" + json.dumps(values) + ")")
    return page.evaluate(_READ)


CASES = [
    # model, optimizer, recipe, attention, count, batch, size, card
    ("gpt2", "adamw", "hf-trainer", "sdpa", "exact", 8, 1024, "RTX 4090"),
    ("gpt2", "sgd+momentum", "pytorch-amp", "eager", "exact", 4, 512, "RTX 3060"),
    ("resnet50", "adamw", "pytorch-fp32", "-", "exact", 16, 224, "A100-80GB"),
    ("bert-base", "adamw", "pytorch-amp", "sdpa", "breakdown", 32, 128, "RTX 4090"),
    ("vgg16", "sgd", "hf-trainer", "-", "exact", 8, 160, "RTX 3080"),
    # does not fit: under pytorch-amp the 8B weights, gradients and AdamW state are fp32
    ("llama-3-8b", "adamw", "pytorch-amp", "sdpa", "exact", 1, 2048, "RTX 4090"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[2]}-{c[3]}-{c[4]}" for c in CASES])
def test_numbers_shown_equal_memtheory_estimate(page, case):
    """Components, total, peak, fit, largest batch and assumptions are estimate()'s."""
    model, opt, recipe, attention, count, batch, size, card = case
    spec = CALCULATOR_MODELS[model]
    values = {"model": model, "recipe": recipe, "optimizer": opt, "convention": count,
              "batch": batch, "size": size, "gpu": card}
    if attention != "-":
        values["attention"] = attention
    shown = show(page, **values)
    assert shown["error"] == ""
    answer = estimate(
        spec.estimate_name, batch=batch, setup=setup(recipe, opt, attention), gpu=card,
        convention="breakdown" if count == "breakdown" else "auto",
        **{"sequence" if spec.kind == "sequence" else "image": size},
    )
    at = answer.memory
    assert [name for name, _ in shown["components"]] == list(at.components)
    assert {name: shown_bytes(cell) for name, cell in shown["components"]} == dict(at.components)
    assert shown_bytes(shown["total"]) == at.total
    assert shown_bytes(shown["peak"]) == answer.peak
    if count == "exact":
        assert at.peak_moment in shown["moment"]
    assert shown["fits"] == ("yes" if answer.fits else "no")
    assert int(shown["largest"]) == answer.max_batch
    if answer.max_batch:
        assert f"{answer.max_batch:,}" in shown["largestText"]
    else:
        assert "none" in shown["largestText"]
    assert shown["assumed"][:-1] == [f"assumed: {line}" for line in answer.assumptions]
    assert shown["command"].startswith(f"memtheory estimate {spec.estimate_name} --recipe {recipe}")
    if model == "llama-3-8b":
        assert not answer.fits and answer.max_batch == 0


def test_a_size_outside_the_model_is_refused(page):
    """GPT-2 has 1024 positions: 2048 is refused with a message, no number shown."""
    shown = show(page, model="gpt2", recipe="pytorch-fp32", batch=1, size=2048, gpu="")
    assert re.search(r"between 1 and 1024", shown["error"]), shown["error"]
    assert shown["hidden"] is True


def test_batch_zero_says_at_least_one_and_clears_the_verdict(page):
    """A verdict shown, then batch 0: the message says 'at least 1' and no verdict stays."""
    shown = show(page, model="gpt2", recipe="hf-trainer", batch=1, size=128, gpu="H200")
    assert shown["fits"] == "yes" and shown["fitText"].startswith("Fits")
    shown = show(page, model="gpt2", batch=0, size=128)
    assert "at least 1" in shown["error"] and "null" not in shown["error"], shown["error"]
    assert shown["fits"] is None and shown["fitText"] == "" and shown["largestText"] == ""
    assert shown["hidden"] is True


def test_a_reserve_error_clears_the_verdict(page):
    """A reserve larger than the card is an error, and the earlier 'Fits' does not stay."""
    shown = show(page, model="gpt2", recipe="hf-trainer", batch=1, size=128, gpu="T4",
                 reserve=1024)
    assert shown["fits"] == "yes"
    card = GPUS["T4"].memory // 2**20
    shown = show(page, model="gpt2", batch=1, size=128, gpu="T4", reserve=card)
    assert "reserve leaves nothing" in shown["error"]
    assert shown["fits"] is None and shown["fitText"] == "" and shown["largest"] is None


def test_resnet_at_one_value_per_channel_is_refused(page):
    """ResNet-50 at batch 1 below its smallest side for batch 1 is refused; batch 2 is not."""
    from memtheory.calculator import bundle

    smallest = bundle(["resnet50"])["models"]["resnet50"]["min_size_batch1"]
    shown = show(page, model="resnet50", recipe="pytorch-amp", batch=1, size=smallest - 1,
                 gpu="T4")
    assert "BatchNorm2d" in shown["error"] and "more than 1 value per channel" in shown["error"]
    assert shown["hidden"] is True and shown["fits"] is None
    shown = show(page, model="resnet50", batch=2, size=smallest - 1, gpu="T4")
    assert shown["error"] == "" and shown["fits"] == "yes"
    shown = show(page, model="resnet50", batch=1, size=smallest, gpu="T4")
    assert shown["error"] == ""


@pytest.mark.parametrize("name", ["bert", "resnet"])
def test_source_examples_are_one_click_away_with_their_slips(page, name):
    """A button loads the example's settings and shows chapter 8's figures for it."""
    from memtheory.calculator import source_examples

    example = source_examples()[name]
    page.evaluate(f"document.getElementById('mt-example-{name}').click()")
    assert page.evaluate("document.getElementById('mt-slips').hidden") is False
    rows = page.evaluate(
        "[...document.querySelectorAll('#mt-slips-body tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    assert rows == example["slips"]
    s = example["settings"]
    shown = page.evaluate(_READ)
    memory = footprint(s["model"], s["optimizer"], s["recipe"], s["attention"], s["convention"])
    symbol = CALCULATOR_MODELS[s["model"]].size_symbol.name
    assert shown_bytes(shown["total"]) == memory.evaluate(B=s["batch"], **{symbol: s["size"]}).total
    assert shown["assumed"][:-1] == [
        f"assumed: {line}"
        for line in assumptions(s["model"], s["optimizer"], s["recipe"], s["attention"])
    ]


def test_a_model_comes_with_the_recipe_memtheory_estimate_takes_for_it(page):
    """Choosing a model selects estimate's default recipe for it, and the command says so."""
    from memtheory.recipes import default_recipe

    for model in ("gpt2", "resnet50", "llama-3-8b"):
        shown = show(page, model=model, gpu="")
        kind = CALCULATOR_MODELS[model].kind
        recipe = default_recipe(kind=kind, lora=False, qlora=False)
        assert page.evaluate("document.getElementById('mt-recipe').value") == recipe
        assert f"--recipe {recipe} " in shown["command"]
