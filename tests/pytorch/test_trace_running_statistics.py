"""Batch norm traced without the running statistics' update: the same outputs, the same trace."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import (  # noqa: E402
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from memtheory.torch import trace  # noqa: E402
from memtheory.torch.tracing import storages  # noqa: E402
from memtheory.torch.tracing.kernels import cpu_outputs  # noqa: E402
from memtheory.torch.tracing.running_statistics import kernel_arguments  # noqa: E402

BATCH_NORM = torch.ops.aten.native_batch_norm.default


def _metadata(tensor):
    if tensor is None:
        return None
    return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype,
            tensor.untyped_storage().nbytes())


@pytest.mark.parametrize("symbolic", [False, True], ids=["fixed sizes", "symbolic sizes"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("channels_last", [False, True])
def test_outputs_are_those_of_the_full_kernel(symbolic, dtype, affine, channels_last):
    """Shapes, strides, dtypes and storage bytes of all three outputs, as the CPU counts them."""
    mode = FakeTensorMode(shape_env=ShapeEnv()) if symbolic else FakeTensorMode()
    image = torch.empty(4, 6, 9, 7, dtype=dtype)
    if channels_last:
        image = image.to(memory_format=torch.channels_last)
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4)
    x = mode.from_tensor(image, symbolic_context=context) if symbolic else mode.from_tensor(image)
    weight, bias = (mode.from_tensor(torch.ones(6)), mode.from_tensor(torch.zeros(6))) \
        if affine else (None, None)
    mean, var = mode.from_tensor(torch.zeros(6)), mode.from_tensor(torch.ones(6))
    args = (x, weight, bias, mean, var, True, 0.1, 1e-5)
    with mode:
        full = cpu_outputs(BATCH_NORM, args, {}, BATCH_NORM(*args))
        shorter = kernel_arguments(BATCH_NORM, args)
        left_out = cpu_outputs(BATCH_NORM, args, {}, BATCH_NORM(*shorter))
    assert kernel_arguments(BATCH_NORM, args)[3:5] == (None, None)
    assert [_metadata(t) for t in left_out] == [_metadata(t) for t in full]


def test_other_calls_keep_their_arguments():
    """Eval mode, no running statistics, a call with fewer arguments, another operation."""
    x, mean, var = torch.randn(2, 3, 4), torch.zeros(3), torch.ones(3)
    for args in ((x, None, None, mean, var, False, 0.1, 1e-5),
                 (x, None, None, None, None, True, 0.1, 1e-5),
                 (x, None, None, mean, var, True, 0.1)):
        assert kernel_arguments(BATCH_NORM, args) is args
    assert kernel_arguments(torch.ops.aten.relu.default, (x,)) == (x,)


class _Normalised(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def _traced(model):
    images, labels = torch.randn(5, 3, 37, 37), torch.randint(0, 10, (5,))
    return trace(model, images, {"B": 5, "H": 37}, loss=nn.CrossEntropyLoss(), target=labels,
                 optimizer="adam")


def test_the_trace_is_the_one_the_full_kernel_gives(monkeypatch):
    """Formulas, moments and conditions: the same with the update left out and run."""
    torch.manual_seed(0)
    model = _Normalised().train()
    left_out = _traced(model)
    monkeypatch.setattr(storages, "kernel_arguments", lambda func, args: args)
    full = _traced(model)
    assert dict(left_out.components) == dict(full.components)
    assert dict(left_out.timeline) == dict(full.timeline)
    assert left_out.inference_peak == full.inference_peak
    assert left_out.conditions == full.conditions
