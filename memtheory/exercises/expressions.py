"""Reading and comparing a learner's formula, safely.

A learner writes a formula such as ``"2*B*H**2 + 5"`` or ``"floor(H/2)"``.
It is read by :func:`memtheory.bounded_parser.parse_formula`, never by
Python or sympy's parser: only numbers, the question's symbols,
``floor``/``ceiling``/``Min``/``Max``, arithmetic operators and parentheses
are allowed, so text such as ``__import__('os')`` is refused, never run; and
limits on length, nesting, powers, degree and expanded size are checked
before anything is computed, so ``((B+1)^64)^64`` is refused at once.

Two formulas are equivalent when they are the same function of positive
integer sizes. Without floor, ceiling, Min or Max, sympy proves it or
disproves it exactly (the numerator of ``given - expected`` over one common
denominator expands to zero, or it does not). With them, a proof is tried
first (each rounded part stands for itself, and sympy has already reduced
``floor(H/2 - 1) + 1`` to ``floor(H/2)``); when none is found the formulas
must agree at sample points chosen where a difference would show: small
sizes, random ones up to 10^12, the question's own sizes, and around every
constant of both formulas and its multiples (so ``... + floor(M/10**13)`` is
caught at ``M = 10**13``).

Examples
--------
>>> from memtheory.symbols import H
>>> formula = parse_expression("floor((H - 2)/2) + 1", {"H": H})
>>> equivalent(formula, sp.floor(H / 2))
True
>>> parse_expression("__import__('os')", {"H": H})
Traceback (most recent call last):
...
memtheory.exercises.errors.AnswerFormatError: '__import__' is not allowed in a formula: ...
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

import sympy as sp

from memtheory.bounded_parser import (
    FORMULA_FUNCTIONS,
    check_formula_size,
    parse_formula,
    quote_text,
)
from memtheory.errors import ParseError
from memtheory.exercises.errors import AnswerFormatError
from memtheory.exercises.parsing import MAX_ANSWER_LENGTH

__all__ = ["FUNCTIONS", "equivalent", "parse_expression", "sample_points"]

FUNCTIONS = FORMULA_FUNCTIONS
"""Functions a formula may call, by the names a learner may write."""

_ROUNDING = (sp.floor, sp.ceiling, sp.Min, sp.Max)
_MAX_CONSTANTS = 24


def parse_expression(raw: object, symbols: Mapping[str, sp.Symbol]) -> sp.Expr:
    """Read a formula in the given symbols, refusing anything but a plain expression.

    Parameters
    ----------
    raw : str or sympy expression
        The learner's formula. ``^`` means a power; ``2B`` means ``2*B``;
        decimals are read exactly (``0.5`` is one half). A sympy expression
        (from a notebook) has its symbols matched to ``symbols`` by name, and
        is held to the same limits.
    symbols : mapping of str to sympy.Symbol
        The symbols the question uses, by the names a learner writes.

    Returns
    -------
    sympy expression

    Raises
    ------
    AnswerFormatError
        For text that is not a formula in these symbols, does not parse, or
        breaks a limit of :mod:`memtheory.bounded_parser`.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> parse_expression("2B H^2 + 0.5", {"B": B, "H": H})
    2*B*H**2 + 1/2
    >>> parse_expression("B**", {"B": B})
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: cannot read 'B**': it is incomplete ...
    """
    if isinstance(raw, sp.Basic):
        return _from_sympy(raw, symbols)
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise AnswerFormatError(f"a formula is text such as '2*B + 5', got a {type(raw).__name__}.")
    if isinstance(raw, int) and raw.bit_length() > 4 * MAX_ANSWER_LENGTH:
        raise AnswerFormatError(f"the number has more than {MAX_ANSWER_LENGTH} digits.")
    text = str(raw).strip() if isinstance(raw, str) else str(raw)
    if not text:
        raise AnswerFormatError("the answer is empty: write a formula such as '2*B + 5'.")
    if len(text) > MAX_ANSWER_LENGTH:
        raise AnswerFormatError(
            f"the formula is {len(text)} characters long; the limit is {MAX_ANSWER_LENGTH}."
        )
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()  # the end of a sentence
    try:
        expr = parse_formula(text, symbols)
    except ParseError as error:
        raise AnswerFormatError(str(error)) from None
    return _checked_result(expr, text)


def _from_sympy(raw: sp.Basic, symbols: Mapping[str, sp.Symbol]) -> sp.Expr:
    try:
        check_formula_size(raw)
    except ParseError as error:
        raise AnswerFormatError(str(error)) from None
    unknown = sorted(s.name for s in raw.free_symbols if s.name not in symbols)
    if unknown:
        raise AnswerFormatError(
            f"the formula uses {', '.join(unknown)}; this question's symbols are "
            f"{', '.join(sorted(symbols))}."
        )
    expr = raw.xreplace({s: symbols[s.name] for s in raw.free_symbols})
    return _checked_result(expr, str(raw))


def _checked_result(expr: object, text: str) -> sp.Expr:
    shown = quote_text(text)
    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.logic.boolalg.Boolean):
        raise AnswerFormatError(f"{shown} is not a formula with a value.")
    if expr.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
        raise AnswerFormatError(f"{shown} is not finite (does it divide by zero?).")
    allowed = (sp.Add, sp.Mul, sp.Pow, sp.Symbol, sp.Number, *_ROUNDING)
    for node in sp.preorder_traversal(expr):
        if not isinstance(node, allowed):
            name = type(node).__name__
            raise AnswerFormatError(f"{shown} contains {name}, which is not allowed.")
    return expr


def _constants(*exprs: sp.Expr) -> list[int]:
    """Whole numbers that may mark where two formulas part: each constant's parts, above 1."""
    found: set[int] = set()
    for expr in exprs:
        for number in expr.atoms(sp.Rational):
            for part in (abs(int(number.p)), int(number.q)):
                if 1 < part < 10**30:
                    found.add(part)
    return sorted(found)[:_MAX_CONSTANTS]


def _points(
    symbols: list[sp.Symbol], count: int, seed: int, marks: Iterable[int]
) -> list[dict[sp.Symbol, int]]:
    rng = random.Random(seed)
    points = [{s: value for s in symbols} for value in (1, 2, 3, 4, 5, 7, 8, 50)]
    for _ in range(count):
        scale = rng.choice((10, 1000, 10**6, 10**12))
        points.append({s: rng.randint(1, scale) for s in symbols})
    for mark in dict.fromkeys(marks):
        for value in (mark - 1, mark, mark + 1, 2 * mark, mark * rng.randint(3, 1000)):
            if value < 1:
                continue
            points.append({s: value for s in symbols})
            for chosen in symbols if len(symbols) > 1 else ():
                points.append({s: value if s == chosen else rng.randint(1, 64) for s in symbols})
    return points


def sample_points(
    symbols: Iterable[sp.Symbol],
    exprs: Iterable[sp.Expr],
    *,
    count: int = 40,
    seed: int = 0,
    sizes: Iterable[int] = (),
) -> list[dict[sp.Symbol, int]]:
    """Return the points :func:`equivalent` samples formulas at (the book's self-check uses them).

    Small sizes, ``count`` random ones, then around ``sizes`` and around the
    constants of ``exprs``.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> [p[H] for p in sample_points([H], [sp.floor(H / 2)], count=0)]
    [1, 2, 3, 4, 5, 7, 8, 50, 1, 2, 3, 4, 1734]
    """
    exprs = [sp.sympify(e) for e in exprs]
    marks = [*(int(s) for s in sizes if int(s) > 0), *_constants(*exprs)]
    return _points(sorted(symbols, key=lambda s: s.name), count, seed, marks)


def _differs(given: sp.Expr, expected: sp.Expr, point: dict[sp.Symbol, int]) -> bool:
    exact = {s: sp.Integer(v) for s, v in point.items()}
    a, b = sp.sympify(given.xreplace(exact)), sp.sympify(expected.xreplace(exact))
    if not (a.is_number and b.is_number) or a.has(sp.nan, sp.zoo) or b.has(sp.nan, sp.zoo):
        return True
    return bool(sp.nsimplify(a - b) != 0)


def _proved_equal(difference: sp.Expr) -> bool:
    """Whether the difference is zero as a polynomial in its symbols and rounded parts."""
    atoms = sorted(difference.atoms(*_ROUNDING), key=sp.default_sort_key)
    stand_ins = {atom: sp.Dummy(f"r{i}") for i, atom in enumerate(atoms)}
    numerator, _ = sp.fraction(sp.together(difference.xreplace(stand_ins)))
    return bool(sp.expand(numerator) == 0)


def equivalent(
    given: sp.Expr,
    expected: sp.Expr,
    *,
    points: int = 40,
    seed: int = 0,
    sizes: Iterable[int] = (),
) -> bool:
    """Whether two formulas in positive-integer sizes are the same function.

    Without floor, ceiling, Min or Max the answer is exact: ``given -
    expected`` over one common denominator has a numerator that expands to
    zero, or it does not. With them, a proof is tried
    first; otherwise the formulas must agree at every sample point (see the
    module's docstring): small sizes, ``points`` random ones, ``sizes`` (the
    question's own numbers), and around each constant of either formula.

    Parameters
    ----------
    given, expected : sympy expressions
    points : int
        Random sample points.
    seed : int
        Seed of the random points.
    sizes : iterable of int
        Sizes the question uses (a GPU's bytes, an image side), tried for every symbol.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> equivalent(2 * B * (H + 1), 2 * B * H + 2 * B)
    True
    >>> equivalent(sp.floor(sp.floor(H / 2) / 2), sp.floor(H / 4))
    True
    >>> equivalent(sp.floor(H / 2), sp.floor((H + 1) / 2))
    False
    >>> equivalent(H + sp.floor(H / 10**13), H)
    False
    """
    given, expected = sp.sympify(given), sp.sympify(expected)
    difference = given - expected
    if not difference.has(*_ROUNDING):
        numerator, _ = sp.fraction(sp.together(difference))
        return bool(sp.expand(numerator) == 0)
    if _proved_equal(difference):
        return True
    symbols = sorted(given.free_symbols | expected.free_symbols, key=lambda s: s.name)
    marks = [*(int(s) for s in sizes if int(s) > 0), *_constants(given, expected)]
    return not any(_differs(given, expected, p) for p in _points(symbols, points, seed, marks))
