"""The smallest and largest values of a size symbol that constraints allow.

Examples
--------
>>> from memtheory.symbols import H
>>> smallest_valid([SizeConstraint(H - 4, "a 5x5 kernel")], H)
5
"""

from __future__ import annotations

from collections.abc import Iterable

import sympy as sp

from memtheory.bisection import BeyondCeilingError, largest_holding
from memtheory.constraints.size_constraint import SizeConstraint
from memtheory.errors import KernelTooLargeError

__all__ = ["largest_valid", "size_shrinks", "smallest_valid"]


def size_shrinks(size: sp.Expr, symbol: sp.Symbol) -> bool:
    """Whether ``size`` falls as ``symbol`` grows large (an upper bound on ``symbol``).

    Compared far out, where a layer's size (even a square such as a flattened
    ``(H // 2 - 2)**2``) grows and a bound such as ``16 - B`` falls.
    """
    near, far = (size.xreplace({symbol: sp.Integer(2**v)}) for v in (40, 41))
    return bool(near.is_number and far.is_number and far < near)


def largest_valid(constraints: Iterable[SizeConstraint], symbol: sp.Symbol) -> int | None:
    """Return the largest value of ``symbol`` that the constraints bounding it from above allow.

    ``None`` when no constraint in ``symbol`` alone shrinks as it grows (no upper
    bound: the usual case for a layer's output size).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> largest_valid([SizeConstraint(16 - B, "the traced formulas' B < 16")], B)
    15
    """
    bounds = [
        c for c in constraints if c.size.free_symbols == {symbol} and size_shrinks(c.size, symbol)
    ]
    if not bounds:
        return None

    def valid(value: int) -> bool:
        return all(c.size.xreplace({symbol: sp.Integer(value)}) >= 1 for c in bounds)

    if not valid(1):
        return 0
    try:
        return largest_holding(valid, 1, ceiling=2**64)
    except BeyondCeilingError:
        return None


def smallest_valid(constraints: Iterable[SizeConstraint], symbol: sp.Symbol, start: int = 1) -> int:
    """Return the smallest value of ``symbol`` from ``start`` on that every constraint allows.

    Constraints in other symbols too are ignored. Sizes are taken to grow
    with the input (a window slides over more positions), so the first valid
    value is found by doubling and then bisection, and checked.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> smallest_valid([SizeConstraint(sp.floor(H / 2) - 2, "pool")], H)
    6
    """
    own = [c for c in constraints if c.size.free_symbols == {symbol}]
    if not own:
        return start

    def valid(value: int) -> bool:
        return all(c.size.xreplace({symbol: sp.Integer(value)}) >= 1 for c in own)

    if valid(start):
        return start
    try:  # the last value refused, then the first allowed
        return largest_holding(lambda value: not valid(value), start, ceiling=2**64) + 1
    except BeyondCeilingError:
        names = "; ".join(c.condition for c in own)
        raise KernelTooLargeError(f"no value of {symbol} satisfies {names}.") from None
