"""Follow fake tensor storages op by op, with sizes as polynomials in the user's symbols.

:class:`SymbolicStorageTracker` does what :class:`memtheory.torch.StorageTracker`
does for :func:`memtheory.torch.measure`, on fake tensors whose sizes are
symbolic:

* every storage an operation returns is registered once (views and in-place
  results share their storage), with a finalizer that takes its bytes off the
  running total when it is freed (storages that exist before the step count
  only if :meth:`track` registers them: parameters, gradients, optimizer
  state, the data), so no live storage is looked at again after each operation;
* the live total is read after every operation, when its inputs and outputs
  are both alive, exactly when ``measure`` reads it.

A storage is identified by its ``StorageImpl`` (``untyped_storage()._cdata``):
fake storages have no data pointer. Bytes are kept as polynomials
(:data:`~memtheory.torch.tracing.sizes.Polynomial`), so the running total is
updated term by term instead of re-adding sympy expressions; a moment is kept
in the timeline only while no later moment is provably at least as large
(the later one then holds everything it held, and more).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import sympy as sp
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from memtheory.max_pruning import provably_nonnegative
from memtheory.torch.tracing.budget import check_budget
from memtheory.torch.tracing.dtype_checks import CHECKED, check_dtypes
from memtheory.torch.tracing.errors import untraceable
from memtheory.torch.tracing.kernels import cpu_outputs, real_storage_bytes
from memtheory.torch.tracing.kernels_onednn import Workspace, onednn_workspace, workspace_marker
from memtheory.torch.tracing.opaque import OPAQUE, check_opaque
from memtheory.torch.tracing.running_statistics import kernel_arguments
from memtheory.torch.tracing.sizes import DataDependentSize, Polynomial, SymbolMap, add_into

__all__ = ["Departed", "SymbolicStorageTracker", "storage_key", "storage_size"]


class Departed(Exception):  # noqa: N818 (not an error: the answer "they differ", found early)
    """A trace at fixed sizes cannot give the bytes it was expected to: it stopped there.

    Examples
    --------
    >>> str(Departed("saved activations: 104 bytes, expected 96"))
    'saved activations: 104 bytes, expected 96'
    """


def storage_key(tensor: torch.Tensor) -> int:
    """Identity of a tensor's storage (shared by its views), valid while the storage lives."""
    return int(tensor.untyped_storage()._cdata)


def storage_size(tensor: torch.Tensor, symbols: SymbolMap) -> Polynomial:
    """Bytes of a tensor's whole storage, as a polynomial in the user's symbols."""
    return symbols.polynomial(tensor.untyped_storage().nbytes())


class SymbolicStorageTracker(TorchDispatchMode):
    """Register storages op by op and keep the moments where the live total may peak.

    Parameters
    ----------
    symbols : SymbolMap
        Translates PyTorch's sizes into the user's symbols.
    label : callable
        ``label(op)``: the text of the moment after ``op`` (phase, module, op).
    keep_all : bool, default False
        Keep every moment, one per operation (to line up traces of the same
        step at different sizes), instead of only those that may be the peak.

    Attributes
    ----------
    ceiling : int or None
        At fixed sizes only: the peak the step should reach. A moment above
        it raises :class:`Departed` at once (the peak can only be larger),
        instead of after the rest of the step.
    """

    def __init__(
        self, symbols: SymbolMap, label: Callable[[str], str], keep_all: bool = False
    ) -> None:
        super().__init__()
        self.keep_all = keep_all
        self.symbols = symbols
        self.label = label
        self._live: dict[int, tuple[weakref.finalize[Any, Any] | None, Polynomial]] = {}
        self.total: Polynomial = {}
        self.moments: list[tuple[str, Polynomial]] = []
        self.copies_of: set[int] = set()
        self.saved_copies: set[int] = set()
        self._parameter_keys: set[int] = set()
        self._last: Polynomial | None = None
        self.operations = 0
        self.workspaces: dict[sp.Symbol, Workspace] = {}
        self._workspace_keys: set[int] = set()
        self.ceiling: int | None = None
        self.last_outputs: set[int] = set()
        """Which tensors (by ``id``) the last operation made: autograd saves some of them."""

    # -- registering -------------------------------------------------------------------
    def track(self, *tensors: Any, nbytes: Any = None) -> None:
        """Register the storages of ``tensors`` (None and non-tensors are ignored).

        ``nbytes``, if given, is the storage size to count instead of the fake one.
        """
        for tensor in tensors:
            self._register(tensor, nbytes, permanent=False)

    def track_workspace(self, tensor: torch.Tensor, workspace: Workspace) -> None:
        """Register oneDNN's LSTM workspace (0 bytes to its fake kernel) at its CPU size.

        Keeping every moment (a fit's trace), its bytes ride on a
        :func:`~memtheory.torch.tracing.kernels_onednn.workspace_marker`, so
        that the fit can tell them from the polynomial rest and add the
        workspace's formula back (it rounds to pages: no polynomial).
        """
        self._workspace_keys.add(storage_key(tensor))
        if not self.keep_all:
            self._register(tensor, None, permanent=False, terms={sp.S.One: workspace.nbytes})
            return
        marker = workspace_marker(len(self.workspaces))
        self.workspaces[marker] = workspace
        self._register(tensor, None, permanent=False, terms={marker: workspace.nbytes})

    def bytes_of(self, tensor: torch.Tensor) -> Polynomial:
        """Bytes of a tensor's storage as this tracker counts them (a workspace at its CPU size)."""
        key = storage_key(tensor)
        known = self._live.get(key) if key in self._workspace_keys else None
        return known[1] if known is not None else storage_size(tensor, self.symbols)

    def keep(self, *tensors: Any) -> None:
        """Register storages that outlive the step (parameters, optimizer state, the data).

        They are counted like any other, but never watched for being freed:
        the module, the optimizer and the caller hold them throughout.
        """
        for tensor in tensors:
            self._register(tensor, None, permanent=True)

    def _register(
        self, tensor: Any, nbytes: Any, permanent: bool, terms: Polynomial | None = None
    ) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            return
        storage = tensor.untyped_storage()
        key = int(storage._cdata)
        known = self._live.get(key)
        if known is not None:
            if permanent and known[0] is not None:
                known[0].detach()
                self._live[key] = (None, known[1])
            return
        if terms is not None:
            size = terms
        else:
            size = self.symbols.polynomial(storage.nbytes() if nbytes is None else nbytes)
        if not size:
            return
        # PyTorch keeps one Python object per storage for as long as the storage lives, so its
        # finalizer runs when the storage is freed (the tracker is held weakly: no cycle).
        watcher = None if permanent else weakref.finalize(storage, _freed, weakref.ref(self), key)
        # A new storage at the key of a freed weight copy is not a copy (unless _to_copy made it).
        self.copies_of.discard(key)
        self._live[key] = (watcher, size)
        add_into(self.total, size)

    def _forget(self, key: int) -> None:
        known = self._live.pop(key, None)
        if known is not None:
            add_into(self.total, known[1], -1)

    def close(self) -> None:
        """Stop watching the storages still alive (their finalizers would outlive the trace)."""
        for watcher, _ in self._live.values():
            if watcher is not None:
                watcher.detach()

    def watch_parameters(self, parameters: Sequence[torch.Tensor]) -> None:
        """Remember parameter storages, to recognise casts of them (autocast's weight copies)."""
        self._parameter_keys |= {storage_key(p) for p in parameters}

    def refresh(self) -> Polynomial:
        """Return the live total (freed storages were taken off when they were freed)."""
        return self.total

    def start(self, label: str) -> Polynomial:
        """Read the live total now and make it the first moment."""
        self.moments = []
        self._last = None
        self.record(label)
        return dict(self.total)

    def record(self, label: str) -> None:
        """Keep the live total as a moment, unless it equals the previous one."""
        now = self.refresh()
        if self.keep_all:
            self.moments.append((label, dict(now)))
            return
        if now == self._last:
            return
        if self.ceiling is not None and now.keys() <= {sp.S.One}:
            found = now.get(sp.S.One, 0)
            if found > self.ceiling:
                raise Departed(f"peak: at least {found} bytes, expected {self.ceiling}")
        snapshot = dict(now)
        while self.moments and _at_least(snapshot, self.moments[-1][1]):
            if snapshot == self.moments[-1][1]:
                return
            self.moments.pop()
        self.moments.append((label, snapshot))
        self._last = snapshot

    # -- the dispatch mode -----------------------------------------------------------------
    def __exit__(self, *exc: Any) -> None:  # noqa: D105
        try:
            super().__exit__(*exc)
        finally:
            self.close()

    def __torch_dispatch__(  # noqa: D105
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func is _DEVICE:  # a query (about a third of the calls), never a storage
            self.operations += 1  # not a place to stop: autograd asks it where C++ cannot throw
            return func(*args, **(kwargs or {}))
        check_budget()
        if func in CHECKED:
            check_dtypes(func, args, self.label(""))
        elif func in OPAQUE:
            check_opaque(func, self.label(""), args)
        try:
            out = func(*kernel_arguments(func, args), **(kwargs or {}))
        except Exception as error:  # noqa: BLE001 (translated, or re-raised as it is)
            raise untraceable(error, str(func), self.label("")) from error
        out = cpu_outputs(func, args, kwargs or {}, out)
        self.operations += 1
        if isinstance(out, torch.Tensor):  # most operations: one tensor, nothing to flatten
            outputs = [out]
        else:
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.last_outputs = {id(t) for t in outputs}
        if not outputs:  # nothing was made: the total can only have fallen since the last moment
            return out
        workspace = onednn_workspace(func, args, out)
        try:
            if workspace is not None:
                self.track(*out[:3])
                self.track_workspace(out[3], workspace)
            else:
                self.track(*outputs, nbytes=real_storage_bytes(func, args, kwargs or {}))
        except DataDependentSize as error:
            raise untraceable(error, str(func), self.label("")) from None
        if func is torch.ops.aten._to_copy.default and args and isinstance(args[0], torch.Tensor):
            if storage_key(args[0]) in self._parameter_keys:
                self.copies_of |= {storage_key(t) for t in outputs}
        self.record(self.label(str(func)))
        return out


_DEVICE = torch.ops.prim.device.default
"""``tensor.device`` asked of a fake tensor: it reaches the dispatch modes, returns a device."""


def _freed(tracker: weakref.ref[SymbolicStorageTracker], key: int) -> None:
    """Take a freed storage's bytes off its tracker's total."""
    owner = tracker()
    if owner is not None:
        owner._forget(key)


def _at_least(later: Polynomial, earlier: Polynomial) -> bool:
    """Whether ``later - earlier`` is provably >= 0 (every differing term nonnegative)."""
    for monomial in later.keys() | earlier.keys():
        difference = later.get(monomial, 0) - earlier.get(monomial, 0)
        if difference < 0 or (difference > 0 and not _nonnegative(monomial)):
            return False
    return True


@lru_cache(maxsize=4096)
def _nonnegative(monomial: sp.Expr) -> bool:
    return provably_nonnegative(monomial)
