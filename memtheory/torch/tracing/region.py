"""Where a fitted recurrent step's formulas hold: the sizes below the fit, checked by tracing.

A recurrent layer (``nn.GRU``, an LSTM without oneDNN) runs other operations
at other sizes, so :mod:`~memtheory.torch.tracing.totals` fits each phase's
*peak*, not each moment. A phase's peak is the largest of many moments, and
which one wins changes with the sizes: above the fit's lattice the saved
activations (growing with ``B * S``) win, at small sizes the weight gradients
summed over the time steps do (a GRU classifier traced at B=5, S=7 was
1,116 bytes low at B=3, S=3). A size of 1 also runs other code (no copy of a
transposed input at ``B = 1`` or ``S = 1``). A polynomial fitted near the
example is therefore checked below it, and the sizes it claims are limited to
the boxes ``size >= corner`` whose corner traced to the byte
(:func:`verified_corners`); elsewhere evaluation is refused
(:func:`region_constraints`), never answered with a silently wrong number.

The boxes assume that bytes which agree at a corner agree above it (the
moment that wins at the corner keeps winning as sizes grow): evidence at the
points tried, not a proof, as the conditions say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy as sp

__all__ = ["MAX_REGION_CHECKS", "region_constraints", "verified_corners"]

MAX_REGION_CHECKS = 24
"""Most fixed-size traces spent on finding where a fitted recurrent step holds."""

Point = tuple[int, ...]


def verified_corners(
    agrees: Callable[[Point], bool], base: Point, budget: int = MAX_REGION_CHECKS
) -> list[Point]:
    """Return the corners of the boxes (each size at least the corner's) the formulas hold on.

    ``base`` (where the fit was made) is always a corner. With one size the
    corner walks down from it while ``agrees``; with two, a staircase walk
    (down the first size while it agrees, else up the second) finds the
    lowest corner for each second size up to the base's, using at most
    ``budget`` calls of ``agrees``. With more sizes only ``base`` is returned.
    A corner inside another's box is left out.

    Examples
    --------
    >>> valid = lambda p: p[0] >= 2 and p[0] * p[1] >= 8
    >>> verified_corners(valid, (5, 7))
    [(8, 1), (4, 2), (3, 3), (2, 4)]
    >>> verified_corners(lambda p: p[0] >= 3, (6,))
    [(3,)]
    """
    checks = 0

    def tried(point: Point) -> bool:
        nonlocal checks
        checks += 1
        return agrees(point)

    if len(base) == 1:
        low = base[0]
        while low > 1 and checks < budget and tried((low - 1,)):
            low -= 1
        return [(low,)]
    if len(base) != 2:
        return [base]
    corners: list[Point] = []
    first, second = 2 * base[0], 1  # a first size above the base's, for second sizes below it
    while second < base[1] and checks < budget:
        if tried((first, second)):
            while first > 1 and checks < budget and tried((first - 1, second)):
                first -= 1
            if not corners or corners[-1][0] > first:
                corners.append((first, second))
            second += 1
        else:
            second += 1
    corners.append(base)
    return [c for c in corners if not any(o != c and _above(c, o) for o in corners)]


def _above(point: Point, corner: Point) -> bool:
    return all(p >= c for p, c in zip(point, corner, strict=True))


def region_constraints(
    symbols: Sequence[sp.Symbol], corners: Sequence[Point]
) -> dict[str, sp.Expr]:
    """Constraints (each expression at least 1) for "sizes inside one of the boxes".

    Examples
    --------
    >>> from sympy import symbols
    >>> B, S = symbols("B S", positive=True, integer=True)
    >>> region_constraints([B, S], [(5, 7)])
    {'B >= 5': B - 4, 'S >= 7': S - 6}
    >>> region_constraints([B, S], [(1, 1)])
    {}
    >>> list(region_constraints([B, S], [(4, 2), (2, 4)]))
    ['B >= 4 and S >= 2, or B >= 2 and S >= 4']
    """
    if len(corners) == 1:
        return {
            f"{s.name} >= {c}": s - c + 1
            for s, c in zip(symbols, corners[0], strict=True)
            if c > 1
        }
    words = ", or ".join(
        " and ".join(f"{s.name} >= {c}" for s, c in zip(symbols, corner, strict=True) if c > 1)
        or "any sizes"
        for corner in corners
    )
    expression = sp.Max(*(
        sp.Min(*(s - c + 1 for s, c in zip(symbols, corner, strict=True))) for corner in corners
    ))
    return {words: expression}
