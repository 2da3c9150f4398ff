"""Exact numbers in exercises: substituting values by name, and writing numbers for people.

Examples
--------
>>> from memtheory.symbols import B
>>> at(4 * B + 3, B=2, H=7)
11
>>> decimal_text(sp.Rational(779_021_856, 2**20), 5)
'742.93'
"""

from __future__ import annotations

import sympy as sp

from memtheory.exercises.step_log import note
from memtheory.units import round_half_up

__all__ = ["at", "decimal_text", "exponent10"]


def at(expression: sp.Expr | int, /, **values: object) -> sp.Expr:
    """Substitute values by symbol name, ignoring names the expression does not contain.

    Unlike :func:`memtheory.evaluate`, a name that is absent is not an error:
    a solver can write ``at(total, B=64)`` whether or not a misconception has
    removed the batch from ``total``.

    Parameters
    ----------
    expression : sympy expression or int
    **values
        Numbers by symbol name.

    Returns
    -------
    sympy expression
        Exact; a number when every free symbol got a value.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> at(sp.floor(H / 2) * B, H=25, B=3)
    36
    >>> at(sp.Integer(5), B=64)
    5
    """
    expr = sp.sympify(expression)
    mapping = {s: sp.sympify(values[s.name]) for s in expr.free_symbols if s.name in values}
    result = expr.xreplace(mapping)
    if mapping:
        values_text = ", ".join(f"{s} = {mapping[s]}" for s in sorted(mapping, key=str))
        note(f"Substitute {values_text} in {sp.sstr(expr)}", result)
    return result


def exponent10(value: sp.Expr | int) -> int:
    """Return ``floor(log10(|value|))`` computed exactly (0 for zero).

    Examples
    --------
    >>> exponent10(742), exponent10(sp.Rational(1, 8)), exponent10(1000)
    (2, -1, 3)
    """
    number = abs(sp.Rational(value))
    if number == 0:
        return 0
    exponent = len(str(int(number))) - 1 if number >= 1 else -1
    while number >= sp.Integer(10) ** (exponent + 1):
        exponent += 1
    while number < sp.Integer(10) ** exponent:
        exponent -= 1
    return exponent


def decimal_text(value: sp.Expr | int, significant: int = 6, *, min_decimals: int = 0) -> str:
    """Write an exact number with ``significant`` digits (rounded half up), never in e-notation.

    Whole-number digits are always kept: ``significant`` only limits the decimals.

    Parameters
    ----------
    value : sympy number or int
    significant : int
        Significant digits to keep.
    min_decimals : int
        Keep at least this many decimals.

    Examples
    --------
    >>> decimal_text(sp.Rational(1, 3), 3)
    '0.333'
    >>> decimal_text(123456789, 3)
    '123456789'
    >>> decimal_text(sp.Rational(61, 10), 2, min_decimals=2)
    '6.10'
    """
    number = sp.Rational(value)
    decimals = max(significant - 1 - exponent10(number), min_decimals, 0)
    return str(round_half_up(number, decimals))
