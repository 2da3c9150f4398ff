"""module_table(depth=) sums what it hides: its rows add up to its total, the saved activations."""

from __future__ import annotations

import pytest
import sympy as sp

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from memtheory.torch import trace  # noqa: E402


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.inner(x))


@pytest.fixture(scope="module")
def nested():
    """A 4-deep model (model > blocks > block > inner > Linear), traced once."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Sequential(_Block(), _Block()), nn.Linear(8, 3))
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    memory = trace(model, x, {"B": 6}, loss=nn.CrossEntropyLoss(), target=y)
    return model, memory


def _cells(table):
    return [(row[0].strip(), int(row[3]), int(row[4])) for row in table.rows]


@pytest.mark.parametrize("depth", [0, 1, 2, 3, None])
def test_rows_add_up_to_the_total_at_every_depth(nested, depth):
    """At each depth the shown rows' parameters and saved bytes sum to the footer's totals."""
    model, memory = nested
    at = memory.evaluate(B=7)
    table = at.module_table(depth=depth)
    cells = _cells(table)
    assert sum(p for _, p, _ in cells) == sum(p.numel() for p in model.parameters())
    assert sum(s for _, _, s in cells) == at["saved_activations"] == int(table.footer[0][4])
    symbolic = memory.module_table(depth=depth)  # formulas, summed the same way
    assert str(sp.Add(*(sp.sympify(row[4]) for row in symbolic.rows))) == str(
        memory["saved_activations"]
    )


def test_a_folded_row_holds_its_submodules(nested):
    """At depth 2 a block's row holds its inner Linear layers' parameters, marked with '+'."""
    _, memory = nested
    cells = {name: p for name, p, _ in _cells(memory.evaluate(B=7).module_table(depth=2))}
    block = (8 * 16 + 16) + (16 * 8 + 8) + 2 * 8
    assert cells["1.0+"] == block and cells["1.1+"] == block
    assert "1.0.inner" not in cells
