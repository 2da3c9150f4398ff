"""unsafe_views: ``aten._unsafe_view`` faked through the cache as ``aten.view``, same tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from memtheory.torch import trace  # noqa: E402
from memtheory.torch.tracing import plain_cache, unsafe_views  # noqa: E402
from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode  # noqa: E402
from tests.pytorch.fake_cache_harness import fake_input, summary  # noqa: E402

pytestmark = pytest.mark.skipif(not unsafe_views.unsafe_views_supported(),
                                reason="PyTorch 2.13 fakes _unsafe_view as view")

aten = torch.ops.aten
SHAPES = {  # an input of (B, S, 48), B and S symbolic at 7 and 9 (or fixed there)
    "merge the first two": lambda b, s: (b * s, 48),
    "split the last": lambda b, s: (b, s, 4, 12),
    "all in one": lambda b, s: (b * s * 48,),
    "move a factor": lambda b, s: (b, s * 2, 24),
}


def _unsafe_views(mode_type, symbolic, shape, requires_grad=False):
    """Run ``_unsafe_view`` twice in a fresh mode: each output's metadata, and any cache refusal."""
    mode = mode_type(shape_env=ShapeEnv() if symbolic else None, allow_non_fake_inputs=True)
    x = fake_input(mode, (7, 9, 48), (True, True, False) if symbolic else None, requires_grad)
    seen = []
    with mode:
        for _ in range(2):
            refused = FakeTensorMode.cache_bypasses["unsafe view"]
            out = aten._unsafe_view.default(x, shape(*x.shape[:2]))
            seen.append((
                tuple(map(str, out.shape)), tuple(map(str, out.stride())),
                str(out.storage_offset()), str(out.untyped_storage().nbytes()),
                out.untyped_storage()._cdata == x.untyped_storage()._cdata,
                out.dtype, out.requires_grad, out._base is None,
                type(out.grad_fn).__name__ if out.grad_fn is not None else None,
                str(torch._C._dispatch_key_set(out)),
                FakeTensorMode.cache_bypasses["unsafe view"] > refused,
            ))
    return seen


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "fixed"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_an_unsafe_view_is_pytorchs_and_cached(name, symbolic):
    """Same sizes, strides, storage, no view base, as PyTorch's mode, which refuses to cache it."""
    ours = _unsafe_views(PlainSizeFakeMode, symbolic, SHAPES[name])
    pytorchs = _unsafe_views(FakeTensorMode, symbolic, SHAPES[name])
    assert [o[:-1] for o in ours] == [p[:-1] for p in pytorchs]
    assert ours[0][4] and ours[0][7]  # the input's storage, and not a view autograd tracks
    assert not ours[1][-1] and pytorchs[1][-1]  # cached here; PyTorch refuses to cache it


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "fixed"])
def test_autograd_still_sees_an_unsafe_view(symbolic):
    """Above the fake mode nothing changes: UnsafeViewBackward0, no view base."""
    ours = _unsafe_views(PlainSizeFakeMode, symbolic, SHAPES["merge the first two"], True)
    pytorchs = _unsafe_views(FakeTensorMode, symbolic, SHAPES["merge the first two"], True)
    assert [o[:-1] for o in ours] == [p[:-1] for p in pytorchs]
    assert ours[0][8] == "UnsafeViewBackward0" and ours[0][7]


def test_a_constant_keeps_its_unsafe_view():
    """A tensor with a constant value (computed for real by PyTorch) is left to PyTorch."""
    mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
    with mode:
        constant = torch.tensor(2.0)
    assert constant.constant is not None
    assert unsafe_views.as_view(aten._unsafe_view.default, (constant, [1])) is (
        aten._unsafe_view.default)
    fake = mode.from_tensor(torch.empty(4))
    assert unsafe_views.as_view(aten._unsafe_view.default, (fake, [2, 2])) is aten.view.default


class _BatchedMatmuls(torch.nn.Module):
    """Linear layers and batched products on (B, S, 32): ``_unsafe_view`` in both passes."""

    def __init__(self):
        super().__init__()
        self.project, self.out = torch.nn.Linear(32, 96), torch.nn.Linear(32, 10)

    def forward(self, x):
        q, k, v = self.project(x).split(32, dim=-1)
        attention = torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1) @ v
        return self.out(attention.relu()).mean(dim=1)


def test_a_trace_is_the_same_with_and_without(monkeypatch):
    """Every formula and condition of a trace, as ``_unsafe_view`` left to PyTorch gives them."""
    model = _BatchedMatmuls().train()
    inputs, target = torch.randn(3, 11, 32), torch.randint(0, 10, (3,))

    def traced():
        return summary(trace(model, inputs, {"B": 3, "S": 11},
                             loss=torch.nn.CrossEntropyLoss(), target=target, optimizer="adamw"))

    calls = []
    original = plain_cache.as_view
    monkeypatch.setattr(plain_cache, "as_view",
                        lambda func, args: calls.append(func) or original(func, args))
    ours = traced()
    assert aten._unsafe_view.default in calls
    monkeypatch.setattr(plain_cache, "as_view", lambda func, args: func)
    assert ours == traced()
