"""The estimate's formula at the peak picks, in each ``Max``, the line largest at the sizes asked.

``_value_at`` evaluates a polynomial line with Python integers instead of sympy's
substitution; these tests hold it to sympy's ``xreplace`` on random lines, floors included.
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from memtheory.estimate.answer import _branch, _value_at
from memtheory.symbols import B, S

coefficients = st.fractions(min_value=-(10**6), max_value=10**12, max_denominator=8)
sizes = st.integers(min_value=1, max_value=10**5)


def _line(c0: Fraction, c1: Fraction, c2: Fraction, floored: bool) -> sp.Expr:
    term = sp.floor(S / 3) if floored else S**2
    return sp.Rational(c0.numerator, c0.denominator) + sp.Rational(
        c1.numerator, c1.denominator
    ) * B * S + sp.Rational(c2.numerator, c2.denominator) * B * term


@given(coefficients, coefficients, coefficients, st.booleans(), sizes, sizes)
def test_a_line_evaluates_as_sympy_substitutes(c0, c1, c2, floored, b, s):
    """Integer arithmetic gives sympy's value: polynomials exactly, floors through sympy."""
    line = _line(c0, c1, c2, floored)
    expected = line.xreplace({B: b, S: s})
    assert _value_at(line, {B: b, S: s}) == Fraction(int(expected.p), int(expected.q))


@given(st.lists(st.tuples(coefficients, coefficients, coefficients, st.booleans()),
                min_size=2, max_size=5), sizes, sizes)
def test_the_branch_is_a_line_as_large_as_the_max(lines, b, s):
    """The line chosen in a Max has the Max's value at the sizes asked."""
    expressions = [_line(*parts) for parts in lines]
    peak = sp.Max(*expressions)
    chosen = _branch(peak, {B: b, S: s})
    assert chosen.xreplace({B: b, S: s}) == peak.xreplace({B: b, S: s})


def _nested(draw: st.DrawFn, depth: int) -> sp.Expr:
    """A random expression of the sizes: lines under floors, ceilings, maxima, minima, powers."""
    if depth == 0:
        return _line(draw(coefficients), draw(coefficients), draw(coefficients),
                     draw(st.booleans()))
    kind = draw(st.sampled_from(["floor", "ceiling", "Max", "Min", "sum", "product", "power"]))
    inner = [_nested(draw, depth - 1) for _ in range(draw(st.integers(2, 3)))]
    divisor = draw(st.integers(1, 7))
    if kind == "floor":
        return sp.floor(inner[0] / divisor)
    if kind == "ceiling":
        return sp.ceiling(inner[0] / divisor)
    if kind == "Max":
        return sp.Max(*inner)
    if kind == "Min":
        return sp.Min(*inner)
    if kind == "sum":
        return sp.Add(*inner)
    if kind == "product":
        return inner[0] * inner[1]
    return inner[0] ** draw(st.integers(0, 3))


nested = st.composite(_nested)


@given(st.integers(0, 3).flatmap(nested), sizes, sizes)
def test_floors_and_maxima_evaluate_as_sympy_substitutes(expression, b, s):
    """Floors, ceilings, maxima and minima of the sizes, in plain fractions: sympy's value."""
    expected = expression.xreplace({B: b, S: s})
    assert _value_at(expression, {B: b, S: s}) == Fraction(int(expected.p), int(expected.q))
