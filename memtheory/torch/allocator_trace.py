"""The CPU allocator's own count of a training step, to check ``measure`` against.

:func:`~memtheory.torch.measure` follows tensor storages through a dispatch
mode. That is exact for what it sees, but it sees only tensors that operations
return: a kernel's own scratch buffers (the CPU convolution's unfolded input,
for one) are never returned, and running under a dispatch mode is itself a
change to the program. PyTorch's profiler, with ``profile_memory=True``,
records every allocation and free of the CPU allocator instead, with no
dispatch mode: :func:`trace_allocator` adds those events up, and
:func:`check_against_allocator` sets one training step's two counts side by
side. Where they agree, ``measure``'s figure is what the allocator handed out;
where the allocator's is higher, the difference is memory no tensor shows.

Examples
--------
>>> import torch
>>> trace = trace_allocator(lambda: torch.ones(1000) * 2)
>>> trace.peak  # the tensor and its double, and the scalar 2 as an 8- and a 4-byte tensor
8012
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._C._autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from memtheory.torch.measurement import LossFunction, Measurement, measure

__all__ = ["AllocatorCheck", "AllocatorTrace", "check_against_allocator", "trace_allocator"]


@dataclass(frozen=True)
class AllocatorTrace:
    """What the CPU allocator handed out while a function ran, from its own events.

    Attributes
    ----------
    peak : int
        Most bytes allocated at once beyond what was allocated at the start.
    end : int
        Bytes allocated when the function returned, beyond the start.
    allocations : int
        How many blocks were allocated.

    Examples
    --------
    >>> import torch
    >>> kept = []
    >>> trace = trace_allocator(lambda: kept.append(torch.zeros(256)))
    >>> trace.peak, trace.end, trace.allocations  # 256 fp32 values, still alive after
    (1024, 1024, 1)
    """

    peak: int
    end: int
    allocations: int


def trace_allocator(run: Callable[[], Any]) -> AllocatorTrace:
    """Run ``run()`` under PyTorch's memory profiler and add up the CPU allocator's events.

    Blocks allocated before ``run`` starts and freed during it are not
    reported by the profiler (it warns; the warning is silenced here), so
    run code that frees nothing older than itself, or read the figures as
    counting only what ``run`` allocated.

    Parameters
    ----------
    run : callable
        Called once, with no arguments.

    Examples
    --------
    >>> import torch
    >>> def step():
    ...     x = torch.ones(1000)  # 4000 bytes
    ...     y = x * 2  # 4000 more, with the scalar 2 as an 8- and a 4-byte tensor
    >>> trace = trace_allocator(step)
    >>> trace.peak, trace.end  # all of it freed when step returns
    (8012, 0)
    """
    with warnings.catch_warnings(), _without_profiler_log_lines():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
            run()
    results = profiler.profiler.kineto_results if profiler.profiler is not None else None
    events = [
        (event.start_ns(), event.nbytes())
        for event in (results.events() if results is not None else [])
        if event.name() == "[memory]" and event.device_type() == DeviceType.CPU
    ]
    live = peak = allocations = 0
    for _, nbytes in sorted(events):
        live += nbytes
        peak = max(peak, live)
        allocations += nbytes > 0
    return AllocatorTrace(peak=peak, end=live, allocations=allocations)


_PROFILER_LOG = "ActivityProfiler"
"""Part of each line the profiler's C++ side writes to standard error when it starts and stops."""


@contextmanager
def _without_profiler_log_lines() -> Iterator[None]:
    """Pass on what the process writes to standard error meanwhile, less the profiler's log lines.

    The profiler's C++ side writes a line to file descriptor 2 each time it
    starts and stops; in a notebook those lines land in the page. Everything
    else written there is written again, in order, when the block ends.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no standard error to redirect: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(True) if _PROFILER_LOG not in line]
            if kept:
                sys.stderr.write("".join(kept))


@dataclass(frozen=True)
class AllocatorCheck:
    """One training step counted twice: by ``measure``'s storages and by the CPU allocator.

    Both are the most bytes allocated at once during the forward, loss,
    backward and optimizer step, beyond what is allocated after
    ``zero_grad``.

    Attributes
    ----------
    measurement : Measurement
        ``measure``'s result for the step.
    storages : int
        ``measure``'s count: live tensor storages.
    allocator : int
        The CPU allocator's count for the same step, run again without a
        dispatch mode.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Linear(8, 2)
    >>> x, y = torch.randn(4, 8), torch.tensor([0, 1, 0, 1])
    >>> check = check_against_allocator(model, x, torch.nn.CrossEntropyLoss(),
    ...                                 torch.optim.SGD(model.parameters(), lr=0.1), target=y)
    >>> check.allocator == check.storages, check.unseen
    (True, 0)
    >>> check.measurement.parameters  # 8 x 2 + 2 fp32 values
    72
    """

    measurement: Measurement
    storages: int
    allocator: int

    @property
    def unseen(self) -> int:
        """Bytes the allocator counted at its peak beyond the storages: kernels' own buffers."""
        return self.allocator - self.storages


def check_against_allocator(
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002 (PyTorch's name)
    loss: LossFunction,
    optimizer: torch.optim.Optimizer,
    *,
    target: torch.Tensor | None = None,
    autocast: torch.dtype | None = None,
) -> AllocatorCheck:
    """Measure a step with ``measure``, run it again under the profiler, and compare.

    The arguments are :func:`~memtheory.torch.measure`'s (CPU only). After
    ``measure`` (which runs its warm-up steps), the gradients are set to None
    and one more step runs under :func:`trace_allocator`.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
    ...                             torch.nn.Linear(32, 4))
    >>> x, y = torch.randn(16, 64), torch.randint(0, 4, (16,))
    >>> check = check_against_allocator(model, x, torch.nn.CrossEntropyLoss(),
    ...                                 torch.optim.SGD(model.parameters(), lr=0.1), target=y)
    >>> check.unseen  # every byte the allocator handed out was a tensor measure saw
    0
    """
    measured = measure(
        module, input, loss, optimizer, target=target, autocast=autocast, record=True
    )
    after_zero_grad = [live for phase, _, live in measured.timeline if phase == "zero_grad"]
    base = after_zero_grad[-1] if after_zero_grad else measured.step_start
    step = [
        live for phase, _, live in measured.timeline if phase not in ("step start", "zero_grad")
    ]
    storages = max(step, default=base) - base

    def one_step() -> None:
        context = torch.autocast("cpu", dtype=autocast) if autocast is not None else nullcontext()
        with context:
            output = module(input)
            value = loss(output) if target is None else loss(output, target)
        value.backward()
        optimizer.step()

    optimizer.zero_grad(set_to_none=True)
    trace = trace_allocator(one_step)
    return AllocatorCheck(measurement=measured, storages=storages, allocator=trace.peak)
