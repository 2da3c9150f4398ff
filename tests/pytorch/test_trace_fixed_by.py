"""Where was the size fixed: the line named is the user's, not PyTorch's or memtheory's.

Each module fixes the batch size in a different way: a hard-coded reshape
(PyTorch's ``reshape`` records the guard), a tensor of a fixed size added to
the output (broadcasting in PyTorch's kernels), and a constant pad followed by
``expand`` (the pad goes through memtheory's ``rewrites.py``). The error must
name this file and the line of the module's forward.
"""

from __future__ import annotations

import inspect
import os

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional  # noqa: E402

from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.torch import trace  # noqa: E402


class _Reshaped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(x.reshape(5, -1))


class _Broadcast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(x) + torch.zeros(5, 4)


class _PaddedThenExpanded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(functional.pad(x.t(), (0, 0, 0, 0)).t().expand(5, 6))


@pytest.mark.parametrize("kind", [_Reshaped, _Broadcast, _PaddedThenExpanded])
def test_fixed_by_names_the_forward_line(kind):
    """The 'fixed by' location is the line of the module's forward that fixed B."""
    lines, first = inspect.getsourcelines(kind.forward)
    line = first + len(lines) - 1  # the return statement
    with pytest.raises(UnsupportedError) as error:
        trace(kind(), torch.randn(5, 6), {"B": 5}, loss=lambda out: out.sum(), fit=False)
    message = str(error.value)
    assert os.path.dirname(torch.__file__) not in message
    assert f"test_trace_fixed_by.py:{line} in forward" in message
    assert "rewrites.py" not in message and "functional.py" not in message
