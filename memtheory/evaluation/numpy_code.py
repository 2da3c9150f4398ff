"""Compile an integer expression to NumPy code, once per expression and argument order.

The code is printed by :class:`~memtheory.evaluation.integer_code.IntegerNumPyPrinter`
from the expression with its maxima pruned for sizes of at least 1
(:mod:`~memtheory.evaluation.envelope`), each product of sizes that several terms
share computed once.

Examples
--------
>>> import numpy as np
>>> from memtheory.symbols import B, S
>>> code = numpy_function(sp.Max(8 * B * S + 100, 9 * B * S + 90, 10 * B * S + 80), ("B", "S"))
>>> code.expression  # the middle line is the largest only where all three are level
Max(8*B*S + 100, 10*B*S + 80)
>>> code.function(np.array([1, 2, 3]), 5).tolist()
[140, 180, 230]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy as sp

from memtheory.evaluation.envelope import pruned
from memtheory.evaluation.integer_code import IntegerNumPyPrinter
from memtheory.evaluation.values import argument_symbols

__all__ = ["NumPyCode", "numpy_function"]


@dataclass(frozen=True)
class NumPyCode:
    """An expression compiled for NumPy: what the code computes, and the code.

    Attributes
    ----------
    expression : sympy expression
        What the code computes: the expression it was compiled from with its
        maxima pruned (:func:`~memtheory.evaluation.envelope.pruned`), equal to it
        wherever every size is at least 1. Overflow is bounded on this one.
    function : callable
        The compiled code: a function of NumPy arrays (or numbers), in the order of
        the names it was compiled for.
    """

    expression: sp.Expr
    function: Callable[..., Any]


@functools.cache
def numpy_function(expr: sp.Expr, names: tuple[str, ...]) -> NumPyCode:
    """Compile ``expr`` for NumPy as a function of ``names`` (once: the result is kept).

    Parameters
    ----------
    expr : sympy expression
        Integer-valued for integer arguments.
    names : tuple of str
        The argument order: every free symbol's name, and possibly others.
    """
    expression = pruned(expr)
    return NumPyCode(expression, _compiled_numpy(expression, argument_symbols(expr, names)))


def _compiled_numpy(expr: sp.Expr, arguments: list[sp.Symbol]) -> Callable[..., Any]:
    """Compile ``expr`` for NumPy, each product of sizes that several terms share computed once.

    A peak is the maximum of many polynomials in the same products (``8240*B*S + ...``,
    ``16464*B*S + ...``): the product ``B*S`` is computed once over the grid and each term
    only scales it. Products of whole numbers stay whole, so the results are unchanged.
    """
    shared = _shared_products(expr)
    if not shared:
        return sp.lambdify(arguments, expr, modules="numpy", printer=IntegerNumPyPrinter)
    stand_ins = {product: sp.Dummy(integer=True, positive=True) for product in shared}
    inner = sp.lambdify(
        [*arguments, *stand_ins.values()], _stood_in(expr, stand_ins), modules="numpy",
        printer=IntegerNumPyPrinter,
    )
    products = [
        sp.lambdify(arguments, product, modules="numpy", printer=IntegerNumPyPrinter)
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
