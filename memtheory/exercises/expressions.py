"""Reading and comparing a learner's formula, safely.

A learner writes a formula such as ``"2*B*H**2 + 5"`` or ``"floor(H/2)"``.
It is checked token by token before sympy sees it: only numbers, the
question's symbols, ``floor``/``ceiling``/``Min``/``Max``, arithmetic
operators and parentheses are allowed, so text such as ``__import__('os')``
is refused, never run. It is then parsed by
:func:`sympy.parsing.sympy_parser.parse_expr` with a namespace that holds
nothing else.

Two formulas are equivalent when they agree at many positive integer points
(sizes are positive integers) and, unless they contain a floor or ceiling,
``simplify(a - b) == 0`` proves it.

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

import io
import random
import tokenize
from collections.abc import Mapping

import sympy as sp
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication,
    parse_expr,
    rationalize,
    standard_transformations,
)

from memtheory.exercises.errors import AnswerFormatError
from memtheory.exercises.parsing import MAX_ANSWER_LENGTH

__all__ = ["FUNCTIONS", "equivalent", "parse_expression"]

FUNCTIONS: dict[str, type[sp.Basic]] = {
    "floor": sp.floor,
    "ceiling": sp.ceiling,
    "ceil": sp.ceiling,
    "Min": sp.Min,
    "min": sp.Min,
    "Max": sp.Max,
    "max": sp.Max,
}
"""Functions a formula may call, by the names a learner may write."""

_OPERATORS = {"+", "-", "*", "/", "**", "^", "(", ")", ","}
_TRANSFORMATIONS = (*standard_transformations, implicit_multiplication, convert_xor, rationalize)
_PARSER_NAMES = ("Integer", "Float", "Rational", "Symbol", "Add", "Mul", "Pow")
_MAX_POWER = 64
_MAX_NUMBER_DIGITS = 40


def _check_tokens(text: str, names: Mapping[str, object]) -> None:
    allowed = ", ".join(sorted(names)) or "none"
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        raise AnswerFormatError(
            f"cannot read {text!r} as a formula: check that every '(' has its ')'."
        ) from None
    for token in tokens:
        kind, string = token.type, token.string
        if kind in (
            tokenize.NEWLINE,
            tokenize.NL,
            tokenize.ENDMARKER,
            tokenize.INDENT,
            tokenize.DEDENT,
        ):
            continue
        if kind == tokenize.NUMBER:
            if (
                not string.replace(".", "")
                .replace("e", "")
                .replace("E", "")
                .replace("-", "")
                .replace("+", "")
                .isdigit()
                or len(string) > _MAX_NUMBER_DIGITS
            ):
                raise AnswerFormatError(f"{string!r} is not a plain decimal number (in {text!r}).")
            continue
        if kind == tokenize.NAME:
            if string in names or string in FUNCTIONS:
                continue
            raise AnswerFormatError(
                f"{string!r} is not allowed in a formula: use the symbols {allowed}, numbers, "
                "+ - * / ** and floor(), ceiling(), Min(), Max()."
            )
        if kind == tokenize.OP and string in _OPERATORS:
            continue
        if kind == tokenize.STRING:
            raise AnswerFormatError(f"quoted text is not allowed in a formula (in {text!r}).")
        if string == "//":
            raise AnswerFormatError(f"write floor(a/b) instead of a//b (in {text!r}).")
        raise AnswerFormatError(
            f"{string!r} is not allowed in a formula: use numbers, the symbols {allowed}, "
            "+ - * / ** ( ) and floor(), ceiling(), Min(), Max()."
        )


def _check_tree(expr: sp.Basic, text: str) -> None:
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.Pow):
            exponent = node.exp
            if not exponent.is_Number or abs(exponent) > _MAX_POWER:
                raise AnswerFormatError(
                    f"in {text!r}: powers must be plain numbers up to {_MAX_POWER}, such as H**2."
                )


def _namespace(names: Mapping[str, sp.Symbol]) -> tuple[dict[str, object], dict[str, object]]:
    local: dict[str, object] = dict(FUNCTIONS)
    local.update(names)
    global_: dict[str, object] = {"__builtins__": {}}
    global_.update({name: getattr(sp, name) for name in _PARSER_NAMES})
    return local, global_


def parse_expression(raw: object, symbols: Mapping[str, sp.Symbol]) -> sp.Expr:
    """Read a formula in the given symbols, refusing anything but a plain expression.

    Parameters
    ----------
    raw : str or sympy expression
        The learner's formula. ``^`` means a power; ``2B`` means ``2*B``;
        decimals are read exactly (``0.5`` is one half). A sympy expression
        (from a notebook) has its symbols matched to ``symbols`` by name.
    symbols : mapping of str to sympy.Symbol
        The symbols the question uses, by the names a learner writes.

    Returns
    -------
    sympy expression

    Raises
    ------
    AnswerFormatError
        For text that is not a formula in these symbols, does not parse, or
        has a power too large to compute.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> parse_expression("2B H^2 + 0.5", {"B": B, "H": H})
    2*B*H**2 + 1/2
    >>> parse_expression("B**", {"B": B})
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: cannot read 'B**' as a formula: ...
    """
    if isinstance(raw, sp.Basic):
        return _from_sympy(raw, symbols)
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise AnswerFormatError(f"a formula is text such as '2*B + 5', got a {type(raw).__name__}.")
    text = str(raw).strip()
    if not text:
        raise AnswerFormatError("the answer is empty: write a formula such as '2*B + 5'.")
    if len(text) > MAX_ANSWER_LENGTH:
        raise AnswerFormatError(
            f"the formula is {len(text)} characters long; the limit is {MAX_ANSWER_LENGTH}."
        )
    _check_tokens(text, symbols)
    local, global_ = _namespace(symbols)
    try:
        unevaluated = parse_expr(
            text,
            local_dict=dict(local),
            global_dict=dict(global_),
            transformations=_TRANSFORMATIONS,
            evaluate=False,
        )
        _check_tree(unevaluated, text)
        expr = parse_expr(
            text,
            local_dict=dict(local),
            global_dict=dict(global_),
            transformations=_TRANSFORMATIONS,
        )
    except AnswerFormatError:
        raise
    except SyntaxError:
        raise AnswerFormatError(
            f"cannot read {text!r} as a formula: it is incomplete or misspelt "
            "(is an operand or a parenthesis missing?)."
        ) from None
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, NameError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise AnswerFormatError(f"cannot read {text!r} as a formula: {reason}.") from None
    return _checked_result(expr, text)


def _from_sympy(raw: sp.Basic, symbols: Mapping[str, sp.Symbol]) -> sp.Expr:
    unknown = sorted(s.name for s in raw.free_symbols if s.name not in symbols)
    if unknown:
        raise AnswerFormatError(
            f"the formula uses {', '.join(unknown)}; this question's symbols are "
            f"{', '.join(sorted(symbols))}."
        )
    expr = raw.xreplace({s: symbols[s.name] for s in raw.free_symbols})
    return _checked_result(expr, str(raw))


def _checked_result(expr: object, text: str) -> sp.Expr:
    if not isinstance(expr, sp.Expr) or isinstance(expr, sp.logic.boolalg.Boolean):
        raise AnswerFormatError(f"{text!r} is not a formula with a value.")
    if expr.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
        raise AnswerFormatError(f"{text!r} is not finite (does it divide by zero?).")
    allowed = (sp.Add, sp.Mul, sp.Pow, sp.Symbol, sp.Number, sp.floor, sp.ceiling, sp.Min, sp.Max)
    for node in sp.preorder_traversal(expr):
        if not isinstance(node, allowed) and not isinstance(node, sp.core.numbers.NumberSymbol):
            raise AnswerFormatError(
                f"{text!r} contains {type(node).__name__}, which is not allowed."
            )
    return expr


def _points(symbols: list[sp.Symbol], count: int, seed: int) -> list[dict[sp.Symbol, int]]:
    rng = random.Random(seed)
    points = [{s: value for s in symbols} for value in (1, 2, 3, 7, 50)]
    for _ in range(count):
        scale = rng.choice((10, 1000, 10**6, 10**12))
        points.append({s: rng.randint(1, scale) for s in symbols})
    return points


def equivalent(given: sp.Expr, expected: sp.Expr, *, points: int = 40, seed: int = 0) -> bool:
    """Whether two formulas in positive-integer sizes are the same function.

    They must agree exactly at ``points`` random positive integer points
    (plus a few small ones); then ``simplify(given - expected) == 0`` must
    hold, unless a floor, ceiling, Min or Max is involved, where simplify
    cannot decide and agreement at the points is taken as equivalence.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> equivalent(2 * B * (H + 1), 2 * B * H + 2 * B)
    True
    >>> equivalent(sp.floor(sp.floor(H / 2) / 2), sp.floor(H / 4))
    True
    >>> equivalent(sp.floor(H / 2), sp.floor((H + 1) / 2))
    False
    """
    given, expected = sp.sympify(given), sp.sympify(expected)
    symbols = sorted(given.free_symbols | expected.free_symbols, key=lambda s: s.name)
    for point in _points(symbols, points, seed):
        a, b = given.xreplace(point), expected.xreplace(point)
        if not (a.is_number and b.is_number) or a.has(sp.nan, sp.zoo) or b.has(sp.nan, sp.zoo):
            return False
        if sp.nsimplify(a - b) != 0:
            return False
    rounding = (sp.floor, sp.ceiling, sp.Min, sp.Max)
    if given.has(*rounding) or expected.has(*rounding):
        return True
    return sp.simplify(given - expected) == 0
