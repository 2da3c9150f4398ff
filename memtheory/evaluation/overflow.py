"""Run compiled NumPy code over a grid in int64, refusing a result that would wrap around.

Examples
--------
>>> import numpy as np
>>> from memtheory.symbols import B
>>> computed_grid(3 * B, ("B",), [np.array([1, 2])], exact=False)
array([3, 6])
>>> computed_grid(2**61 * B, ("B",), [np.array([4])], exact=False)
Traceback (most recent call last):
...
memtheory.errors.EvaluationOverflowError: values reach about 9.22e+18, ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import numpy as np
import sympy as sp

from memtheory.errors import EvaluationOverflowError
from memtheory.evaluation.numpy_code import numpy_function

__all__ = ["INT64_SAFE_LIMIT", "computed_grid", "magnitude_bound"]


INT64_SAFE_LIMIT = 2**62
"""Largest magnitude an int64 grid result may reach: half of int64's range, as margin."""


def computed_grid(
    expr: sp.Expr, names: tuple[str, ...], values: list[np.ndarray], exact: bool
) -> np.ndarray:
    """Evaluate ``expr`` over checked arrays (``values`` in the order of ``names``).

    With ``exact``, in Python integers (object arrays). Otherwise in int64: in one
    pass when :func:`magnitude_bound` shows that no step can leave int64's safe
    range, else checked against a float64 estimate, raising
    :class:`~memtheory.errors.EvaluationOverflowError` rather than wrapping around.
    """
    code = numpy_function(expr, names)
    function = code.function
    if exact:  # 0-d arrays compute in bare Python ints, which numpy.maximum would cast to int64
        lifted = [v.reshape(1) if v.ndim == 0 else v for v in values]
        result = np.asarray(function(*lifted), dtype=object)
        return result.reshape(()) if all(v.ndim == 0 for v in values) else result
    maxima = {
        name: int(np.max(np.abs(v), initial=0)) for name, v in zip(names, values, strict=True)
    }
    if magnitude_bound(code.expression, maxima) < INT64_SAFE_LIMIT:  # no overflow: one pass
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


def magnitude_bound(expr: sp.Expr, maxima: Mapping[str, int]) -> float:
    """Bound every value the compiled code computes, given each symbol's largest magnitude.

    The integer code evaluates each floor, ceiling and fractional sum as
    ``numerator // denominator``, with the numerator the expression times an
    integer that divides the least common multiple ``D`` of every denominator
    in it. Bounding each node's magnitude by sums (``+``), products of
    ``max(bound, 1)`` (``*`` and powers), ``bound + 1`` (rounding) and maxima
    (``Min``, ``Max``) bounds all its children too, so ``D`` times the root's
    bound bounds every intermediate. Anything else gives infinity (no bound).
    The arithmetic is exact (fractions), and the float returned is rounded up,
    so the bound holds beyond 2**53 too.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> magnitude_bound(3 * B * sp.floor(H / 2) ** 2 - 7, {"B": 10, "H": 9})
    6014.0
    """
    bounds: dict[sp.Expr, Fraction | float] = {}

    def bound(node: sp.Expr) -> Fraction | float:  # exact, or math.inf
        if node in bounds:
            return bounds[node]
        value: Fraction | float
        if node.is_Symbol:
            value = Fraction(maxima[node.name]) if node.name in maxima else math.inf
        elif node.is_Rational:
            value = Fraction(abs(int(node.p)), int(node.q))
        elif node.is_Add:
            value = sum((bound(a) for a in node.args), Fraction(0))
        elif node.is_Mul:
            value = math.prod((max(bound(a), 1) for a in node.args), start=Fraction(1))
        elif node.is_Pow and node.exp.is_Integer and node.exp >= 0:
            value = max(bound(node.base), 1) ** int(node.exp)
        elif isinstance(node, sp.floor | sp.ceiling):
            value = bound(node.args[0]) + 1
        elif isinstance(node, sp.Max | sp.Min):
            value = max(bound(a) for a in node.args)
        else:
            value = math.inf
        bounds[node] = value
        return value

    denominators = [r.q for r in expr.atoms(sp.Rational)]
    total = math.lcm(1, *denominators) * bound(expr)
    rounded = float(total)  # to the nearest float, which may lie below: round up instead
    return math.nextafter(rounded, math.inf) if rounded < total else rounded
