"""FSDP2's gathered parameters, which it frees and refills by resizing storages in place.

``torch.distributed.fsdp.fully_shard`` (PyTorch 2.13) keeps each parameter's
all-gather output (the unsharded parameter, in ``param_dtype``) as one storage
for the whole run and frees it after its layer by ``storage.resize_(0)``,
refilling it with ``storage.resize_(nbytes)`` before the next all-gather
(``torch/distributed/fsdp/_fully_shard/_fsdp_param.py:1066-1074``,
``free_storage`` and ``alloc_storage``). No tensor operation shows either, so a
:class:`~memtheory.torch.storages.StorageTracker` would neither see the bytes
come nor go. :func:`fsdp_resizes` tells it: a refilled storage is registered
at its new size, a freed one is forgotten. :func:`memtheory.torch.track` enters
it whenever FSDP2 has been imported, so ``track()`` is exact for a
``fully_shard`` model (its sharded parameters are DTensors, counted by their
local shards).

Examples
--------
>>> from memtheory.torch.storages import StorageTracker
>>> with StorageTracker() as storages, fsdp_resizes(storages):
...     pass
>>> storages.peak
0
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from memtheory.torch.storages import StorageTracker

__all__ = ["FSDP_MODULES", "fsdp_resizes"]

FSDP_MODULES = (
    "torch.distributed.fsdp._fully_shard._fsdp_param",
    "torch.distributed.fsdp._fully_shard._fsdp_param_group",
)
"""The modules whose ``alloc_storage`` / ``free_storage`` resize the gathered parameters."""


@contextmanager
def fsdp_resizes(storages: StorageTracker) -> Iterator[None]:
    """Count FSDP2's in-place storage resizes in ``storages`` while the block runs.

    Nothing is changed when FSDP2 was never imported. Inside the block,
    ``alloc_storage`` registers the refilled storage and ``free_storage``
    forgets it before it is emptied.

    Parameters
    ----------
    storages : StorageTracker
        The tracker that counts the live storages.

    Examples
    --------
    >>> from memtheory.torch.storages import StorageTracker
    >>> storages = StorageTracker()
    >>> with fsdp_resizes(storages):
    ...     pass
    """
    loaded = [module for name in FSDP_MODULES if (module := sys.modules.get(name)) is not None]
    originals = [(module, name, getattr(module, name)) for module in loaded
                 for name in ("alloc_storage", "free_storage") if hasattr(module, name)]
    for module, name, original in originals:
        setattr(module, name, _counted(storages, name, original))
    try:
        yield
    finally:
        for module, name, original in reversed(originals):
            setattr(module, name, original)


def _counted(
    storages: StorageTracker, name: str, original: Callable[[torch.Tensor], None]
) -> Callable[[torch.Tensor], None]:
    """Wrap FSDP2's ``alloc_storage`` or ``free_storage`` to tell ``storages``."""
    if name == "free_storage":

        def free(tensor: torch.Tensor) -> None:
            storages.forget(tensor)
            original(tensor)

        return free

    def alloc(tensor: torch.Tensor) -> None:
        original(tensor)
        storages.track(tensor)

    return alloc
