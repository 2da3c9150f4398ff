"""The front doors: a person's text read as a number or a formula, and quoted in messages.

Examples
--------
>>> parse_arithmetic("1 048 576")
Fraction(1048576, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy as sp

from memtheory.bounded_parser.parse_limits import DEFAULT_LIMITS, Limits
from memtheory.bounded_parser.reader import FormulaReader
from memtheory.bounded_parser.tokens import FORMULA_FUNCTIONS
from memtheory.errors import ParseError

__all__ = ["parse_arithmetic", "parse_formula", "quote_text"]


def quote_text(text: object, limit: int = 60) -> str:
    """Quote text for a message, cut to ``limit`` characters (a refusal never echoes 5000).

    Examples
    --------
    >>> quote_text("22.9 MiB"), quote_text("9" * 100, 10)
    ("'22.9 MiB'", "'9999999999...' (100 characters)")
    """
    shown = str(text)
    if len(shown) <= limit:
        return repr(shown)
    return f"{shown[:limit]!r}"[:-1] + f"...' ({len(shown)} characters)"


def _prepare(text: object, limits: Limits, what: str) -> str:
    if not isinstance(text, str):
        raise ParseError(f"{what} must be text, got {type(text).__name__} ({text!r:.40}).")
    stripped = text.strip()
    if len(stripped) > limits.length:
        raise ParseError(
            f"the text is {len(stripped)} characters long; the limit is {limits.length}."
        )
    if not stripped:
        raise ParseError(f"the text is empty: write {what}.")
    return stripped


def parse_arithmetic(text: str, limits: Limits = DEFAULT_LIMITS) -> Fraction:
    """Read a number, or arithmetic on numbers, exactly: ``"1,048,576"``, ``"3 x 10^6"``.

    Parameters
    ----------
    text : str
        Decimal literals (digit groups and e-notation allowed), ``+ - * / ^``
        (``**``, ``x``, ``×``, ``·`` also), parentheses; no names.
    limits : Limits

    Returns
    -------
    fractions.Fraction
        The exact value.

    Raises
    ------
    ParseError
        If the text is not arithmetic on numbers, or breaks a limit.

    Examples
    --------
    >>> parse_arithmetic("2^30 / 10^9")
    Fraction(2097152, 1953125)
    >>> parse_arithmetic("224,69")
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: cannot read '224,69' as a number: a comma may only group ...
    """
    source = _prepare(text, limits, "a number such as 4632902 or 22.9")
    value = FormulaReader(source, numeric=True, symbols={}, functions={}, limits=limits).read()
    assert isinstance(value, Fraction)
    return value


def parse_formula(
    text: str,
    symbols: Mapping[str, sp.Symbol],
    limits: Limits = DEFAULT_LIMITS,
    functions: Mapping[str, Callable[..., sp.Expr]] = FORMULA_FUNCTIONS,
) -> sp.Expr:
    """Read a formula in ``symbols`` into a sympy expression, within limits.

    Parameters
    ----------
    text : str
        ``^`` or ``**`` for powers; juxtaposition multiplies (``2B H``);
        decimals are exact (``0.5`` is one half).
    symbols : mapping of str to sympy.Symbol
        The names the formula may use.
    limits : Limits
    functions : mapping of str to callable
        Functions it may call (by default floor, ceiling, Min, Max).

    Raises
    ------
    ParseError
        If the text is not such a formula, or breaks a limit.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> parse_formula("((B+1)^64)^64", {"B": B})
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: '((B+1)^64)^64' is too large to compute: its degree reaches ...
    """
    source = _prepare(text, limits, "a formula such as 2*B + 5")
    reader = FormulaReader(
        source, numeric=False, symbols=symbols, functions=functions, limits=limits
    )
    value = reader.read()
    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    return value.expr
