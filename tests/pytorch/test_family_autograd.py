"""Qwen3, Phi-3 and Gemma 2 under the autograd convention against measure() on transformers.

The harness of ``test_llama_autograd.py``: transformers 5.24 builds the
family's ``...ForCausalLM`` from a tiny configuration with
``attn_implementation="eager"``; ``memtheory.torch.measure`` runs its training
step on CPU with ``use_cache=False`` (the loss is Hugging Face's causal-LM
loss); memtheory predicts the step from ``from_config(config, loss=True)``.

Qwen3 adds only per-head RMS norms of the queries and keys
(:class:`~memtheory.layers.head_norm.HeadRMSNorm`) to the Llama layers: its
step must be exact, every component and the peak. Phi-3's and GPT-NeoX's
sliced fused projections are exact too, with every torch.optim
implementation: the network carries the order the modules register their
parameters, which the for-loop step's temporaries follow. Gemma 1, 2 and 3
are exact (the scaled embedding, ``(1 + w)`` norms, Gemma 2's soft-capping).
Falcon's own eager attention is exact in short steps but refused: its
forward peaks at the softmax with the causal mask alive, not modelled.
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

_BIGGER = {"vocab_size": 64, "hidden_size": 48, "intermediate_size": 56, "num_hidden_layers": 3,
           "num_attention_heads": 6}
"""A second size: other widths, depth and head count (each Falcon MLP is 4 h wide)."""


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


GEMMA = {"gemma": {"model_type": "gemma", "head_dim": 8, "num_key_value_heads": 2},
         "gemma2": {"model_type": "gemma2", "head_dim": 8, "num_key_value_heads": 2},
         "gemma3": {"model_type": "gemma3_text", "head_dim": 8, "num_key_value_heads": 2}}
"""Gemma 1, 2 and 3 (text): the scaled embedding, (1 + w) norms, gelu_tanh MLPs; Gemma 2's four
norms per layer and soft-capping; Gemma 3's (1 + w) query/key norms per head."""


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "optimizer"),
                         [("fp32", "sgd"), ("bf16", "adam"), ("autocast", "adamw")])
@pytest.mark.parametrize("size", [TINY, _BIGGER], ids=["tiny", "bigger"])
@pytest.mark.parametrize("family", list(GEMMA))
def test_gemma_training_step_is_exact(family, size, precision, optimizer):
    """Gemma 1, 2 and 3 (eager attention, as Gemma 2 forces): every component and the peak."""
    got, want, _ = _compare({**size, **GEMMA[family]}, precision, optimizer, 2, 6)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "autocast"])
def test_gemma2_peak_inside_soft_capped_attention_backward_is_exact(precision):
    """At 160 positions Gemma 2's step peaks in its soft-capped attention's backward, exactly."""
    config = {**TINY, **GEMMA["gemma2"], "vocab_size": 16, "max_position_embeddings": 256}
    got, want, moment = _compare(config, precision, "sgd", 2, 160)
    assert moment.startswith("backward model.layers.1.self_attn.attention")
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast"])
def test_gemma3_past_its_sliding_pattern_is_exact(precision):
    """Seven layers: a full-attention layer after the sliding ones brings its own rotary tables.

    transformers 5.24's Gemma3RotaryEmbedding keeps an ``inv_freq`` pair per layer type and the
    model computes cos and sin once per type present, as OLMo 3 does; the tests above stop at
    three layers, all sliding.
    """
    config = {**TINY, **GEMMA["gemma3"], "num_hidden_layers": 7, "sliding_window": 4}
    got, want, _ = _compare(config, precision, "sgd", 2, 6)
    assert got == want


def test_gemma_embedding_scale_is_a_buffer_the_backward_keeps():
    """Gemma's sqrt(h) is the embed_scale buffer (transformers 5.24): one scalar of the weights."""
    buffers = {}
    for family in ("gemma", "llama"):
        network = from_config({**TINY, **GEMMA["gemma"], "model_type": family}, batch=2,
                              sequence=6, loss=True)
        for precision in ("fp32", "bf16"):
            memory = mt.training_memory(network, optimizer="sgd", precision=precision,
                                        convention=AutogradConvention())
            buffers[family, precision] = memory.components["buffers"]
    for precision, scalar in (("fp32", 4), ("bf16", 2)):  # torch.tensor(h ** 0.5) in its dtype
        assert buffers["gemma", precision] - buffers["llama", precision] == scalar


_FALCON = {"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4}
LAYOUTS = {
    "phi3": {"model_type": "phi3", "num_key_value_heads": 2, "pad_token_id": 0},
    "gpt_neox": {"model_type": "gpt_neox"},
    "gpt_neox-sequential": {"model_type": "gpt_neox", "use_parallel_residual": False},
    "falcon": {"model_type": "falcon"},
    "falcon-new": {"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 2},
    "falcon-sequential": {"model_type": "falcon", "parallel_attn": False},
}
"""Each layout the builders have for the families with fused projections."""


_RENAMED = (("gpt_neox.", ""), ("transformer.h.", "layers."),
            ("transformer.word_embeddings", "embed_in"), ("transformer.ln_f", "final_layer_norm"),
            ("self_attention.", "attention."), ("ln_attn", "input_layernorm"),
            ("ln_mlp", "post_attention_layernorm"))
"""GPT-NeoX's and Falcon's module names, as the parallel decoder names its layers."""


def _hf_names(name: str) -> str:
    """Return a transformers parameter name as the network names it."""
    for theirs, ours in _RENAMED:
        name = name.replace(theirs, ours)
    return name


@pytest.mark.parametrize("size", [TINY, _BIGGER], ids=["tiny", "bigger"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_registered_order_is_module_parameters_order(layout, size):
    """The network's registered tensors are transformers' named_parameters(), name for name."""
    from memtheory.conventions.autograd.storage_plan import registered_tensors

    config = {**size, **LAYOUTS[layout]}
    values = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(config["model_type"], **values))
    theirs = [(_hf_names(n), p.numel())
              for n, p in model.named_parameters()]
    ours = [(name.removesuffix(".weight").removesuffix(".bias"), int(count))
            for name, count in registered_tensors(from_config(config)).items()]
    assert [count for _, count in ours] == [count for _, count in theirs]
    assert [n for n, _ in ours] == [n.removesuffix(".weight").removesuffix(".bias")
                                   for n, _ in theirs]


STEPS = [
    # (optimizer, implementation, precision)
    ("sgd", "for-loop", "fp32"),
    ("adam", "for-loop", "bf16"),
    ("adam", "for-loop", "fp32"),
    ("adamw", "foreach", "bf16"),
    ("adamw", "fused", "fp32"),
    ("adam", "fused", "bf16"),
    ("adamw", "fused", "autocast"),  # the hf-trainer recipe's step, eager attention
    ("adam", "for-loop", "autocast"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("optimizer", "implementation", "precision"), STEPS)
@pytest.mark.parametrize("size", [TINY, _BIGGER], ids=["tiny", "bigger"])
@pytest.mark.parametrize("layout", ["phi3", "gpt_neox", "gpt_neox-sequential"])
def test_fused_projection_steps_are_exact(layout, size, optimizer, implementation, precision):
    """Phi-3 and GPT-NeoX (sliced fused projections): every component and the peak, exactly.

    Each torch.optim implementation: the for-loop Adam step's temporaries
    follow Phi-3's registration order (``o_proj`` before ``qkv_proj``, the
    norms after the MLP), foreach and fused steps do not depend on it.
    """
    config = {**size, **LAYOUTS[layout]}
    predicted, measured = decoder_step(config, precision, optimizer, 2, 6, implementation)
    assert measured.implementation == implementation
    got, want = compared(predicted, measured)
    assert got == want


def test_phi3_for_loop_adam_needs_the_registration_order():
    """Without Phi-3's registration order the for-loop Adam step's temporaries differ.

    The test above could not fail on the order if both orders gave the same
    temporaries: in the order the layers run they are lower.
    """
    from memtheory.conventions.autograd.kernels.torch_2_13.optimizers import step_temporaries
    from memtheory.conventions.autograd.storage_plan import parameter_tensors, registered_tensors
    from memtheory.optimizers import optimizer

    network = from_config({**TINY, **LAYOUTS["phi3"]})
    adam = optimizer("adam")
    run = list(parameter_tensors(network).values())
    registered = list(registered_tensors(network).values())
    assert sorted(run, key=str) == sorted(registered, key=str)
    assert step_temporaries(adam, "for-loop", registered) > step_temporaries(
        adam, "for-loop", run)


_FALCON_LAYOUTS = ["falcon", "falcon-new", "falcon-sequential"]


@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_is_refused_naming_its_attention(layout):
    """Falcon's own eager attention is refused, with the reason."""
    network = from_config({**_FALCON, **LAYOUTS[layout]}, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError, match="does not model FalconAttention .*causal mask"):
        mt.training_memory(network, optimizer="sgd", precision="fp32",
                           convention=AutogradConvention())


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "optimizer"),
                         [("fp32", "sgd"), ("bf16", "adam"), ("autocast", "adamw")])
@pytest.mark.parametrize("size", [TINY, _BIGGER], ids=["tiny", "bigger"])
@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_short_steps_are_exact(layout, size, precision, optimizer, monkeypatch):
    """Falcon's attention let through: a 6-token step of each layout, every component exact.

    The peak too, but for the 40B layout (``new_decoder_architecture``), whose
    keys and values broadcast to every head before the rotary embedding are
    not modelled (the refusal says so).
    """
    from memtheory.layers.falcon_attention import FalconAttention

    monkeypatch.setattr(FalconAttention, "autograd_checked", True)
    values = {k: v for k, v in size.items() if k != "intermediate_size"}  # Falcon's MLP is 4 h
    got, want, _ = _compare({**values, **LAYOUTS[layout]}, precision, optimizer, 2, 6)
    if layout == "falcon-new":
        got.pop("peak")
        want.pop("peak")
    assert got == want


def _phase_peaks(predicted, measured, phase: str) -> tuple[int, int]:
    """Return the predicted and measured most bytes alive during ``phase``."""
    ours = max(int(v) for label, v in predicted.timeline.items() if label.startswith(phase))
    theirs = max(v for step, _, v in measured.timeline if step.startswith(phase))
    return ours, theirs


@pytest.mark.slow
@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_long_step_gaps_are_the_refusals(layout, monkeypatch):
    """At 160 bf16 positions: the multi-query backward is exact; the gaps are those cited.

    The forward peaks inside the attention (the causal mask, not modelled)
    and the 40B layout's backward is not modelled: both gaps are pinned,
    measured, in the refusal and the class docstring.
    """
    from memtheory.layers.falcon_attention import FalconAttention

    monkeypatch.setattr(FalconAttention, "autograd_checked", True)
    config = {**_FALCON, **LAYOUTS[layout], "max_position_embeddings": 256}
    predicted, measured = decoder_step(config, "bf16", "sgd", 2, 160)
    got, want = compared(predicted, measured)
    assert {name for name in got if got[name] != want[name]} == {"peak"}
    assert measured.peak_moment.startswith("forward")
    ours, theirs = _phase_peaks(predicted, measured, "backward")
    if layout == "falcon-new":
        assert f"peaks {theirs - ours:,} bytes above" in (FalconAttention.__doc__ or "")
    else:
        assert ours == theirs
    if layout == "falcon":
        cited = f"peaks {measured.peak - int(predicted.peak):,} bytes above"
        assert cited in (FalconAttention.autograd_refusal or "")


_MOE = {**TINY, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize(
    ("config", "layer"),
    [
        ({**TINY, "model_type": "olmo"}, "UpcastLayerNorm 'model.layers.0.input_layernorm'"),
        ({**_MOE, "model_type": "qwen3_moe"}, "MixtureOfExperts 'model.layers.0.mlp'"),
        # V3's latent attention is modelled (test_deepseek_autograd.py): its routed experts
        # (layer 1 on, first_k_dense_replace 1) are the reason
        ({**TINY, "model_type": "deepseek_v3", "kv_lora_rank": 8, "q_lora_rank": None,
          "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6,
          "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "first_k_dense_replace": 1},
         "MixtureOfExperts 'model.layers.1.mlp'"),
    ],
    ids=["olmo", "qwen3_moe", "deepseek_v3"],
)
def test_newer_families_are_refused_naming_the_layer(config, layer):
    """OLMo, Qwen3-MoE, DeepSeek: refused, naming a layer (OLMo 2 and 3: test_olmo_autograd)."""
    network = from_config(config, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError, match=f"does not model {layer}"):
        mt.training_memory(network, optimizer="sgd", precision="fp32",
                           convention=AutogradConvention())


def test_olmo_layout_is_exact_at_fp32_and_the_upcast_norms_are_the_bf16_gap(monkeypatch):
    """OLMo, its layer norms let through: exact at fp32; at bf16 only saved tensors differ.

    The layout (weightless layer norms, fp32 rotary tables) is right: an fp32
    step is exact, every component. In bf16 the upcasting layer norms keep
    fp32 copies the plain layer norm does not, which is why they stay
    refused: the gap is in the saved activations (and the peak) only, and
    memtheory predicts less.
    """
    from memtheory.layers.upcast_norm import UpcastLayerNorm

    monkeypatch.setattr(UpcastLayerNorm, "autograd_checked", True)
    config = {**TINY, "model_type": "olmo", "num_key_value_heads": 2}
    got, want, _ = _compare(config, "fp32", "sgd", 2, 6)
    assert got == want
    got, want, _ = _compare(config, "bf16", "adam", 2, 6)
    differ = {name for name in got if got[name] != want[name]}
    assert differ <= {"saved_activations", "peak"}
    assert got["saved_activations"] < want["saved_activations"]
