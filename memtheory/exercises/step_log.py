"""The channel a worked solution's steps are written through, wherever a solver takes them.

Steps a solver takes outside its ``how`` (a substitution with
:func:`~memtheory.exercises.numeric.at`, the techniques of
:mod:`~memtheory.exercises.technique_steps`) call :func:`note`; it hands the
step to the :class:`StepSink` that :func:`recording` installed for the current
context (a :class:`~memtheory.exercises.derivation.Recorder`), and does nothing
when none is. :func:`took` says which kind of step was taken (the key of
:data:`~memtheory.exercises.sections.STEP_SECTIONS` that names the book's
section teaching it), without a line of text. This module imports nothing of
the exercises, so any of them can note a step.

Examples
--------
>>> class Steps(list):
...     def noted(self, text, value):
...         self.append((text, value))
...     def noted_lines(self, lines):
...         self.extend(lines)
...     def took(self, kind):
...         self.append(kind)
>>> steps = Steps()
>>> with recording(steps):
...     note("Batch", 64)
...     took("zero_stage")
>>> note("not recorded")
>>> steps
[('Batch', 64), 'zero_stage']
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar

__all__ = ["StepSink", "active", "note", "note_lines", "recording", "shown", "took"]

T = TypeVar("T")


class StepSink(Protocol):
    """What records the steps :func:`note` and :func:`note_lines` are given."""

    def noted(self, text: str, value: object) -> None:
        """Record that a step computed ``text`` (its result ``value``, or None)."""

    def noted_lines(self, lines: Sequence[str]) -> None:
        """Record a block of steps: a heading, then indented lines."""

    def took(self, kind: str) -> None:
        """Record that a step of this kind was taken (a key of ``STEP_SECTIONS``)."""


_ACTIVE: ContextVar[StepSink | None] = ContextVar("memtheory_step_sink", default=None)


def note(text: str, value: object = None) -> None:
    """Record a step in the running :class:`StepSink`, if any (outside one, do nothing).

    Parameters
    ----------
    text : str
        What the step computes.
    value : object, optional
        Its result, written after ``=``.

    Examples
    --------
    >>> note("nothing is recording")
    """
    sink = _ACTIVE.get()
    if sink is not None:
        sink.noted(text, value)


def shown(text: str, value: T) -> T:
    """Record ``text = value`` (as :func:`note`) and return ``value``: a step inside an expression.

    Examples
    --------
    >>> shown("two and two", 2 + 2)
    4
    """
    note(text, value)
    return value


def note_lines(lines: Sequence[str]) -> None:
    """Record a block of steps (a heading, then indented lines) in the running sink, if any.

    Examples
    --------
    >>> note_lines(["nothing is recording", "  so nothing is kept"])
    """
    sink = _ACTIVE.get()
    if sink is not None:
        sink.noted_lines(lines)


def took(kind: str) -> None:
    """Record in the running sink, if any, that a step of ``kind`` was taken (no text).

    Examples
    --------
    >>> took("kv_cache_formula")
    """
    sink = _ACTIVE.get()
    if sink is not None:
        sink.took(kind)


def active() -> StepSink | None:
    """Return the sink :func:`recording` installed for this context, or None.

    Examples
    --------
    >>> active() is None
    True
    """
    return _ACTIVE.get()


@contextmanager
def recording(sink: StepSink) -> Iterator[StepSink]:
    """Send every :func:`note` in this context to ``sink`` until the block ends.

    Examples
    --------
    >>> class Steps(list):
    ...     def noted(self, text, value):
    ...         self.append(text)
    >>> with recording(Steps()) as steps:
    ...     note("one step")
    >>> steps
    ['one step']
    """
    token = _ACTIVE.set(sink)
    try:
        yield sink
    finally:
        _ACTIVE.reset(token)
