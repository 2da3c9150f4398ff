"""The maxima pruned for compiled grids keep every value, and keep only lines that can win.

:func:`memtheory.evaluation.envelope.pruned` may drop a candidate of a ``Max`` only
where the others reach at least as high at every admissible point (every size a
positive integer). Each check compares with the expression as it was, evaluated
line by line at every whole point up to beyond the last crossing of its lines.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.evaluation.envelope import pruned
from memtheory.symbols import B, S

SLOPES, INTERCEPTS = 40, 400
"""Small coefficients: two lines cross below x = INTERCEPTS, so x up to 2 * INTERCEPTS shows all."""

POINTS = np.arange(1, 2 * INTERCEPTS + 1)

lines = st.lists(
    st.tuples(st.integers(0, SLOPES), st.integers(0, INTERCEPTS)), min_size=1, max_size=12
)
"""Lines ``a*x + k`` as (a, k): the moments of a step, in one product of sizes."""


def _values(expression: sp.Expr, batch: np.ndarray, sequence: np.ndarray) -> np.ndarray:
    """``expression`` at each (B, S), by sympy's own NumPy code (no pruning)."""
    function = sp.lambdify([B, S], expression, modules="numpy")
    shape = np.broadcast(batch, sequence).shape
    return np.broadcast_to(np.asarray(function(batch, sequence)), shape)


def _candidates(expression: sp.Expr) -> list[sp.Expr]:
    return list(expression.args) if isinstance(expression, sp.Max) else [expression]


@settings(max_examples=60, deadline=None)
@given(drawn=lines)
def test_pruned_lines_take_the_same_value_at_every_whole_point(drawn):
    """Max of lines in B*S: the pruned maximum equals the maximum of all lines at x = 1..800."""
    expression = sp.Max(*(a * B * S + k for a, k in drawn), evaluate=False)
    kept = pruned(expression)
    expected = np.max([a * POINTS + k for a, k in drawn], axis=0)
    assert np.array_equal(_values(kept, POINTS, np.ones_like(POINTS)), expected)


@settings(max_examples=60, deadline=None)
@given(drawn=lines)
def test_every_line_kept_is_the_largest_at_some_whole_point(drawn):
    """No line is kept that no whole x >= 1 makes the largest: the pruning is not timid."""
    expression = sp.Max(*(a * B * S + k for a, k in drawn), evaluate=False)
    largest = np.max([a * POINTS + k for a, k in drawn], axis=0)
    for line in _candidates(pruned(expression)):
        assert np.any(_values(line, POINTS, np.ones_like(POINTS)) == largest), line
    assert len(_candidates(pruned(expression))) <= len(set(drawn))


@settings(max_examples=40, deadline=None)
@given(first=lines, second=lines, loose=lines, shift=st.integers(0, 50))
def test_maxima_added_to_the_same_term_are_merged_exactly(first, second, loose, shift):
    """Max(X + Max(..), X + Max(..), lines, numbers) keeps its value on a (B, S) grid."""
    added = shift * S + 3
    expression = sp.Max(
        added + sp.Max(*(a * B * S + k for a, k in first), evaluate=False),
        added + sp.Max(*(a * B * S + k for a, k in second), evaluate=False),
        *(a * B * S + k for a, k in loose),
        sp.Integer(INTERCEPTS // 2),
        evaluate=False,
    )
    batch, sequence = np.arange(1, 41).reshape(-1, 1), np.arange(1, 41).reshape(1, -1)
    expected = _values(expression, batch, sequence)
    assert np.array_equal(_values(pruned(expression), batch, sequence), expected)


def test_lines_in_a_symbol_that_may_be_below_one_are_left_alone():
    """A real x: 2x - 1 < x for x < 1, so Max(x, 2x - 1, 0) keeps all three."""
    x = sp.Symbol("x", real=True)
    expression = sp.Max(x, 2 * x - 1, 0, evaluate=False)
    assert set(_candidates(pruned(expression))) == {x, 2 * x - 1, sp.Integer(0)}


def test_a_line_on_top_only_between_two_whole_numbers_is_dropped():
    """22 < 10x < 20x - 28 between x = 2.2 and 2.8 only: at every whole x another line wins."""
    expression = sp.Max(sp.Integer(22), 10 * B, 20 * B - 28, evaluate=False)
    assert set(_candidates(pruned(expression))) == {sp.Integer(22), 20 * B - 28}
    assert [mt.evaluate(expression, B=b) for b in (2, 3)] == [22, 32]


@settings(max_examples=30, deadline=None)
@given(drawn=lines, batch=st.integers(1, 30), sequence=st.integers(1, 30))
def test_evaluate_grid_of_a_peak_of_lines_agrees_with_sympy(drawn, batch, sequence):
    """evaluate_grid (pruned, compiled) gives sympy's exact value of the unpruned maximum."""
    drawn = [*drawn, (1, 0)]  # B*S in one line at least, so that B and S are its symbols
    expression = sp.Max(*(a * B * S + k + 7 * S for a, k in drawn), evaluate=False)
    grid = mt.evaluate_grid(expression, B=np.arange(1, 31).reshape(-1, 1), S=np.arange(1, 31))
    assert grid[batch - 1, sequence - 1] == mt.evaluate(expression, B=batch, S=sequence)
