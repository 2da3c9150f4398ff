"""How many GPUs: the fewest devices on which a sharded step fits a card.

With ZeRO / FSDP the model states (weights, gradients, optimizer state) are
split over the data-parallel devices (chapter 13, "Checkpointing, sharding and
offload"), so a device's memory falls as devices are added, while what each
device keeps for its own micro-batch (activations, the input, a gathered
layer under ZeRO-3) does not. :func:`fewest_gpus` tries device counts in
increasing order, powers of two (the counts nodes come in: 1, 2, 4, 8, ...)
or every count, and returns the first whose per-device peak fits.

Examples
--------
>>> from memtheory.finetuning import finetune_memory
>>> from memtheory.models import gpt2
>>> memory = finetune_memory(gpt2("xl", batch=1, sequence=256), precision="autocast-bf16")
>>> found = fewest_gpus(memory, usable=12 * 2**30, zero=3)
>>> found.gpus, found.counts
(4, 'powers of two')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

import sympy as sp

from memtheory.errors import InvalidArgumentError
from memtheory.estimate.compiled import CompiledFootprint
from memtheory.estimate.fitting import fewest_fitting
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.techniques.parallel import Offload, ParallelMemory, parallel_memory

__all__ = ["MOST_GPUS", "DeviceSearch", "fewest_gpus"]

MOST_GPUS = 4096
"""The largest device count :func:`fewest_gpus` tries."""

Counts = Literal["powers of two", "any"]


@dataclass(frozen=True)
class DeviceSearch:
    """What :func:`fewest_gpus` found.

    Attributes
    ----------
    gpus : int or None
        The fewest devices that fit; None when none up to :data:`MOST_GPUS` does.
    counts : {"powers of two", "any"}
    tried : tuple of (int, sympy.Rational)
        Each device count tried, with its per-device peak in bytes.
    memory : ParallelMemory or None
        The split at ``gpus`` (symbolic), None when nothing fits.
    splits : tuple of (int, CompiledFootprint)
        Each data-parallel size tried (``gpus`` over tensor x pipeline), with its
        compiled split: what a replay entry (:mod:`~memtheory.estimate.replay`)
        searches again at other sizes.

    Examples
    --------
    >>> from memtheory.finetuning import finetune_memory
    >>> from memtheory.models import gpt2
    >>> memory = finetune_memory(gpt2("xl", batch=1, sequence=256), precision="autocast-bf16")
    >>> found = fewest_gpus(memory, usable=12 * 2**30, zero=3)
    >>> found.gpus, found.memory.devices
    (4, 4)
    >>> [(gpus, f"{int(peak) / 2**30:.1f} GiB") for gpus, peak in found.tried]
    [(1, '25.4 GiB'), (2, '13.8 GiB'), (4, '8.0 GiB')]
    """

    gpus: int | None
    counts: Counts
    tried: tuple[tuple[int, sp.Expr], ...]
    memory: ParallelMemory | None
    splits: tuple[tuple[int, CompiledFootprint], ...] = field(
        default=(), compare=False, repr=False
    )


def fewest_gpus(
    memory: MemoryBreakdown,
    *,
    usable: sp.Expr | int,
    values: dict[str, int] | None = None,
    zero: int = 3,
    tensor: int = 1,
    pipeline: int = 1,
    offload: Offload = "none",
    network: Network | None = None,
    counts: Counts = "powers of two",
    sequence_parallel: bool = False,
    autocast_copies: bool = True,
    split_at: Callable[[int], CompiledFootprint] | None = None,
) -> DeviceSearch:
    """Return the fewest devices on which ``memory`` (one replica's step) fits ``usable`` bytes.

    Parameters
    ----------
    memory : MemoryBreakdown
        One replica's step for one micro-batch per device.
    usable : bytes
        What a device can use (:func:`memtheory.gpus.usable_memory`).
    values : dict, optional
        Sizes for the free symbols (``{"B": 1, "S": 4096}``).
    zero : {0, 1, 2, 3}, default 3
        ZeRO stage; 0 (plain data parallelism) never shrinks a replica.
    tensor, pipeline : int, default 1
        Kept fixed: the count grows in data-parallel devices, so every count
        tried is a multiple of ``tensor * pipeline``.
    offload, network
        As :func:`~memtheory.techniques.parallel.parallel_memory`.
    counts : {"powers of two", "any"}, default "powers of two"
        Data-parallel sizes 1, 2, 4, ... or 1, 2, 3, ...
    sequence_parallel, autocast_copies : bool
        As :func:`~memtheory.techniques.parallel.parallel_memory`.
    split_at : callable, optional
        The split for a data-parallel size, compiled
        (:class:`~memtheory.estimate.compiled.CompiledFootprint`), as
        :func:`~memtheory.estimate.estimate` keeps it; by default
        :func:`~memtheory.techniques.parallel.parallel_memory` of the arguments above.

    Examples
    --------
    >>> from memtheory.finetuning import finetune_memory
    >>> from memtheory.models import gpt2
    >>> memory = finetune_memory(gpt2("xl", batch=1, sequence=256), precision="autocast-bf16")
    >>> fewest_gpus(memory, usable=12 * 2**30, zero=3, counts="any").gpus
    3
    """
    if counts not in ("powers of two", "any"):
        raise InvalidArgumentError(f"counts must be 'powers of two' or 'any', got {counts!r}.")
    values = values or {}
    group = tensor * pipeline
    tried: list[tuple[int, sp.Expr]] = []

    def compiled(data: int) -> CompiledFootprint:
        if split_at is not None:
            return split_at(data)
        return CompiledFootprint(parallel_memory(
            memory, data=data, zero=zero, tensor=tensor, pipeline=pipeline, offload=offload,
            network=network, sequence_parallel=sequence_parallel,
            autocast_copies=autocast_copies,
        ))

    def split(data: int) -> ParallelMemory:
        return cast(ParallelMemory, compiled(data).footprint)

    splits: dict[int, CompiledFootprint] = {}

    def peak(data: int) -> sp.Expr:
        splits[data] = compiled(data)
        value = sp.sympify(splits[data].peak(**values))
        tried.append((data * group, value))
        return value

    limit = sp.sympify(usable)
    most = MOST_GPUS // group
    whole = zero == 0 and offload == "none"  # a whole replica per device: more do not help
    data = fewest_fitting(lambda data: bool(peak(data) <= limit), most,
                          every=counts == "any", whole=whole)
    tried.sort(key=lambda pair: pair[0])
    kept = tuple(sorted(splits.items()))
    if data is None:
        return DeviceSearch(None, counts, tuple(tried), None, kept)
    return DeviceSearch(data * group, counts, tuple(tried), split(data), kept)
