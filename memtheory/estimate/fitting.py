"""The largest size that fits, searched with plain integers (no sympy imported).

:func:`largest_fitting` doubles, then bisects, on a function of one size that
does not decrease (a step's compiled peak): what ``memtheory estimate`` prints
as the largest batch and sequence. It is kept apart from
:mod:`~memtheory.estimate.compiled` so that an answer put together again from
plain numbers (:mod:`~memtheory.estimate.replay`) searches the same way
without importing sympy.

Examples
--------
>>> largest_fitting(lambda b: 3 * b + 1, 100)
33
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SEARCH_CEILING", "largest_fitting"]

SEARCH_CEILING = 2**80
"""The search gives up beyond this value (as :func:`~memtheory.whatif.max_value` does)."""


def largest_fitting(f: Callable[[int], int], cap: int, stop: int | None = None) -> int | None:
    """Return the largest whole ``v >= 1`` (at most ``stop``) with ``f(v) <= cap``; 0 if none.

    ``f`` must not decrease. None when ``f`` hardly grows (the answer would be
    beyond :data:`SEARCH_CEILING`): :func:`~memtheory.whatif.max_value` says why.

    Examples
    --------
    >>> largest_fitting(lambda b: 1000 * b + 24, 10**6), largest_fitting(lambda b: b, 10, stop=4)
    (999, 4)
    >>> largest_fitting(lambda b: 10 * b, 5)
    0
    """
    if f(1) > cap:
        return 0
    if stop is not None and f(stop) <= cap:
        return stop
    low, high = 1, 2
    while (stop is None or high < stop) and f(high) <= cap:
        low, high = high, 2 * high
        if high > SEARCH_CEILING:
            return None
    if stop is not None:
        high = min(high, stop)  # f(stop) > cap
    while high - low > 1:
        middle = (low + high) // 2
        if f(middle) <= cap:
            low = middle
        else:
            high = middle
    return low
