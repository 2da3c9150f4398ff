"""Checking values against size constraints: refused with the layer named, or left symbolic.

Examples
--------
>>> from memtheory.symbols import H
>>> check_sizes([SizeConstraint(H - 4, "layer 1")], {H: sp.Integer(9)})
()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy as sp

from memtheory._replace import replaced
from memtheory.constraints.bounds import largest_valid, size_shrinks, smallest_valid
from memtheory.constraints.size_constraint import SizeConstraint
from memtheory.errors import KernelTooLargeError

__all__ = ["check_sizes", "too_small"]


def check_sizes(
    constraints: Iterable[SizeConstraint],
    values: Mapping[sp.Symbol, sp.Expr],
    sizes: Iterable[sp.Expr] | None = None,
) -> tuple[SizeConstraint, ...]:
    """Refuse ``values`` that make a size below 1; return the constraints still symbolic.

    ``sizes``, when given, are the constraints' sizes with ``values`` already
    substituted (by a caller that substitutes them with other expressions, sharing
    the work).

    Raises
    ------
    KernelTooLargeError
        Naming the values, the layer, the size and the condition.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> rule = SizeConstraint(H - 4, "layer 1 of 'net', Conv2d 'conv2d_1', output dimension 2")
    >>> check_sizes([rule], {B: sp.Integer(3)})
    (SizeConstraint(size=H - 4, where="layer 1 of 'net', Conv2d 'conv2d_1', output dimension 2"),)
    >>> check_sizes([rule], {H: sp.Integer(3)})
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: H=3 is too small for layer 1 of 'net', Conv2d ...
    """
    remaining: list[SizeConstraint] = []
    constraints = tuple(constraints)
    # One pass over every size: a deep network's sizes are floors nested in one another.
    if sizes is None:
        sizes = replaced([c.size for c in constraints], values) if values else None
    substituted = None if sizes is None else list(sizes)
    for index, constraint in enumerate(constraints):
        size = constraint.size if substituted is None else substituted[index]
        if not size.free_symbols:
            if size < 1:
                shown = ", ".join(
                    f"{symbol}={value}"
                    for symbol, value in values.items()
                    if symbol in constraint.size.free_symbols
                )
                raise too_small(constraint, shown, size)
        else:
            remaining.append(
                constraint if size == constraint.size else SizeConstraint(size, constraint.where)
            )
    return tuple(remaining)


def too_small(constraint: SizeConstraint, shown: str, size: object) -> KernelTooLargeError:
    """Return the error for values (``shown``, as ``"H=2"``) that make ``constraint`` fail."""
    hint = ""
    symbols = constraint.size.free_symbols
    if constraint.is_limit and len(symbols) == 1 and not size_shrinks(
        constraint.size, next(iter(symbols))
    ):  # a shortest size the model takes (a vision-language model's image tokens)
        return KernelTooLargeError(
            f"{shown} is below {constraint.where}; {constraint.condition} must hold. The "
            "model takes no smaller size: use a larger one."
        )
    if constraint.is_limit:
        largest = (
            largest_valid([constraint], next(iter(symbols))) if len(symbols) == 1 else None
        )
        bound = (
            f"{next(iter(symbols))} <= {largest} must hold ({constraint.condition})"
            if largest is not None
            else f"{constraint.condition} must hold"
        )
        return KernelTooLargeError(
            f"{shown} is beyond {constraint.where}; {bound}. The model takes no larger size: "
            "use a smaller one."
        )
    if len(symbols) == 1:
        (symbol,) = symbols
        if size_shrinks(constraint.size, symbol):
            # An upper bound (a traced formula's "B < 16"), not a window that must fit.
            return KernelTooLargeError(
                f"{shown} is outside {constraint.where}: it would be {size}, and "
                f"{constraint.condition} must hold. Use a smaller {symbol}, or derive the "
                f"formula again for this range of {symbol}."
            )
        try:
            hint = f" (so {symbol} >= {smallest_valid([constraint], symbol)})"
        except KernelTooLargeError:
            hint = ""
    return KernelTooLargeError(
        f"{shown} is too small for {constraint.where}: it would be {size}, and "
        f"{constraint.condition} must hold{hint}. Use a larger input, more padding, or a "
        "smaller kernel or stride."
    )
