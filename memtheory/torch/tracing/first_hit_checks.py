"""A fake-tensor cache entry checked when it is first used, not when it is made.

When PyTorch 2.13's fake-tensor cache makes an entry (a miss), it rebuilds an
output from the entry at once and throws it away, only to check that the
rebuilt tensor has the dispatch keys of the real output. With symbolic sizes
that rebuild is not cheap (sizes, strides, storage size and contiguity through
``SymNode`` arithmetic, then a ``FakeTensor``), and many entries are never used
again: an ``as_strided`` of the backward, a size seen once. A GPT-2 small trace
made about 2,800 entries, each check about as dear as a hit.

:class:`FirstHitChecks` keeps the real output's dispatch keys in the entry
instead (:class:`UncheckedEntry`) and makes the check on the entry's first hit,
with the output that hit rebuilds anyway. A match stores the entry as PyTorch
would have stored it; a mismatch (or a size that depends on data, which
PyTorch's check also refuses) stores PyTorch's refusal and runs the operation
in full, so every output is the one PyTorch's cache would give. Only entries
that no other mode can find wait for their check: those whose key holds a
tensor record of :mod:`~.cache_keys` (PyTorch's own keys never do), and those
kept in the shape environment of this mode; every other entry is checked when
made, as PyTorch does.

Examples
--------
>>> first_hit_checks_supported() in (True, False)
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensorMode

from memtheory.torch.tracing.cache_keys import TENSOR_RECORD

__all__ = ["FirstHitChecks", "UncheckedEntry", "first_hit_checks_supported"]


@dataclasses.dataclass(frozen=True, slots=True)
class UncheckedEntry(fake_tensor._DispatchCacheValidEntry):
    """A cache entry whose rebuilt outputs are not yet checked: the real outputs' keys.

    ``key_sets`` holds, for each output, the dispatch key set of the output the
    operation gave, or None where nothing is rebuilt (an in-place output, a number).
    """

    key_sets: tuple[Any, ...] = ()


def first_hit_checks_supported() -> bool:
    """Whether this PyTorch makes the check :class:`FirstHitChecks` defers (2.13).

    Examples
    --------
    >>> import torch
    >>> first_hit_checks_supported() == torch.__version__.startswith("2.13.")
    True
    """
    if not torch.__version__.startswith("2.13."):
        return False
    making = getattr(FakeTensorMode._get_output_info_for_cache_entry, "__code__", None)
    dispatching = getattr(FakeTensorMode._cached_dispatch_impl, "__code__", None)
    if making is None or dispatching is None:
        return False
    return (
        "_output_from_cache_entry" in making.co_names
        and "dispatch_key_set mismatch" in making.co_consts
        and {"_output_from_cache_entry", "_make_cache_entry", "_dispatch_impl"}
        <= set(dispatching.co_names)
    )


class FirstHitChecks(FakeTensorMode):
    """``FakeTensorMode`` whose cache entries are checked on their first hit (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred = first_hit_checks_supported()
        """Whether entries wait for their check (PyTorch 2.13)."""
        self._real_output: Any = None
        """The output an entry is being made of, while PyTorch would rebuild it to check it."""
        self._call: tuple[Sequence[type], Mapping[str, object]] | None = None
        """The types and keyword arguments of the operation being looked up."""

    def _cached_dispatch_impl(
        self, func: Any, types: Sequence[type], args: Sequence[object],
        kwargs: Mapping[str, object],
    ) -> object:
        outer, self._call = self._call, (types, kwargs)
        try:
            return super()._cached_dispatch_impl(func, types, args, kwargs)
        finally:
            self._call = outer

    def _make_cache_entry(
        self, state: Any, key: Any, func: Any, args: Sequence[object],
        kwargs: Mapping[str, object], output: Any,
    ) -> Any:
        if not (self._deferred and self._only_ours(state, key)):
            return super()._make_cache_entry(state, key, func, args, kwargs, output)
        outer, self._real_output = self._real_output, _WAITING
        try:
            entry = super()._make_cache_entry(state, key, func, args, kwargs, output)
        finally:
            self._real_output = outer
        if not isinstance(entry, fake_tensor._DispatchCacheValidEntry):
            return entry
        outputs = output if entry.is_output_tuple else (output,)
        keys = tuple(
            torch._C._dispatch_key_set(out) if _rebuilt(info) else None
            for info, out in zip(entry.output_infos, outputs, strict=True)
        )
        return UncheckedEntry(entry.output_infos, entry.is_output_tuple, keys)

    def _get_output_info_for_cache_entry(
        self, state: Any, key: Any, func: Any, args: Sequence[object],
        kwargs: Mapping[str, object], output: Any,
    ) -> Any:
        if self._real_output is None:
            return super()._get_output_info_for_cache_entry(
                state, key, func, args, kwargs, output)
        self._real_output = output  # PyTorch's check rebuilds nothing: the output is its own
        try:
            return super()._get_output_info_for_cache_entry(
                state, key, func, args, kwargs, output)
        finally:
            self._real_output = _WAITING

    def _output_from_cache_entry(
        self, state: Any, entry: Any, key: Any, func: Any, args: Sequence[object],
    ) -> Any:
        if self._real_output is not None and self._real_output is not _WAITING:
            return self._real_output
        if not isinstance(entry, UncheckedEntry):
            return super()._output_from_cache_entry(state, entry, key, func, args)
        cache = state.shape_env.fake_tensor_cache if state.cache_on_shape_env() else (
            FakeTensorMode.cache)
        try:
            output = super()._output_from_cache_entry(state, entry, key, func, args)
        except torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode:
            return self._refused(cache, key, "data dependent symnode", func, args)
        outputs: tuple[Any, ...] = output if isinstance(output, tuple) else (output,)
        if any(want is not None and torch._C._dispatch_key_set(out) != want
               for out, want in zip(outputs, entry.key_sets, strict=True)):
            return self._refused(cache, key, "dispatch_key_set mismatch", func, args)
        cache[key] = fake_tensor._DispatchCacheValidEntry(entry.output_infos,
                                                          entry.is_output_tuple)
        return output

    def _refused(self, cache: Any, key: Any, reason: str, func: Any,
                 args: Sequence[object]) -> Any:
        """Store PyTorch's refusal for ``key`` and run the operation in full."""
        cache[key] = fake_tensor._DispatchCacheBypassEntry(reason)
        FakeTensorMode.cache_bypasses[reason] += 1
        if self._call is None:
            raise AssertionError("a cache entry was checked outside an operation's lookup")
        types, kwargs = self._call
        return self._dispatch_impl(func, types, args, kwargs)

    def _only_ours(self, state: Any, key: Any) -> bool:
        """Whether no other mode can find the entry: a tensor record, or our shape environment."""
        if state.cache_on_shape_env():
            return state.shape_env is self.shape_env
        return any(value is TENSOR_RECORD for value in key.key)


class _Waiting:
    """Marks an entry being made, before PyTorch asks for the output to check."""

    __slots__ = ()


_WAITING = _Waiting()


def _rebuilt(info: Any) -> bool:
    """Whether a hit rebuilds this output (not an in-place argument, not a number)."""
    return info.inplace_idx is None and info.metadata is not None
