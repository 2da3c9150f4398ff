"""A time budget for :func:`~memtheory.torch.trace`: a forward that hangs ends in a clear error.

``trace`` runs the user's ``forward`` (and loss) on fake tensors, which takes
a fraction of a real step, but user code may sleep, wait on the network or
loop without end. :func:`time_budget` bounds the block it wraps in two ways:
every operation the trace sees first checks the clock (:func:`check_budget`),
and, in the main thread, a ``SIGALRM`` timer interrupts Python code that runs
no operation at all (``time.sleep(30)``). Either raises a
:class:`~memtheory.errors.TraceTimeoutError` saying what to do.

Examples
--------
>>> import time
>>> with time_budget(0.05):
...     time.sleep(5)
Traceback (most recent call last):
...
memtheory.errors.TraceTimeoutError: trace ran past its time budget of 0.05 s: ...
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memtheory.errors import InvalidArgumentError, TraceTimeoutError

__all__ = ["DEFAULT_TIME_LIMIT", "check_budget", "time_budget"]

DEFAULT_TIME_LIMIT = 1800.0
"""Seconds a trace may take by default: half an hour (GPT-2 small takes about 10 s of CPU;
DenseNet-121 at B=8 took over 600 s on a loaded 2-core machine)."""

_deadline: list[tuple[float, float]] = []
"""The budgets in force, innermost last: (deadline on the monotonic clock, seconds)."""


def check_budget() -> None:
    """Raise :class:`~memtheory.errors.TraceTimeoutError` if the innermost budget has run out."""
    if _deadline and time.monotonic() > _deadline[-1][0]:
        _expired(_deadline[-1][1])


def _expired(seconds: float) -> None:
    raise TraceTimeoutError(
        f"trace ran past its time budget of {seconds:g} s: the model's forward (or its loss) "
        "ran that long on fake tensors, where a step takes a fraction of a real one. Code that "
        "sleeps, waits for data or loops until some value changes cannot be traced: take that "
        "out of forward. If the model is only big, pass a larger time_limit= (in seconds)."
    )


def _alarm(signum: int, frame: Any) -> None:
    if _deadline:
        _expired(_deadline[-1][1])


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Bound the block to ``seconds`` of wall-clock time (nested budgets keep the earlier end).

    Parameters
    ----------
    seconds : float
        A positive number of seconds.

    Raises
    ------
    InvalidArgumentError
        If ``seconds`` is not a positive, finite number.
    TraceTimeoutError
        When the block runs past its budget.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
        math.isfinite(seconds) and seconds > 0
    ):
        raise InvalidArgumentError(
            f"time_limit must be a positive number of seconds, got {seconds!r:.40}. "
            "Pass e.g. time_limit=1800."
        )
    end = time.monotonic() + seconds
    if _deadline and _deadline[-1][0] < end:
        end, seconds = _deadline[-1]
    _deadline.append((end, seconds))
    restore = _start_alarm(end - time.monotonic())
    try:
        yield
    finally:
        restore()
        _deadline.pop()


def _start_alarm(seconds: float) -> Any:
    """Arm ``SIGALRM`` for ``seconds`` where that is possible and free; return the undo."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )
    if not usable:
        return lambda: None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))

    def restore() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    return restore
