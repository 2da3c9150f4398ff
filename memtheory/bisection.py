"""The largest whole number at which a condition holds: doubled, then bisected (plain integers).

Every "largest size that fits" search of memtheory is the same walk over a
condition that holds up to some value and fails beyond it (memory never
shrinks as a size grows): double from a value where it holds until it fails,
then bisect between the last value that held and the first that failed.
:func:`largest_holding` is that walk and :func:`last_holding` its bisection;
:func:`~memtheory.whatif.max_value` (on a sympy total) and
:func:`~memtheory.estimate.fitting.largest_fitting` (on a compiled peak,
without sympy) both search with them, so they try the same values and agree.
This module imports nothing, so a search run without sympy stays without it.

Examples
--------
>>> largest_holding(lambda b: 3 * b + 1 <= 100, 1)
33
>>> last_holding(lambda d: 1000 // d > 120, 1, 64)  # the last count that does not fit yet
8
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SEARCH_CEILING", "BeyondCeilingError", "largest_holding", "last_holding"]

SEARCH_CEILING = 2**80
"""The doubling gives up beyond this value: the condition hardly ever fails."""


class BeyondCeilingError(Exception):
    """The condition still held past :data:`SEARCH_CEILING` (each caller says why).

    Attributes
    ----------
    reached : int
        The largest value at which the condition was seen to hold.
    """

    def __init__(self, reached: int) -> None:
        super().__init__(f"the condition still holds at {reached}")
        self.reached = reached


def last_holding(holds: Callable[[int], bool], low: int, high: int) -> int:
    """Return the largest ``v`` in ``[low, high)`` with ``holds(v)``, bisecting.

    ``holds(low)`` must be true, ``holds(high)`` false, and ``holds`` true up to
    some value and false beyond it; ``holds`` is called only strictly between them.

    Examples
    --------
    >>> tried = []
    >>> last_holding(lambda v: tried.append(v) or v <= 37, 32, 64), tried
    (37, [48, 40, 36, 38, 37])
    """
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            low = middle
        else:
            high = middle
    return low


def largest_holding(
    holds: Callable[[int], bool], low: int, *, stop: int | None = None,
    ceiling: int = SEARCH_CEILING,
) -> int:
    """Return the largest ``v >= low`` (below ``stop``) with ``holds(v)``: doubled, then bisected.

    Parameters
    ----------
    holds : callable
        True up to some value, false beyond it; true at ``low``.
    low : int
        Where the doubling starts: ``max(2 * low, 2)``, then twice that, ...
    stop : int, optional
        A value where ``holds`` is known to be false: the doubling stops there
        (the caller has checked it).
    ceiling : int, default :data:`SEARCH_CEILING`

    Raises
    ------
    BeyondCeilingError
        When the doubling passes ``ceiling`` with the condition still true.

    Examples
    --------
    >>> largest_holding(lambda v: v * v <= 1000, 1), largest_holding(lambda v: True, 1, stop=9)
    (31, 8)
    >>> largest_holding(lambda v: True, 1, ceiling=100)
    Traceback (most recent call last):
    ...
    memtheory.bisection.BeyondCeilingError: the condition still holds at 64
    """
    high = max(2 * low, 2)
    while (stop is None or high < stop) and holds(high):
        low, high = high, 2 * high
        if high > ceiling:
            raise BeyondCeilingError(low)
    if stop is not None:
        high = min(high, stop)
    return last_holding(holds, low, high)
