"""Code printers that keep integer expressions in integer arithmetic: floors become ``//``.

:class:`ExactPythonPrinter` prints plain Python (exact for integers of any size,
used by :func:`~memtheory.evaluation.compile_exact` and :mod:`memtheory.estimate`);
:class:`IntegerNumPyPrinter` prints NumPy code (``numpy.maximum`` for ``Max``) for
:func:`~memtheory.evaluation.evaluate_grid`. A fraction that does not stay inside
a floor or a ceiling cannot be printed as integer code and is refused.

Examples
--------
>>> import sympy as sp
>>> from memtheory.symbols import B, H
>>> ExactPythonPrinter().doprint(sp.floor((H - 3) / 2) + B)
'B + ((H - 3)//2)'
>>> IntegerNumPyPrinter().doprint(sp.Max(B, H, 3))
'numpy.maximum(numpy.maximum(3, B), H)'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter

from memtheory.errors import EvaluationError

__all__ = ["ExactPythonPrinter", "IntegerNumPyPrinter"]


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


class ExactPythonPrinter(_IntegerCode, PythonCodePrinter):
    """Print plain Python code that computes an integer expression with integers only."""


class IntegerNumPyPrinter(_IntegerCode, NumPyPrinter):
    """Print NumPy code that computes an integer expression in integer arithmetic."""

    def _print_Min(self, expr: sp.Expr) -> str:  # noqa: N802 (sympy printer API)
        return self._nested("numpy.minimum", expr.args)

    def _print_Max(self, expr: sp.Expr) -> str:  # noqa: N802 (sympy printer API)
        return self._nested("numpy.maximum", expr.args)

    def _nested(self, function: str, args: Sequence[sp.Expr]) -> str:
        text = self._print(args[0])
        for arg in args[1:]:
            text = f"{function}({text}, {self._print(arg)})"
        return text
