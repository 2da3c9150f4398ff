"""A fake-tensor mode that caches an operation only where its sizes are polynomials.

PyTorch's ``FakeTensorMode`` keeps a dispatch cache: an operation seen
before with the same input metadata gets an output rebuilt from the cached
entry instead of running its meta kernel. That pays where the same operation
repeats on the same sizes (the identical blocks of a transformer: without
it GPT-2 small's trace took 21% to 29% longer). It does not pay where a size is
a floor expression, a CNN's spatial size after a strided convolution or a
pooling (``(H - 1) // 2 + 1``, nested once per downsampling):

* every miss builds the entry and then rebuilds an output from it to check
  it, so a miss costs the operation and a hit on top;
* a hit rebuilds the output's sizes and strides through ``SymNode``
  arithmetic on the whole floor chain, and its storage size from those
  strides, where PyTorch writes ``Max(1, size)``: the live bytes come out as
  a longer polynomial that is equal for every size the trace allows, but
  that the trace's pruning cannot compare with the bytes around it, so the
  timeline keeps more moments (DenseNet-121: 951 rather than 739) and the
  peak is a longer formula;
* the cache is PyTorch's, shared by the process, so a trace's moments
  depended on which entries earlier traces had left in it.

:class:`PlainSizeFakeMode` sends an operation that reads a size which is not a
polynomial in the symbols (a floor, a maximum, a remainder) straight to the
meta kernel, and every other operation through the cache as before. What each
operation returns is what its kernel returns, so the bytes are the same:
DenseNet-121's whole trace took 52.6 s against 64.5 s (one run each), with a
peak formula a third as long and the same value at every size checked. A view
the cache gives back is rebuilt by :func:`~.cached_views.cached_view`, without
the storage PyTorch makes for it and drops. The cache's keys are built by
:func:`~.cache_keys.prepared_for_hash`, in this mode and in the one a trace
uses at fixed sizes (without a shape environment), and ``aten._unsafe_view``,
which PyTorch does not cache, is cached as the ``aten.view`` it fakes
(:mod:`~.unsafe_views`), and an entry is checked on its first hit rather than
when it is made (:mod:`~.first_hit_checks`).

Examples
--------
>>> import torch
>>> from torch.fx.experimental.symbolic_shapes import ShapeEnv
>>> mode = PlainSizeFakeMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
>>> with mode:
...     torch.ones(2, 3).sum().shape
torch.Size([])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from memtheory.torch.tracing.cache_keys import fast_keys_supported, prepared_for_hash
from memtheory.torch.tracing.cached_views import cached_view, cached_views_supported
from memtheory.torch.tracing.first_hit_checks import FirstHitChecks
from memtheory.torch.tracing.unsafe_views import as_view

__all__ = ["PlainSizeFakeMode", "reads_floor_size"]


class PlainSizeFakeMode(FirstHitChecks):
    """``FakeTensorMode`` whose dispatch cache skips operations on non-polynomial sizes.

    Takes ``FakeTensorMode``'s arguments. Without a shape environment (fixed
    sizes) every size is an integer and every operation goes through the cache.
    In both, the cache's keys are built by :func:`~.cache_keys.prepared_for_hash`
    (PyTorch 2.13; PyTorch's own walk on any other release).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plain: dict[Any, bool] = {}
        """Whether each size expression met so far is a polynomial (sympy's answer, once)."""
        self._views = self.shape_env is not None and cached_views_supported()
        """Whether a cached view is rebuilt by :func:`~.cached_views.cached_view`."""
        self._fast_keys = fast_keys_supported()
        """Whether cache keys are built by :func:`~.cache_keys.prepared_for_hash`."""

    def _cached_dispatch_impl(
        self,
        func: Any,
        types: Sequence[type],
        args: Sequence[object],
        kwargs: Mapping[str, object],
    ) -> object:
        func = as_view(func, args)
        if self.shape_env is not None and (
            reads_floor_size(args, self._plain) or reads_floor_size(kwargs.values(), self._plain)
        ):
            return self._dispatch_impl(func, types, args, kwargs)
        return super()._cached_dispatch_impl(func, types, args, kwargs)

    def _prep_args_for_hash(
        self, result: list[object], args: Any, state: Any, id_hashed_objects: list[object],
    ) -> None:
        if self._fast_keys:
            prepared_for_hash(self, result, args, state, id_hashed_objects)
        else:
            super()._prep_args_for_hash(result, args, state, id_hashed_objects)

    def _get_output_tensor_from_cache_entry(
        self, state: Any, entry: Any, key: Any, func: Any, args: Sequence[object],
    ) -> FakeTensor | None:
        if (
            self._views
            and entry.inplace_idx is None
            and entry.view_idx is not None
            and entry.metadata is not None
            and entry.metadata.layout == torch.strided
            and isinstance(func, torch._ops.OpOverload)
            and func.is_view
        ):
            return cached_view(self, state, entry, key, args)
        return super()._get_output_tensor_from_cache_entry(state, entry, key, func, args)


def reads_floor_size(values: Iterable[object], plain: dict[Any, bool]) -> bool:
    """Whether any tensor size or size argument in ``values`` is not a polynomial.

    ``plain`` remembers the answer for each sympy expression (they repeat:
    every tensor of a stage shares its spatial size).

    Examples
    --------
    >>> import sympy as sp
    >>> from torch.fx.experimental.symbolic_shapes import ShapeEnv
    >>> env = ShapeEnv()
    >>> h = env.create_unbacked_symint()
    >>> reads_floor_size([[3, h * 2]], {}), reads_floor_size([(h - 1) // 2 + 1], {})
    (False, True)
    """
    for value in values:
        if isinstance(value, FakeTensor):
            if value._has_symbolic_sizes_strides and _any_floor(value.shape, plain):
                return True
        elif isinstance(value, torch.SymInt):
            if not _plain(value, plain):
                return True
        elif isinstance(value, list | tuple) and reads_floor_size(value, plain):
            return True
    return False


def _any_floor(sizes: Iterable[Any], plain: dict[Any, bool]) -> bool:
    return any(isinstance(s, torch.SymInt) and not _plain(s, plain) for s in sizes)


def _plain(size: torch.SymInt, plain: dict[Any, bool]) -> bool:
    expression = size.node.expr
    answer = plain.get(expression)
    if answer is None:
        answer = plain[expression] = bool(expression.is_polynomial())
    return answer
