"""A learned position table is a size constraint the model's values carry (issue 27).

A symbolic GPT-2 evaluated at S=2048 gave a number though building it with sequence=2048 is
refused (its ``wpe`` has 1,024 rows), and ``max_value(memory, "S", "80 GB", B=1)`` answered
5,420 for GPT-2 and 7,905 for BERT (512 rows). The position counts are Hugging Face's:
``GPT2Config().n_positions`` and ``BertConfig().max_position_embeddings`` (transformers).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.models import bert_base, gpt2
from memtheory.techniques import generation_memory

GPT2_POSITIONS = 1024
"""GPT-2's n_positions (Radford et al. 2019; transformers' GPT2Config default)."""

BERT_POSITIONS = 512
"""BERT's max_position_embeddings (Devlin et al. 2019; transformers' BertConfig default)."""


def test_the_position_counts_are_hugging_faces():
    """The constants above are what transformers' configs say, where transformers is here."""
    transformers = pytest.importorskip("transformers")
    assert transformers.GPT2Config().n_positions == GPT2_POSITIONS
    assert transformers.BertConfig().max_position_embeddings == BERT_POSITIONS


@pytest.fixture(scope="module")
def memories() -> dict[str, tuple[int, mt.MemoryBreakdown]]:
    """Training (AdamW) memory of GPT-2 small and BERT-base, symbolic in B and S."""
    return {
        "gpt2": (GPT2_POSITIONS, mt.training_memory(gpt2("small"), optimizer="adamw")),
        "bert": (BERT_POSITIONS, mt.training_memory(bert_base(), optimizer="adamw")),
    }


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_every_path_refuses_a_sequence_past_the_table(memories, model):
    """evaluate, evaluate_grid, compile_exact and the result's evaluate/grid refuse S = rows + 1."""
    positions, memory = memories[model]
    beyond = positions + 1
    for call in (
        lambda: memory.evaluate(B=1, S=beyond),
        lambda: mt.evaluate(memory.total, B=1, S=beyond),
        lambda: mt.evaluate(memory.peak, B=1, S=2 * positions),
        lambda: mt.evaluate_grid(memory.total, B=1, S=np.array([positions, beyond])),
        lambda: mt.compile_exact(memory.total, ["B", "S"])(1, beyond),
        lambda: memory.grid(B=1, S=np.array([8, beyond])),
    ):
        with pytest.raises(mt.KernelTooLargeError, match=f"S <= {positions}"):
            call()
    assert memory.evaluate(B=1, S=positions).total.is_number


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_max_value_stops_at_the_table(memories, model):
    """80 GB would hold thousands of positions: the answer is the model's limit, which fits."""
    positions, memory = memories[model]
    assert memory.evaluate(B=1, S=positions).peak <= mt.parse_bytes("80 GB")
    assert mt.max_value(memory, "S", "80 GB", B=1) == positions
    assert mt.max_value(memory.peak, "S", "80 GB", B=1) == positions


def test_generation_memory_refuses_a_sequence_past_the_table():
    """A GPT-2 generating text carries the limit too."""
    memory = generation_memory(gpt2("small"))
    with pytest.raises(mt.KernelTooLargeError, match="wpe"):
        memory.evaluate(B=1, S=GPT2_POSITIONS + 1)
    with pytest.raises(mt.KernelTooLargeError, match="wpe"):
        mt.evaluate(memory.total, B=1, S=GPT2_POSITIONS + 1)
    assert mt.max_value(memory, "S", "80 GB", B=1) == GPT2_POSITIONS


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 64), sequence=st.integers(1, 128))
def test_a_table_refuses_exactly_the_sequences_longer_than_its_rows(rows, sequence):
    """For any table of rows, its memory (and evaluate within it) refuses S iff S > rows.

    Every such network keeps 4*B*S activations: the bare expression belongs to many of
    them, so the value that decides is the memory result, or within=the network.
    """
    from memtheory.symbols import S

    net = mt.Network([mt.Input((S, 4)), mt.layers.PositionEmbedding(rows)], name=f"table {rows}")
    memory = mt.training_memory(net, optimizer="sgd")
    if sequence <= rows:
        assert memory.evaluate(B=1, S=sequence).total.is_number
        assert mt.evaluate(net.activation_count, within=net, B=1, S=sequence) == 4 * sequence
    else:
        with pytest.raises(mt.KernelTooLargeError, match=f"S <= {rows}"):
            memory.evaluate(B=1, S=sequence)
        with pytest.raises(mt.KernelTooLargeError, match=f"S <= {rows}"):
            mt.evaluate(net.activation_count, within=net, B=1, S=sequence)
