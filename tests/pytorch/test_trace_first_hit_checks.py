"""first_hit_checks: a cache entry checked on its first hit, with the same outputs as PyTorch's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses import fake_tensor  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from memtheory.torch.tracing import first_hit_checks  # noqa: E402
from memtheory.torch.tracing.first_hit_checks import UncheckedEntry  # noqa: E402
from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode  # noqa: E402
from tests.pytorch.fake_cache_harness import fake_input, small_gpt2_traced, summary  # noqa: E402

pytestmark = pytest.mark.skipif(not first_hit_checks.first_hit_checks_supported(),
                                reason="first_hit_checks defers PyTorch 2.13's check")

OPERATIONS = {
    "a new tensor": lambda x: x * 2.0,
    "a view": lambda x: x.transpose(0, 1),
    "two outputs": lambda x: torch.max(x, dim=1),
    "in place": lambda x: x.clone().add_(1.0),
    "a reduction": lambda x: x.sum(dim=-1),
}


def _mode_and_input(mode_type, symbolic):
    mode = mode_type(shape_env=ShapeEnv() if symbolic else None, allow_non_fake_inputs=True)
    return mode, fake_input(mode, (5, 7, 16), (True, True, False) if symbolic else None)


_REBUILD = FakeTensorMode._output_from_cache_entry
"""PyTorch's rebuild of a cached output (at a hit, and at a miss to check the entry)."""


def _described(value, base):
    if isinstance(value, tuple):
        return tuple(_described(v, base) for v in value)
    return (tuple(map(str, value.shape)), tuple(map(str, value.stride())),
            str(value.storage_offset()), str(value.untyped_storage().nbytes()),
            value.untyped_storage()._cdata == base.untyped_storage()._cdata, value.dtype,
            str(torch._C._dispatch_key_set(value)))


def _run(mode_type, symbolic, operation, monkeypatch):
    """Run ``operation`` three times: the outputs, the rebuilds, the entries left unchecked."""
    mode, x = _mode_and_input(mode_type, symbolic)
    rebuilds = []

    def counted(self, *args):
        rebuilds.append(len(seen))
        return _REBUILD(self, *args)

    monkeypatch.setattr(FakeTensorMode, "_output_from_cache_entry", counted)
    monkeypatch.setattr(FakeTensorMode, "cache", {})
    seen, unchecked = [], []
    with mode:
        for _ in range(3):
            seen.append(_described(operation(x), x))
            caches = [FakeTensorMode.cache] + ([mode.shape_env.fake_tensor_cache]
                                               if symbolic else [])
            unchecked.append(sum(isinstance(e, UncheckedEntry)
                                 for c in caches for e in c.values()))
    return seen, rebuilds, unchecked


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "fixed"])
@pytest.mark.parametrize("name", list(OPERATIONS))
def test_outputs_are_pytorchs_and_a_miss_rebuilds_nothing(name, symbolic, monkeypatch):
    """Same outputs as PyTorch's mode; no rebuild at the miss; checked and stored at the hit."""
    ours, our_rebuilds, unchecked = _run(PlainSizeFakeMode, symbolic, OPERATIONS[name],
                                         monkeypatch)
    pytorchs, their_rebuilds, none = _run(FakeTensorMode, symbolic, OPERATIONS[name],
                                          monkeypatch)
    assert ours == pytorchs
    assert 0 not in our_rebuilds and 0 in their_rebuilds  # PyTorch rebuilds at the miss
    assert 1 in our_rebuilds  # the first hit rebuilds (and checks) its output
    assert unchecked[0] > unchecked[1] == unchecked[2] and none == [0, 0, 0]


def test_a_mismatch_on_the_first_hit_runs_the_operation_and_refuses_the_entry():
    """Keys unlike the real output's: PyTorch's refusal stored, the operation run in full."""
    mode, x = _mode_and_input(PlainSizeFakeMode, symbolic=True)
    with mode:
        first = x * 2.0
        cache = mode.shape_env.fake_tensor_cache
        (key, entry), = [(k, e) for k, e in cache.items() if isinstance(e, UncheckedEntry)]
        unlike = object()  # equal to no dispatch key set
        cache[key] = UncheckedEntry(entry.output_infos, entry.is_output_tuple, (unlike,))
        refused = FakeTensorMode.cache_bypasses["dispatch_key_set mismatch"]
        second = x * 2.0
        third = x * 2.0
    assert _described(second, x) == _described(first, x) == _described(third, x)
    assert isinstance(cache[key], fake_tensor._DispatchCacheBypassEntry)
    assert FakeTensorMode.cache_bypasses["dispatch_key_set mismatch"] == refused + 2


def test_an_entry_other_modes_can_find_is_checked_when_made(monkeypatch):
    """A key without a tensor (a factory) is PyTorch's own key: its entry is checked at once."""
    monkeypatch.setattr(FakeTensorMode, "cache", {})
    mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
    with mode:
        torch.zeros(3, 4)
        torch.ones(5) * 2.0
    kinds = {type(entry).__name__ for entry in FakeTensorMode.cache.values()}
    assert "_DispatchCacheValidEntry" in kinds and "UncheckedEntry" in kinds
    for key, entry in FakeTensorMode.cache.items():
        holds_tensor = any(v is first_hit_checks.TENSOR_RECORD for v in key.key)
        assert isinstance(entry, UncheckedEntry) == holds_tensor


def test_a_trace_is_the_same_with_checks_at_the_miss(monkeypatch):
    """A small GPT-2's formulas and conditions, as with PyTorch's checks when entries are made."""
    deferred = summary(small_gpt2_traced())
    monkeypatch.setattr(first_hit_checks, "first_hit_checks_supported", lambda: False)
    assert deferred == summary(small_gpt2_traced())
