"""Qwen3, Phi-3, Gemma, GPT-NeoX, Falcon and OLMo under the autograd convention vs measure().

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
Falcon's own eager attention is exact in every layout, its forward peak
inside the attention at the softmax included. OLMo 1 (weightless upcasting
layer norms, ``clip_qkv``'s in-place clamps) is exact.
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

_UNTUNED = {"vocab_size": 40, "hidden_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}
"""A third Falcon size no formula was tuned on: four heads of 10, a 40-token vocabulary."""


def _falcon(size: dict, layout: str) -> dict:
    """A Falcon configuration of ``size`` (its MLP is 4 h wide) in ``layout``."""
    values = {k: v for k, v in size.items() if k != "intermediate_size"}
    return {**values, **LAYOUTS[layout], "max_position_embeddings": 256}


@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_is_estimated_under_the_autograd_convention(layout):
    """Falcon's attention is no longer refused: the step has a peak, in bytes."""
    network = from_config({**_FALCON, **LAYOUTS[layout]}, batch=2, sequence=6, loss=True)
    result = mt.training_memory(network, optimizer="sgd", precision="fp32",
                                convention=AutogradConvention())
    assert result.peak > result.components["parameters"]



@pytest.mark.parametrize(("precision", "optimizer", "size", "batch", "sequence"), [
    ("bf16", "adamw", TINY, 2, 9),
    ("autocast", "adam", TINY, 2, 6),
    ("fp32", "sgd", _UNTUNED, 3, 13),
], ids=["bf16", "autocast", "fp32-untuned"])
@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_sdpa_steps_are_exact(layout, precision, optimizer, size, batch, sequence):
    """Falcon's SDPA call (transformers' default): every component and the peak, 0 bytes off.

    The multi-query layouts run PyTorch's math path (fp32 copies, per-head keys and
    values), the 40B layout the CPU flash kernel with each layer's cast of the mask.
    """
    predicted, measured = decoder_step(_falcon(size, layout), precision, optimizer,
                                       batch, sequence, attention="sdpa")
    got, want = compared(predicted, measured)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "autocast"])
@pytest.mark.parametrize("layout", ["falcon", "falcon-new"])
def test_falcon_long_sdpa_steps_are_exact(layout, precision):
    """160 positions under SDPA: the multi-query peak inside the math path's backward."""
    predicted, measured = decoder_step(_falcon(TINY, layout), precision, "sgd", 2, 160,
                                       attention="sdpa")
    got, want = compared(predicted, measured)
    assert got == want
    if layout == "falcon":
        assert predicted.peak_moment.startswith("backward layers.1.attention.attention")

@pytest.mark.slow
@pytest.mark.parametrize(("precision", "optimizer"),
                         [("fp32", "sgd"), ("bf16", "adam"), ("autocast", "adamw")])
@pytest.mark.parametrize("size", [TINY, _BIGGER, _UNTUNED], ids=["tiny", "bigger", "untuned"])
@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_short_steps_are_exact(layout, size, precision, optimizer):
    """A 6-token step of each Falcon layout, at three sizes: every component and the peak."""
    got, want, _ = _compare(_falcon(size, layout), precision, optimizer, 2, 6)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize(("batch", "sequence"), [(3, 40), (2, 50)])
def test_sequential_falcon_with_a_small_vocabulary_is_exact_at_the_loss(batch, sequence):
    """Autocast, a 40-token vocabulary: every component and the peak, exactly.

    At B=3, S=40 the prediction was 1,944 B high: its "forward loss" moment
    held the final norm's output, which ``FalconForCausalLM.forward`` holds
    only while it computes a loss itself (given ``labels=``); here the loss
    is applied to the returned logits (``loss_on_logits``). At B=2, S=50 the
    step peaks in the last layer's forward, where ``FalconDecoderLayer``
    (sequential) holds ``attention_output`` and ``mlp_layernorm_out`` until it
    returns.
    """
    predicted, measured = decoder_step(_falcon(_UNTUNED, "falcon-sequential"), "autocast",
                                       "sgd", batch, sequence)
    got, want = compared(predicted, measured)
    assert got == want
    for phase in ("forward", "backward"):
        ours, theirs = _phase_peaks(predicted, measured, phase)
        assert ours == theirs, phase


def test_a_loss_on_the_logits_frees_the_final_norm_output_first():
    """The loss's forward moment holds B x S x h fp32 less when the caller applies the loss.

    Inside ``*ForCausalLM.forward`` (``labels=``) its ``hidden_states`` holds
    the final norm's output while the loss runs; a loss on the returned
    logits runs after that forward returned (under autocast the head saves
    a bf16 cast, not the fp32 output).
    """
    from memtheory.conventions.autograd import autocast_precision
    from memtheory.models.decoder_stack import loss_on_logits

    batch, sequence = 3, 40
    network = from_config(_falcon(_UNTUNED, "falcon-sequential"), batch=batch,
                          sequence=sequence, loss=True)
    moments = {}
    for where, net in (("model", network), ("caller", loss_on_logits(network))):
        result = mt.training_memory(net, optimizer="sgd", precision=autocast_precision(),
                                    convention=AutogradConvention())
        moments[where] = result.timeline
    norm_output = batch * sequence * _UNTUNED["hidden_size"] * 4
    assert moments["model"]["forward loss"] - moments["caller"]["forward loss"] == norm_output
    assert moments["model"]["forward lm_head"] == moments["caller"]["forward lm_head"]


def test_lora_keeps_the_model_calls_starting_at_an_adapted_layer_s_first_row():
    """apply_lora keeps every call; one that starts at an adapted projection starts at its base.

    Without them a LoRA network's positions and mask, which no layer reads,
    were never freed, and no call held what the model keeps in variables.
    """
    from memtheory.finetuning import LoRA
    from memtheory.finetuning.lora import apply_lora

    network = from_config({**_FALCON, **LAYOUTS["falcon-sequential"]}, batch=2, sequence=6,
                          loss=True)
    tuned = apply_lora(network, LoRA(4, 8, targets=("query_key_value",)))
    assert len(tuned.calls) == len(network.calls)
    for (start, end), (was, ended) in zip(tuned.calls, network.calls, strict=True):
        assert end == ended
        assert start == (f"{was}.base_layer" if was.endswith("query_key_value") else was)


def _phase_peaks(predicted, measured, phase: str) -> tuple[int, int]:
    """Return the predicted and measured most bytes alive during ``phase``."""
    ours = max(int(v) for label, v in predicted.timeline.items() if label.startswith(phase))
    theirs = max(v for step, _, v in measured.timeline if step.startswith(phase))
    return ours, theirs


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast"])
@pytest.mark.parametrize("size", [TINY, _UNTUNED], ids=["tiny", "untuned"])
@pytest.mark.parametrize("layout", _FALCON_LAYOUTS)
def test_falcon_long_steps_are_exact_forward_and_backward(layout, size, precision):
    """At 160 positions: every component, the peak, and the most alive in each pass, exactly.

    In fp32 and bf16 the step peaks inside the last attention's forward, at
    its softmax (the causal mask, the scores, their sum with the mask and the
    probabilities alive); under autocast in its softmax's backward. Both
    passes' highest moments are checked, whichever sets the peak.
    """
    predicted, measured = decoder_step(_falcon(size, layout), precision, "sgd", 2, 160)
    got, want = compared(predicted, measured)
    assert got == want
    for phase in ("forward", "backward"):
        ours, theirs = _phase_peaks(predicted, measured, phase)
        assert ours == theirs, phase
    if precision != "autocast":
        assert measured.peak_moment == "forward: aten._softmax.default"
        assert predicted.peak_moment.endswith("attention.attention (softmax)")
        assert predicted.peak_moment.startswith("forward")


def test_falcon_forward_peaks_at_the_softmax_by_the_tensors_not_yet_made():
    """The last attention's softmax moment exceeds its own by the scores, less what p @ v makes.

    At the softmax the scores and their sum with the mask are alive, freed
    before ``p @ v`` makes the values' per-head copy and the output (bf16,
    no autocast: the probabilities are not cast).
    """
    batch, sequence = 2, 160
    network = from_config({**_FALCON, **LAYOUTS["falcon"], "max_position_embeddings": 256},
                          batch=batch, sequence=sequence, loss=True)
    result = mt.training_memory(network, optimizer="sgd", precision="bf16",
                                convention=AutogradConvention())
    heads, width = _FALCON["num_attention_heads"], _FALCON["hidden_size"]
    scores = batch * heads * sequence * sequence * 2
    per_head = batch * sequence * width * 2  # the values' copy, and the output
    name = "forward layers.1.attention.attention"
    assert result.timeline[f"{name} (softmax)"] - result.timeline[name] == 2 * scores - 2 * per_head
    assert result.peak_moment == f"{name} (softmax)"


def test_falcon_model_call_holds_its_mask_and_positions_until_the_final_norm():
    """The causal mask (B, 1, S, S) and the int64 positions are freed once the model returns."""
    batch, sequence = 2, 12
    network = from_config({**_FALCON, **LAYOUTS["falcon"]}, batch=batch, sequence=sequence,
                          loss=True)
    result = mt.training_memory(network, optimizer="sgd", precision="fp32",
                                convention=AutogradConvention())
    held = batch * sequence * sequence * 4 + sequence * 8
    timeline = result.timeline
    lm_head_made = batch * sequence * _FALCON["vocab_size"] * 4  # the logits
    drop = timeline["forward final_layer_norm"] - timeline["forward lm_head"]
    assert drop == held - lm_head_made


def test_falcon_sdpa_mask_is_one_bool_square_expanded_over_the_batch():
    """With SDPA, FalconModel's materialised mask is one S x S bool storage: CausalMask(boolean)."""
    from transformers.masking_utils import create_causal_mask

    from memtheory.layers.causal_mask import CausalMask

    batch, sequence = 3, 7
    config = transformers.AutoConfig.for_model(
        "falcon", attn_implementation="sdpa",
        **{k: v for k, v in _FALCON.items() if k != "model_type"})
    mask = create_causal_mask(
        config=config, inputs_embeds=torch.zeros(batch, sequence, _FALCON["hidden_size"]),
        attention_mask=None, cache=None, position_ids=torch.arange(sequence)[None],
        allow_is_causal_skip=False)
    spec = CausalMask(boolean=True).autograd(((batch, sequence),))
    assert mask.dtype == torch.bool
    assert tuple(mask.shape) == CausalMask().output_shape((batch, sequence))
    assert mask.untyped_storage().nbytes() == spec.output_elements * spec.compute_dtype.bytes


@pytest.mark.parametrize(
    ("config", "layer"),
    [
        # V3's latent attention is modelled (test_deepseek_autograd.py): its routed experts
        # (layer 1 on, first_k_dense_replace 1) are the reason
        ({**TINY, "model_type": "deepseek_v3", "kv_lora_rank": 8, "q_lora_rank": None,
          "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6,
          "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "first_k_dense_replace": 1},
         "MixtureOfExperts 'model.layers.1.mlp'"),
    ],
    ids=["deepseek_v3"],
)
def test_newer_families_are_refused_naming_the_layer(config, layer):
    """DeepSeek: refused, naming a layer.

    OLMo 1 is exact now (test_olmo_* below), and so are Qwen3-MoE's experts
    (tests/pytorch/test_moe_autograd.py).
    """
    network = from_config(config, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError, match=f"does not model {layer}"):
        mt.training_memory(network, optimizer="sgd", precision="fp32",
                           convention=AutogradConvention())


_OLMO = {**TINY, "model_type": "olmo", "num_key_value_heads": 2}


@pytest.mark.parametrize("clip", [None, 8.0], ids=["unclipped", "clip_qkv"])
@pytest.mark.parametrize(("precision", "optimizer"),
                         [("fp32", "sgd"), ("bf16", "adam"), ("autocast", "adamw")])
def test_olmo_training_step_is_exact(precision, optimizer, clip):
    """OLMo 1 (weightless upcasting layer norms, clip_qkv set or not): every component, the peak.

    In bf16 its layer norm keeps an fp32 copy of its input and fp32
    statistics; with ``clip_qkv`` each in-place clamp keeps a copy of the
    projection it overwrites.
    """
    got, want, _ = _compare({**_OLMO, "clip_qkv": clip}, precision, optimizer, 2, 6)
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "autocast"])
def test_olmo_peak_inside_attention_backward_is_exact(precision):
    """At 64 positions an OLMo step with clip_qkv peaks in the softmax's backward, exactly."""
    got, want, moment = _compare({**_OLMO, "clip_qkv": 8.0}, precision, "adamw", 2, 64)
    assert got == want
    assert moment.endswith("self_attn.attention (softmax)")


def test_olmo_clip_qkv_keeps_a_copy_of_each_projection():
    """clip_qkv adds, per layer, one saved copy of the query, key and value projections."""
    batch, sequence = 2, 6
    saved = {}
    for clip in (None, 8.0):
        network = from_config({**_OLMO, "clip_qkv": clip}, batch=batch, sequence=sequence,
                              loss=True)
        result = mt.training_memory(network, optimizer="sgd", precision="bf16",
                                    convention=AutogradConvention())
        saved[clip] = result.components["saved_activations"]
    width = TINY["hidden_size"] // TINY["num_attention_heads"]
    features = (TINY["num_attention_heads"] + 2 * _OLMO["num_key_value_heads"]) * width
    copies = TINY["num_hidden_layers"] * batch * sequence * features * 2  # bf16
    assert saved[8.0] - saved[None] == copies
