"""The issue's two Llama-3-8B questions, ``--gpus auto``, the exact-or-fallback choice, ``--json``.

Numbers are derived here from the library's functions called directly
(``finetune_memory``, ``parallel_memory``, ``usable_memory``) or from the
published configuration of Llama-3-8B (Meta's ``config.json``: hidden 4096,
32 layers, 32 heads, 8 key/value heads, FFN 14336, vocabulary 128256;
8,030,261,248 parameters on the model card).
"""

from __future__ import annotations

import json

import pytest
import sympy as sp

from memtheory.cli import main
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.estimate import estimate
from memtheory.estimate.devices import fewest_gpus
from memtheory.estimate.step import step_memory
from memtheory.finetuning import LoRA, finetune_memory
from memtheory.gpus import usable_memory
from memtheory.models import from_config, gpt2
from memtheory.recipes import Setup
from memtheory.symbols import B, S
from memtheory.techniques import parallel_memory
from memtheory.techniques.checkpointing import checkpoint_units
from memtheory.units import format_bytes

LLAMA_3_8B = 8_030_261_248  # Meta's model card
HIDDEN, LAYERS, KV_WIDTH = 4096, 32, 8 * 128  # config.json: 8 key/value heads of 128


def test_lora_on_a_24_gb_card_at_sequence_4096():
    """Question 1: exact convention, the adapters' count from the config, the verdict and limits."""
    answer = estimate("llama-3-8b", sequence=4096, lora=16, flash=True, gpu="RTX 4090",
                      setup="hf-trainer")
    assert answer.convention_name == "autograd" and "exact" in answer.why
    # LoRA on q_proj (4096 -> 4096) and v_proj (4096 -> 1024): r (n_in + n_out) each, per layer
    assert answer.settings["trainable"] == LAYERS * 16 * ((HIDDEN + HIDDEN) + (HIDDEN + KV_WIDTH))
    assert answer.settings["parameters"] == LLAMA_3_8B
    # the frozen base in bf16: every parameter but none of the adapters, 2 bytes each
    assert answer.memory["frozen_parameters"] == 2 * LLAMA_3_8B
    usable = usable_memory("RTX 4090").usable
    symbolic = finetune_memory(
        from_config("llama-3-8b", batch=B, sequence=S, flash=True, loss=True),
        lora=LoRA(16), precision="bf16", convention=Setup.recipe("hf-trainer").convention(),
    )
    assert answer.peak == symbolic.evaluate(B=1, S=4096).peak
    assert answer.fits is bool(answer.peak <= usable)
    s = answer.max_sequence
    assert symbolic.evaluate(B=1, S=s).peak <= usable < symbolic.evaluate(B=1, S=s + 1).peak


def test_lora_with_checkpointing_says_why_it_is_not_exact():
    """--checkpointing falls back to the breakdown convention's checkpointing model, and says so."""
    answer = estimate("llama-3-8b", sequence=4096, lora=16, flash=True, checkpointing=True,
                      gpu="RTX 4090")
    assert answer.convention_name == "breakdown"
    assert "checkpointing" in answer.why and "chapter 13" in answer.report()
    plain = estimate("llama-3-8b", sequence=4096, lora=16, flash=True, convention="breakdown")
    assert answer.peak < plain.peak


def test_decoders_split_into_checkpoint_units_despite_the_rotary_table():
    """Every decoder layer reads the rotary table; it is no jump: two units per layer at least."""
    config = {"model_type": "llama", "vocab_size": 50, "hidden_size": 32,
              "intermediate_size": 40, "num_hidden_layers": 3, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64}
    ends = {unit.layers[-1] for unit in checkpoint_units(from_config(config, loss=True))}
    for layer in range(3):
        assert {f"model.layers.{layer}.add_1", f"model.layers.{layer}.add_2"} <= ends


@pytest.mark.slow
def test_how_many_gpus_for_full_fine_tuning_with_zero_3():
    """Question 2: the fewest powers of two that fit; half as many do not (parallel_memory)."""
    setup = Setup.recipe("pytorch-amp")  # torch.autocast over FSDP's fp32 weights
    answer = estimate("llama-3-8b", sequence=4096, flash=True, gpus="auto", zero=3,
                      gpu="H100-80GB", setup=setup)
    n = answer.settings["gpus"]
    assert answer.search is not None and answer.search.gpus == n and answer.fits
    assert n & (n - 1) == 0  # a power of two
    network = from_config("llama-3-8b", batch=B, sequence=S, flash=True, loss=True)
    memory = finetune_memory(network, precision="autocast-bf16", convention=setup.convention())
    usable = usable_memory("H100-80GB").usable

    def peak(devices: int) -> sp.Expr:
        split = parallel_memory(memory, data=devices, zero=3, network=network)
        return split.evaluate(B=1, S=4096).peak

    assert peak(n) <= usable < peak(n // 2)
    # ZeRO-3 shards the fp32 weights: 4 bytes x 8,030,261,248 / n per device
    assert answer.memory["parameters"] == sp.Rational(4 * LLAMA_3_8B, n)
    assert "fewest GPUs (powers of two, ZeRO-3" in answer.report()


def test_any_count_is_the_least_whole_number():
    """counts='any': N fits and N - 1 does not; never more than the power-of-two answer."""
    memory = finetune_memory(gpt2("xl", batch=1, sequence=256, loss=True),
                             precision="autocast-bf16")
    usable = 12 * 2**30
    any_n = fewest_gpus(memory, usable=usable, zero=3, counts="any").gpus
    two_n = fewest_gpus(memory, usable=usable, zero=3).gpus
    assert any_n is not None and two_n is not None and any_n <= two_n

    def peak(devices: int) -> sp.Expr:
        return parallel_memory(memory, data=devices, zero=3).peak

    assert peak(any_n) <= usable < peak(any_n - 1)


def test_plain_data_parallel_never_shrinks():
    """ZeRO-0 keeps a whole replica per device: no count fits when one does not."""
    memory = finetune_memory(gpt2("xl", batch=1, sequence=256, loss=True),
                             precision="autocast-bf16")
    found = fewest_gpus(memory, usable=2**30, zero=0)
    assert found.gpus is None and [n for n, _ in found.tried] == [1]


def test_cli_answers_both_questions_and_json_is_complete(capsys):
    """main([...]) prints both answers; every number of the text is in --json."""
    argv = ["estimate", "llama-3-8b", "--seq", "4096", "--flash", "--gpus", "auto", "--zero", "3",
            "--gpu", "H100-80GB"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    n = data["settings"]["gpus"]
    assert f"fewest GPUs (powers of two, ZeRO-3, batch 1 per GPU, sequence 4096): {n} " in text
    for name, value in data["components"].items():
        assert format_bytes(value, "GiB").split()[0] in text, name
        assert f"{100 * data['component_shares'][name]:.1f}%" in text, name
    for key in ("total_bytes", "peak_bytes"):
        assert format_bytes(data[key], "GiB") in text and format_bytes(data[key], "GB") in text
    budget = data["budget"]
    for key in ("memory_bytes", "reserve_bytes", "usable_bytes"):
        assert format_bytes(budget[key], "GiB") in text
    assert f"({100 * data['usable_share']:.0f}% of usable)" in text
    assert f"largest batch at sequence 4096: {data['max_batch']}" in text
    assert f"largest sequence at batch 1: {data['max_sequence']}" in text
    assert data["formula_at_peak"] in text and data["convention_why"] in text
    for line in data["assumptions"] + data["notes"]:
        assert line in text
    for tried in data["gpu_search"]["tried"]:
        if tried["gpus"] <= 2 * n:
            assert f"{tried['gpus']}: {format_bytes(tried['peak_bytes'], 'GiB')}" in text
    assert f"{data['settings']['parameters']:,} parameters" in text
    assert main(["estimate", "llama-3-8b", "--lora", "16", "--seq", "4096", "--flash",
                 "--gpu", "RTX 4090"]) == 0
    assert "convention: autograd: exact" in capsys.readouterr().out


def test_defaults_are_a_recipe_and_are_stated():
    """The default is the recipe a user most likely runs, named first, every choice said.

    Llama-3-8B's checkpoint is bf16, so the Trainer trains it in bf16 (no
    autocast copies); GPT-2's is fp32, so ``bf16=True`` runs autocast over it.
    """
    llama = estimate("llama-3-8b", batch=1, sequence=128)
    assert llama.settings["recipe"] == "hf-trainer" and llama.settings["precision"] == "bf16"
    assert llama.assumptions[0].startswith("recipe hf-trainer")
    said = "\n".join(llama.assumptions)
    assert "fused implementation" in said and "attention: SDPA" in said
    assert "keeps only the loss" in said
    full = estimate("gpt2", batch=1, sequence=128)
    assert full.settings["precision"] == "autocast-bf16" and full.settings["optimizer"] == "adamw"
    lora = estimate("llama-3-8b", batch=1, sequence=128, lora=8)
    assert lora.settings["recipe"] == "peft-lora"
    assert any("adapters" in line and "fp32" in line for line in lora.assumptions)
    vision = estimate("resnet50", batch=8)
    assert vision.settings["recipe"] == "pytorch-amp"
    assert not any(line.startswith("attention") for line in vision.assumptions)
    asked = estimate("gpt2", batch=1, sequence=128, precision="fp32", flash=False)
    assert asked.settings["recipe"] == "hf-trainer (precision=fp32, attention=eager)"
    assert any(line.startswith("attention: eager") for line in asked.assumptions)


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"qlora": True}, "QLoRA"),
        ({"optimizer": "paged-adamw-8bit"}, "8-bit"),
        ({"checkpointing": True}, "checkpointing"),
        ({"lora": 8}, "fused attention"),  # adapters inside the builder's one attention layer
    ],
)
def test_fallback_names_its_reason(options, reason):
    """Convention auto falls back to breakdown with the reason; autograd refuses with it."""
    options = dict(options)
    network = gpt2("small", batch=1, sequence=64, loss=True)
    lora = LoRA(options.pop("lora")) if "lora" in options else None
    if options.get("qlora"):
        lora = LoRA(8)
    step = step_memory(network, lora=lora, **options)
    assert step.convention == "breakdown" and reason in step.why
    with pytest.raises(UnsupportedError, match=reason):
        step_memory(network, lora=lora, convention="autograd", **options)


def test_bad_gpu_counts_are_memtheory_errors():
    """--gpus auto needs a card; an unknown convention is refused."""
    with pytest.raises(InvalidArgumentError, match="--gpu"):
        estimate("gpt2", gpus="auto", zero=3)
    with pytest.raises(InvalidArgumentError, match="convention"):
        step_memory(gpt2("small", batch=1, sequence=8), convention="exact")
