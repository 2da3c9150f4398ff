"""Follow tensor storages operation by operation: which are alive, and the most bytes at once.

:class:`StorageTracker` is the counting machinery of :func:`memtheory.torch.track`
and :func:`memtheory.torch.measure`: a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` that registers every
storage an operation returns, with a finalizer that takes its bytes off a
running total when it is freed, and reads that total after every operation
(no live storage is looked at again, however many there are). Storages are counted
once however many views share them (``untyped_storage().nbytes()``, keyed by
``data_ptr()``). Derived in the book's chapter "Theory vs measurement".
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from memtheory.cuda_allocator import block_size

__all__ = ["StorageTracker", "plain", "storage_of"]


class StorageTracker(TorchDispatchMode):
    """Follow tensor storages op by op and record the most bytes alive at once.

    Storages that exist before the mode starts count only if :meth:`track`
    registers them (parameters, gradients, optimizer state, the data). Every
    storage an operation returns is registered with a weak reference, and the
    live total (storages whose weak reference has not expired) is read after
    each operation, so the peak includes an operation's inputs and outputs.

    Parameters
    ----------
    record : bool, default False
        Keep the live total after every operation in :attr:`timeline`.
    blocks_on : torch.device, optional
        Also follow the storages on this device rounded up to the CUDA caching
        allocator's blocks (:func:`memtheory.cuda_allocator.block_size`), and
        keep their most at once in :attr:`block_peak`.

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(1000)
    >>> with StorageTracker() as tracker:
    ...     tracker.track(x)
    ...     y = (x * 2).sum()
    >>> tracker.peak  # x and x * 2 (4000 bytes each), and their 4-byte sum
    8004
    >>> with StorageTracker(blocks_on=torch.device("cpu")) as tracker:
    ...     tracker.track(x)
    ...     y = (x * 2).sum()
    >>> tracker.block_peak  # the same three storages in 512-byte blocks
    8704
    """

    def __init__(self, record: bool = False, blocks_on: torch.device | None = None) -> None:
        super().__init__()
        self._live: dict[int, tuple[weakref.finalize[Any, Any], int, int]] = {}
        self._total = 0
        self._blocks = 0
        self.blocks_on = blocks_on
        self.block_peak = 0
        self.phase = ""
        self.peak = 0
        self.peak_moment = ""
        self.record = record
        self.timeline: list[tuple[str, str, int]] = []
        self.copies_of: set[int] = set()
        self._parameter_pointers: set[int] = set()

    def track(self, *tensors: Any) -> None:
        """Register the storages of ``tensors`` (None and non-tensors are ignored)."""
        for given in tensors:
            tensor = plain(given)
            if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided:
                storage = tensor.untyped_storage()
                pointer, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes == 0 or pointer in self._live:
                    continue
                on_device = self.blocks_on is not None and storage.device == self.blocks_on
                blocks = block_size(nbytes) if on_device else 0
                # PyTorch keeps one Python object per storage while the storage lives, so its
                # finalizer runs when the storage is freed (the tracker is held weakly).
                watcher = weakref.finalize(storage, _freed, weakref.ref(self), pointer)
                watcher.atexit = False
                self._live[pointer] = (watcher, nbytes, blocks)
                # A new storage at a freed weight copy's address is not a copy (unless
                # _to_copy made it: it is marked again after this).
                self.copies_of.discard(pointer)
                self._total += nbytes
                self._blocks += blocks
                self.on_register(pointer)

    def _forget(self, pointer: int) -> None:
        known = self._live.pop(pointer, None)
        if known is not None:
            self._total -= known[1]
            self._blocks -= known[2]

    def forget(self, tensor: torch.Tensor) -> None:
        """Stop counting ``tensor``'s storage now, as if freed (before a ``resize_(0)``).

        FSDP2 frees and refills its gathered parameters by resizing their
        storages in place, which no operation shows; see
        :func:`memtheory.torch.fsdp.fsdp_resizes`.
        """
        pointer = storage_of(tensor).data_ptr()
        known = self._live.get(pointer)
        if known is not None:
            known[0].detach()
            self._forget(pointer)

    def close(self) -> None:
        """Stop watching the storages still alive (the mode's exit does it)."""
        for watcher, _, _ in list(self._live.values()):
            watcher.detach()

    def __exit__(self, *exc: Any) -> None:  # noqa: D105
        try:
            super().__exit__(*exc)
        finally:
            self.close()

    def on_register(self, pointer: int) -> None:
        """Note a storage newly registered (by its ``data_ptr()``); nothing here, for subclasses.

        A subclass overrides it to note what made the storage (see
        :func:`memtheory.torch.track`).
        """

    def watch_parameters(self, parameters: Iterable[torch.Tensor]) -> None:
        """Remember parameter storages, to recognise casts of them (autocast's weight copies)."""
        self._parameter_pointers |= {storage_of(p).data_ptr() for p in parameters}

    def alive(self) -> dict[int, int]:
        """Return the registered storages still alive, ``data_ptr()`` to bytes.

        Also raises :attr:`block_peak` to their total in allocator blocks.
        """
        self.block_peak = max(self.block_peak, self._blocks)
        return {pointer: nbytes for pointer, (_, nbytes, _) in self._live.copy().items()}

    def live_bytes(self) -> int:
        """Bytes of the registered storages that are still alive (what :meth:`alive` sums)."""
        self.block_peak = max(self.block_peak, self._blocks)
        return self._total

    def start(self, phase: str = "start") -> int:
        """Read the live total now, and make it the peak so far."""
        self.block_peak = 0
        live = self.live_bytes()
        self.peak, self.peak_moment = live, phase
        if self.record:
            self.timeline.append((phase, "", live))
        return live

    def __torch_dispatch__(  # noqa: D105
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if func not in _MADE_OUTSIDE:
            outputs = _allocated(outputs, self._live, (args, kwargs))
        self.track(*outputs)
        if func is torch.ops.aten._to_copy.default and args:
            source = args[0]
            if storage_of(source).data_ptr() in self._parameter_pointers:
                self.copies_of |= {storage_of(t).data_ptr() for t in outputs}
        live = self.live_bytes()
        if live > self.peak:
            self.peak, self.peak_moment = live, f"{self.phase}: {func}"
        if self.record:
            self.timeline.append((self.phase, str(func), live))
        return out


_MADE_OUTSIDE = frozenset({torch.ops.aten.lift_fresh.default, torch.ops.aten.lift.default})
"""Operations that hand back, as their input, a tensor made outside the dispatcher:
``torch.tensor(...)`` builds its storage in C++ and then calls ``lift_fresh`` on it."""


def _allocated(
    outputs: list[torch.Tensor], known: dict[int, Any], given: object
) -> list[torch.Tensor]:
    """Return the outputs whose storage is not one of the operation's inputs' it was not told of.

    A view or an in-place result of a tensor made before the tracker started (a dataset
    indexed row by row, a tensor never registered) allocates nothing: its storage is not
    counted. Storages the tracker registered are counted once, as before.
    """
    unknown = [t for t in outputs if _pointer(t) not in known]
    if not unknown:
        return unknown
    inputs = {_pointer(t) for t in tree_flatten(given)[0] if isinstance(t, torch.Tensor)}
    return [t for t in unknown if _pointer(t) not in inputs]


def _pointer(tensor: torch.Tensor) -> int | None:
    """Return the address of a strided tensor's storage (None for other layouts)."""
    tensor = plain(tensor)
    if tensor.layout != torch.strided:
        return None
    return int(tensor.untyped_storage().data_ptr())


def plain(tensor: torch.Tensor) -> torch.Tensor:
    """Return the plain tensor that holds ``tensor``'s storage: a DTensor's local shard.

    A traceable wrapper subclass (``DTensor``) has no storage of its own; its
    first inner tensor (``_local_tensor``) has it. Any other tensor is returned.

    Examples
    --------
    >>> x = torch.ones(3)
    >>> plain(x) is x
    True
    """
    while is_traceable_wrapper_subclass(tensor):
        inner, _ = tensor.__tensor_flatten__()
        tensor = getattr(tensor, inner[0])
    return tensor


def storage_of(tensor: torch.Tensor) -> torch.UntypedStorage:
    """Return ``tensor``'s untyped storage; a DTensor's is its local shard's.

    Examples
    --------
    >>> storage_of(torch.ones(3)).nbytes()
    12
    """
    return plain(tensor).untyped_storage()


def _freed(tracker: weakref.ref[StorageTracker], pointer: int) -> None:
    """Take a freed storage's bytes off its tracker's totals."""
    owner = tracker()
    if owner is not None:
        owner._forget(pointer)
