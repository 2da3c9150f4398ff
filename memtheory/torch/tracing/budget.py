"""A time budget for :func:`~memtheory.torch.trace`: a forward that hangs ends in a clear error.

``trace`` runs the user's ``forward`` (and loss) on fake tensors, which takes
a fraction of a real step, but user code may sleep, wait on the network or
loop without end. :func:`time_budget` bounds the block it wraps in two ways:
every operation the trace sees first checks the clock (:func:`check_budget`),
and, in the main thread, a ``SIGALRM`` timer interrupts Python code that runs
no operation at all (``time.sleep(30)``). Either raises a
:class:`~memtheory.errors.TraceTimeoutError` saying what to do.

Neither raises where PyTorch's C++ has called back into Python and cannot let
an exception through: autograd asks a fake tensor its device (a dispatch) while
it records a result, and an exception there ends the process (``terminate
called after throwing an instance of 'python_error'``; a GRU's step hit it).
PyTorch's C++ calls Python in many such places (its dispatch rules, symbolic
sizes' arithmetic, fake kernels). So the clock is read on the operations
themselves, not on that query, and the timer only raises in the model's own
Python (where a forward that sleeps or loops without an operation runs); fired
anywhere else (PyTorch, sympy, memtheory, a dispatch, a finalizer, where an
exception is printed and lost with the finalizer's work, an import, which would
stay half made) it waits a moment and fires again, and the next operation stops
the trace meanwhile.

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
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sympy
import torch

import memtheory
from memtheory.errors import InvalidArgumentError, TraceTimeoutError

__all__ = ["DEFAULT_TIME_LIMIT", "check_budget", "overdue", "time_budget"]

DEFAULT_TIME_LIMIT = 1800.0
"""Seconds a trace may take by default: half an hour (GPT-2 small takes about 10 s of CPU;
DenseNet-121 at B=8 took over 600 s on a loaded 2-core machine)."""

_deadline: list[tuple[float, float]] = []
"""The budgets in force, innermost last: (deadline on the monotonic clock, seconds)."""


def check_budget() -> None:
    """Raise :class:`~memtheory.errors.TraceTimeoutError` if the innermost budget has run out."""
    if _deadline and time.monotonic() > _deadline[-1][0]:
        _expired(_deadline[-1][1])


def overdue() -> TraceTimeoutError | None:
    """Return the error to raise if the innermost budget has run out, else None.

    The budget's error is a ``TypeError`` (as every :class:`~memtheory.errors.UnsupportedError`),
    and PyTorch's tensor operators (``x / 2.0``) turn a ``TypeError`` into ``NotImplemented``:
    Python then raises its own "unsupported operand type(s)". Whoever words a failure of the
    step asks this first, so that a trace stopped by its budget says so.

    Examples
    --------
    >>> overdue() is None
    True
    """
    if _deadline and time.monotonic() > _deadline[-1][0]:
        return _error(_deadline[-1][1])
    return None


def _expired(seconds: float) -> None:
    raise _error(seconds)


def _error(seconds: float) -> TraceTimeoutError:
    return TraceTimeoutError(
        f"trace ran past its time budget of {seconds:g} s: the model's forward (or its loss) "
        "ran that long on fake tensors, where a step takes a fraction of a real one. Code that "
        "sleeps, waits for data or loops until some value changes cannot be traced: take that "
        "out of forward. If the model is only big, pass a larger time_limit= (in seconds)."
    )


_RETRY = 0.02
"""Seconds until a timer that fired where it may not raise fires again."""

_LIBRARIES = tuple(
    os.path.dirname(module.__file__) + os.sep for module in (torch, sympy, memtheory)
    if module.__file__)
"""Code the timer never interrupts: C++ calls into PyTorch's Python (dispatch rules, symbolic
sizes, fake kernels) where an exception ends the process, and into sympy and memtheory from
there; the next operation's check stops the trace instead."""

_CALLBACKS = ("__torch_dispatch__", "__torch_function__", "__del__")
"""Functions (anyone's) that PyTorch's C++ or the interpreter calls back."""

_WEAKREFS = (os.sep + "weakref.py", os.sep + "_weakrefset.py")
"""Where weak references' callbacks run: an exception there is printed and lost, with the
callback's work (a storage's end, a cache entry's removal)."""

_IMPORTS = "<frozen importlib"
"""Python's import machinery: a module stopped while it imports stays half made in
``sys.modules`` (PyTorch imports parts of itself during a first trace)."""


def _may_stop(frame: Any) -> bool:
    """Whether the timer may raise in ``frame``: the model's own Python, not a callback.

    The innermost frame must be outside PyTorch, sympy and memtheory, and no frame on the
    stack may be a dispatch, a torch function, a finalizer, a weak reference's callback or
    an import.
    A model's forward that sleeps or loops without an operation runs in its own frame.
    """
    if frame is None or frame.f_code.co_filename.startswith(_LIBRARIES):
        return False
    while frame is not None:
        code = frame.f_code
        if code.co_name in _CALLBACKS or code.co_filename.endswith(_WEAKREFS) or \
                code.co_filename.startswith(_IMPORTS):
            return False
        frame = frame.f_back
    return True


def _alarm(signum: int, frame: Any) -> None:
    if not _deadline:
        return
    if not _may_stop(frame):
        signal.setitimer(signal.ITIMER_REAL, _RETRY)  # out of there by then, or again
        return
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
