r"""Exact JavaScript for the calculator: sympy's printer over ``BigInt`` rationals.

:class:`ExactJavaScriptPrinter` compiles a memory formula to a call tree
over :data:`RUNTIME` (a twenty-line JavaScript runtime), so that the page
computes every value exactly at any size.

Examples
--------
>>> from memtheory.symbols import B
>>> exact_js(2 * B + 1)
'A(1n,M(2n,B))'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sympy as sp
from sympy.printing.jscode import JavascriptCodePrinter

from memtheory.errors import UnsupportedError

__all__ = ["RUNTIME", "ExactJavaScriptPrinter", "exact_js"]


RUNTIME = """\
const G=(a,b)=>{a=a<0n?-a:a;b=b<0n?-b:b;while(b){[a,b]=[b,a%b];}return a;};
const Q=(n,d=1n)=>{if(d<0n){n=-n;d=-d;}const k=G(n,d)||1n;return [n/k,d/k];};
const R=x=>typeof x==="bigint"?[x,1n]:x;
const A=(...x)=>x.map(R).reduce((s,y)=>Q(s[0]*y[1]+y[0]*s[1],s[1]*y[1]));
const M=(...x)=>x.map(R).reduce((s,y)=>Q(s[0]*y[0],s[1]*y[1]));
const P=(x,k)=>{let r=[1n,1n];for(let i=0;i<k;i++)r=M(r,x);return r;};
const F=x=>{x=R(x);let q=x[0]/x[1];if(x[0]<0n&&q*x[1]!==x[0])q-=1n;return [q,1n];};
const C=x=>{x=R(x);let q=x[0]/x[1];if(x[0]>0n&&q*x[1]!==x[0])q+=1n;return [q,1n];};
const K=(x,y)=>{x=R(x);y=R(y);const d=x[0]*y[1]-y[0]*x[1];\
return d>0n?1:d<0n?-1:0;};
const X=(...x)=>x.map(R).reduce((s,y)=>K(s,y)>=0?s:y);
"""
"""The exact arithmetic the compiled formulas call: rationals as ``[numerator, denominator]``
pairs of ``BigInt`` (``Q``; ``R`` reads a bare ``BigInt`` integer as one), sum ``A``,
product ``M``, whole power ``P``, ``floor`` ``F``,
``ceiling`` ``C``, comparison ``K`` and ``Max`` ``X``."""

_ALLOWED = (sp.Add, sp.Mul, sp.Pow, sp.Integer, sp.Rational, sp.Symbol, sp.floor, sp.ceiling,
            sp.Max)


class ExactJavaScriptPrinter(JavascriptCodePrinter):
    """sympy's JavaScript printer, printing exact ``BigInt`` rational arithmetic (:data:`RUNTIME`).

    Only what memory formulas contain is accepted: sums, products, whole
    positive powers, rationals, size symbols, ``floor``, ``ceiling`` and
    ``Max``; anything else is an :class:`~memtheory.errors.UnsupportedError`.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> ExactJavaScriptPrinter().doprint(sp.ceiling(S / 3) + sp.Max(B, 4))
    'A(X(4n,B),C(M(Q(1n,3n),S)))'
    """

    def _print_Integer(self, expr: sp.Integer) -> str:  # noqa: N802 (sympy names)
        return f"{int(expr)}n"

    def _print_Rational(self, expr: sp.Rational) -> str:  # noqa: N802 (sympy names)
        if expr.q == 1:
            return self._print_Integer(sp.Integer(expr.p))
        return f"Q({int(expr.p)}n,{int(expr.q)}n)"

    _print_Zero = _print_One = _print_NegativeOne = _print_Integer  # noqa: N815
    _print_Half = _print_Rational  # noqa: N815

    def _call(self, name: str, args: Iterable[sp.Basic]) -> str:
        return f"{name}({','.join(self._print(arg) for arg in args)})"

    def _print_Add(self, expr: sp.Add, order: str | None = None) -> str:  # noqa: N802 (sympy names)
        return self._call("A", expr.args)  # any order: the sum is exact

    def _print_Mul(self, expr: sp.Mul, **kwargs: Any) -> str:  # noqa: N802 (sympy names)
        return self._call("M", expr.args)

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:  # noqa: N802 (sympy names)
        exponent = expr.exp
        if not (exponent.is_Integer and exponent > 0):
            raise UnsupportedError(
                f"the calculator compiles whole positive powers only, not {expr}; "
                "rewrite the formula without it."
            )
        return f"P({self._print(expr.base)},{int(exponent)})"

    def _print_floor(self, expr: sp.floor) -> str:  # noqa: N802 (sympy names)
        return self._call("F", expr.args)

    def _print_ceiling(self, expr: sp.ceiling) -> str:  # noqa: N802 (sympy names)
        return self._call("C", expr.args)

    def _print_Max(self, expr: sp.Max) -> str:  # noqa: N802 (sympy names)
        return self._call("X", expr.args)

    def doprint(self, expr: Any, assign_to: Any = None) -> str:
        """Print ``expr``, refusing what the runtime cannot compute exactly."""
        expr = sp.sympify(expr)
        for node in sp.preorder_traversal(expr):
            if not isinstance(node, _ALLOWED):
                raise UnsupportedError(
                    f"the calculator cannot compile {type(node).__name__} ({node}) in {expr}: "
                    "only sums, products, whole powers, floor, ceiling and Max."
                )
        return str(super().doprint(expr, assign_to))


def exact_js(expr: sp.Expr | int) -> str:
    """Return ``expr`` as a JavaScript expression over :data:`RUNTIME` (symbols by their names).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> exact_js(sp.Rational(3, 2) * B)
    'M(Q(3n,2n),B)'
    """
    return ExactJavaScriptPrinter().doprint(expr)
