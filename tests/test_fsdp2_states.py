"""FSDP2's per-rank model states (memtheory.techniques.fsdp2): invariants of torch.chunk's split.

The measured side (a real ``fully_shard`` step, tracked) is
``tests/pytorch/test_fsdp_cpu.py``; these check the formulas against
``torch.chunk``'s rule as its documentation states it and against each other.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory.errors import InvalidSizeError
from memtheory.techniques import fsdp2_model_states, padded_rows, shard_rows

rows = st.integers(1, 5000)
worlds = st.integers(1, 64)
shapes = st.lists(st.lists(st.integers(1, 50), min_size=0, max_size=3).map(tuple),
                  min_size=1, max_size=6)


@given(rows, worlds)
def test_the_ranks_own_every_row_once(n, world):
    """The ranks' rows add up to dim 0, and none owns more than the padded chunk."""
    owned = [shard_rows(n, world, r) for r in range(world)]
    assert sum(owned) == n
    assert max(owned) == padded_rows(n, world) == math.ceil(n / world)


@given(shapes, worlds)
def test_optimizer_state_over_all_ranks_is_the_whole_model(sizes, world):
    """AdamW's state sums to 8 bytes per element over the ranks; the padded shards to at least 4."""
    elements = sum(math.prod(s) for s in sizes)
    states = [fsdp2_model_states(sizes, world, r) for r in range(world)]
    assert sum(s["optimizer_state"] for s in states) == 8 * elements
    assert world * states[0]["parameters"] >= 4 * elements
    assert all(s["optimizer_step_counters"] == 4 * len(sizes) for s in states)
    assert states[0]["optimizer_state"] == 2 * states[0]["parameters"]


@given(shapes, worlds)
def test_padding_vanishes_when_dim0_divides(sizes, world):
    """With every dim 0 a multiple of the world size, each rank holds exactly 1/world."""
    scaled = [(s[0] * world, *s[1:]) if s else (world,) for s in sizes]
    elements = sum(math.prod(s) for s in scaled)
    for r in range(world):
        states = fsdp2_model_states(scaled, world, r)
        assert states["parameters"] * world == 4 * elements
        assert states["optimizer_state"] * world == 8 * elements


@pytest.mark.parametrize(("world", "rank"), [(0, 0), (2, 2), (2, -1), (True, 0)])
def test_impossible_ranks_are_refused(world, rank):
    """A world of no ranks, or a rank outside it, names the problem."""
    with pytest.raises(InvalidSizeError, match="rank"):
        fsdp2_model_states([(4, 4)], world, rank)


ODD_LLAMA = {"model_type": "llama", "vocab_size": 97, "hidden_size": 40,
             "intermediate_size": 44, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 256,
             "tie_word_embeddings": False}
"""The measured second size of tests/pytorch/test_fsdp_cpu.py: 97 rows divide by no world."""


@pytest.mark.parametrize("world", [2, 4])
def test_the_fsdp2_recipe_estimates_rank_zeros_model_states(world):
    """``estimate(setup="fsdp2-bf16")`` holds rank 0's padded shards, own rows and whole steps."""
    from memtheory.estimate.plan import estimate
    from memtheory.estimate.resolve import resolve_model
    from memtheory.network.parameters import parameter_shapes

    network = resolve_model(ODD_LLAMA, batch=2, sequence=6).network
    sizes = [tuple(int(n) for n in shape) for _, shape in parameter_shapes(network)]
    device = estimate(ODD_LLAMA, batch=2, sequence=6, gpus=world,
                      setup="fsdp2-bf16").memory.device.components
    expected = fsdp2_model_states(sizes, world, 0)  # rank 0 owns the most rows
    assert {name: int(device[name]) for name in expected} == expected
    assert int(device["gradients"]) == expected["parameters"]  # fp32 shards, padded alike
    assert all(fsdp2_model_states(sizes, world, r)["optimizer_state"]
               <= expected["optimizer_state"] for r in range(world))


def test_the_generic_zero3_split_stays_even():
    """``--zero 3`` without the recipe keeps ZeRO's even split (step counters divided too)."""
    from memtheory.estimate.plan import estimate

    fsdp = estimate(ODD_LLAMA, batch=2, sequence=6, gpus=2, setup="fsdp2-bf16")
    zero3 = estimate(ODD_LLAMA, batch=2, sequence=6, gpus=2, setup="pytorch-amp", zero=3)
    counters = [int(e.memory.device.components["optimizer_step_counters"]) for e in (fsdp, zero3)]
    assert counters[0] == 2 * counters[1]
