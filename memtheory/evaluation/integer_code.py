"""Code printers that keep integer expressions in integer arithmetic: floors become ``//``.

:class:`ExactPythonPrinter` prints plain Python (exact for integers of any size,
used by :func:`~memtheory.evaluation.compile_exact` and :mod:`memtheory.estimate`);
:class:`IntegerNumPyPrinter` prints NumPy code (``numpy.maximum`` for ``Max``) for
:func:`~memtheory.evaluation.evaluate_grid`. A fraction that does not stay inside
a floor or a ceiling cannot be printed as integer code and is refused.
:func:`polynomial_code` writes the commonest case, a maximum of integer polynomials,
without a printer.

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

__all__ = ["ExactPythonPrinter", "IntegerNumPyPrinter", "polynomial_code"]


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


def polynomial_code(
    expression: sp.Basic, done: dict[int, tuple[sp.Basic, str | None]] | None = None
) -> str | None:
    """Python source of an integer polynomial's maximum, written directly; None for anything else.

    Integers, symbols, sums, products, powers to whole exponents, ``Max`` and ``Min``:
    what a transformer's exact peak is made of. Each node is written once (``done``, by
    identity: a factored peak shares its parts) and in the order the expression holds
    its arguments, as :class:`ExactPythonPrinter` prints them with ``{"order": "none"}``,
    but without sympy's printer, which took most of compiling a ZeRO-3 question's four
    peaks (issue 26). A fraction, a floor or any other function is None: print it with
    :class:`ExactPythonPrinter` (integer arithmetic, floors as floor division).

    Examples
    --------
    >>> import sympy as sp
    >>> from memtheory.symbols import B, S
    >>> polynomial_code(sp.Max(3 * B * S**2 + 8, B * S - 2))
    'max(((-2) + B*S), (8 + 3*B*S**2))'
    >>> polynomial_code(sp.floor(S / 2)) is None
    True
    """
    if done is None:
        done = {}
    known = done.get(id(expression))
    if known is not None:
        return known[1]
    code: str | None
    if expression.is_Integer:
        code = str(expression.p) if expression.p >= 0 else f"({expression.p})"
    elif expression.is_Symbol:
        code = expression.name
    elif expression.is_Pow:
        base, power = expression.args
        written = polynomial_code(base, done)
        if not base.is_Symbol and written is not None:
            written = f"({written})"
        code = (None if written is None or not power.is_Integer or power.is_negative
                else f"{written}**{power.p}")
    elif expression.is_Add or expression.is_Mul or isinstance(expression, sp.Max | sp.Min):
        written_args = [polynomial_code(argument, done) for argument in expression.args]
        parts = [part for part in written_args if part is not None]
        if len(parts) < len(written_args):
            code = None
        elif expression.is_Add:
            code = f"({' + '.join(parts)})"
        elif expression.is_Mul:
            code = "*".join(parts)
        else:
            code = f"{'max' if isinstance(expression, sp.Max) else 'min'}({', '.join(parts)})"
    else:
        code = None
    done[id(expression)] = (expression, code)
    return code
