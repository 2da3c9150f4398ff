"""Split a measured training step into its phases: where each starts, and how high it climbs.

A :class:`~memtheory.torch.Measurement` taken with ``record=True`` keeps the
live bytes after every operation, each labelled with its phase
(``"zero_grad"``, ``"forward"``, ``"loss"``, ``"backward"``, ``"optimizer
step"``). :func:`phase_peaks` reads, for each phase, the live bytes just before
its first operation and the most bytes alive during it: the rise between the two
is what the phase itself adds, such as the optimizer step's temporaries or the
gradients of the backward pass. The live total is read after each operation, so
a tensor freed between two operations shows until the next one.

These are live tensor storages, on any device. On CUDA, ``Measurement.allocator``
(:class:`~memtheory.torch.allocator_counters.AllocatorReport`) holds the caching
allocator's own statistics per phase as well, workspaces and block rounding included.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memtheory.errors import InvalidArgumentError
from memtheory.torch.measurement import Measurement

__all__ = ["PhasePeak", "phase_peaks"]


@dataclass(frozen=True)
class PhasePeak:
    """The live bytes when a phase starts and the most bytes alive during it.

    Attributes
    ----------
    start : int
        Live bytes when the phase begins: the lower of the totals after the
        previous phase's last operation and after this phase's first. (The
        live total is read after each operation, so a tensor freed between two
        phases, such as the backward pass's seed gradient when ``backward()``
        returns, still shows in the first; ``optimizer.step()`` and
        ``zero_grad()`` begin with a profiler record that allocates nothing.)
    peak : int
        Most live bytes after any operation of the phase.

    Examples
    --------
    >>> import torch
    >>> from memtheory.torch import measure
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    >>> m = measure(model, x, loss=torch.nn.CrossEntropyLoss(), target=y,
    ...             optimizer=torch.optim.SGD(model.parameters(), lr=0.1), record=True)
    >>> backward = phase_peaks(m)["backward"]
    >>> backward, backward.rise
    (PhasePeak(start=1344, peak=1768), 424)
    >>> backward.peak == m.peak
    True
    """

    start: int
    peak: int

    @property
    def rise(self) -> int:
        """Bytes the phase adds at its peak to what was alive when it started.

        Examples
        --------
        >>> PhasePeak(start=100, peak=160).rise
        60
        """
        return self.peak - self.start


def phase_peaks(step: Measurement | Iterable[tuple[str, str, int]]) -> dict[str, PhasePeak]:
    """Return each phase's starting bytes and peak, in the order the phases ran.

    Parameters
    ----------
    step : Measurement or iterable of (phase, operation, live bytes)
        A measurement taken with ``record=True``, or its ``timeline``.

    Raises
    ------
    InvalidArgumentError
        If the timeline is empty (a measurement taken without ``record=True``).

    Examples
    --------
    >>> timeline = [("step start", "", 100), ("forward", "mm", 140), ("forward", "relu", 130),
    ...             ("backward", "mm", 150), ("backward", "relu", 120),
    ...             ("optimizer step", "record", 110), ("optimizer step", "sqrt", 170)]
    >>> peaks = phase_peaks(timeline)
    >>> peaks["forward"], peaks["backward"].rise, peaks["optimizer step"]
    (PhasePeak(start=100, peak=140), 20, PhasePeak(start=110, peak=170))
    """
    timeline = step.timeline if isinstance(step, Measurement) else tuple(step)
    if not timeline:
        raise InvalidArgumentError(
            "phase_peaks needs the live bytes after every operation: measure the step with "
            "measure(..., record=True)."
        )
    peaks: dict[str, PhasePeak] = {}
    before = timeline[0][2]
    for phase, _, live in timeline:
        known = peaks.get(phase)
        if known is None:
            peaks[phase] = PhasePeak(start=min(before, live), peak=live)
        elif live > known.peak:
            peaks[phase] = PhasePeak(start=known.start, peak=live)
        before = live
    return peaks
