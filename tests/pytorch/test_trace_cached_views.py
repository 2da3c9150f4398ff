"""cached_view: a view rebuilt from the fake-tensor cache is the tensor PyTorch rebuilds."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from memtheory.errors import InvalidArgumentError  # noqa: E402
from memtheory.torch.tracing import cached_views, plain_cache  # noqa: E402
from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode  # noqa: E402
from tests.pytorch.fake_cache_harness import fake_input  # noqa: E402

pytestmark = pytest.mark.skipif(not cached_views.cached_views_supported(),
                                reason="cached_view repeats PyTorch 2.13's rebuild")

VIEWS = {
    "view": lambda x: x.view(x.shape[0] * x.shape[1], 48),
    "unflatten": lambda x: x.unflatten(-1, (4, 12)),
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.permute(2, 0, 1),
    "slice": lambda x: x[:, 1:],
    "slice with a step": lambda x: x[:, ::2, 3:],
    "select": lambda x: x.select(1, 0),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "expand": lambda x: x.unsqueeze(0).expand(3, *x.shape),
    "narrow": lambda x: x.narrow(2, 8, 16),
    "diagonal": lambda x: x.diagonal(0, 1, 2),
    "as_strided": lambda x: x.as_strided((x.shape[0], 5), (x.shape[1] * 48, 3), 2),
    "split": lambda x: x.split(16, -1),
    "unbind": lambda x: x.unbind(-1)[3],
    "real of a complex": lambda x: torch.view_as_real(x.to(torch.complex64)),
    "conjugate": lambda x: x.to(torch.complex64).conj().transpose(0, 1),
    "negative view": lambda x: torch._neg_view(x).t_() if x.dim() == 2 else torch._neg_view(x),
    "half": lambda x: x.half().transpose(1, 2),
    "needs a gradient": lambda x: x.detach().requires_grad_().transpose(0, 1),
}


def _input(mode):
    """A fake (B, S, 48) tensor with B and S symbolic (7 and 9), of ``mode``."""
    return fake_input(mode, (7, 9, 48), (True, True, False))


def _metadata(tensor, base):
    """Everything a tensor's bytes and later operations read, beside its base's storage."""
    return (
        tuple(map(str, tensor.shape)), tuple(map(str, tensor.stride())),
        str(tensor.storage_offset()), str(tensor.untyped_storage().nbytes()),
        tensor.untyped_storage()._cdata == base.untyped_storage()._cdata,
        tensor.dtype, tensor.device, tensor.layout, tensor.requires_grad, tensor.is_conj(),
        tensor.is_neg(), tensor.is_contiguous(), str(torch._C._dispatch_key_set(tensor)),
        tensor._base is not None, tensor.is_leaf,
    )


def _twice(mode_type, view):
    """The view's metadata, run twice in a fresh mode of ``mode_type`` (the second: a hit)."""
    mode = mode_type(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    x = _input(mode)
    results = []
    with mode:
        for _ in range(2):
            out = view(x)
            outs = out if isinstance(out, tuple | list) else (out,)
            results.append([_metadata(o, o._base if o._base is not None else x) for o in outs])
    return results


@pytest.mark.parametrize("name", list(VIEWS))
def test_a_cached_view_is_pytorchs(name, monkeypatch):
    """Each view op, first run (a miss) and again (a hit): metadata, storage, keys as PyTorch's.

    PyTorch's own ``FakeTensorMode`` builds the reference in a twin shape environment; every
    size and stride is compared as its expression.
    """
    used = []
    original = plain_cache.cached_view

    def counted(*args, **kwargs):
        used.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(plain_cache, "cached_view", counted)
    expected = _twice(FakeTensorMode, VIEWS[name])
    assert _twice(PlainSizeFakeMode, VIEWS[name]) == expected
    assert expected[0] == expected[1]
    if name not in ("conjugate", "real of a complex", "half", "needs a gradient"):
        assert used  # the rebuild ran (the others may bypass PyTorch's cache)


def test_only_a_view_is_rebuilt(monkeypatch):
    """Outputs with storages of their own (an addition, a copy) keep PyTorch's rebuild."""
    used = []
    monkeypatch.setattr(plain_cache, "cached_view", lambda *a, **k: used.append(a))
    mode = PlainSizeFakeMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    x = _input(mode)
    with mode:
        for _ in range(2):
            y = (x + 1).contiguous().clone()
    assert not used and y.untyped_storage()._cdata != x.untyped_storage()._cdata


def test_fixed_sizes_and_another_pytorch_keep_pytorchs_rebuild(monkeypatch):
    """Without a shape environment, or where the check says another rebuild, nothing changes."""
    assert not PlainSizeFakeMode(allow_non_fake_inputs=True)._views
    monkeypatch.setattr(plain_cache, "cached_views_supported", lambda: False)
    assert not PlainSizeFakeMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)._views


def test_it_says_what_it_needs():
    """A mode without a shape environment is refused by name."""
    with pytest.raises(InvalidArgumentError, match="shape environment"):
        cached_views.cached_view(FakeTensorMode(), None, None, None, ())
