"""Three exact ways to put numbers into a symbolic size.

* :func:`evaluate` substitutes values with sympy and returns an exact sympy
  number (or a smaller expression, when some symbols stay free).
* :func:`compile_exact` turns an expression into a plain Python function of
  Python integers: floors become ``//``, so results are exact whatever their size.
* :func:`evaluate_grid` runs the same integer code over NumPy arrays, for
  what-if grids of a million points and more. It uses ``int64`` by default and
  refuses, rather than wraps around, when a value would not fit; ``dtype=object``
  gives exact Python integers at any size.

All three agree exactly on every integer-valued expression memtheory builds,
and all three check what they are given the same way: a size symbol (a
positive integer, :mod:`memtheory.symbols`) takes positive whole numbers only
(NumPy's integers too; never ``True``, ``2.5``, ``0`` or ``NaN``), and no output
size of the network an expression comes from may fall below 1 (a 5x5 kernel on
a side of 2): :mod:`memtheory.constraints` says how those constraints travel
with the expressions, and ``within=`` names a network for an expression built
by hand.

Examples
--------
>>> import numpy as np
>>> from memtheory.symbols import B, H
>>> size = 4 * B * 32 * (sp.floor((H - 2) / 2) + 1) ** 2
>>> evaluate(size, B=64, H=50)
5120000
>>> compile_exact(size, ["B", "H"])(64, 50)
5120000
>>> evaluate_grid(size, B=np.array([1, 64]), H=50)
array([  80000, 5120000])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter

from memtheory._replace import replaced
from memtheory._shown import shown
from memtheory.constraints import (
    SizeConstraint,
    candidates,
    carry,
    sizes_inside,
    too_small,
    warn_outside,
    warn_unknown,
)
from memtheory.errors import EvaluationError, EvaluationOverflowError, KernelTooLargeError
from memtheory.max_pruning import substituted_maximum

__all__ = [
    "compile_exact",
    "evaluate",
    "evaluate_grid",
    "replaced",
    "substitute",
    "substitution",
    "symbols_by_name",
]

INT64_SAFE_LIMIT = 2**62
"""Largest magnitude an int64 grid result may reach: half of int64's range, as margin."""


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


def substitution(
    expressions: Iterable[sp.Expr], values: Mapping[str, object]
) -> dict[sp.Symbol, sp.Integer]:
    """Check ``values`` against the free symbols of ``expressions`` and build a substitution.

    Every name must be a free symbol of one of the expressions (a typo is an
    error, not a silent no-op), and every value must satisfy the symbol's
    assumptions (a batch size of 2.5 or -1 is refused).

    Raises
    ------
    EvaluationError
        Naming the offending symbol and what would fix it.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> substitution([2 * B], {"B": 8})
    {B: 8}
    >>> substitution([2 * B], {"b": 8})
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: no symbol named 'b' here; the free symbols are: B.
    """
    expressions = [sp.sympify(e) for e in expressions]
    available = symbols_by_name(expressions)
    result: dict[sp.Symbol, sp.Integer] = {}
    for name, value in values.items():
        if name not in available:
            names = ", ".join(sorted(available)) or "none (it is already a number)"
            raise EvaluationError(f"no symbol named {name!r} here; the free symbols are: {names}.")
        symbol = available[name]
        result[symbol] = _checked_value(symbol, value)
    return result


def _checked_value(symbol: sp.Symbol, value: object) -> sp.Expr:
    if isinstance(value, bool | np.bool_):
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


def evaluate(expression: sp.Expr | int, /, *, within: object = None, **values: object) -> sp.Expr:
    """Substitute ``values`` (by symbol name) into ``expression``, exactly.

    Every size symbol must get a positive whole number, and no output size of
    the network the expression comes from may drop below 1 (see
    :mod:`memtheory.constraints`): a kernel that does not fit is an error, not a
    number.

    Parameters
    ----------
    expression : sympy expression
        Any memtheory quantity.
    within : Network, memory result or constraints, optional
        The size constraints to check (and the expression's own, when one network
        alone hands it out); see :func:`~memtheory.constraints.candidates`.
    **values
        Numbers for some or all of its free symbols, by name (``B=64``).

    Returns
    -------
    sympy expression
        An exact sympy number when every symbol got a value; otherwise the
        expression with the given values substituted (it carries the
        constraints that still apply).

    Raises
    ------
    EvaluationError
        For an unknown name or a value that is not a size.
    KernelTooLargeError
        For values that make a layer's output size less than 1.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> evaluate(B * H**2, B=2, H=3)
    18
    >>> evaluate(B * H**2, B=2)
    2*H**2
    """
    expr = as_expression(expression, "evaluate")
    mapping = substitution([expr], values)
    found = candidates(expr, within)
    remaining = found.check(mapping) if mapping else found
    if not found.known:  # built by hand, perhaps from a network's expressions: warn, never refuse
        warn_outside(sizes_inside(expr), mapping)
    result = _substituted(expr, mapping)
    if mapping:
        for group in remaining.sets:  # each network's constraints still open go with the result
            carry(result, group, vouch=True)
    return result


def as_expression(expression: object, caller: str) -> sp.Expr:
    """Return ``expression`` as a sympy expression, or raise :class:`EvaluationError`.

    Integers (NumPy's too) and sympy expressions are accepted; text is not
    parsed (use :func:`memtheory.units.parse_bytes` for sizes).

    Examples
    --------
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


def substitute(expression: sp.Expr, values: Mapping[sp.Symbol, sp.Expr]) -> sp.Expr:
    """Substitute values already checked (:func:`substitution`), exactly, checking nothing.

    For a caller that has checked the size constraints itself (a memory
    result's own, say): unlike :func:`evaluate`, the result carries none.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> substitute(B * H + sp.Max(B, H), substitution([B * H], {"B": 2}))
    2*H + Max(2, H)
    """
    return _substituted(expression, dict(values))


def _substituted(expr: sp.Expr, values: dict[sp.Symbol, sp.Expr]) -> sp.Expr:
    """``expr.xreplace(values)``, each ``Max`` pruned again (:mod:`memtheory.max_pruning`).

    sympy re-evaluates a ``Max`` whose arguments change, comparing them pairwise
    while symbols remain (slow on a peak of many candidates); ``maximum`` prunes
    the candidates that another one dominates instead, and agrees with sympy
    once every symbol has a value.
    """
    if isinstance(expr, sp.Max):
        return substituted_maximum(expr.args, values, lambda term: _substituted(term, values))
    if not expr.args or not expr.has(sp.Max):
        return expr.xreplace(values)
    return expr.func(*(_substituted(argument, values) for argument in expr.args))


class _IntegerCode(PythonCodePrinter):
    """Mixin for code printers that keep integer expressions in integer arithmetic."""

    def _integer_fraction(self, expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
        numerator, denominator = sp.fraction(sp.together(expr))
        if not denominator.is_Integer:
            raise EvaluationError(
                f"cannot compile {expr} to integer arithmetic: it divides by {denominator}."
            )
        return numerator, denominator

    def _print_floor(self, expr: sp.Expr) -> str:
        numerator, denominator = self._integer_fraction(expr.args[0])
        return f"(({self._print(numerator)})//{self._print(denominator)})"

    def _print_ceiling(self, expr: sp.Expr) -> str:
        numerator, denominator = self._integer_fraction(expr.args[0])
        return f"(-((-({self._print(numerator)}))//{self._print(denominator)}))"

    def _print_Rational(self, expr: sp.Rational) -> str:  # noqa: N802 (sympy printer API)
        if expr.q != 1:
            raise EvaluationError(f"cannot compile the fraction {expr} to integer arithmetic.")
        return str(expr.p)

    def _print_Add(self, expr: sp.Expr, order: Any = None) -> str:  # noqa: N802 (sympy printer API)
        return self._print_with_denominator(expr, super()._print_Add)

    def _print_Mul(self, expr: sp.Expr) -> str:  # noqa: N802 (sympy printer API)
        return self._print_with_denominator(expr, super()._print_Mul)

    def _print_with_denominator(self, expr: sp.Expr, plain: Callable[[sp.Expr], str]) -> str:
        if not _has_fraction_outside_rounding(expr):
            return plain(expr)
        numerator, denominator = self._integer_fraction(expr)
        if denominator == 1:
            return plain(numerator)
        return f"(({self._print(numerator)})//{self._print(denominator)})"


def _has_fraction_outside_rounding(expr: sp.Expr) -> bool:
    """Whether a non-integer rational appears in ``expr`` outside every floor and ceiling."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, sp.floor | sp.ceiling):
            continue
        if isinstance(node, sp.Rational) and node.q != 1:
            return True
        if isinstance(node, sp.Pow) and node.exp.is_negative:
            return True
        stack.extend(node.args)
    return False


class _ExactPythonPrinter(_IntegerCode, PythonCodePrinter):
    pass


class _IntegerNumPyPrinter(_IntegerCode, NumPyPrinter):
    def _print_Min(self, expr: sp.Expr) -> str:  # noqa: N802 (sympy printer API)
        return self._nested("numpy.minimum", expr.args)

    def _print_Max(self, expr: sp.Expr) -> str:  # noqa: N802 (sympy printer API)
        return self._nested("numpy.maximum", expr.args)

    def _nested(self, function: str, args: Sequence[sp.Expr]) -> str:
        text = self._print(args[0])
        for arg in args[1:]:
            text = f"{function}({text}, {self._print(arg)})"
        return text


def _arguments(expression: sp.Expr, names: Sequence[str] | None) -> list[sp.Symbol]:
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
    arguments = _arguments(expr, _names_argument(names))
    raw = sp.lambdify(arguments, expr, modules=[{}, "math"], printer=_ExactPythonPrinter)
    given = set(arguments)
    found = candidates(expr, within)
    warn_only = not found.known  # built by hand: its network's sizes are warned about, not refused

    def compiled_checks(
        group: Iterable[SizeConstraint],
    ) -> list[tuple[SizeConstraint, Callable[..., Any]]]:
        return [
            (
                constraint,
                sp.lambdify(
                    arguments, constraint.size, modules=[{}, "math"], printer=_ExactPythonPrinter
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
        if failures:
            if len(failures) == len(groups) and not found.unknown:
                raise failures[0]  # out of range for every network it may come from
            warn_unknown(str(failures[0]))
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
            if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Number):
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
        return int(_checked_value(symbol, value))  # whole, and positive where the symbol is

    return whole


def evaluate_grid(
    expression: sp.Expr,
    /,
    *,
    dtype: type | str = "int64",
    within: object = None,
    **arrays: object,
) -> np.ndarray:
    """Evaluate an integer-valued expression over NumPy arrays (broadcast together).

    Every value is checked as :func:`evaluate` checks one: a size symbol takes
    positive whole numbers only, and no output size of the network the
    expression comes from may drop below 1 anywhere on the grid.

    Parameters
    ----------
    expression : sympy expression
        Integer-valued for integer arguments.
    dtype : {"int64", object}
        ``"int64"`` is fast and checked: if any result (or intermediate, as
        estimated in float64) would leave int64's safe range,
        :class:`~memtheory.errors.EvaluationOverflowError` is raised instead of
        returning wrapped-around numbers. ``object`` computes with Python
        integers: exact at any size, and slower.
    within : Network, memory result or constraints, optional
        The size constraints to check (and the expression's own, when one network
        alone hands it out); see :func:`~memtheory.constraints.candidates`.
    **arrays
        A value or array for every free symbol, by name.

    Examples
    --------
    >>> import numpy as np
    >>> from memtheory.symbols import B, H
    >>> evaluate_grid(B * H, B=np.arange(1, 4), H=np.array([[10], [20]]))
    array([[10, 20, 30],
           [20, 40, 60]])
    >>> evaluate_grid(2**40 * B * H, B=2**20, H=2**10)
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationOverflowError: ... pass dtype=object for exact Python integers.
    >>> evaluate_grid(B * H, B=np.array([4, 0]), H=3)
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: B must be positive; got 0 (at index (1,)).
    """
    expr = as_expression(expression, "evaluate_grid")
    exact = _grid_dtype(dtype)
    names = sorted(symbols_by_name([expr]))
    missing = sorted(set(names) - set(arrays))
    if missing:
        raise EvaluationError(f"evaluate_grid needs values for {', '.join(missing)}.")
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise EvaluationError(
            f"no symbol named {', '.join(map(repr, extra))} here; the free symbols are: "
            f"{', '.join(names) or 'none'}."
        )
    symbols = symbols_by_name([expr])
    kind = object if exact else np.int64
    values = {name: _as_array(arrays[name], kind, name) for name in names}
    for name in names:
        _check_signs(symbols[name], values[name])
    try:
        np.broadcast_shapes(*(v.shape for v in values.values()))
    except ValueError:
        shapes = ", ".join(f"{name} {values[name].shape}" for name in names)
        raise EvaluationError(
            f"the arrays do not broadcast together: {shapes}. Give them shapes NumPy can "
            "broadcast (e.g. B=np.arange(1, 9)[:, None] beside H=np.arange(1, 5))."
        ) from None
    _check_grid_constraints(expr, within, values, exact)
    return _grid(expr, tuple(names), [values[name] for name in names], exact)


def _check_grid_constraints(
    expr: sp.Expr, within: object, values: Mapping[str, np.ndarray], exact: bool
) -> None:
    """Refuse (or, for an expression built by hand, warn about) sizes below 1 on the grid."""
    found = candidates(expr, within)
    if not found.known:  # built by hand: warn about its network's sizes, never refuse
        for constraint in sizes_inside(expr):
            if _check_grid_constraint(constraint, values, exact, warn=True):
                break  # warned once: enough
    failures = []
    for group in found.sets:
        try:
            for constraint in group:
                _check_grid_constraint(constraint, values, exact, warn=False)
        except KernelTooLargeError as error:
            failures.append(error)
    if failures:
        if len(failures) == len(found.sets) and not found.unknown:
            raise failures[0]  # the grid is out of range whichever network it comes from
        warn_unknown(str(failures[0]), stacklevel=4)


def _grid_dtype(dtype: object) -> bool:
    """Whether ``dtype`` asks for exact Python integers (object) rather than int64."""
    if dtype is object or (isinstance(dtype, str) and dtype == "object"):
        return True
    try:
        chosen = np.dtype(dtype)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        chosen = None
    if chosen is None or chosen != np.int64:
        raise EvaluationError(f"dtype must be 'int64' or object, got {shown(dtype)}.")
    return False


def _check_signs(symbol: sp.Symbol, array: np.ndarray) -> None:
    lowest = 1 if symbol.is_positive else 0 if symbol.is_nonnegative else None
    if lowest is None or not array.size:
        return
    bad = array < lowest
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        word = "positive" if lowest else "non-negative"
        raise EvaluationError(f"{symbol} must be {word}; got {array[where]} (at index {where}).")


def _check_grid_constraint(
    constraint: SizeConstraint, values: Mapping[str, np.ndarray], exact: bool, warn: bool
) -> bool:
    """Refuse (or with ``warn``, warn about) a grid point that makes the size less than 1.

    Returns whether it warned.
    """
    involved = sorted(symbols_by_name([constraint.size]))
    if not set(involved) <= set(values):
        return False  # the expression does not depend on those sizes
    if len(involved) == 1:  # one size: its distinct values are enough
        inputs = [np.unique(values[involved[0]])]
    else:
        inputs = [values[name] for name in involved]
    sizes = _grid(constraint.size, tuple(involved), inputs, exact)
    bad = np.asarray(sizes < 1)
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        at = np.broadcast_arrays(*inputs)
        if warn:
            symbols = symbols_by_name([constraint.size])
            point = {
                symbols[n]: sp.Integer(int(a[where])) for n, a in zip(involved, at, strict=True)
            }
            return warn_outside([constraint], point, stacklevel=5)
        shown = ", ".join(f"{name}={a[where]}" for name, a in zip(involved, at, strict=True))
        raise too_small(constraint, shown, np.asarray(sizes)[where])
    return False


def _grid(
    expr: sp.Expr, names: tuple[str, ...], values: list[np.ndarray], exact: bool
) -> np.ndarray:
    """Evaluate ``expr`` over checked arrays (``values`` in the order of ``names``)."""
    function = _numpy_function(expr, names)
    if exact:
        return np.asarray(function(*values), dtype=object)
    maxima = {
        name: int(np.max(np.abs(v), initial=0)) for name, v in zip(names, values, strict=True)
    }
    if _magnitude_bound(expr, maxima) < INT64_SAFE_LIMIT:  # no step can overflow: one pass
        result = np.asarray(function(*values))
        return result if result.dtype == np.int64 else result.astype(np.int64)
    estimate = np.asarray(function(*[v.astype(np.float64) for v in values]), dtype=np.float64)
    largest = max(
        [np.max(np.abs(estimate), initial=0.0)]
        + [float(np.max(np.abs(v), initial=0)) for v in values]
    )
    if not np.isfinite(largest) or largest >= INT64_SAFE_LIMIT:
        raise EvaluationOverflowError(
            f"values reach about {largest:.3g}, beyond int64's safe range "
            f"({INT64_SAFE_LIMIT:.3g}); "
            "pass dtype=object for exact Python integers."
        )
    result = np.asarray(function(*values))
    if result.dtype != np.int64:
        result = result.astype(np.int64)
    if not np.allclose(result, estimate, rtol=1e-9, atol=1.0):
        raise EvaluationOverflowError(
            "an intermediate value overflowed int64; pass dtype=object for exact Python integers."
        )
    return result


def _magnitude_bound(expr: sp.Expr, maxima: Mapping[str, int]) -> float:
    """Bound every value the compiled code computes, given each symbol's largest magnitude.

    The integer code evaluates each floor, ceiling and fractional sum as
    ``numerator // denominator``, with the numerator the expression times an
    integer that divides the least common multiple ``D`` of every denominator
    in it. Bounding each node's magnitude by sums (``+``), products of
    ``max(bound, 1)`` (``*`` and powers), ``bound + 1`` (rounding) and maxima
    (``Min``, ``Max``) bounds all its children too, so ``D`` times the root's
    bound bounds every intermediate. Anything else gives infinity (no bound).

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> _magnitude_bound(3 * B * sp.floor(H / 2) ** 2 - 7, {"B": 10, "H": 9})
    6014.0
    """
    bounds: dict[sp.Expr, float] = {}

    def bound(node: sp.Expr) -> float:
        if node in bounds:
            return bounds[node]
        if node.is_Symbol:
            value = float(maxima.get(node.name, math.inf))
        elif node.is_Rational:
            value = float(abs(node))
        elif node.is_Add:
            value = math.fsum(bound(a) for a in node.args)
        elif node.is_Mul:
            value = math.prod(max(bound(a), 1.0) for a in node.args)
        elif node.is_Pow and node.exp.is_Integer and node.exp >= 0:
            value = max(bound(node.base), 1.0) ** int(node.exp)
        elif isinstance(node, sp.floor | sp.ceiling):
            value = bound(node.args[0]) + 1
        elif isinstance(node, sp.Max | sp.Min):
            value = max(bound(a) for a in node.args)
        else:
            value = math.inf
        bounds[node] = value
        return value

    denominators = [r.q for r in expr.atoms(sp.Rational)]
    return float(math.lcm(1, *denominators)) * bound(expr)


_NUMPY_CACHE: dict[tuple[sp.Expr, tuple[str, ...]], Callable[..., Any]] = {}


def _numpy_function(expr: sp.Expr, names: tuple[str, ...]) -> Callable[..., Any]:
    key = (expr, names)
    if key not in _NUMPY_CACHE:
        _NUMPY_CACHE[key] = _compiled_numpy(expr, _arguments(expr, names))
    return _NUMPY_CACHE[key]


def _compiled_numpy(expr: sp.Expr, arguments: list[sp.Symbol]) -> Callable[..., Any]:
    """Compile ``expr`` for NumPy, each product of sizes that several terms share computed once.

    A peak is the maximum of many polynomials in the same products (``8240*B*S + ...``,
    ``16464*B*S + ...``): the product ``B*S`` is computed once over the grid and each term
    only scales it. Products of whole numbers stay whole, so the results are unchanged.
    """
    shared = _shared_products(expr)
    if not shared:
        return sp.lambdify(arguments, expr, modules="numpy", printer=_IntegerNumPyPrinter)
    stand_ins = {product: sp.Dummy(integer=True, positive=True) for product in shared}
    inner = sp.lambdify(
        [*arguments, *stand_ins.values()], _stood_in(expr, stand_ins), modules="numpy",
        printer=_IntegerNumPyPrinter,
    )
    products = [
        sp.lambdify(arguments, product, modules="numpy", printer=_IntegerNumPyPrinter)
        for product in stand_ins
    ]

    def function(*values: Any) -> Any:
        return inner(*values, *(product(*values) for product in products))

    return function


def _shared_products(expr: sp.Expr) -> list[sp.Expr]:
    """Products of two or more size factors that several terms of ``expr`` multiply."""
    seen: dict[sp.Expr, int] = {}
    for node in sp.preorder_traversal(expr):
        if node.is_Mul:
            rest = node.as_coeff_Mul()[1]
            factors = rest.args if rest.is_Mul else ()
            if len(factors) >= 2 and all(_size_power(f) for f in factors):
                seen[rest] = seen.get(rest, 0) + 1
    return [product for product, count in seen.items() if count >= 2]


def _size_power(factor: sp.Expr) -> bool:
    if factor.is_Symbol:
        return True
    return bool(factor.is_Pow and factor.base.is_Symbol and factor.exp.is_Integer
                and factor.exp > 0)


def _stood_in(node: sp.Expr, stand_ins: Mapping[sp.Expr, sp.Symbol]) -> sp.Expr:
    """``node`` with each product in ``stand_ins`` replaced by its stand-in, as it is ordered."""
    if node.is_Mul:
        coefficient, rest = node.as_coeff_Mul()
        if rest in stand_ins:
            return sp.Mul(coefficient, stand_ins[rest], evaluate=False)
    if not node.args:
        return node
    args = [_stood_in(arg, stand_ins) for arg in node.args]
    if isinstance(node, sp.Add | sp.Mul | sp.Max | sp.Min):
        return node.func(*args, evaluate=False)
    return node.func(*args)


def _as_array(value: object, dtype: type, name: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise EvaluationError(
            f"{name} must be a whole number or an array of them; NumPy cannot read "
            f"{value!r} ({error})."
        ) from None
    if array.dtype == object:
        items = array.ravel().tolist()
    else:
        items = None
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.floor(array)):
            raise EvaluationError(f"{name} must hold whole numbers; got non-integer values.")
    elif array.dtype.kind == "b" or (array.dtype.kind not in "iu" and items is None):
        raise EvaluationError(f"{name} must hold whole numbers; got dtype {array.dtype}.")
    if items is not None and not all(
        isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in items
    ):
        raise EvaluationError(f"{name} must hold whole numbers.")
    if dtype is object:
        return np.array([int(i) for i in array.ravel().tolist()], dtype=object).reshape(array.shape)
    if array.dtype.kind in "uf" and array.size and np.max(np.abs(array)) >= 2**63:
        raise EvaluationOverflowError(f"{name} does not fit in int64; pass dtype=object.")
    if items is not None and any(abs(i) >= 2**63 for i in items):
        raise EvaluationOverflowError(f"{name} does not fit in int64; pass dtype=object.")
    return array.astype(np.int64)
