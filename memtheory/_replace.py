"""Substitution into many expressions at once, each shared subexpression rebuilt once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from math import prod

import sympy as sp
from sympy.core.parameters import global_parameters

__all__ = ["replaced"]


def _exact(func: type, arguments: list[sp.Basic]) -> sp.Basic | None:
    """Return the sum or product of rationals as sympy would build it, without its flatten.

    ``Add`` and ``Mul`` of :class:`~sympy.Rational` arguments evaluate to the
    exact rational result; computing it with Python's integers and fractions
    gives the same number for a fraction of the cost (a deep network's
    evaluated timeline rebuilds hundreds of such nodes). None where this does
    not apply: another function, an argument that is not rational, or
    sympy's evaluation switched off.
    """
    if (func is not sp.Add and func is not sp.Mul) or not global_parameters.evaluate:
        return None
    if not all(isinstance(a, sp.Rational) for a in arguments):
        return None
    if all(a.is_Integer for a in arguments):
        integers = [int(a) for a in arguments]
        return sp.Integer(sum(integers) if func is sp.Add else prod(integers))
    fractions = [Fraction(int(a.p), int(a.q)) for a in arguments]
    value = sum(fractions) if func is sp.Add else prod(fractions)
    return sp.Rational(value.numerator, value.denominator)


def replaced(expressions: Iterable[sp.Expr], mapping: Mapping[sp.Basic, sp.Basic]) -> list[sp.Expr]:
    """Return ``[e.xreplace(mapping) for e in expressions]``, each shared subexpression once.

    The moments of a deep network's timeline share most of their terms, each
    a floor nested as deep as the network; ``xreplace`` alone would rebuild
    every one of them again for every moment.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> replaced([B * sp.floor(H / 2), sp.floor(H / 2) + 1], {H: 9})
    [4*B, 5]
    """
    done: dict[sp.Basic, tuple[sp.Basic, bool]] = {}

    def walk(node: sp.Basic) -> tuple[sp.Basic, bool]:  # Basic._xreplace, remembered
        known = done.get(node)
        if known is not None:
            return known
        if node in mapping:
            result = (mapping[node], True)
        else:
            arguments = [walk(a) if isinstance(a, sp.Basic) else (a, False) for a in node.args]
            changed = any(change for _, change in arguments)
            if not changed:
                result = (node, False)
            else:
                new = [a for a, _ in arguments]
                exact = _exact(node.func, new)
                result = (node.func(*new) if exact is None else exact, True)
        done[node] = result
        return result

    return [walk(sp.sympify(e))[0] if mapping else sp.sympify(e) for e in expressions]
