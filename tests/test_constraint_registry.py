"""Size constraints travel per network: an expression two networks hand out keeps both (issue 27).

The constraints used to live in one process-wide table keyed by the expression, holding for
each expression only the constraints *every* network that handed it out shared. Building the
README's CNN a second time under another name (every constraint's label then differs) left the
first one's total with none: ``evaluate(first.total, B=64, H=3)`` was refused before and
returned a number after. Every expected side here comes from PyTorch's output-size formula
(the ``torch.nn.Conv2d`` / ``torch.nn.MaxPool2d`` docs), written in this file.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.symbols import B, H, size_symbol

_FRESH = itertools.count()


def readme_cnn(name: str) -> mt.Network:
    """The README's what-if CNN: two padded 3x3 convolutions, each followed by 2x2 pooling."""
    return mt.Network(
        [
            mt.Input((3, H, H)),
            mt.Conv2d(32, 3, padding=1),
            mt.MaxPool2d(2),
            mt.Conv2d(64, 3, padding=1),
            mt.MaxPool2d(2),
            mt.Flatten(),
            mt.Dense(500),
            mt.Dense(10),
        ],
        name=name,
    )


def torch_side(side: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output side of a convolution or pooling window, by the formula in PyTorch's docs."""
    return (side + 2 * padding - (kernel - 1) - 1) // stride + 1


def readme_smallest() -> int:
    """Smallest side the README CNN takes: both poolings must leave at least 1."""

    def last(h: int) -> int:
        first = torch_side(torch_side(h, 3, padding=1), 2, stride=2)
        return torch_side(torch_side(first, 3, padding=1), 2, stride=2)

    return next(h for h in range(1, 64) if last(h) >= 1)


@pytest.fixture()
def twins() -> tuple[mt.MemoryBreakdown, mt.MemoryBreakdown]:
    """The README CNN's Adam memory, built under two names in one process."""
    first = mt.training_memory(readme_cnn("first"), optimizer="adam")
    again = mt.training_memory(readme_cnn("again"), optimizer="adam")
    _ = first.total, again.total  # both handed out
    return first, again


def test_the_readme_cnn_takes_sides_from_four():
    """The independent formula: the second pooling needs a side of at least 4."""
    assert readme_smallest() == 4


def test_the_twins_hand_out_the_same_total(twins):
    """The collision of the issue: the two totals are one sympy expression."""
    first, again = twins
    assert first.total == again.total


def test_a_twin_total_is_still_refused_on_every_path(twins):
    """evaluate, evaluate_grid and compile_exact of first.total refuse H=3 after `again` exists."""
    first, _ = twins
    side = readme_smallest() - 1
    with pytest.raises(mt.KernelTooLargeError, match="maxpool2d_2"):
        mt.evaluate(first.total, B=64, H=side)
    with pytest.raises(mt.KernelTooLargeError, match="maxpool2d_2"):
        mt.evaluate_grid(first.total, B=np.array([1, 64]), H=side)
    with pytest.raises(mt.KernelTooLargeError, match="maxpool2d_2"):
        mt.compile_exact(first.total, ["B", "H"])(64, side)
    with pytest.raises(mt.KernelTooLargeError, match="maxpool2d_2"):
        mt.evaluate(mt.evaluate(first.total, B=64), H=side)  # through a partial evaluation


def test_max_value_of_a_twin_total_starts_at_the_smallest_side(twins):
    """A limit one byte short of the smallest side's memory fits no side: not H=1..3."""
    first, _ = twins
    smallest = readme_smallest()
    tight = first.evaluate(B=1, H=smallest).total
    with pytest.raises(mt.DoesNotFitError, match=f"H={smallest}"):
        mt.max_value(first.total, "H", tight - 1, B=1)
    assert mt.max_value(first.total, "H", tight, B=1) == smallest


# -- networks whose equal expressions need different sizes ---------------------------------
def test_two_different_networks_with_one_activation_count():
    """A 5x5 kernel on a side, a padded 1x1 on that side less 6: one count, sides 5 and 7.

    Both keep 8 (side - 4)^2 activations per sample.
    """
    side = size_symbol(f"registry_side_{next(_FRESH)}")
    five = mt.Network([mt.Input((1, side, side)), mt.Conv2d(8, 5)], "five")
    seven = mt.Network([mt.Input((1, side - 6, side - 6)), mt.Conv2d(8, 1, padding=1)], "seven")
    assert five.activation_count == seven.activation_count
    smallest = {
        "five": next(h for h in range(1, 20) if torch_side(h, 5) >= 1),
        "seven": next(h for h in range(1, 20) if h - 6 >= 1 and torch_side(h - 6, 1, 1, 1) >= 1),
    }
    assert smallest == {"five": 5, "seven": 7}
    name = side.name
    with pytest.raises(mt.KernelTooLargeError, match="'five'"):  # both refuse side 4
        mt.evaluate(five.activation_count, B=1, **{name: smallest["five"] - 1})
    with pytest.warns(mt.errors.SizeWarning, match="'seven'"):  # five takes 6, seven does not
        mt.evaluate(five.activation_count, B=1, **{name: smallest["seven"] - 1})
    with pytest.raises(mt.KernelTooLargeError, match="'seven'"):
        mt.evaluate(seven.activation_count, within=seven, B=1, **{name: smallest["seven"] - 1})


def counts_needing(side: sp.Symbol, shift: int, label: str) -> mt.ModelCounts:
    """Counts whose activations are 7 * side**2 * B, valid only while side - shift >= 1."""
    return mt.ModelCounts(
        parameters=3 * side + 11,
        activations=7 * side**2 * B,
        input_elements=side**2 * B,
        constraints={label: side - shift},
    )


def test_an_expression_of_two_networks_is_checked_against_each():
    """Refused where both refuse, a SizeWarning where one does, quiet where neither does."""
    side = size_symbol(f"registry_side_{next(_FRESH)}")
    tight, loose = counts_needing(side, 4, "tight"), counts_needing(side, 2, "loose")
    assert tight.activations == loose.activations
    name = side.name
    with pytest.raises(mt.KernelTooLargeError, match="too small"):  # both refuse 2
        mt.evaluate(tight.activations, B=1, **{name: 2})
    with pytest.warns(mt.errors.SizeWarning, match="unknown") as caught:
        value = mt.evaluate(tight.activations, B=1, **{name: 3})
    assert value == 7 * 3**2 and "tight" in str(caught[0].message)
    with pytest.warns(mt.errors.SizeWarning, match="unknown"):
        mt.evaluate_grid(tight.activations, B=1, **{name: np.array([5, 3])})
    with pytest.warns(mt.errors.SizeWarning, match="unknown"):
        mt.compile_exact(tight.activations, ["B", name])(1, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mt.evaluate(tight.activations, B=1, **{name: 5}) == 7 * 5**2


def test_the_value_the_user_holds_decides():
    """A memory result checks its own constraints; within= names the network's."""
    side = size_symbol(f"registry_side_{next(_FRESH)}")
    tight, loose = counts_needing(side, 4, "tight"), counts_needing(side, 2, "loose")
    name = side.name
    tight_memory = mt.training_memory(tight, optimizer="sgd")
    loose_memory = mt.training_memory(loose, optimizer="sgd")
    with pytest.raises(mt.KernelTooLargeError, match="tight"):
        tight_memory.evaluate(B=1, **{name: 3})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loose_memory.evaluate(B=1, **{name: 3}).total == mt.evaluate(
            loose_memory.total, within=loose, B=1, **{name: 3}
        )
    with pytest.raises(mt.KernelTooLargeError, match="tight"):
        mt.evaluate(tight.activations, within=tight, B=1, **{name: 3})
    with pytest.raises(mt.KernelTooLargeError, match="tight"):
        tight_memory.grid(B=1, **{name: np.array([9, 3])})


def test_max_value_of_a_memory_result_uses_its_own_constraints():
    """The tight counts' memory starts at side 5; the loose counts' at 3, though equal."""
    side = size_symbol(f"registry_side_{next(_FRESH)}")
    tight, loose = counts_needing(side, 4, "tight"), counts_needing(side, 2, "loose")
    tight_memory = mt.training_memory(tight, optimizer="sgd")
    loose_memory = mt.training_memory(loose, optimizer="sgd")
    assert tight_memory.total == loose_memory.total
    at_three = loose_memory.evaluate(B=1, **{side.name: 3}).total
    assert mt.max_value(loose_memory, side.name, at_three, B=1) == 3
    with pytest.raises(mt.DoesNotFitError, match=f"{side.name}=5"):
        mt.max_value(tight_memory, side.name, at_three, B=1)
    with pytest.warns(mt.errors.SizeWarning, match="unknown"):  # the bare total: whose is unknown
        with pytest.raises(mt.DoesNotFitError, match=f"{side.name}=5"):
            mt.max_value(tight_memory.total, side.name, at_three, B=1)


def test_a_network_that_needs_nothing_counts_as_one_of_the_owners():
    """A padded twin takes H=2: the unpadded network's total is then only warned about."""
    valid = mt.Network([mt.Input((1, H, H)), mt.Conv2d(4, 3, padding=1), mt.Flatten()], "padded")
    assert valid.size_checks() == ()
    shrunk = mt.Network([mt.Input((1, H + 2, H + 2)), mt.Conv2d(4, 3), mt.Flatten()], "shrunk")
    assert shrunk.activation_count == valid.activation_count  # both 4 * H**2 per sample
    _ = valid.activation_count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mt.evaluate(valid.activation_count, B=1, H=1) == 4 * torch_side(1, 3, padding=1) ** 2


def test_too_many_owners_make_the_constraints_unknown_not_silent():
    """Past OWNER_LIMIT networks for one expression, a value every one refuses is warned about."""
    from memtheory.constraints import OWNER_LIMIT

    side = size_symbol(f"registry_side_{next(_FRESH)}")
    made = [counts_needing(side, shift, f"owner {shift}") for shift in range(1, OWNER_LIMIT + 2)]
    with pytest.warns(mt.errors.SizeWarning, match="unknown"):
        assert mt.evaluate(made[0].activations, B=1, **{side.name: 1}) == 7
    side = size_symbol(f"registry_side_{next(_FRESH)}")
    made = [counts_needing(side, 3, f"owner {i}") for i in range(OWNER_LIMIT + 1)]
    with pytest.raises(mt.KernelTooLargeError):  # the same sizes, labelled anew: one verdict
        mt.evaluate(made[0].activations, B=1, **{side.name: 1})


# -- invariants ------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.integers(0, 8),
    second=st.integers(0, 8),
    value=st.integers(1, 12),
)
def test_one_networks_expression_never_uses_the_others_constraints(first, second, value):
    """Two networks, one expression: its own refusal is never silent, nor its acceptance refused.

    The memory result decides exactly by its own constraints.
    """
    side = size_symbol(f"registry_side_{next(_FRESH)}")
    mine = counts_needing(side, first, "mine")
    counts_needing(side, second, "theirs")
    own_ok = value - first >= 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            number = mt.evaluate(mine.activations, B=1, **{side.name: value})
        except mt.KernelTooLargeError:
            assert not own_ok, "refused a value its own constraints allow"
        else:
            assert number == 7 * value**2
            warned = any(issubclass(w.category, mt.errors.SizeWarning) for w in caught)
            assert own_ok or warned, "a value its own constraints refuse went through silently"
    memory = mt.training_memory(mine, optimizer="sgd")
    if own_ok:
        assert memory.evaluate(B=1, **{side.name: value}).total.is_number
    else:
        with pytest.raises(mt.KernelTooLargeError, match="mine"):
            memory.evaluate(B=1, **{side.name: value})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel=st.integers(2, 6), pool=st.integers(1, 3), value=st.integers(1, 14))
def test_twin_networks_refuse_exactly_what_the_layer_formula_refuses(kernel, pool, value):
    """Two same-layer networks under two names: refused iff PyTorch's formula gives a side < 1.

    Whatever the other one registered.
    """
    names = [f"twin {next(_FRESH)}", f"twin {next(_FRESH)}"]
    totals = [
        mt.training_memory(
            mt.Network([mt.Input((1, H, H)), mt.Conv2d(2, kernel), mt.MaxPool2d(pool)], name),
            optimizer="sgd",
        ).total
        for name in names
    ]
    assert totals[0] == totals[1]
    valid = torch_side(torch_side(value, kernel), pool, stride=pool) >= 1
    if valid:
        assert mt.evaluate(totals[0], B=1, H=value).is_number
    else:
        with pytest.raises(mt.KernelTooLargeError, match="too small"):
            mt.evaluate(totals[0], B=1, H=value)


def test_results_derived_from_a_memory_result_keep_refusing():
    """ZeRO and the parallel split of the README CNN's memory refuse the sides it refuses."""
    from memtheory.techniques import parallel_memory, zero_partition

    memory = mt.training_memory(readme_cnn("derived"), optimizer="adam")
    side = readme_smallest() - 1
    sharded = zero_partition(memory, 4, stage=3)
    assert sharded.constraints == memory.constraints
    for result in (sharded, parallel_memory(memory, data=2).device):
        with pytest.raises(mt.KernelTooLargeError, match="maxpool2d_2"):
            result.evaluate(B=1, H=side)
        assert result.evaluate(B=1, H=side + 1).total.is_number
