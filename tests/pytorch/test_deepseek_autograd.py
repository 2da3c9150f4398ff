"""DeepSeek V3's multi-head latent attention under the autograd convention against measure().

The harness of ``test_family_autograd.py`` (``hf_decoders.decoder_step``):
transformers 5.24 builds ``DeepseekV3ForCausalLM`` from a tiny configuration
with eager attention and ``first_k_dense_replace = num_hidden_layers`` (every
layer dense: no routed experts), ``memtheory.torch.measure`` runs one training
step on CPU, memtheory predicts it from ``from_config(config, loss=True)``.
Every component and the peak must agree to the byte, at the size of
``test_latent_cache.py`` and at a second one nobody tuned for (the single
``q_proj``, other widths, three layers). A model with routed experts is still
refused, naming the experts; V2's complex rotary is refused, naming it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import Logits, compared, decoder_step, torch_optimizer  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.torch import measure  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

# The tiny DeepSeek of tests/pytorch/test_latent_cache.py, every layer dense. transformers
# reads num_key_value_heads (default 128) for repeat_kv, so it is the heads here.
V3 = {"model_type": "deepseek_v3", "vocab_size": 96, "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4,
      "num_experts_per_tok": 2, "n_shared_experts": 1, "kv_lora_rank": 8, "q_lora_rank": 12,
      "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6,
      "first_k_dense_replace": 2, "max_position_embeddings": 512}
BIGGER = {**V3, "vocab_size": 64, "hidden_size": 48, "intermediate_size": 56,
          "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 6,
          "kv_lora_rank": 12, "q_lora_rank": None, "qk_rope_head_dim": 6,
          "qk_nope_head_dim": 8, "v_head_dim": 10, "first_k_dense_replace": 3}
"""A second size: one q_proj (q_lora_rank null), other widths and head count, three layers."""

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
"""DeepSeek-V3's rope_scaling (its config.json: yarn, beta_fast 32, beta_slow 1, mscale 1.0,
mscale_all_dim 1.0), its factor the tiny model's 512 / 128 positions: the same inv_freq
buffers and cos/sin tables as plain rotary, other values."""


def _compare(config: dict, precision: str, batch: int, sequence: int, optimizer: str = "adamw"):
    """Return (predicted, measured) components and peaks, and the measured peak's moment."""
    predicted, measured = decoder_step(config, precision, optimizer, batch, sequence)
    got, want = compared(predicted, measured)
    return got, want, predicted.peak_moment


@pytest.mark.slow
def test_tiny_v3_training_step_is_exact():
    """Tiny V3, fp32, AdamW: every component and the peak, byte for byte."""
    got, want, _ = _compare(V3, "fp32", 2, 6)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize(("config", "precision", "batch", "sequence"), [
    (V3, "bf16", 2, 6),
    (V3, "autocast", 2, 6),
    (BIGGER, "fp32", 3, 7),  # peaks in AdamW's step: needs transformers' parameter order
    (BIGGER, "bf16", 3, 40),
    ({**BIGGER, "attention_bias": True, "tie_word_embeddings": True}, "fp32", 2, 9),
    ({**V3, "rope_interleave": False}, "bf16", 2, 64),  # rotate_half, not the pairs
    ({**V3, "rope_scaling": YARN}, "bf16", 2, 64),
], ids=["v3-bf16", "v3-autocast", "bigger-fp32", "bigger-bf16", "bigger-bias-tied",
        "v3-rotate-half", "v3-yarn"])
def test_training_step_is_exact(config, precision, batch, sequence):
    """Both sizes, fp32, bf16 and autocast, AdamW: every component and the peak, exactly."""
    got, want, _ = _compare(config, precision, batch, sequence)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize(("config", "precision", "batch", "sequence"), [
    ({**V3, "vocab_size": 16}, "fp32", 2, 160),
    ({**V3, "vocab_size": 16}, "bf16", 2, 160),
    ({**BIGGER, "vocab_size": 16}, "bf16", 3, 128),
], ids=["v3-fp32", "v3-bf16", "bigger-bf16"])
def test_peak_inside_latent_attention_backward_is_exact(config, precision, batch, sequence):
    """Long sequences, a small vocabulary: the step peaks in the attention's softmax backward."""
    got, want, moment = _compare(config, precision, batch, sequence)
    last = config["num_hidden_layers"] - 1
    assert moment.startswith(f"backward model.layers.{last}.self_attn.attention")
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_one_sequence_keeps_kv_b_proj_output_and_gaps_as_llama(precision):
    """Batch 1: matmul views the values (bmm keeps kv_b_proj's output); the rest as Llama's.

    Every component and the peak agree but the saved activations, which differ from the
    measurement by exactly what Llama's step at batch 1 does (outside the attention).
    """
    config = {**V3, "vocab_size": 16}
    got, want, _ = _compare(config, precision, 1, 64)
    llama = {k: config[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                    "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "max_position_embeddings")}
    llama_got, llama_want, _ = _compare({**llama, "model_type": "llama"}, precision, 1, 64)
    gap = {k: got[k] - want[k] for k in got}
    assert gap == {k: llama_got[k] - llama_want[k] for k in llama_got}
    assert [k for k in gap if gap[k]] in ([], ["saved_activations"])


def _sdpa_step(config: dict, precision: str, batch: int, sequence: int):
    """One AdamW step with ``attn_implementation="sdpa"``: (predicted, measured) and moment.

    On the CPU, SDPA takes values narrower than the queries only on its math
    path: memtheory's ``from_config(..., flash=True, device="cpu")``.
    """
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(config["model_type"], attn_implementation="sdpa",
                                           **values)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = Logits(transformers.AutoModelForCausalLM.from_config(hf)).to(dtype).train()
    ids = torch.randint(0, config["vocab_size"], (batch, sequence))
    measured = measure(module, ids, causal_lm_loss, torch_optimizer("adamw", module.parameters()),
                       target=ids.clone(), warmup_steps=1)
    network = from_config(config, batch=batch, sequence=sequence, loss=True, flash=True,
                          device="cpu")
    predicted = mt.training_memory(network, optimizer="adamw", precision=precision,
                                   convention=AutogradConvention(measured.implementation))
    got, want = compared(predicted, measured)
    return got, want, predicted.peak_moment


@pytest.mark.slow
@pytest.mark.parametrize(("config", "precision", "batch", "sequence"), [
    (V3, "fp32", 2, 6),
    ({**V3, "vocab_size": 16}, "bf16", 2, 48),
    ({**BIGGER, "vocab_size": 16}, "fp32", 3, 40),
    ({**BIGGER, "vocab_size": 16}, "bf16", 2, 96),
    (BIGGER, "bf16", 3, 7),
], ids=["v3-fp32", "v3-bf16", "bigger-fp32", "bigger-bf16", "bigger-bf16-short"])
def test_sdpa_math_path_step_is_exact(config, precision, batch, sequence):
    """SDPA on the CPU (its math path: fp32 Q, K, V copies, S x S kept): every component, peak."""
    got, want, _ = _sdpa_step(config, precision, batch, sequence)
    assert got == want


def test_sdpa_on_the_cpu_keeps_what_cuda_flash_does_not():
    """flash=True: on the CPU the math path keeps B x H x S x S fp32; CUDA's assumption does not."""
    network = {device: from_config(V3, batch=2, sequence=64, loss=True, flash=True,
                                   device=device) for device in ("cpu", "cuda")}
    saved = {device: mt.training_memory(net, optimizer="adamw", precision="bf16",
                                        convention=AutogradConvention())
             .components["saved_activations"] for device, net in network.items()}
    heads, layers = V3["num_attention_heads"], V3["num_hidden_layers"]
    assert saved["cpu"] - saved["cuda"] >= layers * 2 * heads * 64 * 64 * 4


def _refusal(config: dict) -> str:
    network = from_config(config, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError) as refused:
        mt.training_memory(network, optimizer="adamw", convention=AutogradConvention())
    return str(refused.value)


def test_routed_experts_are_the_named_reason():
    """With routed experts in layer 1 the refusal names the experts, not the latent attention.

    DeepSeek's experts are built without a router memtheory models (its sigmoid,
    group-limited routing), so the experts' layer refuses where Mixtral's answers.
    """
    message = _refusal({**V3, "first_k_dense_replace": 1})
    assert "model.layers.1.mlp" in message
    assert "MixtureOfExperts" in message
    assert "self_attn" not in message


def test_v2_complex_rotary_is_the_named_reason():
    """DeepSeek V2's attention (complex rotary) is refused, naming the rotary, before its MLP."""
    message = _refusal({**V3, "model_type": "deepseek_v2"})
    assert "model.layers.0.self_attn.attention" in message
    assert "complex" in message
