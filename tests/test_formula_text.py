"""formula_text writes exactly what sympy's ``str`` writes: random formulas and real peaks.

The estimate prints its formula (and the replay entry keeps it) with
:func:`~memtheory.evaluation.formula_text.formula_text`; a user who prints
``answer.formula`` gets sympy's ``str``. The two must be the same characters.
"""

from __future__ import annotations

import sympy as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memtheory import training_memory
from memtheory.evaluation.formula_text import formula_text
from memtheory.models import gpt2
from memtheory.symbols import B, H, S

_SYMBOLS = st.sampled_from([B, S, H, sp.Symbol("x"), sp.Symbol("T", integer=True)])
_COEFFICIENTS = st.one_of(st.integers(-3, 3), st.integers(-10**12, 10**12))


def _monomials() -> st.SearchStrategy[sp.Expr]:
    power = st.tuples(_SYMBOLS, st.integers(1, 3)).map(lambda pair: pair[0] ** pair[1])
    return st.builds(lambda c, factors: c * sp.Mul(*factors), _COEFFICIENTS,
                     st.lists(power, max_size=3))


def _polynomials() -> st.SearchStrategy[sp.Expr]:
    return st.lists(_monomials(), min_size=1, max_size=5).map(lambda terms: sp.Add(*terms))


def _odd_parts() -> st.SearchStrategy[sp.Expr]:
    """What sympy prints for formula_text: floors, fractions, a negative power, pi."""
    return st.one_of(
        _SYMBOLS.map(lambda s: sp.floor(s / 2)),
        _SYMBOLS.map(lambda s: s / 3),
        _SYMBOLS.map(lambda s: 1 / s),
        st.just(sp.pi),
        st.just(sp.Rational(7, 2)),
        _SYMBOLS.map(lambda s: (s + 1) ** 2),
    )


def _formulas() -> st.SearchStrategy[sp.Expr]:
    leaves = st.one_of(_polynomials(), _odd_parts())

    def extend(inner: st.SearchStrategy[sp.Expr]) -> st.SearchStrategy[sp.Expr]:
        return st.one_of(
            st.lists(inner, min_size=2, max_size=4).map(lambda a: sp.Max(*a)),
            st.lists(inner, min_size=2, max_size=4).map(lambda a: sp.Min(*a)),
            st.tuples(inner, _polynomials()).map(lambda pair: pair[0] + pair[1]),
            st.tuples(_COEFFICIENTS, inner).map(lambda pair: pair[0] * pair[1]),
            st.tuples(_SYMBOLS, inner).map(lambda pair: pair[0] * pair[1]),
            st.tuples(inner, inner).map(lambda pair: pair[0] + pair[1]),
        )

    return st.recursive(leaves, extend, max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(formula=_formulas())
@example(formula=5 - 2 * B)  # a number before one negative multiple (as_ordered_terms)
@example(formula=-5 - 2 * B)
@example(formula=5 - 2 * B * S)
@example(formula=sp.Max(B, S) * 1024 * S + sp.Min(3 * B, S) - 7)
@example(formula=-sp.Max(B * S, 4))
@example(formula=sp.Max(sp.Symbol("x"), -2 * sp.Symbol("x")))  # held in another order
@example(formula=sp.Max(B, S) ** 2 + B)
@example(formula=sp.Max(B**2 * S, B * S**2, 3 * B**3) + 2 * B * S)
def test_formula_text_is_strs_text(formula):
    """Maxima, minima, sums and products of polynomials, with parts sympy prints itself."""
    assert formula_text(formula) == str(formula)


def test_a_shared_part_is_written_the_same_everywhere():
    """A factored peak shares its parts by identity: each is written once, the text unchanged."""
    shared = sp.Max(3 * B * S + 8, B * S**2 - 2)
    formula = sp.Max(shared + 4 * S, shared * 2, shared)
    assert formula_text(formula) == str(formula)


def test_a_transformers_peak_is_strs_text():
    """GPT-2 small's exact peak under the autograd convention: a Max of sums in B and S."""
    peak = training_memory(gpt2("small"), optimizer="adamw", convention="autograd").peak
    assert peak.has(sp.Max)
    assert formula_text(peak) == str(peak)
