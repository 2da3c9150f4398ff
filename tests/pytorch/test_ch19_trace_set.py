"""Set ch19's module-table answers agree with a real trace of the same PyTorch modules."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from memtheory.exercises import find_variant  # noqa: E402
from memtheory.torch import trace  # noqa: E402


class _Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


def test_q1_q2_match_the_traced_module_table():
    """The book's q1 (BatchNorm at (8, 16, 32, 32)) and q2 (a 16-channel block) from a trace."""
    block = _Block(16)
    memory = trace(block, torch.randn(4, 16, 20, 20), {"B": 4, "H": 20},
                   loss=lambda out: out.sum(), optimizer="sgd")
    rows = {row.path: row for row in memory.evaluate(B=8, H=32).modules}
    assert rows["bn1"].saved == find_variant("ch19.q1").expected
    assert sum(r.parameters for r in memory.modules) == find_variant("ch19.q2").expected
    assert sum(p.numel() for p in block.parameters()) == find_variant("ch19.q2").expected
