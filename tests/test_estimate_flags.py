"""memtheory estimate: flags with no effect are refused, sizes checked, scripts get a verdict.

Issue 25 ("flags that mislead") and issue 27's CLI and ``estimate()`` items:
each question here was answered with a number before; now it is refused
with the reason (exit status 2), or answered as asked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from memtheory.cli import main
from memtheory.errors import InvalidArgumentError, MemtheoryError, UnsupportedError
from memtheory.estimate import estimate
from memtheory.estimate.accumulation import accumulation_steps
from memtheory.gpus import GPUS, gpu
from memtheory.models import PRESETS, from_config
from memtheory.models.hf_config import LAYER_LIMIT


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["llama-3-8b", "--seq", "100000"], "at most 8192 positions"),
        (["gpt2", "--limit", "24"], "no unit"),
        (["gpt2", "--lora-alpha", "16"], "--lora-alpha applies to LoRA"),
        (["gpt2", "--lora-targets", "c_attn"], "--lora-targets applies to LoRA"),
        (["resnet50", "--seq", "128"], "--seq applies to language models"),
        (["gpt2", "--image", "128"], "--image applies to vision models"),
        (["gpt2", "--zero", "3"], "there is one"),
        (["gpt2", "--offload", "optimizer"], "with one GPU"),
        (["gpt2", "--gpu", "a100"], "A100-40GB and A100-80GB"),
        (["gpt2", "--gpu", "V100"], "V100-16GB and V100-32GB"),
        (["gpt2", "--tp", "7"], "does not divide GPT-2 small's 12 attention heads"),
        (["gpt2", "--pp", "100"], "more pipeline stages than GPT-2 small has blocks (12)"),
        (["gpt2", "--pp", str(10**9)], "more pipeline stages"),
        (["gpt2", "--precision", "bool"], "floating-point"),
        (["gpt2", "--precision", "int8"], "floating-point"),
        (["gpt2", "--precision", "fp8_e4m3"], "FP8 training is not modelled yet"),
        (["llama-3-8b", "--precision", "fp8_e5m2"], "not modelled yet"),
        (["gpt2", "--check"], "--check"),
        (["gpt2", "--batch", "4", "--global-batch", "30"], "not a multiple"),
        (["gpt2", "--batch", "4", "--grad-accum", "2", "--global-batch", "32"], "disagree"),
    ],
)
def test_misleading_flags_are_refused_with_the_reason(capsys, argv, message):
    """Each flag with no effect, or a size the model cannot take, exits 2 saying why."""
    assert main(["estimate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_preset_position_limit_comes_from_its_config():
    """--seq is checked against the preset's max_position_embeddings, read from PRESETS."""
    limit = PRESETS["llama-3-8b"].config["max_position_embeddings"]
    assert estimate("llama-3-8b", sequence=limit).settings["sequence"] == limit
    with pytest.raises(InvalidArgumentError, match=f"at most {limit} positions"):
        estimate("llama-3-8b", sequence=limit + 1)


def test_check_gives_the_verdict_an_exit_status():
    """--check: 0 when the step fits the card, 1 when it does not (GPT-2 on a T4; Llama 8B not)."""
    assert main(["estimate", "gpt2", "--gpu", "T4", "--check"]) == 0
    assert estimate("llama-3-8b", gpu="T4").fits is False
    assert main(["estimate", "llama-3-8b", "--gpu", "T4", "--check"]) == 1
    assert main(["estimate", "llama-3-8b", "--gpu", "T4"]) == 0


def test_amd_and_intel_cards_are_known_with_their_stated_memory():
    """MI300X, MI250 and Gaudi 3: the vendors' stated capacity, read as GiB as for NVIDIA."""
    assert gpu("MI300X").memory == 192 * 2**30 and "amd.com" in gpu("MI300X").source
    assert gpu("AMD Instinct MI250").memory == 128 * 2**30
    assert gpu("gaudi3").memory == 128 * 2**30 and "intel.com" in gpu("Gaudi 3").source
    assert {"MI210", "MI250X", "MI325X", "Gaudi 2"} <= set(GPUS)


def test_gradient_accumulation_raises_every_moment_before_the_step_by_the_gradients():
    """--grad-accum 4: the one-micro-batch step's peak, with the gradients alive throughout.

    Under the Trainer's loop (the default recipe for GPT-2) every moment also holds the
    three other micro-batches' data, which ``get_batch_samples`` fetches before the first.
    """
    one = estimate("gpt2", batch=2, sequence=128)
    four = estimate("gpt2", batch=2, sequence=128, grad_accum=4)
    components = one.memory.components
    assert "loop_scalars" in components  # the Trainer's loop
    gradients = components["gradients"]
    prefetched = 3 * (components["input"] + components.get("targets", 0))
    after = ("optimizer", "gradient clipping")
    before = {m: v for m, v in one.memory.timeline.items() if not m.startswith(after)}
    later = {m: v for m, v in one.memory.timeline.items() if m.startswith(after)}
    assert four.peak == max(max(before.values()) + gradients + prefetched,
                            max(later.values()) + prefetched)
    assert four.settings["global_batch"] == 2 * 4
    again = estimate("gpt2", batch=2, sequence=128, global_batch=8)
    assert again.settings["grad_accum"] == 4 and again.peak == four.peak


def test_accumulation_steps_follow_from_the_global_batch():
    """The global batch = micro-batch x accumulation x data-parallel GPUs."""
    assert accumulation_steps(batch=4, data=2, grad_accum=None, global_batch=64) == 64 // (4 * 2)
    assert accumulation_steps(batch=4, data=2, grad_accum=None, global_batch=None) == 1
    with pytest.raises(InvalidArgumentError, match="positive whole number"):
        accumulation_steps(batch=4, data=1, grad_accum=0, global_batch=None)


def test_lora_on_a_tied_head_is_exact_and_a_fallback_says_why_in_words():
    """Llama-3.2-1B and Gemma tie their heads: LoRA is followed exactly; GPT-2's says why not.

    The tie was measured with real peft under the Trainer
    (tests/pytorch/test_peft_tied.py); a fallback's reason names the layer in
    words, not the convention's internals.
    """
    for model in ("llama-3.2-1b", "gemma-2b"):
        assert estimate(model, sequence=128, lora=8).convention_name == "autograd"
    fallback = estimate("gpt2", sequence=128, lora=8)
    assert fallback.convention_name == "breakdown"
    assert "fused attention layer ('h.0.attn'" in fallback.why
    assert "add that layer" not in fallback.why and "autograd_checked" not in fallback.why


@pytest.mark.parametrize(
    "options",
    [
        {"tensor": None},
        {"pipeline": None},
        {"limit": math.nan},
        {"limit": math.inf},
        {"gpus": np.array([2])},
        {"optimizer": 3},
        {"optimizer": "x" * 10**6},
        {"limit": [24]},
        {"grad_accum": 0},
        {"global_batch": 2.5},
    ],
    ids=lambda o: f"{next(iter(o))}={str(next(iter(o.values())))[:12]}",
)
def test_estimate_refuses_bad_python_arguments_with_memtheory_errors(options):
    """Wrong types and values from Python get a memtheory error that quotes a short prefix."""
    with pytest.raises(MemtheoryError) as raised:
        estimate("gpt2", sequence=64, **options)
    assert len(str(raised.value)) < 2000


def test_from_config_refuses_depths_past_the_layer_limit():
    """num_hidden_layers past LAYER_LIMIT is refused before anything is built."""
    config = {"model_type": "llama", "vocab_size": 100, "hidden_size": 32,
              "intermediate_size": 64, "num_attention_heads": 4}
    assert from_config({**config, "num_hidden_layers": 2}).parameter_count > 0
    with pytest.raises(InvalidArgumentError, match=f"at most {LAYER_LIMIT} layers"):
        from_config({**config, "num_hidden_layers": 10**7})


@pytest.mark.parametrize(
    ("family", "nearest"),
    [("mllama", "llama"), ("mllama", "llava")],
)
def test_unmodelled_families_are_refused_with_the_reason_and_the_nearest(family, nearest):
    """Llama-3.2-Vision: refused, naming what to use instead (Gemma 3 with vision is built)."""
    with pytest.raises(UnsupportedError, match=nearest):
        from_config({"model_type": family, "hidden_size": 64})


def test_serving_finds_the_most_sequences_by_bisection_on_a_tiny_model():
    """A tiny OLMo 2 on a T4: the largest concurrency whose decode step fits, found quickly.

    The count was searched one by one down from the cache-only bound, which
    never ended for a model of a few thousand parameters; the answer must be
    the largest count that fits (and the next one must not).
    """
    from memtheory.estimate.serving import serving_memory
    from memtheory.symbols import B

    config = {"model_type": "olmo2", "vocab_size": 96, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 256}
    answer = serving_memory(config, context=64, gpu="T4")
    assert answer.memory is not None
    budget = answer.utilization * answer.memory - answer.reserve

    def held(count: int):
        return (answer.weights + count * answer.kv_per_sequence
                + max(answer.prefill, answer.decode.subs(B, count)))

    most = answer.max_concurrency
    assert most > 0 and held(most) <= budget < held(most + 1)


def test_deepseek_trains_and_serves_its_latent_cache():
    """DeepSeek V3: a training step, and serving with the latent cache; no tensor-parallel MLA."""
    from memtheory.estimate.serving import serving_memory

    config = {"model_type": "deepseek_v3", "vocab_size": 96, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
              "kv_lora_rank": 8, "q_lora_rank": 12, "qk_rope_head_dim": 4,
              "qk_nope_head_dim": 4, "v_head_dim": 6, "first_k_dense_replace": 1}
    answer = estimate(config, batch=2, sequence=32)
    assert answer.settings["parameters"] == from_config(config).parameter_count
    served = serving_memory(config, context=64, gpu="T4")
    # per sequence: layers x 64 positions x (kv_lora_rank + qk_rope_head_dim) x 2 bytes (fp16)
    assert served.kv_per_sequence == 2 * 64 * (8 + 4) * 2
    assert served.max_concurrency > 0
    assert any("estimate" in note and "latent" in note for note in served.assumptions)
    with pytest.raises(UnsupportedError, match="latent attention.*--tp 1"):
        serving_memory(config, context=64, gpu="T4", tensor=2)


@pytest.mark.parametrize(
    "argv",
    [["gpt2", "--tp", "3"], ["gpt2", "--pp", "5"], ["gpt2", "--gpus", "3", "--zero", "3"],
     ["gpt2", "--tp", "2", "--sequence-parallel"], ["resnet50", "--pp", "3"]],
)
def test_splits_that_keep_whole_heads_and_blocks_are_answered(argv):
    """Tensor sizes dividing the heads, stages up to the blocks, ZeRO over 3 GPUs: answered."""
    assert main(["estimate", *argv]) == 0
