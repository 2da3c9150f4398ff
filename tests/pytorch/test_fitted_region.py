"""Where a fitted recurrent step's formulas are claimed: the staircase of verified corners."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")

from memtheory.torch.tracing.region import (  # noqa: E402
    MAX_REGION_CHECKS,
    region_constraints,
    verified_corners,
)


@given(low_b=st.integers(1, 6), low_s=st.integers(1, 6), product=st.integers(1, 40),
       base=st.tuples(st.integers(6, 9), st.integers(6, 9)))
def test_every_corner_agrees_and_none_is_inside_another(low_b, low_s, product, base):
    """Corners found under an up-closed region lie in it, and no box holds another's corner."""
    calls: list[tuple[int, ...]] = []

    def agrees(p: tuple[int, ...]) -> bool:
        calls.append(p)
        return p[0] >= low_b and p[1] >= low_s and p[0] * p[1] >= product

    corners = verified_corners(agrees, base)
    assert len(calls) <= MAX_REGION_CHECKS
    for corner in corners:
        assert corner == base or agrees(corner)
        assert not any(o != corner and all(a >= b for a, b in zip(corner, o, strict=True))
                       for o in corners)
    # every box is claimed by a point the predicate accepts (or the fit's own base)
    assert any(all(a >= b for a, b in zip(base, c, strict=True)) for c in corners)


@given(low=st.integers(1, 9), base=st.integers(1, 9))
def test_one_size_walks_down_to_the_lowest_agreeing_size(low, base):
    """With one size, the corner is the smallest size at or below the base that agrees."""
    assert verified_corners(lambda p: p[0] >= low, (base,)) == [(min(low, base),)]


def test_the_constraint_refuses_exactly_outside_the_union_of_boxes():
    """The union's expression is at least 1 exactly inside some box (checked on a grid)."""
    import sympy as sp

    b, s = sp.symbols("B S", positive=True, integer=True)
    corners = [(8, 1), (4, 2), (2, 5)]
    (expression,) = region_constraints([b, s], corners).values()
    for i in range(1, 12):
        for j in range(1, 12):
            inside = any(i >= c0 and j >= c1 for c0, c1 in corners)
            assert (expression.subs({b: i, s: j}) >= 1) == inside
