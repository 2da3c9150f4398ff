"""``trl-dpo``: no Setup but answered by ``estimate``, and :func:`dpo_step_memory`'s composition.

The measurement against the real ``DPOTrainer`` is ``tests/pytorch/test_dpo_recipe.py``;
these tests need neither torch nor TRL.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory import training_memory
from memtheory.cli import main
from memtheory.dtypes import dtype
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.finetuning import (
    DPO_UNSUPPORTED,
    TRL_TOKEN_CHUNK,
    TRL_VOCAB_CHUNK,
    LoRA,
    dpo_head_bytes,
    dpo_step_memory,
    fused_head_backward_bytes,
)
from memtheory.finetuning.trl_head import RECOMPUTE_NOT_COUNTED
from memtheory.models import from_config
from memtheory.recipes import RECIPES, REFUSED_RECIPES, Setup

TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "tie_word_embeddings": False}
"""The recipes' tiny Llama (memtheory.torch.recipe_steps.TINY_LLAMA), written out: no torch."""


@pytest.mark.parametrize("name", ["trl-dpo", "DPO", "TRL DPO", "dpo_trainer"])
def test_setup_recipe_says_trl_dpo_is_answered_by_estimate(name):
    """Setup.recipe("trl-dpo") is no Setup: it names the fused head and what answers it."""
    with pytest.raises(UnsupportedError, match="fused, chunked LM head") as error:
        Setup.recipe(name)
    assert "dpo_step_memory" in str(error.value)
    assert "memtheory estimate MODEL --recipe trl-dpo" in str(error.value)
    assert str(error.value) == DPO_UNSUPPORTED


def test_refused_recipes_are_not_recipes():
    """No refused name is also a recipe of the catalog; trl-dpo is answered, not refused."""
    assert not set(REFUSED_RECIPES) & set(RECIPES)
    assert "trl-dpo" not in REFUSED_RECIPES


def test_estimate_answers_recipe_trl_dpo(capsys, tmp_path, monkeypatch):
    """`memtheory estimate CONFIG --recipe trl-dpo --json` answers with dpo_step_memory's peak."""
    monkeypatch.setenv("MEMTHEORY_CACHE", "off")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "max_position_embeddings": 64}))
    assert main(["estimate", str(path), "--recipe", "trl-dpo", "--seq", "7", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    step = dpo_step_memory(TINY, pairs=1, sequence=7, precision="autocast-bf16")
    assert answer["peak_bytes"] == step.peak
    assert answer["settings"]["trl_parts"] == dict(step.parts)


def test_precomputed_reference_log_probs_replace_the_reference_by_the_batchs_log_probs():
    """precompute_ref_log_probs: no reference weights; 2 x pairs fp32 more in the batch, always."""
    fp32 = dtype("fp32").bytes
    for lora in (None, LoRA(4, 8)):
        live = dpo_step_memory(TINY, pairs=3, sequence=9, lora=lora)
        early = dpo_step_memory(TINY, pairs=3, sequence=9, lora=lora,
                                precompute_ref_log_probs=True)
        assert early.parts["reference weights"] == 0
        carried = 2 * 3 * fp32
        assert (early.parts["batch and head beyond the recipe"]
                == live.parts["batch and head beyond the recipe"] + carried)
        assert (early.parts["after the head"] - live.parts["after the head"]
                == carried - live.parts["reference weights"])
        assert "precompute_ref_log_probs=True" in early.assumed[0]


@given(tokens=st.integers(1, 10_000), hidden=st.integers(1, 512),
       vocabulary=st.integers(1, 70_000))
def test_a_frozen_head_saves_its_weights_gradient(tokens, hidden, vocabulary):
    """Training the head adds exactly its fp32 weight gradient to the backward."""
    trained = fused_head_backward_bytes(tokens, hidden, vocabulary)
    frozen = fused_head_backward_bytes(tokens, hidden, vocabulary, weight_gradient=False)
    assert trained - frozen == dtype("fp32").bytes * vocabulary * hidden


@given(tokens=st.integers(1, 3 * TRL_TOKEN_CHUNK), hidden=st.integers(1, 64))
def test_the_tile_buffer_is_the_full_width_whatever_the_vocabulary(tokens, hidden):
    """Below one tile's width the buffer stays TRL_VOCAB_CHUNK wide; rows stop at a chunk."""
    small = fused_head_backward_bytes(tokens, hidden, 2)
    rows = min(tokens, TRL_TOKEN_CHUNK)
    fp32, flag = dtype("fp32").bytes, dtype("bool").bytes
    assert small == fp32 * (tokens * hidden + 2 * hidden + rows * TRL_VOCAB_CHUNK) + (
        rows * 2 * (7 * fp32 + flag))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_bad_sizes_are_refused_clearly(bad):
    """Sizes that are not positive whole numbers get a memtheory error naming them."""
    with pytest.raises(InvalidArgumentError, match="tokens must be a positive whole number"):
        fused_head_backward_bytes(bad, 32, 96)
    with pytest.raises(InvalidArgumentError, match="pairs must be a whole number"):
        dpo_step_memory(TINY, pairs=bad, sequence=7)


def test_a_sequence_needs_two_tokens():
    """One token leaves no next token to score."""
    with pytest.raises(InvalidArgumentError, match="sequence must be a whole number of at least 2"):
        dpo_step_memory(TINY, pairs=2, sequence=1)


def test_full_fine_tuning_adds_a_second_copy_of_the_weights():
    """The reference weights are the policy's bytes; the base is the Trainer's step over 2B rows."""
    step = dpo_step_memory(TINY, pairs=3, sequence=9, checkpointing=False)
    network = from_config(TINY, batch=6, sequence=9, loss=True, flash=True)
    trainer = training_memory(network, setup=Setup.recipe("hf-trainer", device="cpu"),
                              precision="fp32")
    weights = int(trainer.components["parameters"])
    assert step.parts["reference weights"] == step.parts["policy weights"] == weights
    assert step.parts["up to the final norm"] == int(trainer.timeline["forward model.norm"])
    assert step.parts["fused head backward"] == fused_head_backward_bytes(6 * 8, 32, 96)
    assert step.parts["batch and head beyond the recipe"] == dpo_head_bytes(6, 9, 32)
    head = ("up to the final norm", "reference weights", "batch and head beyond the recipe",
            "fused head backward")
    assert step.peak == max(sum(step.parts[k] for k in head), step.parts["after the head"])


def test_checkpointing_lowers_what_lies_beneath_the_head():
    """TRL's default checkpointing: the same head, less beneath it, by the layers' saving."""
    off = dpo_step_memory(TINY, pairs=3, sequence=9, checkpointing=False)
    on = dpo_step_memory(TINY, pairs=3, sequence=9)
    saving = on.parts["checkpointing keeps less, per layer"]
    assert saving > 0
    assert off.peak - on.peak == TINY["num_hidden_layers"] * saving - dtype("int64").bytes * 9
    assert on.parts["fused head backward"] == off.parts["fused head backward"]


def test_lora_keeps_no_reference_copy_and_no_head_gradient():
    """Under peft the reference is the model with adapters off: no copy, a frozen head."""
    lora = dpo_step_memory(TINY, pairs=3, sequence=9, lora=LoRA(4, 8))
    full = dpo_step_memory(TINY, pairs=3, sequence=9)
    assert lora.parts["reference weights"] == 0
    assert full.parts["fused head backward"] - lora.parts["fused head backward"] == (
        dtype("fp32").bytes * TINY["vocab_size"] * TINY["hidden_size"])
    assert lora.peak < full.peak
    assert any("checkpointing on, TRL's default" in line for line in lora.assumed)


@given(sequences=st.integers(1, 64), sequence=st.integers(2, 4096), hidden=st.integers(1, 8192))
def test_the_head_replaces_the_norms_output_by_its_shifted_copy(sequences, sequence, hidden):
    """One position per row fewer of hidden states; per scored token: targets, log Z, etc."""
    fp32, index = dtype("fp32").bytes, dtype("int64").bytes
    tokens = sequences * (sequence - 1)
    assert dpo_head_bytes(sequences, sequence, hidden) == (
        index * sequences * sequence - fp32 * sequences * hidden
        + tokens * (index + 3 * fp32) + 2 * fp32)


def test_the_vocabulary_tile_is_capped():
    """A vocabulary wider than TRL_VOCAB_CHUNK is folded a tile at a time."""
    wide = fused_head_backward_bytes(10, 8, 2 * TRL_VOCAB_CHUNK, weight_gradient=False)
    fp32, flag = dtype("fp32").bytes, dtype("bool").bytes
    assert wide == fp32 * (10 * 8 + 10 * TRL_VOCAB_CHUNK) + 10 * TRL_VOCAB_CHUNK * (
        7 * fp32 + flag)


def test_only_fp32_weights_are_modelled():
    """A precision other than fp32 weights (bf16 autocast or not) is refused, naming the choices."""
    with pytest.raises(InvalidArgumentError, match="'fp32', 'autocast-bf16'"):
        dpo_step_memory(TINY, pairs=2, sequence=7, precision="bf16")


@pytest.mark.parametrize("checkpointing", [True, False])
def test_adapters_under_autocast_are_answered_and_say_what_they_leave_out(checkpointing):
    """LoRA under bf16 autocast: no reference copy, the head's backward frozen; the gap is said."""
    step = dpo_step_memory(TINY, pairs=2, sequence=7, lora=LoRA(4, 8),
                           precision="autocast-bf16", checkpointing=checkpointing)
    assert step.parts["reference weights"] == 0
    assert step.parts["fused head backward"] == fused_head_backward_bytes(
        4 * 6, 32, 96, weight_gradient=False, autocast=True)
    assert RECOMPUTE_NOT_COUNTED not in step.assumed  # modelled: attention adapters
    every = dpo_step_memory(TINY, pairs=2, sequence=7, lora=LoRA(4, 8, targets="all-linear"),
                                 precision="autocast-bf16", checkpointing=checkpointing)
    assert (RECOMPUTE_NOT_COUNTED in every.assumed) is checkpointing  # MLP adapters: not modelled


def test_autocast_halves_the_tile_buffer():
    """bf16=True: the head's tile buffer is bf16; the weights and the base step are the recipe's."""
    fp32 = dpo_step_memory(TINY, pairs=2, sequence=7)
    bf16 = dpo_step_memory(TINY, pairs=2, sequence=7, precision="autocast-bf16")
    assert bf16.parts["fused head backward"] == fused_head_backward_bytes(24, 32, 96,
                                                                          autocast=True)
    assert bf16.parts["reference weights"] == fp32.parts["reference weights"]
    assert bf16.peak < fp32.peak


def test_a_preset_name_or_config_file_is_read_as_from_config_reads_it(tmp_path):
    """dpo_step_memory takes what from_config takes: a preset's name, a config.json, a mapping."""
    import json

    from memtheory.errors import MemtheoryError
    from memtheory.finetuning import dpo_step_memory
    from memtheory.models.hf_config import load_config

    config = load_config("llama-3.2-1b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    answers = {dpo_step_memory(source, pairs=1, sequence=64).peak
               for source in ("llama-3.2-1b", path, config)}
    assert len(answers) == 1
    with pytest.raises(MemtheoryError, match="llama-3.2-1"):
        dpo_step_memory("llama-3.2-1", pairs=1, sequence=64)
