"""Bounds on what expanding a formula costs (degree and terms), refused past the limits.

Examples
--------
>>> from memtheory.symbols import B
>>> _size((B + 1) ** 3, DEFAULT_LIMITS, 1)
FormulaShape(degree=3, terms=4, den_degree=0, den_terms=1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy as sp

from memtheory.bounded_parser.parse_limits import DEFAULT_LIMITS, Limits
from memtheory.errors import ParseError

__all__ = ["ATOM_SHAPE", "CONSTANT_SHAPE", "FormulaShape", "check_formula_size"]


def _monomials(terms: int, n: int, degree: int, atoms: int) -> int:
    """Bound the terms of ``(t terms)**n`` expanded: the multinomial count or the monomials."""
    multinomial = math.comb(terms + n - 1, n) if n else 1
    return min(multinomial, math.comb(degree + atoms, atoms)) if atoms else multinomial


@dataclass(frozen=True)
class FormulaShape:
    """Bounds on a formula put over one common denominator: degree and terms of each part."""

    degree: int = 0
    terms: int = 1
    den_degree: int = 0
    den_terms: int = 1

    @property
    def total(self) -> int:
        """The degree of the numerator and the denominator together."""
        return self.degree + self.den_degree

    def plus(self, other: FormulaShape) -> FormulaShape:
        """Return the shape of a sum, over the product of the two denominators."""
        if self.den_degree == 0 and other.den_degree == 0:
            return FormulaShape(max(self.degree, other.degree), self.terms + other.terms)
        return FormulaShape(
            max(self.degree + other.den_degree, other.degree + self.den_degree),
            self.terms * other.den_terms + other.terms * self.den_terms,
            self.den_degree + other.den_degree,
            self.den_terms * other.den_terms,
        )

    def times(self, other: FormulaShape) -> FormulaShape:
        """Return the shape of a product: degrees add, term counts multiply."""
        return FormulaShape(
            self.degree + other.degree,
            self.terms * other.terms,
            self.den_degree + other.den_degree,
            self.den_terms * other.den_terms,
        )

    def inverse(self) -> FormulaShape:
        """Return the shape of the reciprocal: numerator and denominator swapped."""
        return FormulaShape(self.den_degree, self.den_terms, self.degree, self.terms)

    def power(self, n: int, atoms: int) -> FormulaShape:
        """Return the shape of the ``n``-th power, with at most as many terms as ``atoms`` allow."""
        base = self.inverse() if n < 0 else self
        n = abs(n)
        return FormulaShape(
            base.degree * n,
            _monomials(base.terms, n, base.degree * n, atoms),
            base.den_degree * n,
            _monomials(base.den_terms, n, base.den_degree * n, atoms),
        )

    def refusal(self, limits: Limits) -> str | None:
        """Say which limit the shape breaks, if one."""
        if self.total > limits.degree:
            return f"its degree reaches {self.total}; the limit is {limits.degree}"
        if max(self.terms, self.den_terms) > limits.terms:
            terms = max(self.terms, self.den_terms)
            return f"expanded it could have {terms} terms; the limit is {limits.terms}"
        return None


CONSTANT_SHAPE = FormulaShape()
ATOM_SHAPE = FormulaShape(1, 1)


def _size(expr: sp.Basic, limits: Limits, atoms: int) -> FormulaShape:
    """Bound a sympy expression's shape, refusing what breaks the limits."""
    if expr.is_Number:
        if expr.is_Rational:
            if max(abs(int(expr.p)).bit_length(), int(expr.q).bit_length()) > limits.bits:
                raise ParseError(f"a number in the formula exceeds {limits.bits} bits.")
        return CONSTANT_SHAPE
    if expr.is_Symbol:
        return ATOM_SHAPE
    if isinstance(expr, sp.Pow):
        exponent = expr.exp
        if not exponent.is_Integer or abs(int(exponent)) > limits.power:
            raise ParseError(
                f"powers must be whole numbers up to {limits.power}; the formula has {exponent}."
            )
        shape = _size(expr.base, limits, atoms).power(int(exponent), atoms)
    elif isinstance(expr, sp.Add | sp.Mul):
        shapes = [_size(arg, limits, atoms) for arg in expr.args]
        shape = shapes[0]
        for other in shapes[1:]:
            shape = shape.plus(other) if isinstance(expr, sp.Add) else shape.times(other)
    else:
        for arg in expr.args:
            _size(arg, limits, atoms)
        shape = ATOM_SHAPE if expr.args else CONSTANT_SHAPE
    refusal = shape.refusal(limits)
    if refusal:
        raise ParseError(f"the formula is too large to compute: {refusal}.")
    return shape


def check_formula_size(expr: sp.Basic, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse a sympy expression (one built in a notebook) that breaks the limits.

    Raises
    ------
    ParseError
        If it has more than ``limits.nodes`` nodes, nests deeper than
        ``limits.depth``, or breaks the power, bits, degree or terms limit.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> check_formula_size((B + 1) ** 4)
    >>> check_formula_size(((B + 1) ** 64) ** 64)
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: powers must be whole numbers up to 64; the formula has 4096.
    """
    count = 0
    stack: list[tuple[sp.Basic, int]] = [(expr, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > limits.nodes:
            raise ParseError(f"the formula has more than {limits.nodes} parts.")
        if depth > limits.depth:
            raise ParseError(f"the formula is nested more than {limits.depth} levels deep.")
        stack.extend((arg, depth + 1) for arg in node.args)
    atoms = len(expr.free_symbols) + sum(
        1 for _ in expr.atoms(sp.floor, sp.ceiling, sp.Min, sp.Max)
    )
    _size(expr, limits, atoms)
