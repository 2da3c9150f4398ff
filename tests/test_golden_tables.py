"""Golden files for printed tables: the StackExchange CNN, VGG-16 and GPT-2 small.

Each table is rendered as text, Markdown and HTML and compared with the file in
tests/golden/. A change to the renderer or to a number shows up as a diff here.
The files are rewritten only on request: ``pytest tests/test_golden_tables.py
--regen-golden``, then review ``git diff tests/golden`` before committing.

The numbers in them are memtheory's (checked elsewhere against their sources:
the StackExchange CNN's per-layer counts in tests/test_worked_examples.py,
VGG-16's 138,357,544 and GPT-2 small's 124,439,808 parameters in
tests/test_models.py); here the column sums are also checked against the totals.
"""

from pathlib import Path

import pytest

from memtheory import Table, training_memory
from memtheory.models import gpt2, vgg16
from memtheory.worked_examples import small_cnn_network

GOLDEN = Path(__file__).parent / "golden"


def _cases() -> dict[str, Table]:
    cnn = small_cnn_network(batch=128)
    vgg = vgg16(batch=32)
    gpt = gpt2("small", batch=8, sequence=1024)
    return {
        "small_cnn_layers": cnn.summary().table(),
        "small_cnn_adam": training_memory(cnn, optimizer="adam").table("MiB"),
        "small_cnn_adam_autograd": training_memory(
            cnn, optimizer="adam", convention="autograd"
        ).table("MiB"),
        "vgg16_layers": vgg.summary().table(),
        "vgg16_adam": training_memory(vgg, optimizer="adam").table("GiB"),
        "gpt2_small_layers": gpt.summary().table(),
        "gpt2_small_adam_mixed": training_memory(
            gpt, optimizer="adam", precision="mixed-fp16"
        ).table("GiB"),
    }


CASES = _cases()
RENDERINGS = {"txt": Table.text, "md": Table.markdown, "html": Table.html}


@pytest.mark.parametrize("suffix", RENDERINGS)
@pytest.mark.parametrize("name", CASES)
def test_table_matches_its_golden_file(name, suffix, request):
    """The rendering is byte-identical to tests/golden/NAME.SUFFIX (or rewrites it on request)."""
    rendered = RENDERINGS[suffix](CASES[name]) + "\n"
    path = GOLDEN / f"{name}.{suffix}"
    if request.config.getoption("--regen-golden"):
        path.write_text(rendered, encoding="utf-8")
        pytest.skip(f"rewrote {path.name}")
    assert path.exists(), f"{path} is missing: run pytest {__file__} --regen-golden"
    assert rendered == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [n for n in CASES if n.endswith("_layers")])
def test_layer_table_columns_sum_to_their_totals(name):
    """Weights, biases and activations (less the input row) add up to the footer's totals."""
    table = CASES[name]
    footer = table.footer[0]
    for index, title in enumerate(table.titles):
        if title not in ("weights", "biases", "activations"):
            continue
        cells = [int(c) for c in table.column(title)]
        if title == "activations":
            cells = cells[1:]  # the input row is listed but not counted
        assert sum(cells) == int(footer[index]), title
