"""PlainSizeFakeMode: PyTorch's fake-tensor cache only where every size is a polynomial."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sympy as sp  # noqa: E402
from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import (  # noqa: E402
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from memtheory.torch import measure, torch_optimizer, trace  # noqa: E402
from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode  # noqa: E402


def _twice(mode_class):
    """Run relu twice on a pooled (floor-sized) fake image, then twice on the image itself.

    Returns PyTorch's cache hits and misses during each pair, and the storage bytes of the
    two pooled results as sympy expressions.
    """
    mode = mode_class(shape_env=ShapeEnv())
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4)
    image = mode.from_tensor(torch.empty(4, 3, 97, 97), symbolic_context=context)
    with mode:
        pooled = nn.functional.max_pool2d(image, 3, 2, 1)
        before = (FakeTensorMode.cache_hits, FakeTensorMode.cache_misses)
        first, second = torch.relu(pooled), torch.relu(pooled)
        middle = (FakeTensorMode.cache_hits, FakeTensorMode.cache_misses)
        torch.relu(image), torch.relu(image)
        after = (FakeTensorMode.cache_hits, FakeTensorMode.cache_misses)
    counts = [(m[0] - b[0], m[1] - b[1]) for b, m in ((before, middle), (middle, after))]
    sizes = [t.untyped_storage().nbytes().node.expr for t in (first, second)]
    return counts, sizes


def test_floor_sized_operations_run_their_kernel_every_time():
    """On floor sizes: no cache entry, no hit, and both results have the kernel's bytes."""
    (floors, plain), (first, second) = _twice(PlainSizeFakeMode)
    assert floors == (0, 0)
    assert plain[0] >= 1 and plain[1] >= 1  # plain sizes still go through the cache
    assert first == second


def test_pytorchs_own_cache_rebuilds_the_bytes_from_strides():
    """The reason: PyTorch's hit rebuilds the storage size from strides, another expression.

    Equal wherever every size is at least 1, written differently: deeper in a CNN PyTorch
    writes its strides with ``Max(1, size)``, which the trace's pruning cannot compare.
    """
    (floors, _), (first, second) = _twice(FakeTensorMode)
    assert floors[0] >= 1  # the second relu was a hit
    assert first != second
    values = {s: 5 + i for i, s in enumerate(sorted(first.free_symbols, key=str))}
    assert first.xreplace(values) == second.xreplace(values)


class _DenseBlocks(nn.Module):
    """Concatenating blocks after a strided stem and between poolings (DenseNet's pattern)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(width), nn.ReLU(), nn.Conv2d(width, 4, 3, padding=1))
            for width in (8, 12, 16)
        )
        self.fc = nn.Linear(20, 10)

    def forward(self, x):
        features = [nn.functional.max_pool2d(self.stem(x), 3, 2, 1)]
        for index, layer in enumerate(self.layers):
            features.append(layer(torch.cat(features, 1)))
            if index == 1:
                features = [nn.functional.avg_pool2d(f, 2) for f in features]
        return self.fc(torch.cat(features, 1).mean((2, 3)))


def _traced(model, **options):
    images, labels = torch.randn(5, 3, 45, 45), torch.randint(0, 10, (5,))
    return trace(model, images, {"B": 5, "H": 45}, loss=nn.CrossEntropyLoss(), target=labels,
                 optimizer="adam", **options)


def test_a_pooled_concatenating_cnn_has_kernel_bytes_at_every_moment():
    """No moment of the timeline carries PyTorch's ``Max(1, size)``; the bytes are measure's."""
    torch.manual_seed(0)
    model = _DenseBlocks().train()
    memory = _traced(model)
    assert memory.timeline
    assert not any(moment.has(sp.Max) for moment in memory.timeline.values())
    for batch, side in ((2, 37), (6, 64)):
        real = measure(model, torch.randn(batch, 3, side, side), nn.CrossEntropyLoss(),
                       torch_optimizer("adam", model.parameters()),
                       target=torch.randint(0, 10, (batch,)))
        assert memory.evaluate(B=batch, H=side).peak == real.peak

