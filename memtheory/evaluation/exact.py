"""Compile an expression to a checked function of Python integers: :func:`compile_exact`.

Examples
--------
>>> from memtheory.symbols import B, H
>>> compile_exact(B * H + 1)(B=2, H=3)
7
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sympy as sp

from memtheory._numpy_types import numpy_types
from memtheory._shown import shown
from memtheory.constraints import (
    SizeConstraint,
    candidates,
    sizes_inside,
    too_small,
    warn_outside,
)
from memtheory.constraints.carried import warn_lost
from memtheory.errors import EvaluationError
from memtheory.evaluation.integer_code import ExactPythonPrinter
from memtheory.evaluation.values import (
    argument_symbols,
    as_expression,
    checked_value,
    refuse_or_warn,
)

__all__ = ["compile_exact"]


def compile_exact(
    expression: sp.Expr,
    names: Sequence[str] | None = None,
    *,
    within: object = None,
) -> Callable[..., int]:
    """Compile an integer-valued expression into a function of Python integers.

    Floors and ceilings become floor division, so the function is exact for
    integers of any size (Python integers do not overflow). The function checks
    its arguments as :func:`evaluate` does: a size symbol takes a positive whole
    number (NumPy integers too), and no output size of the network the
    expression comes from may drop below 1.

    Parameters
    ----------
    expression : sympy expression
        Integer-valued for integer arguments (element counts, bytes).
    names : sequence of str, optional
        Argument order; by default the free symbols' names, sorted.
    within : Network, memory result or constraints, optional
        The size constraints to check (and the expression's own, when one network
        alone hands it out); see :func:`~memtheory.constraints.candidates`.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> f = compile_exact(sp.floor((H - 3) / 2) + 1)
    >>> f(25), f(10**30 + 1)
    (12, 500000000000000000000000000000)
    >>> f(2.5)
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: H is a whole number (a size), got 2.5.
    """
    expr = as_expression(expression, "compile_exact")
    arguments = argument_symbols(expr, _names_argument(names))
    raw = sp.lambdify(arguments, expr, modules=[{}, "math"], printer=ExactPythonPrinter)
    given = set(arguments)
    given_symbols = sp.Tuple(*arguments)
    found = candidates(expr, within)
    warn_only = not found.known  # built by hand: its network's sizes are warned about, not refused

    def compiled_checks(
        group: Iterable[SizeConstraint],
    ) -> list[tuple[SizeConstraint, Callable[..., Any]]]:
        return [
            (
                constraint,
                sp.lambdify(
                    arguments, constraint.size, modules=[{}, "math"], printer=ExactPythonPrinter
                ),
            )
            for constraint in group
            if constraint.size.free_symbols <= given
        ]

    groups = [compiled_checks(sizes_inside(expr))] if warn_only else list(
        map(compiled_checks, found.sets)
    )
    converters = [_argument_check(symbol) for symbol in arguments]
    count = len(arguments)

    def compiled(*args: object, **kwargs: object) -> int:
        if kwargs:
            args = _by_name(arguments, args, kwargs)
        if len(args) != count:
            raise EvaluationError(
                f"this function takes {count} value(s), for "
                f"{', '.join(s.name for s in arguments) or 'nothing'}; got {len(args)}."
            )
        values = [convert(value) for convert, value in zip(converters, args, strict=True)]
        failures = []
        for checks in groups:
            for constraint, size in checks:
                value = size(*values)
                if value < 1:
                    if warn_only:
                        given_values = dict(zip(arguments, map(sp.sympify, values), strict=True))
                        warn_outside([constraint], given_values, [sp.sympify(value)])
                        break
                    shown = ", ".join(
                        f"{s}={v}"
                        for s, v in zip(arguments, values, strict=True)
                        if s in constraint.size.free_symbols
                    )
                    failures.append(too_small(constraint, shown, value))
                    break
        refuse_or_warn(failures, found, stacklevel=3)
        if warn_only:  # sizes outside a traced result's conditions
            warn_lost(given_symbols, dict(zip(arguments, values, strict=True)))
        return raw(*values)

    compiled.__doc__ = f"Exact value of {expr} for ({', '.join(map(str, arguments))})."
    return compiled


def _names_argument(names: object) -> Sequence[str] | None:
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise EvaluationError(
            f"names must be a list of symbol names such as ['B', 'H'], got {shown(names)}."
        )
    if not all(isinstance(name, str) for name in names):
        raise EvaluationError(f"names must be symbol names (text), got {shown(list(names))}.")
    if len(set(names)) != len(names):
        raise EvaluationError(f"names must not repeat, got {shown(list(names))}.")
    return names


def _by_name(
    arguments: Sequence[sp.Symbol], args: tuple[object, ...], kwargs: Mapping[str, object]
) -> tuple[object, ...]:
    order = [s.name for s in arguments]
    unknown = sorted(set(kwargs) - set(order))
    if unknown:
        raise EvaluationError(
            f"no argument named {', '.join(unknown)}; the arguments are {', '.join(order)}."
        )
    merged = dict(zip(order, args, strict=False))
    twice = sorted(set(merged) & set(kwargs))
    if twice:
        raise EvaluationError(f"{', '.join(twice)} given twice.")
    merged.update(kwargs)
    missing = [name for name in order if name not in merged]
    if missing:
        raise EvaluationError(f"missing a value for {', '.join(missing)}.")
    return tuple(merged[name] for name in order)


def _argument_check(symbol: sp.Symbol) -> Callable[[object], Any]:
    """Return a function that checks one argument against the symbol's assumptions."""
    if not symbol.is_integer:

        def plain(value: object) -> Any:
            if isinstance(value, (bool, *numpy_types("bool_"))) or not isinstance(
                value, numbers.Number
            ):
                raise EvaluationError(
                    f"{symbol} must be a number, got {shown(value)} ({type(value).__name__})."
                )
            return value

        return plain
    lowest = 1 if symbol.is_positive else 0 if symbol.is_nonnegative else None

    def whole(value: object) -> int:
        if type(value) is int:  # the common case, checked without sympy
            if lowest is not None and value < lowest:
                word = "positive" if lowest else "non-negative"
                raise EvaluationError(f"{symbol} must be {word}, got {shown(value)}.")
            return value
        if isinstance(value, sp.Basic) and not value.is_number:
            raise EvaluationError(f"{symbol} needs a number here, got the expression {value!r}.")
        return int(checked_value(symbol, value))  # whole, and positive where the symbol is

    return whole
