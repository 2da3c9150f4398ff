"""The book's live calculator in headless Chromium: the numbers it shows are memtheory's.

The test opens book/_build/html/calculator.html as a file (no server), sets the
inputs as a reader would (selects, number fields, change events), and compares
every number on the page (each component's bytes, the total, the peak, whether
it fits, the largest batch) with memtheory evaluated in Python at the same
values: training_memory for the bytes and memtheory.whatif.max_value for the
largest batch.
"""

import re

import pytest
import sympy as sp

from memtheory import training_memory
from memtheory.calculator import CALCULATOR_MODELS
from memtheory.conventions import convention
from memtheory.errors import DoesNotFitError
from memtheory.gpus import DEFAULT_RESERVE, GPUS
from memtheory.optimizers import optimizer
from memtheory.precision import precision
from memtheory.whatif import max_value
from tests.book.test_rendering import HTML, _browser

PAGE = HTML / "calculator.html"

_SET = """
((values) => {
  const set = (id, value) => {
    const el = document.getElementById(id);
    el.value = String(value);
    el.dispatchEvent(new Event('change'));
  };
  set('mt-model', values.model);
  for (const id of ['optimizer', 'precision', 'convention', 'batch', 'size', 'gpu']) {
    set('mt-' + id, values[id]);
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
          moment: document.getElementById('mt-peak-moment').textContent};
})()
"""


@pytest.fixture(scope="module")
def page():
    """The calculator page, loaded and ready, in a 1280 px Chromium."""
    if not PAGE.exists():
        pytest.skip("book/_build/html/calculator.html is missing: build the book first")
    with _browser(1280, 900) as chromium:
        chromium.open(PAGE)
        chromium.evaluate(
            "new Promise(done => { const t = setInterval(() => { if (window.memtheoryCalculator)"
            " { clearInterval(t); done(); } }, 50); })",
            timeout=60,
        )
        yield chromium


def shown_bytes(cell: dict) -> sp.Rational:
    """Return the bytes a cell shows; its text (no separators) must equal its exact value."""
    numerator, denominator = cell["exact"].split("/")
    value = sp.Rational(int(numerator), int(denominator))
    assert sp.Rational(cell["text"].replace(",", "")) == value, cell
    return value


def expected(model, opt, prec, conv, batch, size):
    """Return memtheory's own footprint of the step, and the values to evaluate it at."""
    spec = CALCULATOR_MODELS[model]
    memory = training_memory(
        spec.build(), optimizer=optimizer(opt), precision=precision(prec),
        convention=convention(conv),
    )
    return memory, {"B": batch, spec.size_symbol.name: size}


CASES = [
    # model, optimizer, precision, convention, batch, size, card
    ("stackexchange-cnn", "adamw", "fp32", "breakdown", 64, 50, "RTX 4090"),
    ("stackexchange-cnn", "sgd+momentum", "autocast-bf16", "autograd", 37, 61, "T4"),
    ("gpt2", "adamw", "bf16", "autograd", 4, 512, "RTX 3060"),
    ("resnet50", "sgd", "fp32", "autograd", 16, 224, "A100-80GB"),
    ("bert-base", "adamw", "mixed-bf16", "breakdown", 32, 128, "RTX 4090"),
    ("vgg16", "sgd+momentum", "bf16", "breakdown", 8, 160, "RTX 3080"),
    # does not fit: Llama-3-8B with fp32 AdamW needs 16 bytes per parameter, far above 24 GiB
    ("llama-3-8b", "adamw", "fp32", "breakdown", 1, 2048, "RTX 4090"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_numbers_shown_equal_memtheory(page, case):
    """Components, total, peak (and its moment), fit and largest batch are memtheory's."""
    model, opt, prec, conv, batch, size, card = case
    page.evaluate(_SET + "(" + __import__("json").dumps({
        "model": model, "optimizer": opt, "precision": prec, "convention": conv,
        "batch": batch, "size": size, "gpu": card}) + ")")
    shown = page.evaluate(_READ)
    assert shown["error"] == ""
    memory, values = expected(model, opt, prec, conv, batch, size)
    at = memory.evaluate(**values)
    assert {name: shown_bytes(cell) for name, cell in shown["components"]} == dict(at.components)
    assert [name for name, _ in shown["components"]] == list(at.components)
    assert shown_bytes(shown["total"]) == at.total
    assert shown_bytes(shown["peak"]) == at.peak
    if conv == "autograd":
        assert at.peak_moment in shown["moment"]
    usable = GPUS[card].memory - DEFAULT_RESERVE
    fits = at.peak <= usable
    assert shown["fits"] == ("yes" if fits else "no")
    others = {k: v for k, v in values.items() if k != "B"}
    try:
        largest = max_value(memory, "B", usable, by="peak", **others)
    except DoesNotFitError:
        largest = 0
    assert int(shown["largest"]) == largest
    assert (largest >= batch) == fits  # the peak grows with the batch
    if largest:
        assert f"{largest:,}" in shown["largestText"]
    else:
        assert "none" in shown["largestText"]
    if model == "llama-3-8b":
        assert not fits and largest == 0


def test_a_size_outside_the_model_is_refused(page):
    """GPT-2 has 1024 positions: 2048 is refused with a message, no number shown."""
    page.evaluate(_SET + '({model: "gpt2", optimizer: "sgd", precision: "fp32",'
                  ' convention: "breakdown", batch: 1, size: 2048, gpu: ""})')
    shown = page.evaluate(_READ)
    assert re.search(r"between 1 and 1024", shown["error"]), shown["error"]
    assert page.evaluate("document.getElementById('mt-result').hidden") is True


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
    settings = example["settings"]
    shown = page.evaluate(_READ)
    memory, values = expected(settings["model"], settings["optimizer"], settings["precision"],
                              settings["convention"], settings["batch"], settings["size"])
    assert shown_bytes(shown["total"]) == memory.evaluate(**values).total
