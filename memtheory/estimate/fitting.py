"""The largest size that fits, searched with plain integers (no sympy imported).

:func:`largest_fitting` doubles, then bisects, on a function of one size that
does not decrease (a step's compiled peak), with
:func:`~memtheory.bisection.largest_holding` (the walk
:func:`~memtheory.whatif.max_value` takes too): what ``memtheory estimate`` prints
as the largest batch and sequence. It is kept apart from
:mod:`~memtheory.estimate.compiled` so that an answer put together again from
plain numbers (:mod:`~memtheory.estimate.replay`) searches the same way
without importing sympy. :func:`fewest_fitting` is ``--gpus auto``'s search
for the fewest devices, for the same reason.

Examples
--------
>>> largest_fitting(lambda b: 3 * b + 1, 100)
33
"""

from __future__ import annotations

from collections.abc import Callable

from memtheory.bisection import (
    SEARCH_CEILING,
    BeyondCeilingError,
    largest_holding,
    last_holding,
)

__all__ = ["SEARCH_CEILING", "fewest_fitting", "largest_fitting"]


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
    try:
        return largest_holding(lambda v: f(v) <= cap, 1, stop=stop)
    except BeyondCeilingError:
        return None


def fewest_fitting(
    fits: Callable[[int], bool], most: int, *, every: bool, whole: bool
) -> int | None:
    """Return the fewest data-parallel devices, up to ``most``, on which a step fits; None if none.

    What :func:`~memtheory.estimate.devices.fewest_gpus` searches: the counts
    1, 2, 4, ... in turn, or with ``every`` each count 1, 2, 3, ... (bisected:
    ``fits`` is false up to some count and true from there). ``whole``: each
    device holds a whole replica, so more devices do not help and only 1 is tried.

    Examples
    --------
    >>> fewest_fitting(lambda d: 100 // d <= 15, 64, every=False, whole=False)
    8
    >>> fewest_fitting(lambda d: 100 // d <= 15, 64, every=True, whole=False)
    7
    >>> fewest_fitting(lambda d: 100 // d <= 15, 64, every=True, whole=True) is None
    True
    """
    if not every:
        data = 1
        while data <= most:
            if fits(data):
                return data
            if whole:
                break
            data *= 2
        return None
    if fits(1):
        return 1
    if whole or not fits(most):
        return None
    # 1 does not fit, most does; the peak falls as devices are added
    return last_holding(lambda data: not fits(data), 1, most) + 1
