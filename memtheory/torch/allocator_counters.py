"""A device allocator's own statistics, read around each phase of a measured step.

:func:`memtheory.torch.measure` counts tensor storages, which is exact on any
device. On a GPU the allocator adds what storages do not show: each block is
rounded up, libraries take workspaces from the same allocator, and freed blocks
stay reserved. :class:`CudaCounters` reads PyTorch's CUDA caching allocator
(``torch.cuda.memory_allocated`` and its peers); :class:`PhaseRecorder` reads
any :class:`AllocatorCounters` at the start and end of each phase, resetting the
peak in between, and :class:`AllocatorReport` holds what it read.

PyTorch keeps no statistics for its CPU allocator, so a CPU measurement has no
report. The counters are an interface so that other allocators (or a test's
simulated one) can be read the same way.

Examples
--------
A stand-in allocator whose peak is always 100 bytes above what is allocated:

>>> class Fake:
...     allocated_now = 1000
...     def synchronize(self): pass
...     def reset_peak(self): pass
...     def allocated(self): return self.allocated_now
...     def peak_allocated(self): return self.allocated_now + 100
...     def reserved(self): return 4096
...     def peak_reserved(self): return 4096
...     def device_in_use(self): return None
>>> recorder = PhaseRecorder(Fake())
>>> with recorder.phase("forward"):
...     pass
>>> recorder.phases[0].peak_allocated
1100
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from memtheory.tables import Column, Table
from memtheory.units import format_bytes

__all__ = [
    "AllocatorCounters",
    "AllocatorReport",
    "CudaCounters",
    "PhaseCounters",
    "PhaseRecorder",
]


@runtime_checkable
class AllocatorCounters(Protocol):
    """The statistics of a device allocator that :func:`~memtheory.torch.measure` reads.

    ``allocated`` counts the blocks handed out to tensors (and to library
    workspaces), ``reserved`` the memory the allocator holds from the device;
    the peaks are since the last :meth:`reset_peak`. ``device_in_use`` is the
    device's memory in use by every process, as the driver reports it (what
    ``nvidia-smi`` adds up), or None where unknown.

    Examples
    --------
    Any object with these methods is one (a test's simulated allocator here);
    ``measure(..., counters=)`` reads it around each phase of the step:

    >>> import torch
    >>> from memtheory.torch import measure
    >>> class Fixed:
    ...     def synchronize(self): pass
    ...     def reset_peak(self): pass
    ...     def allocated(self): return 1000
    ...     def peak_allocated(self): return 1100
    ...     def reserved(self): return 4096
    ...     def peak_reserved(self): return 4096
    ...     def device_in_use(self): return None
    >>> isinstance(Fixed(), AllocatorCounters)
    True
    >>> model = torch.nn.Linear(8, 2)
    >>> m = measure(model, torch.randn(4, 8), loss=torch.nn.CrossEntropyLoss(),
    ...             target=torch.tensor([0, 1, 0, 1]), optimizer="sgd", counters=Fixed())
    >>> [(p.phase, p.peak_allocated) for p in m.allocator.phases][:2]
    [('zero_grad', 1100), ('forward', 1100)]
    """

    def synchronize(self) -> None:
        """Wait for the device's queued work, so the counters are up to date."""

    def reset_peak(self) -> None:
        """Start the peaks afresh from the current values."""

    def allocated(self) -> int:
        """Bytes allocated now."""

    def peak_allocated(self) -> int:
        """Most bytes allocated since the last reset."""

    def reserved(self) -> int:
        """Bytes reserved now."""

    def peak_reserved(self) -> int:
        """Most bytes reserved since the last reset."""

    def device_in_use(self) -> int | None:
        """Bytes in use on the whole device, all processes and contexts, or None."""


class CudaCounters:
    """PyTorch's CUDA caching allocator statistics for one device.

    Parameters
    ----------
    device : torch.device
        A CUDA device (``torch.device("cuda", 0)``).

    Notes
    -----
    ``allocated`` and ``reserved`` are ``torch.cuda.memory_allocated`` and
    ``torch.cuda.memory_reserved``; ``device_in_use`` is total minus free
    from ``torch.cuda.mem_get_info``, which includes the CUDA context and
    other processes on the same device.

    Examples
    --------
    >>> import torch
    >>> CudaCounters(torch.device("cuda", 0)).device
    device(type='cuda', index=0)
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def synchronize(self) -> None:  # noqa: D102 (AllocatorCounters)
        torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:  # noqa: D102
        torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self) -> int:  # noqa: D102
        return int(torch.cuda.memory_allocated(self.device))

    def peak_allocated(self) -> int:  # noqa: D102
        return int(torch.cuda.max_memory_allocated(self.device))

    def reserved(self) -> int:  # noqa: D102
        return int(torch.cuda.memory_reserved(self.device))

    def peak_reserved(self) -> int:  # noqa: D102
        return int(torch.cuda.max_memory_reserved(self.device))

    def device_in_use(self) -> int | None:  # noqa: D102
        free, total = torch.cuda.mem_get_info(self.device)
        return int(total - free)


@dataclass(frozen=True)
class PhaseCounters:
    """What the allocator reported for one phase of a step.

    Attributes
    ----------
    phase : str
        ``"zero_grad"``, ``"forward"``, ``"loss"``, ``"backward"``,
        ``"optimizer step"`` or ``"inference"``.
    allocated_before, allocated_after : int
        Bytes allocated when the phase starts and when it ends.
    peak_allocated : int
        Most bytes allocated during the phase.
    reserved_after, peak_reserved : int
        Bytes reserved when the phase ends, and the most during it.
    """

    phase: str
    allocated_before: int
    allocated_after: int
    peak_allocated: int
    reserved_after: int
    peak_reserved: int


class PhaseRecorder:
    """Read :class:`AllocatorCounters` around phases: synchronize, read, reset the peak, run, read.

    Parameters
    ----------
    counters : AllocatorCounters
    """

    def __init__(self, counters: AllocatorCounters) -> None:
        self.counters = counters
        self.phases: list[PhaseCounters] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the counters of the code run inside as the phase ``name``."""
        counters = self.counters
        counters.synchronize()
        before = counters.allocated()
        counters.reset_peak()
        yield
        counters.synchronize()
        self.phases.append(
            PhaseCounters(
                phase=name,
                allocated_before=before,
                allocated_after=counters.allocated(),
                peak_allocated=counters.peak_allocated(),
                reserved_after=counters.reserved(),
                peak_reserved=counters.peak_reserved(),
            )
        )


@dataclass(frozen=True)
class AllocatorReport:
    """The device allocator's view of a measured training step and inference pass.

    Attributes
    ----------
    device : str
        The device, named as PyTorch names it, with its model where known
        (``"cuda:0 (NVIDIA H100 80GB HBM3)"``).
    phases : tuple of PhaseCounters
        The step's phases in order, then ``"inference"``.
    block_peak : int
        The step's live tensor storages on the device, each rounded up to the
        caching allocator's 512-byte blocks (:func:`memtheory.cuda_allocator.block_size`),
        at their peak: what ``peak_allocated`` would be with no workspace and
        no allocation outside a tensor.
    device_in_use : int or None
        The device's memory in use at the end of the step, all processes and
        the CUDA context included.

    Examples
    --------
    >>> phases = (PhaseCounters("forward", 100, 900, 1000, 2048, 2048),
    ...           PhaseCounters("backward", 900, 200, 1400, 4096, 4096),
    ...           PhaseCounters("inference", 200, 200, 700, 4096, 4096))
    >>> report = AllocatorReport("cuda:0", phases, block_peak=1024, device_in_use=None)
    >>> report.peak_allocated, report.peak_reserved, report.peak_phase
    (1400, 4096, 'backward')
    >>> report.inference_peak_allocated, report.beyond_blocks
    (700, 376)
    """

    device: str
    phases: tuple[PhaseCounters, ...]
    block_peak: int
    device_in_use: int | None

    def _step_phases(self) -> tuple[PhaseCounters, ...]:
        return tuple(p for p in self.phases if p.phase != "inference")

    def _inference(self) -> PhaseCounters | None:
        return next((p for p in self.phases if p.phase == "inference"), None)

    @property
    def peak_allocated(self) -> int:
        """Most bytes allocated during the training step."""
        return max((p.peak_allocated for p in self._step_phases()), default=0)

    @property
    def peak_reserved(self) -> int:
        """Most bytes reserved during the training step."""
        return max((p.peak_reserved for p in self._step_phases()), default=0)

    @property
    def peak_phase(self) -> str:
        """The phase in which the step's allocated peak was reached."""
        step = self._step_phases()
        return max(step, key=lambda p: p.peak_allocated).phase if step else ""

    @property
    def inference_peak_allocated(self) -> int:
        """Most bytes allocated during the inference pass (0 if none was run)."""
        inference = self._inference()
        return inference.peak_allocated if inference else 0

    @property
    def inference_peak_reserved(self) -> int:
        """Most bytes reserved during the inference pass (0 if none was run)."""
        inference = self._inference()
        return inference.peak_reserved if inference else 0

    @property
    def beyond_blocks(self) -> int:
        """``peak_allocated`` minus ``block_peak``: workspaces and other allocations at the peak.

        The two peaks need not fall at the same moment, so this is a summary,
        not one allocation's size; it can be negative where a storage was
        freed before the allocator saw it (the block is reused at once).
        """
        return self.peak_allocated - self.block_peak

    def table(self, unit: str = "MiB") -> Table:
        """Return the counters phase by phase, in ``unit``.

        Examples
        --------
        >>> phases = (PhaseCounters("forward", 0, 2**20, 2**21, 2**22, 2**22),)
        >>> print(AllocatorReport("cuda:0", phases, 2**20, None).table())
        ... # doctest: +NORMALIZE_WHITESPACE
        Allocator on cuda:0
        phase    allocated before (MiB)  allocated after (MiB)  peak allocated (MiB)  ...
        """
        columns = [
            Column("phase"),
            Column(f"allocated before ({unit})", "right"),
            Column(f"allocated after ({unit})", "right"),
            Column(f"peak allocated ({unit})", "right"),
            Column(f"peak reserved ({unit})", "right"),
        ]

        def cell(nbytes: int) -> str:
            return format_bytes(nbytes, unit).rsplit(" ", 1)[0]

        rows = [
            (
                p.phase,
                cell(p.allocated_before),
                cell(p.allocated_after),
                cell(p.peak_allocated),
                cell(p.peak_reserved),
            )
            for p in self.phases
        ]
        notes = [
            "Live storages rounded to 512-byte blocks peak at "
            f"{format_bytes(self.block_peak, unit)}; the allocated peak is "
            f"{format_bytes(self.peak_allocated, unit)}."
        ]
        if self.device_in_use is not None:
            notes.append(
                f"The device had {format_bytes(self.device_in_use, unit)} in use at the end "
                "(all processes and the CUDA context)."
            )
        return Table(columns, rows, title=f"Allocator on {self.device}", notes=notes)
