"""Deeply nested symbolic sizes: derived exactly up to sympy's recursion depth, then a clear error.

Each 2x2 pooling over a symbolic size nests one more floor. The reference for
a symbolic result is the same network built with the size as a number (no
floors at all), evaluated at that size.
"""

from __future__ import annotations

import pytest

import memtheory as mt
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


def test_too_deep_for_sympy_is_a_clear_error():
    """Beyond what Python's recursion limit lets sympy walk, the error says what to do."""
    with pytest.raises(UnsupportedError, match="recursion limit.*spatial size as a number"):
        _pooling_stack(H, 400)
