"""cache_keys: the fake-tensor cache keys memtheory builds match where PyTorch's match."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch._subclasses._fake_tensor_utils import (  # noqa: E402
    _CacheKeyState,
    _InputBackref,
    _PySymInputStub,
)
from torch._subclasses.fake_tensor import FakeTensorMode, _BypassDispatchCache  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from memtheory.torch import trace  # noqa: E402
from memtheory.torch.tracing import cache_keys, plain_cache  # noqa: E402
from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode  # noqa: E402
from tests.pytorch.fake_cache_harness import fake_input, small_gpt2_traced  # noqa: E402

pytestmark = pytest.mark.skipif(not cache_keys.fast_keys_supported(),
                                reason="cache_keys repeats PyTorch 2.13's key walk")

aten = torch.ops.aten


def _key(mode, func, args, kwargs, fast):
    """The key ``mode`` makes for the call, built fast or by PyTorch, and the state it left."""
    state = _CacheKeyState(mode.shape_env)
    mode._fast_keys = fast
    try:
        return FakeTensorMode._cache_key(mode, state, func, args, kwargs), state
    except _BypassDispatchCache as bypass:
        return ("no caching", str(bypass)), state
    finally:
        mode._fast_keys = True


def _symbols_in_order(key):
    """Each symbolic size a key holds, in order: its node, or which earlier one it repeats."""
    if not hasattr(key, "key"):
        return key
    stubs, seen = [], {}
    for place, value in enumerate(key.key):
        if isinstance(value, _PySymInputStub):
            if isinstance(value.value, _InputBackref):
                stubs.append(("again", seen[value.value.value]))
            else:
                seen[place] = len(seen)
                stubs.append(("size", id(value.value.node)))
    return stubs


class _Matched:
    """Which fast key went with which of PyTorch's, over many calls (one to one, we hope)."""

    def __init__(self):
        self.fast_to_pytorch, self.pytorch_to_fast, self.calls = {}, {}, 0

    def add(self, mode, func, args, kwargs):
        fast, fast_state = _key(mode, func, args, kwargs, fast=True)
        pytorch, pytorch_state = _key(mode, func, args, kwargs, fast=False)
        assert _symbols_in_order(fast) == _symbols_in_order(pytorch), func
        assert fast_state.known_symbols == pytorch_state.known_symbols, func
        self.fast_to_pytorch.setdefault(fast, set()).add(pytorch)
        self.pytorch_to_fast.setdefault(pytorch, set()).add(fast)
        self.calls += 1

    def one_to_one(self):
        return (all(len(v) == 1 for v in self.fast_to_pytorch.values())
                and all(len(v) == 1 for v in self.pytorch_to_fast.values()))


@pytest.fixture
def matched(monkeypatch):
    """Every cache key a trace asks for, made both ways (the trace's modes, patched)."""
    seen = _Matched()

    class Recording(PlainSizeFakeMode):
        def _cache_key(self, state, func, args, kwargs):
            seen.add(self, func, args, kwargs)
            return super()._cache_key(state, func, args, kwargs)

    monkeypatch.setattr(plain_cache, "PlainSizeFakeMode", Recording)
    return seen


def test_keys_match_pytorchs_on_a_transformer_trace(matched):
    """A small GPT-2 traced in (B, S), its checks at fixed sizes and at B = 1: every key."""
    memory = small_gpt2_traced()
    assert memory.evaluate(B=3, S=10).peak > 0
    assert matched.calls > 1000 and matched.one_to_one()
    # keys repeat (the blocks are alike), so the match says something
    assert len(matched.fast_to_pytorch) < matched.calls / 2


def test_keys_match_pytorchs_on_a_pooled_cnn_trace(matched):
    """Strided convolutions, pooling and channels-last: symbolic (floors) and fixed sizes."""
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(8, 5),
    ).train().to(memory_format=torch.channels_last)
    images = torch.randn(4, 3, 20, 20).to(memory_format=torch.channels_last)
    trace(model, images, {"B": 4, "H": 20}, loss=nn.CrossEntropyLoss(),
          target=torch.randint(0, 5, (4,)), optimizer="sgd")
    assert matched.calls > 100 and matched.one_to_one()


def _pool(mode, symbolic):
    """Fake tensors alike in all but one property, pair by pair: PyTorch's keys tell them apart."""
    dynamic = (True, True, False) if symbolic else None
    base, other = (fake_input(mode, (6, 8, 4), dynamic) for _ in range(2))
    with mode:
        complex_base = base.to(torch.complex64)
        with torch.inference_mode():
            inference = base.clone()
        return [
            base, other, base.clone(), base[1:], base[:-1], base[:, 1:], base[:, :-1],
            base.transpose(0, 1), base.transpose(0, 1).contiguous(), base.double(),
            base.detach().requires_grad_(), complex_base, complex_base.conj(),
            torch._neg_view(complex_base), inference, base[:3], torch.empty_like(base[:3]),
            base.unsqueeze(0).expand(2, *base.shape), base.to("meta"),
            torch.empty(2, 3, 5, 7, device="meta"),
            torch.empty(2, 3, 5, 7, device="meta").to(memory_format=torch.channels_last),
            torch.empty(2, 3, 5, 7, device="meta").permute(0, 2, 3, 1),
        ]


@settings(max_examples=60, deadline=None)
@given(st.booleans(), st.data())
def test_two_tensors_share_a_key_exactly_where_pytorchs_do(symbolic, data):
    """For two tensors (and the pair with a number), equal fast keys iff equal PyTorch keys."""
    mode = PlainSizeFakeMode(shape_env=ShapeEnv() if symbolic else None,
                             allow_non_fake_inputs=True)
    pool = _pool(mode, symbolic)
    first = data.draw(st.integers(0, len(pool) - 1))
    second = data.draw(st.integers(0, len(pool) - 1))
    number = data.draw(st.sampled_from([1, 1.0, True, 2]))
    calls = [(pool[first], pool[second]), (pool[second], pool[first]), (pool[first], number)]
    keys = {fast: [_key(mode, aten.add.Tensor, args, {}, fast)[0] for args in calls]
            for fast in (True, False)}
    for one in range(3):
        for two in range(3):
            assert (keys[True][one] == keys[True][two]) == (keys[False][one] == keys[False][two])


def test_every_property_in_the_pool_changes_the_key():
    """The pool's tensors differ pairwise in PyTorch's keys, and so in the fast ones."""
    mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
    pool = _pool(mode, symbolic=False)
    for fast in (True, False):
        keys = [_key(mode, aten.neg.default, (t,), {}, fast)[0] for t in pool]
        distinct = {k for k in keys if not isinstance(k, tuple)}
        # base, other and base.clone() are alike
        assert len(distinct) == len(pool) - 2


def test_another_modes_tensor_is_not_cached_here():
    """A fake of another mode, a real tensor: no key, as in PyTorch."""
    mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
    stranger = FakeTensorMode().from_tensor(torch.empty(2))
    for args in [(stranger,), (torch.empty(2),)]:
        fast, _ = _key(mode, aten.neg.default, args, {}, fast=True)
        pytorch, _ = _key(mode, aten.neg.default, args, {}, fast=False)
        assert fast == pytorch and fast[0] == "no caching"


def test_a_key_with_a_tensor_never_equals_pytorchs():
    """The marker: the two kinds of key can share PyTorch's process-wide cache."""
    mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
    tensor = mode.from_tensor(torch.empty(3))
    fast, _ = _key(mode, aten.neg.default, (tensor,), {}, fast=True)
    pytorch, _ = _key(mode, aten.neg.default, (tensor,), {}, fast=False)
    assert cache_keys.TENSOR_RECORD in fast.key and fast != pytorch
    size = [3, 4]
    assert (_key(mode, aten.zeros.default, (size,), {}, fast=True)[0]
            == _key(mode, aten.zeros.default, (size,), {}, fast=False)[0])


def test_a_subgraph_argument_is_not_cached_here():
    """A higher-order operator's graph module: PyTorch keys it by identity; here, no caching."""
    mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
    graph = torch.fx.symbolic_trace(torch.nn.ReLU())
    fast, _ = _key(mode, aten.neg.default, (graph,), {}, fast=True)
    pytorch, _ = _key(mode, aten.neg.default, (graph,), {}, fast=False)
    assert fast == ("no caching", "subgraph argument") and hasattr(pytorch, "key")
