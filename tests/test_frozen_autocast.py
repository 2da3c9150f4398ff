"""Frozen layers under torch.autocast, and what the TRL step reads from the recipe's plan.

The measurements these rules come from are in ``tests/pytorch/`` (a frozen
Linear beside LoRA under autocast against ``measure``:
``test_finetuning_measured.py``; the real TRL trainers under ``track()``:
``test_trl_recipe.py``, ``test_dpo_recipe.py``). Here: the rules' own
invariants, without torch.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory import Dense, Input, Network
from memtheory.dtypes import dtype
from memtheory.errors import UnsupportedError
from memtheory.finetuning import Frozen, LoRA, finetune_memory
from memtheory.finetuning.trl_head import lora_checkpoint_extra
from memtheory.finetuning.trl_plan import (
    autocast_cache_bytes,
    first_layer_shortfall,
    recipe_plan,
)
from memtheory.layers import CrossEntropyLoss, LayerNorm
from memtheory.symbols import B

TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "tie_word_embeddings": False}
"""The tiny Llama of the TRL tests (memtheory.torch.recipe_steps.TINY_LLAMA)."""


def test_a_frozen_dense_under_autocast_keeps_its_own_weight_cast():
    """Its weight's cast is saved (a weight copy), its bias's a transient; fp32 keeps nothing."""
    layer = Frozen(Dense(10, name="fc"))
    plain = layer.autograd(((B, 6),))
    mixed = layer.autograd(((B, 6),), autocast="bf16")
    assert plain.saved == ()
    assert [(s.role, s.elements) for s in mixed.saved] == [("weight copy", 10 * 6)]
    assert [(s.role, s.elements) for s in mixed.transients] == [("weight copy", 10)]


def test_a_frozen_layer_norm_under_autocast_is_refused_with_the_fix():
    """Not measured under autocast frozen: refused, naming what was and the fix."""
    with pytest.raises(UnsupportedError, match=r"frozen LayerNorm under torch.autocast.*bf16"):
        Frozen(LayerNorm(name="ln")).autograd(((B, 6),), autocast="bf16")


@pytest.mark.parametrize("wanted", [False, True], ids=["no-grad input", "grad input"])
def test_the_copy_is_a_weight_copy_only_when_the_input_needs_a_gradient(wanted):
    """A frozen Dense after a trained one keeps its cast; before it, neither keeps one."""
    layers = [Input((6,), batch=4), Dense(8, name="a"), Dense(5, name="b"), CrossEntropyLoss()]
    frozen = "b" if wanted else "a"
    memory = finetune_memory(Network(layers), frozen=frozen, optimizer="adam",
                             precision="autocast-bf16", convention="autograd")
    bf16 = int(dtype("bf16").bytes)
    # a's input is the batch (no gradient): a's cast, cached or its own, is never kept; b's
    # input needs a gradient only when a is trained, and then b, frozen, keeps its own cast
    assert memory.components.get("weight_copies", 0) == (bf16 * 5 * 8 if wanted else 0)


@settings(max_examples=12, deadline=None)
@given(sequences=st.integers(1, 4), sequence=st.integers(2, 12), rank=st.integers(1, 8))
def test_in_fp32_the_first_layers_shortfall_is_the_measured_formula(sequences, sequence, rank):
    """Read from the plan, the fp32 shortfall is lora_checkpoint_extra (measured at two sizes)."""
    plan = recipe_plan(TINY, sequences=sequences, sequence=sequence, lora=LoRA(rank, 2 * rank),
                       precision="fp32")
    assert first_layer_shortfall(plan) == lora_checkpoint_extra(sequences, sequence, 32)
    assert autocast_cache_bytes(plan, "model.norm") == 0


@settings(max_examples=8, deadline=None)
@given(sequences=st.integers(1, 4), sequence=st.integers(2, 12))
def test_full_fine_tuning_has_no_shortfall_and_no_cache(sequences, sequence):
    """Every layer's input needs a gradient when the embeddings are trained: nothing to add."""
    for precision in ("fp32", "autocast-bf16"):
        plan = recipe_plan(TINY, sequences=sequences, sequence=sequence, lora=None,
                           precision=precision)
        assert (first_layer_shortfall(plan), autocast_cache_bytes(plan, "model.norm")) == (0, 0)


@settings(max_examples=8, deadline=None)
@given(sequences=st.integers(1, 4), sequence=st.integers(2, 12), rank=st.integers(1, 8))
def test_under_autocast_the_shortfall_adds_the_first_layers_casts(sequences, sequence, rank):
    """Autocast adds q, k, v's bf16 copies and the lora_A casts, which sit in the cache instead."""
    sizes = {"sequences": sequences, "sequence": sequence, "lora": LoRA(rank, 2 * rank)}
    fp32 = recipe_plan(TINY, precision="fp32", **sizes)
    mixed = recipe_plan(TINY, precision="autocast-bf16", **sizes)
    bf16 = int(dtype("bf16").bytes)
    hidden, kv = 32, 32 // 4 * 2
    projections = bf16 * hidden * (hidden + 2 * kv)  # q, k, v of the first layer
    adapters = bf16 * 2 * rank * hidden  # lora_A of q and v: rank x hidden each
    assert first_layer_shortfall(mixed) - first_layer_shortfall(fp32) == projections + adapters
    assert autocast_cache_bytes(mixed, "model.norm") == adapters
