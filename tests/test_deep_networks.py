"""Deep chains of poolings over a symbolic size: derived exactly, one floor deep at any depth.

Each 2x2 pooling over a symbolic size used to nest one more floor (and about
150 reached Python's recursion limit inside sympy); a floor of a floor over a
whole stride now collapses into one. The reference for a symbolic result is
the same network built with the size as a number (no floors at all),
evaluated at that size.
"""

from __future__ import annotations

import pytest
import sympy as sp

import memtheory as mt
from memtheory._recursion import nesting_guard
from memtheory.errors import UnsupportedError
from memtheory.symbols import H

POOLS = 145
"""Nested floors: past what a stateless optimizer's ``0 * parameters`` used to survive (~130)."""


def _pooling_stack(side: object, pools: int) -> mt.Network:
    layers = [mt.MaxPool2d(2) for _ in range(pools)]
    return mt.Network([mt.Input((1, side, side)), *layers, mt.Flatten(), mt.Dense(3)])


@pytest.mark.parametrize("convention", ["breakdown", "rule_of_thumb", "autograd"])
def test_deep_symbolic_sizes_match_the_numeric_network(convention):
    """145 nested floors: training memory evaluated at a size equals the network built at it."""
    side = 2**POOLS * 3 + 5  # the last pooling leaves 3 x 3
    symbolic = mt.training_memory(
        _pooling_stack(H, POOLS), optimizer="sgd", convention=convention
    ).evaluate(B=2, H=side)
    numeric = mt.training_memory(
        _pooling_stack(side, POOLS), optimizer="sgd", convention=convention
    ).evaluate(B=2)
    assert symbolic.total == numeric.total
    assert symbolic.peak == numeric.peak


def test_past_the_old_recursion_limit_sizes_stay_one_floor_deep():
    """400 poolings (once a recursion-limit error): each size is one floor, exact at a huge side."""
    pools = 400
    net = _pooling_stack(H, pools)
    sizes = [row.output_shape[-1] for row in net.rows[1 : pools + 1]]
    assert all(len(size.atoms(sp.floor)) == 1 for size in sizes)
    assert sizes[-1] == sp.floor(H / 2**pools)
    side = 2**pools * 3 + 5
    symbolic = mt.training_memory(net, optimizer="sgd").evaluate(B=2, H=side)
    numeric = mt.training_memory(_pooling_stack(side, pools), optimizer="sgd").evaluate(B=2)
    assert symbolic.total == numeric.total


def test_recursion_in_sympy_is_a_clear_error():
    """Where sympy still recurses too deep while a network is built, the error says what to do."""
    with pytest.raises(UnsupportedError, match="recursion limit.*spatial size as a number"):
        with nesting_guard("Network 'deep'"):
            raise RecursionError
