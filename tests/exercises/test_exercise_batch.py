"""The largest batch that fits: sympy's solution agrees with counting batch by batch."""

import pytest
import sympy as sp

from memtheory import ModelCounts, training_memory
from memtheory.exercises import find_variant, largest_batch, largest_batch_formula
from memtheory.symbols import B, H, size_symbol


def brute_force(slope, intercept, limit):
    """Return the largest b >= 0 with slope * b + intercept <= limit, by counting."""
    best = 0
    while slope * (best + 1) + intercept <= limit:
        best += 1
    return best


@pytest.mark.parametrize(
    ("slope", "intercept", "limit"),
    [(100, 50, 1000), (100, 50, 1050), (100, 50, 149), (100, 50, 150), (7, 0, 6), (3, 10, 5)],
)
def test_largest_batch_matches_counting(slope, intercept, limit):
    """The floor of the root is the largest batch, including at the exact boundary."""
    assert largest_batch(slope * B + intercept, limit) == brute_force(slope, intercept, limit)


def test_seed_000_network_on_4_gib():
    """The training-memory question's network with Adam fits 928 images in 4 GiB.

    Per image: (2 x 532,752 activations + 9,000 inputs) x 4 bytes; fixed: 19,072,984 x 16 bytes.
    """
    counts = ModelCounts.per_sample(
        parameters=19_072_984, activations=532_752, input_elements=9_000
    )
    total = training_memory(counts, "adam").total
    derived = (4 * 2**30 - 19_072_984 * 16) // ((2 * 532_752 + 9_000) * 4)
    assert largest_batch(total, 4 * 2**30) == derived == 928
    assert find_variant("ch06.q2").expected == derived


@pytest.mark.parametrize(
    "total",
    [B**2 + 1, sp.Integer(5), -B + 100, B * H + 1],
    ids=["square", "constant", "falling", "two"],
)
def test_totals_that_are_not_affine_in_b_are_refused(total):
    """A total that is not affine in B with a positive slope (and no other symbol) is refused."""
    with pytest.raises(ValueError):
        largest_batch(total, 1000)


def test_formula_agrees_with_the_number():
    """floor((M - b)/a) gives the same batch as largest_batch at many memory sizes."""
    m = size_symbol("M")
    formula = largest_batch_formula(4_298_016 * B + 305_167_744, m)
    for memory in (4 * 2**30, 8 * 10**9, 305_167_744 + 4_298_016, 10**12 + 7):
        expected = largest_batch(4_298_016 * B + 305_167_744, memory)
        assert formula.xreplace({m: memory}) == expected


def test_agrees_with_the_what_if_toolkit():
    """Where one sample fits, largest_batch agrees with memtheory.whatif.max_batch."""
    whatif = pytest.importorskip("memtheory.whatif")
    counts = ModelCounts.per_sample(
        parameters=19_072_984, activations=532_752, input_elements=9_000
    )
    for optimizer in ("adam", "sgd+momentum", "sgd"):
        total = training_memory(counts, optimizer).total
        for limit in (4 * 2**30, 16 * 10**9, 305_167_744 + 4_298_016):
            assert largest_batch(total, limit) == whatif.max_batch(total, limit)
