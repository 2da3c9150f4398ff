"""``trl-sft``: no Setup but answered by ``estimate``, and :func:`sft_step_memory`'s composition.

The measurement against the real ``SFTTrainer`` is ``tests/pytorch/test_trl_recipe.py``;
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
from memtheory.errors import InvalidArgumentError, MemtheoryError, UnsupportedError
from memtheory.finetuning import (
    SFT_UNSUPPORTED,
    LoRA,
    dpo_head_bytes,
    fused_head_backward_bytes,
    sft_head_bytes,
    sft_step_memory,
)
from memtheory.finetuning.trl_head import RECOMPUTE_NOT_COUNTED
from memtheory.models import from_config
from memtheory.recipes import RECIPES, REFUSED_RECIPES, TRL_RECIPES, Setup

TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "tie_word_embeddings": False}
"""The recipes' tiny Llama (memtheory.torch.recipe_steps.TINY_LLAMA), written out: no torch."""


@pytest.mark.parametrize("name", ["trl-sft", "SFT", "TRL SFT", "sft_trainer"])
def test_setup_recipe_says_trl_sft_is_answered_by_estimate(name):
    """Setup.recipe("trl-sft") is no Setup: it names the fused head and what answers it."""
    with pytest.raises(UnsupportedError, match="fused, chunked LM head") as error:
        Setup.recipe(name)
    assert "sft_step_memory" in str(error.value)
    assert "memtheory estimate MODEL --recipe trl-sft" in str(error.value)
    assert str(error.value) == SFT_UNSUPPORTED


def test_trl_sft_is_answered_not_refused_nor_a_recipe():
    """trl-sft is a TRL recipe: neither refused nor a Setup recipe of the catalog."""
    assert "trl-sft" in TRL_RECIPES
    assert "trl-sft" not in REFUSED_RECIPES
    assert "trl-sft" not in RECIPES


def test_estimate_answers_recipe_trl_sft(capsys, tmp_path, monkeypatch):
    """`memtheory estimate CONFIG --recipe trl-sft --json` answers with sft_step_memory's peak."""
    monkeypatch.setenv("MEMTHEORY_CACHE", "off")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "max_position_embeddings": 64}))
    assert main(["estimate", str(path), "--recipe", "trl-sft", "--batch", "2", "--seq", "7",
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    step = sft_step_memory(TINY, batch=2, sequence=7, precision="autocast-bf16")
    assert answer["peak_bytes"] == step.peak
    assert answer["settings"]["trl_parts"] == dict(step.parts)


def test_the_step_is_the_trainers_up_to_the_norm_then_the_fused_head():
    """The parts: the hf-trainer recipe at the norm, the SFT batch and head, the head's backward."""
    step = sft_step_memory(TINY, batch=3, sequence=9, checkpointing=False)
    network = from_config(TINY, batch=3, sequence=9, loss=True, flash=True)
    trainer = training_memory(network, setup=Setup.recipe("hf-trainer", device="cpu"),
                              precision="fp32")
    assert step.parts["up to the final norm"] == int(trainer.timeline["forward model.norm"])
    assert step.parts["weights"] == int(trainer.components["parameters"])
    assert step.parts["fused head backward"] == fused_head_backward_bytes(3 * 8, 32, 96)
    assert step.parts["batch and head beyond the recipe"] == sft_head_bytes(3, 9, 32)
    head = ("up to the final norm", "batch and head beyond the recipe", "fused head backward")
    assert step.peak == max(sum(step.parts[k] for k in head), step.parts["after the head"])
    assert step.parts["checkpointing keeps less, per layer"] == 0


def test_checkpointing_keeps_each_layers_output_only():
    """TRL's default: each decoder layer keeps its fp32 output, not its saved tensors."""
    off = sft_step_memory(TINY, batch=3, sequence=9, checkpointing=False)
    on = sft_step_memory(TINY, batch=3, sequence=9)
    network = from_config(TINY, batch=3, sequence=9, loss=True, flash=True)
    trainer = training_memory(network, setup=Setup.recipe("hf-trainer", device="cpu"),
                              precision="fp32")
    grown = int(trainer.timeline["forward model.layers.1.add_2"]
                - trainer.timeline["forward model.layers.0.add_2"])
    kept = dtype("fp32").bytes * 3 * 9 * TINY["hidden_size"]
    saving = grown - kept
    assert on.parts["checkpointing keeps less, per layer"] == saving > 0
    layers = TINY["num_hidden_layers"]
    position_ids = dtype("int64").bytes * 9  # (1, S), held by the checkpoints
    assert off.parts["up to the final norm"] - on.parts["up to the final norm"] == (
        layers * saving - position_ids)
    assert on.parts["after the head"] <= off.parts["after the head"]
    assert on.peak_moment == off.peak_moment == "fused head backward"
    assert "checkpointing on" in on.assumed[-1] and "off" in off.assumed[-1]


def test_a_large_models_peak_is_after_the_head():
    """Llama-3-8B at one short sequence: the gradients, not the head's tile, set the peak."""
    step = sft_step_memory("llama-3-8b", batch=1, sequence=256)
    assert step.peak_moment == "after the head"
    assert step.peak == step.parts["after the head"] > step.parts["weights"] * 2


def test_the_recipes_answer_is_not_the_sft_steps():
    """hf-trainer keeps a loss over the logits; the SFT step peaks in the fused head instead."""
    step = sft_step_memory(TINY, batch=2, sequence=7, checkpointing=False)
    network = from_config(TINY, batch=2, sequence=7, loss=True, flash=True)
    trainer = training_memory(network, setup=Setup.recipe("hf-trainer", device="cpu"),
                              precision="fp32")
    assert step.peak != int(trainer.peak)


@given(batch=st.integers(1, 64), sequence=st.integers(2, 4096), hidden=st.integers(1, 8192))
def test_sft_holds_one_scalar_more_than_dpo_over_the_same_rows(batch, sequence, hidden):
    """Per row and token the same terms as DPO's batch; the loss keeps one fp32 scalar more."""
    assert sft_head_bytes(batch, sequence, hidden) - dpo_head_bytes(batch, sequence, hidden) == (
        dtype("fp32").bytes)


@given(batch=st.integers(1, 64), sequence=st.integers(2, 4096), hidden=st.integers(1, 8192))
def test_the_head_replaces_the_norms_output_by_its_shifted_copy(batch, sequence, hidden):
    """The mask, one position per row fewer of hidden states, per-token terms, three scalars."""
    fp32, index = dtype("fp32").bytes, dtype("int64").bytes
    tokens = batch * (sequence - 1)
    assert sft_head_bytes(batch, sequence, hidden) == (
        index * batch * sequence - fp32 * batch * hidden
        + tokens * (index + 3 * fp32) + 3 * fp32)


@pytest.mark.slow
@given(batch=st.integers(1, 8), sequence=st.integers(2, 64))
def test_a_longer_batch_never_needs_less(batch, sequence):
    """One more sequence, or one more token per sequence, never lowers the peak."""
    step = sft_step_memory(TINY, batch=batch, sequence=sequence).peak
    assert sft_step_memory(TINY, batch=batch + 1, sequence=sequence).peak > step
    assert sft_step_memory(TINY, batch=batch, sequence=sequence + 1).peak > step


def test_lora_freezes_the_head():
    """Under peft the head's weight has no gradient: the backward is smaller by it."""
    lora = sft_step_memory(TINY, batch=3, sequence=9, lora=LoRA(4, 8))
    full = sft_step_memory(TINY, batch=3, sequence=9)
    assert full.parts["fused head backward"] - lora.parts["fused head backward"] == (
        dtype("fp32").bytes * TINY["vocab_size"] * TINY["hidden_size"])
    assert lora.peak < full.peak
    assert any("checkpointing on, TRL's default" in line for line in lora.assumed)


def test_autocast_halves_the_tile_buffer():
    """bf16=True: the head's backward is the autocast one; the weights are the same."""
    fp32 = sft_step_memory(TINY, batch=2, sequence=7)
    bf16 = sft_step_memory(TINY, batch=2, sequence=7, precision="autocast-bf16")
    assert bf16.parts["fused head backward"] == fused_head_backward_bytes(12, 32, 96,
                                                                          autocast=True)
    assert bf16.parts["weights"] == fp32.parts["weights"]
    assert bf16.peak < fp32.peak


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_bad_sizes_are_refused_clearly(bad):
    """A batch that is not a positive whole number gets a memtheory error naming it."""
    with pytest.raises(InvalidArgumentError, match="batch must be a whole number"):
        sft_step_memory(TINY, batch=bad, sequence=7)


def test_a_sequence_needs_two_tokens():
    """One token leaves no next token to score."""
    with pytest.raises(InvalidArgumentError, match="sequence must be a whole number of at least 2"):
        sft_step_memory(TINY, batch=2, sequence=1)


def test_other_precisions_are_refused():
    """Only fp32 weights are modelled (bf16 off or on), named with the choices."""
    with pytest.raises(InvalidArgumentError, match="'fp32', 'autocast-bf16'"):
        sft_step_memory(TINY, batch=2, sequence=7, precision="bf16")


@pytest.mark.parametrize("checkpointing", [True, False])
def test_adapters_under_autocast_are_answered_and_say_what_they_leave_out(checkpointing):
    """LoRA under bf16 autocast: the head's backward is autocast's, frozen; the gap is said."""
    step = sft_step_memory(TINY, batch=2, sequence=7, lora=LoRA(4, 8),
                           precision="autocast-bf16", checkpointing=checkpointing)
    assert step.parts["fused head backward"] == fused_head_backward_bytes(
        12, 32, 96, weight_gradient=False, autocast=True)
    assert RECOMPUTE_NOT_COUNTED not in step.assumed  # modelled: attention adapters
    every = sft_step_memory(TINY, batch=2, sequence=7, lora=LoRA(4, 8, targets="all-linear"),
                                 precision="autocast-bf16", checkpointing=checkpointing)
    assert (RECOMPUTE_NOT_COUNTED in every.assumed) is checkpointing  # MLP adapters: not modelled


def test_a_preset_name_is_read_as_from_config_reads_it():
    """sft_step_memory takes a preset's name as well as a mapping; a wrong name is named."""
    from memtheory.models.hf_config import load_config

    assert sft_step_memory("llama-3.2-1b", batch=1, sequence=64).peak == sft_step_memory(
        load_config("llama-3.2-1b"), batch=1, sequence=64).peak
    with pytest.raises(MemtheoryError, match="llama-3.2-1"):
        sft_step_memory("llama-3.2-1", batch=1, sequence=64)


def test_a_model_without_a_llama_style_final_norm_is_refused():
    """GPT-2 (final norm ln_f) is not the measured layout: a memtheory error, not a KeyError."""
    with pytest.raises(UnsupportedError, match="model_type 'gpt2'.*Llama-style"):
        sft_step_memory("gpt2", batch=1, sequence=16)
