"""Qwen3, Phi-3 and Gemma 2 under the autograd convention against measure() on transformers.

The harness of ``test_llama_autograd.py``: transformers 5.24 builds the
family's ``...ForCausalLM`` from a tiny configuration with
``attn_implementation="eager"``; ``memtheory.torch.measure`` runs its training
step on CPU with ``use_cache=False`` (the loss is Hugging Face's causal-LM
loss); memtheory predicts the step from ``from_config(config, loss=True)``.

Qwen3 adds only per-head RMS norms of the queries and keys
(:class:`~memtheory.layers.head_norm.HeadRMSNorm`) to the Llama layers: its
step must be exact, every component and the peak. Phi-3's sliced fused
projections are exact with SGD, but a for-loop Adam step's temporaries follow
Phi-3's parameter registration order, which the convention does not: it
refuses Phi-3 (the gap is checked to be exactly that). Gemma 2's scaled
embedding, ``(1 + w)`` norms and soft-capping are not measured: refused too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import compared, decoder_step  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.models import from_config  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TINY = {"vocab_size": 50, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 128, "tie_word_embeddings": False}


def _compare(config: dict, precision: str, optimizer: str, batch: int, sequence: int):
    """Return (predicted, measured) components and peaks, and the predicted peak's moment."""
    predicted, measured = decoder_step(config, precision, optimizer, batch, sequence)
    got, want = compared(predicted, measured)
    return got, want, predicted.peak_moment


QWEN3 = {**TINY, "model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 8}

MATRIX = [
    # (extra keys, precision, optimizer, batch, sequence)
    ({}, "fp32", "sgd", 2, 6),
    ({}, "bf16", "adam", 2, 6),
    ({}, "autocast", "adamw", 2, 8),
    ({"head_dim": 16, "attention_bias": True, "num_key_value_heads": 1}, "fp32", "adam", 3, 5),
    ({"tie_word_embeddings": True}, "bf16", "sgd", 2, 6),
]


@pytest.mark.parametrize(("extra", "precision", "optimizer", "batch", "sequence"), MATRIX)
def test_qwen3_training_step_is_exact(extra, precision, optimizer, batch, sequence):
    """Qwen3 (q_norm, k_norm per head): every component and the peak, byte for byte."""
    got, want, _ = _compare({**QWEN3, **extra}, precision, optimizer, batch, sequence)
    assert got == want


def test_qwen3_peak_inside_attention_backward_is_exact():
    """At 64 positions the Qwen3 step peaks in the softmax's backward, exactly."""
    got, want, moment = _compare(QWEN3, "bf16", "sgd", 2, 64)
    assert moment.startswith("backward model.layers.1.self_attn.attention")
    assert got == want


@pytest.mark.parametrize(
    ("config", "layer"),
    [
        ({**TINY, "model_type": "phi3", "pad_token_id": 0}, "Slice 'model.layers.0.self_attn.q'"),
        ({**TINY, "model_type": "gemma2", "head_dim": 8}, "TensorScale 'model.embed_scale'"),
    ],
    ids=["phi3", "gemma2"],
)
def test_unmeasured_families_are_refused_naming_the_layer(config, layer):
    """Phi-3 and Gemma 2: the autograd convention refuses, naming the first unmeasured layer."""
    network = from_config(config, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError, match=f"does not model {layer}"):
        mt.training_memory(network, optimizer="sgd", precision="fp32",
                           convention=AutogradConvention())


def test_gemma2_soft_capping_and_norms_are_refused_too():
    """Past the embedding, Gemma 2's (1 + w) norm and capped attention are refused with reasons."""
    from memtheory.layers.rms_norm import GemmaRMSNorm
    from memtheory.layers.softcap import SoftCap, SoftCappedAttention

    network = from_config({**TINY, "model_type": "gemma2", "head_dim": 8}, batch=2, sequence=6)
    kinds = {type(row.layer) for row in network.rows if not row.layer.autograd_checked}
    assert {GemmaRMSNorm, SoftCap, SoftCappedAttention} <= kinds
    assert "soft-capping" in (SoftCappedAttention.autograd_refusal or "")


PHI3 = {**TINY, "model_type": "phi3", "num_key_value_heads": 2, "pad_token_id": 0}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_phi3_slices_are_exact_with_sgd(precision, monkeypatch):
    """Phi-3's sliced fused projections, let through: an SGD step is exact, every component."""
    from memtheory.layers.split import Slice

    monkeypatch.setattr(Slice, "autograd_checked", True)
    got, want, _ = _compare(PHI3, precision, "sgd", 2, 6)
    assert got == want


def test_phi3_adam_gap_is_the_parameter_order_of_the_for_loop_step(monkeypatch):
    """Why Slice stays refused, stated exactly: Adam's for-loop temporaries follow module order.

    torch.optim's for-loop Adam keeps the previous parameter's ``denom`` while
    it computes the next one's, so its peak depends on ``module.parameters()``
    order; Phi-3 registers ``o_proj`` before ``qkv_proj`` and the norms after
    the MLP. Everything else agrees; the step's peak is low by the difference
    between the temporaries in transformers' order and in the network's.
    """
    from memtheory.conventions.autograd.kernels.torch_2_13.optimizers import step_temporaries
    from memtheory.conventions.autograd.storage_plan import parameter_tensors
    from memtheory.layers.split import Slice
    from memtheory.optimizers import optimizer

    monkeypatch.setattr(Slice, "autograd_checked", True)
    got, want, _ = _compare(PHI3, "bf16", "adam", 2, 6)
    gap = want.pop("peak") - got.pop("peak")
    assert got == want
    values = {k: v for k, v in PHI3.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model("phi3", **values))
    bf16 = 2
    theirs = [p.numel() * bf16 for p in model.parameters()]
    ours = [int(n) * bf16 for n in parameter_tensors(from_config(PHI3)).values()]
    adam = optimizer("adam")
    assert gap == step_temporaries(adam, "for-loop", theirs) - step_temporaries(
        adam, "for-loop", ours) > 0


_FALCON = {"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4}
_MOE = {**TINY, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize(
    ("config", "layer"),
    [
        ({**TINY, "model_type": "olmo"}, "UpcastLayerNorm 'model.layers.0.input_layernorm'"),
        ({**TINY, "model_type": "olmo2"}, "UpcastRMSNorm 'model.layers.0.self_attn.q_norm'"),
        ({**TINY, "model_type": "gemma3_text", "head_dim": 8}, "TensorScale 'model.embed_scale'"),
        ({**TINY, "model_type": "gpt_neox"}, "Slice 'layers.0.attention.q'"),
        ({**_FALCON, "model_type": "falcon"}, "Slice 'layers.0.attention.q'"),
        ({**_MOE, "model_type": "qwen3_moe"}, "MixtureOfExperts 'model.layers.0.mlp'"),
        ({**TINY, "model_type": "deepseek_v3", "kv_lora_rank": 8, "q_lora_rank": None,
          "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6},
         "Slice 'model.layers.0.self_attn.kv_latent'"),
    ],
    ids=["olmo", "olmo2", "gemma3", "gpt_neox", "falcon", "qwen3_moe", "deepseek_v3"],
)
def test_newer_families_are_refused_naming_the_layer(config, layer):
    """OLMo, OLMo 2, Gemma 3, GPT-NeoX, Falcon, Qwen3-MoE, DeepSeek: refused, naming a layer."""
    network = from_config(config, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError, match=f"does not model {layer}"):
        mt.training_memory(network, optimizer="sgd", precision="fp32",
                           convention=AutogradConvention())


@pytest.mark.parametrize("family", ["olmo", "olmo2"])
def test_olmo_layout_is_exact_at_fp32_and_the_upcast_norms_are_the_bf16_gap(family, monkeypatch):
    """OLMo and OLMo 2, their norms let through: exact at fp32; at bf16 only saved tensors differ.

    The layout (weightless layer norms; OLMo 2's norms after each block and
    full-width query/key norms) is right: an fp32 step is exact, every
    component. In bf16 the upcasting norms keep fp32 copies the plain norms
    do not, which is why they stay refused: the gap is in the saved
    activations (and the peak) only, and memtheory predicts less.
    """
    from memtheory.layers.upcast_norm import UpcastLayerNorm, UpcastRMSNorm

    monkeypatch.setattr(UpcastLayerNorm, "autograd_checked", True)
    monkeypatch.setattr(UpcastRMSNorm, "autograd_checked", True)
    config = {**TINY, "model_type": family, "num_key_value_heads": 2}
    got, want, _ = _compare(config, "fp32", "sgd", 2, 6)
    assert got == want
    got, want, _ = _compare(config, "bf16", "adam", 2, 6)
    differ = {name for name in got if got[name] != want[name]}
    assert differ <= {"saved_activations", "peak"}
    assert got["saved_activations"] < want["saved_activations"]
