"""trace on awkward example inputs: views, non-contiguous tensors, and sizes the model fixes.

A sliced view (``x = torch.randn(16, 3, 32, 32)[:8]``) or a transposed
tensor is traced as a fresh tensor of its shape and dtype, as a data loader's
batch is, symbolically (its base's sizes no longer get symbols of their own),
and equals ``measure`` of a fresh batch at sizes it was not traced at. A
``dims`` value equal to a size the model fixes (3 input channels, a hidden
size of 64) gets a memtheory error naming the clash and a size to use instead.
"""

from __future__ import annotations

from itertools import count

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from memtheory.errors import InvalidArgumentError  # noqa: E402
from memtheory.torch import measure, trace  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _Net(nn.Module):
    """A convolution, a global average and a linear head: 3 channels in, 10 classes out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean((2, 3)))


def _net() -> _Net:
    torch.manual_seed(0)
    return _Net()


def _measured(model: nn.Module, batch: int, side: int) -> int:
    x, y = torch.randn(batch, 3, side, side), torch.randint(0, 10, (batch,))
    return measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam").peak


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(lambda: torch.randn(16, 3, 12, 12)[:8], id="sliced view"),
        pytest.param(lambda: torch.randn(12, 12, 3, 8).permute(3, 2, 0, 1), id="permuted"),
        pytest.param(lambda: torch.randn(8, 3, 20, 20)[:, :, 4:16, 2:14], id="cropped"),
    ],
)
def test_views_trace_symbolically_and_match_measure(example):
    """A view example input traces symbolically; the formulas equal measure at new sizes."""
    model, x = _net(), example()
    assert x._base is not None and tuple(x.shape) == (8, 3, 12, 12)
    memory = trace(model, x, {"B": 8, "H": 12}, loss=nn.CrossEntropyLoss(),
                   target=torch.randint(0, 10, (8,)), optimizer="adam")
    assert memory.method == "symbolic"
    assert any("view or shares its storage" in note for note in memory.notes)
    for batch, side in ((8, 12), (5, 17)):
        assert memory.evaluate(B=batch, H=side).peak == _measured(model, batch, side)


def test_view_note_names_the_extra_storage():
    """The note gives the view's storage and the bytes beyond its own, which measure counts."""
    model, x = _net(), torch.randn(16, 3, 12, 12)[:8]
    y = torch.randint(0, 10, (8,))
    memory = trace(model, x, {"B": 8, "H": 12}, loss=nn.CrossEntropyLoss(), target=y,
                   optimizer="adam")
    whole = 16 * 3 * 12 * 12 * 4
    beyond = whole - 8 * 3 * 12 * 12 * 4
    assert any(f"({whole} bytes, {beyond} beyond its own)" in note for note in memory.notes)
    on_view = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam").peak
    assert on_view - memory.evaluate(B=8, H=12).peak == beyond


def test_a_view_target_and_a_meta_view_trace_too():
    """A sliced target, and a view of a meta tensor, trace to the same formulas."""
    model = _net()
    plain = trace(model, torch.randn(8, 3, 12, 12), {"B": 8, "H": 12},
                  loss=nn.CrossEntropyLoss(), target=torch.randint(0, 10, (8,)), optimizer="adam")
    sliced = trace(model, torch.empty(16, 3, 12, 12, device="meta")[:8], {"B": 8, "H": 12},
                   loss=nn.CrossEntropyLoss(), target=torch.randint(0, 10, (16,))[:8],
                   optimizer="adam")
    assert sliced.peak == plain.peak and dict(sliced.components) == dict(plain.components)


def _free(size: int, *shapes: tuple[int, ...]) -> int:
    used = {n for shape in shapes for n in shape}
    return next(n for n in count(size + 1) if n not in used)


@pytest.mark.parametrize("fit", [True, False])
def test_batch_equal_to_the_channels_is_named(fit):
    """dims={"B": 3} with 3 input channels: an error naming B=3, the weight and a free size."""
    model = _net()
    x, y = torch.randn(3, 3, 12, 12), torch.randint(0, 10, (3,))
    with pytest.raises(InvalidArgumentError) as raised:
        trace(model, x, {"B": 3}, loss=nn.CrossEntropyLoss(), target=y, fit=fit)
    message = str(raised.value)
    other = _free(3, tuple(x.shape), tuple(model.conv.weight.shape))
    assert message.startswith("B=3 is also a size the model fixes")
    assert "conv.weight has shape (8, 3, 3, 3)" in message
    assert f"dims={{'B': {other}}}" in message


def test_sequence_equal_to_the_hidden_size_is_named():
    """dims={"S": 64} on a model of width 64: the error names S=64, not the batch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    x = torch.randn(4, 64, 64)
    with pytest.raises(InvalidArgumentError, match=r"^S=64 is also a size the model fixes"):
        trace(model, x, {"B": 4, "S": 64}, loss=lambda out: out.sum())
