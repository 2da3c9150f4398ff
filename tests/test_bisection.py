"""One shared search: :mod:`memtheory.bisection` and the four searches built on it, vs brute force.

Every expected value here is found by trying each whole number in turn (the
definition of "largest that holds" / "fewest that fits"), independently of the
doubling and bisection under test.
"""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import assume, given
from hypothesis import strategies as st

from memtheory.bisection import BeyondCeilingError, largest_holding, last_holding
from memtheory.constraints import SizeConstraint, largest_valid, smallest_valid
from memtheory.errors import EvaluationError, KernelTooLargeError
from memtheory.estimate.fitting import fewest_fitting, largest_fitting
from memtheory.symbols import B, H
from memtheory.whatif.solve import _bisected


@given(threshold=st.integers(1, 5000), low=st.integers(1, 5000))
def test_largest_holding_is_the_threshold(threshold, low) -> None:
    """A condition true up to ``threshold``: the walk from any ``low`` below it finds it."""
    low = min(low, threshold)
    assert largest_holding(lambda v: v <= threshold, low) == threshold


@given(threshold=st.integers(1, 300), stop=st.integers(2, 300))
def test_largest_holding_stops_at_stop(threshold, stop) -> None:
    """With ``stop`` (where the condition is known false), nothing at or past it is tried."""
    assume(threshold < stop)  # the caller's promise: false at stop
    tried: list[int] = []
    found = largest_holding(lambda v: tried.append(v) or v <= threshold, 1, stop=stop)
    assert found == threshold
    assert all(v < stop for v in tried)


@given(threshold=st.integers(0, 400), low=st.integers(0, 400), span=st.integers(1, 400))
def test_last_holding_is_brute_force(threshold, low, span) -> None:
    """Between a value that holds and one that does not, the last that holds."""
    high = low + span
    threshold = min(max(threshold, low), high - 1)
    expected = max(v for v in range(low, high) if v <= threshold)
    assert last_holding(lambda v: v <= threshold, low, high) == expected


def test_the_ceiling_says_where_it_stopped() -> None:
    """A condition that never fails: the error carries the last value seen to hold."""
    with pytest.raises(BeyondCeilingError) as raised:
        largest_holding(lambda v: True, 3, ceiling=1000)
    assert raised.value.reached == 768  # 3 doubled to the largest value under 1000: 3 * 2**8
    assert largest_fitting(lambda v: 0, 10) is None
    with pytest.raises(EvaluationError, match=r"up to B=\d+: it hardly grows with B"):
        _bisected(lambda v: 0, 10, 1, "B")


@given(slope=st.integers(1, 50), constant=st.integers(0, 500), cap=st.integers(0, 5000),
       stop=st.none() | st.integers(1, 200))
def test_largest_fitting_and_max_value_bisect_alike(slope, constant, cap, stop) -> None:
    """Estimate's search and whatif's bisection find the brute-force largest size."""
    def f(v: int) -> int:
        return slope * v + constant

    top = cap // slope + 2 if stop is None else stop
    fitting = [v for v in range(1, top + 1) if f(v) <= cap]
    assert largest_fitting(f, cap, stop) == (max(fitting) if fitting else 0)
    if f(1) <= cap:
        assert _bisected(f, cap, 1, "B") == max(v for v in range(1, cap + 2) if f(v) <= cap)


@given(states=st.integers(1, 10**6), own=st.integers(0, 10**4), usable=st.integers(1, 10**6),
       most=st.integers(1, 300), whole=st.booleans())
def test_fewest_fitting_is_brute_force(states, own, usable, most, whole) -> None:
    """The fewest devices: sharded states over ``d`` plus a device's own bytes, tried in turn."""
    def fits(d: int) -> bool:
        return -(-states // d) + own <= usable

    every = [d for d in range(1, (1 if whole else most) + 1) if fits(d)]
    powers = [d for d in (2**k for k in range(12)) if d <= (1 if whole else most) and fits(d)]
    assert fewest_fitting(fits, most, every=True, whole=whole) == (every[0] if every else None)
    assert fewest_fitting(fits, most, every=False, whole=whole) == (powers[0] if powers else None)


@given(window=st.integers(1, 9), margin=st.integers(0, 40), start=st.integers(1, 500))
def test_smallest_valid_is_brute_force(window, margin, start) -> None:
    """The first side from ``start`` that a pooling allows: floor(H / k) - c >= 1, tried in turn."""
    constraint = SizeConstraint(sp.floor(H / window) - margin, "pool")
    expected = next(h for h in range(start, start + window * (margin + 1) + 1)
                    if h // window - margin >= 1)
    assert smallest_valid([constraint], H, start) == expected


@given(limit=st.integers(1, 10**6))
def test_largest_valid_is_brute_force(limit) -> None:
    """The largest batch a traced formula holds for: limit - B >= 1, so B = limit - 1."""
    assert largest_valid([SizeConstraint(limit - B, "traced")], B) == limit - 1


def test_a_size_no_value_allows_is_refused() -> None:
    """A constraint no value meets: past the ceiling, a clear error naming it."""
    with pytest.raises(KernelTooLargeError, match=r"no value of B satisfies -B >= 1\."):
        smallest_valid([SizeConstraint(-B, "never")], B)
