"""Python's cycle collector run less often while memtheory derives a step.

A derivation makes hundreds of thousands of objects (sympy's expressions, a
timeline's log) that either live until the answer is built or are freed by
their reference count the moment they are dropped: neither is the cycle
collector's work. At Python's default threshold (a collection of the youngest
objects every 700 allocations net, and of every object, sympy's modules
included, every so many of those) the collector ran about 540 times in one
``memtheory estimate`` and its full collections grew with the step: a
GPT-2-wide stack's exact peak took 2.3 times as long at 200 blocks as at 100
with it, 2.0 times without (issue 26). :func:`fewer_collections` raises the
youngest generation's threshold for the length of a derivation and puts it
back after; the older generations keep their own, so cycles are still
collected, later. The front doors that derive run under it
(:func:`~memtheory.training_memory`, :func:`~memtheory.inference_memory`,
:func:`~memtheory.max_pruning.maximum`, :func:`~memtheory.estimate.estimate`;
not :func:`~memtheory.torch.trace`, whose gain was 2%); the ``memtheory`` command raises
it for its whole process (:func:`collect_less_often`).

Examples
--------
>>> import gc
>>> before = gc.get_threshold()
>>> with fewer_collections():
...     gc.get_threshold()[0] == max(YOUNG_OBJECTS, before[0])
True
>>> gc.get_threshold() == before
True
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

__all__ = [
    "YOUNG_OBJECTS", "collect_less_often", "fewer_collections", "with_fewer_collections",
]

YOUNG_OBJECTS = 50_000
"""Objects made (net of those freed) between two collections of the youngest generation
(Python's default: 700)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the youngest generation's threshold to :data:`YOUNG_OBJECTS` inside the block.

    A threshold already as high (a caller's own, or an enclosing block's) is left
    as it is; the thresholds found are put back when the block ends, however it ends.
    """
    before = gc.get_threshold()
    if before[0] >= YOUNG_OBJECTS:
        yield
        return
    gc.set_threshold(YOUNG_OBJECTS, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def with_fewer_collections(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``function`` inside :func:`fewer_collections`."""

    @functools.wraps(function)
    def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with fewer_collections():
            return function(*args, **kwargs)

    return wrapped


def collect_less_often() -> None:
    """Raise the youngest generation's threshold to :data:`YOUNG_OBJECTS` for good.

    For a process memtheory owns: the ``memtheory`` command calls it first
    (:func:`memtheory.cli.console`), so that the whole command runs so (the parser,
    the cache, the report), not only the derivations. At Python's default the
    command ran the collector about 540 times, four of them over every object,
    sympy's modules included: 0.28 s of a ZeRO-3 question derived (issue 26).
    :func:`memtheory.cli.main` leaves the collector alone, since whoever calls it
    owns the process.

    Examples
    --------
    >>> before = gc.get_threshold()
    >>> collect_less_often()
    >>> gc.get_threshold() == (YOUNG_OBJECTS, *before[1:])
    True
    >>> gc.set_threshold(*before)
    """
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])
