"""What a caller hands the evaluators: an expression, symbol names and values, checked.

Each evaluator (:mod:`~memtheory.evaluation.substitution`,
:mod:`~memtheory.evaluation.exact`, :mod:`~memtheory.evaluation.grid`) reads its
input through these, so that all three refuse the same things the same way: a
size symbol (a positive integer, :mod:`memtheory.symbols`) takes positive whole
numbers only, never ``True``, ``2.5``, ``0`` or ``NaN``.

Examples
--------
>>> from memtheory.symbols import B
>>> checked_value(B, 4.0)
4
>>> checked_value(B, 0)
Traceback (most recent call last):
...
memtheory.errors.EvaluationError: B must be positive, got 0.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import sympy as sp

from memtheory._numpy_types import numpy_types
from memtheory._shown import shown
from memtheory.constraints import Candidates, warn_unknown
from memtheory.errors import EvaluationError, KernelTooLargeError

__all__ = [
    "argument_symbols",
    "as_expression",
    "checked_value",
    "refuse_or_warn",
    "symbols_by_name",
]


def symbols_by_name(expressions: Iterable[sp.Expr]) -> dict[str, sp.Symbol]:
    """Map each free symbol's name to the symbol, across ``expressions``.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> sorted(symbols_by_name([B * H, B + 1]))
    ['B', 'H']
    """
    found: dict[str, sp.Symbol] = {}
    seen: set[sp.Basic] = set()  # a subexpression shared by many expressions is walked once
    walked = sp.Basic.free_symbols
    for expression in expressions:
        stack = [sp.sympify(expression)]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if type(node).free_symbols is walked:  # the union over its arguments
                stack.extend(node.args)
                continue
            for symbol in node.free_symbols:
                found.setdefault(symbol.name, symbol)
    return found


def as_expression(expression: object, caller: str) -> sp.Expr:
    """Return ``expression`` as a sympy expression, or raise :class:`EvaluationError`.

    Integers (NumPy's too) and sympy expressions are accepted; text is not
    parsed (use :func:`memtheory.units.parse_bytes` for sizes).

    Examples
    --------
    >>> import numpy as np
    >>> as_expression(np.int64(4), "evaluate")
    4
    >>> as_expression("B*H", "evaluate")
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: evaluate takes a sympy expression or a number, got 'B*H' ...
    """
    if isinstance(expression, sp.Expr):
        return expression
    if isinstance(expression, numbers.Integral) and not isinstance(expression, bool):
        return sp.Integer(int(expression))
    if isinstance(expression, numbers.Rational):
        return sp.Rational(int(expression.numerator), int(expression.denominator))
    if isinstance(expression, sp.Basic):
        kind = f"a {type(expression).__name__}, not an expression"
    else:
        kind = f"{type(expression).__name__}"
    raise EvaluationError(
        f"{caller} takes a sympy expression or a number, got {shown(expression)} ({kind}). Build "
        "it from memtheory's symbols (memtheory.symbols) or a memory result's total."
    )


def checked_value(symbol: sp.Symbol, value: object) -> sp.Expr:
    """Return ``value`` as a sympy number ``symbol`` can take, or raise :class:`EvaluationError`.

    A real number, finite; whole for an integer symbol (whole floats are taken),
    positive or non-negative as the symbol is; never a bool.
    """
    if isinstance(value, (bool, *numpy_types("bool_"))):
        raise EvaluationError(
            f"{symbol} must be a number, got {shown(value)} ({type(value).__name__})."
        )
    if isinstance(value, numbers.Integral):
        number: sp.Expr = sp.Integer(int(value))
    elif isinstance(value, sp.Expr):
        number = value
    elif isinstance(value, numbers.Real):
        real = float(value)
        if not math.isfinite(real):
            raise EvaluationError(f"{symbol} must be a finite number, got {shown(value)}.")
        if symbol.is_integer and not real.is_integer():
            raise EvaluationError(f"{symbol} is a whole number (a size), got {shown(value)}.")
        number = sp.Integer(int(real)) if real.is_integer() else sp.nsimplify(real)
    else:
        raise EvaluationError(
            f"{symbol} must be a real number, got {shown(value)} ({type(value).__name__})."
        )
    if number.is_number:
        if number.is_extended_real is not True or not number.is_finite:
            raise EvaluationError(f"{symbol} must be a finite real number, got {shown(value)}.")
        if symbol.is_integer and not number.is_integer:
            raise EvaluationError(f"{symbol} is a whole number (a size), got {shown(value)}.")
        if symbol.is_positive and not number.is_positive:
            raise EvaluationError(f"{symbol} must be positive, got {shown(value)}.")
        if symbol.is_nonnegative and not number.is_nonnegative:
            raise EvaluationError(f"{symbol} must not be negative, got {shown(value)}.")
    return number


def argument_symbols(expression: sp.Expr, names: Sequence[str] | None) -> list[sp.Symbol]:
    """Return the symbols of a compiled function's arguments, in the order of ``names``.

    By default the free symbols, sorted by name; a name that is no free symbol
    gets a plain symbol of that name (an argument the expression ignores).

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> argument_symbols(B * H, None), argument_symbols(B * H, ["H", "B", "X"])
    ([B, H], [H, B, X])
    >>> argument_symbols(B * H, ["B"])
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: the expression also depends on H: name it ...
    """
    available = symbols_by_name([expression])
    if names is None:
        return [available[name] for name in sorted(available)]
    missing = sorted(set(available) - set(names))
    if missing:
        raise EvaluationError(
            f"the expression also depends on {', '.join(missing)}: name it in the argument list "
            "or substitute a value with evaluate() first."
        )
    return [available.get(name, sp.Symbol(name)) for name in names]


def refuse_or_warn(
    failures: Sequence[KernelTooLargeError], found: Candidates, stacklevel: int
) -> None:
    """Settle values that some network the expression may come from refuses (``failures``).

    Out of range for every network in ``found`` (and none unknown): the first
    failure is raised. For some only, or when its constraints are unknown: a
    warning, pointing ``stacklevel`` frames above the caller.

    Examples
    --------
    >>> from memtheory.constraints import SizeConstraint, too_small
    >>> from memtheory.symbols import H
    >>> rule = SizeConstraint(H - 4, "layer 1 of 'a'")
    >>> refuse_or_warn([], Candidates(((rule,),)), stacklevel=2)
    >>> refuse_or_warn([too_small(rule, "H=2", -2)], Candidates(((rule,),)), stacklevel=2)
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: ...
    """
    if not failures:
        return
    if len(failures) == len(found.sets) and not found.unknown:
        raise failures[0]  # out of range whichever network it comes from
    warn_unknown(str(failures[0]), stacklevel=stacklevel + 1)
