"""The newer families' ``config.json`` keys: OLMo, Gemma 3, Qwen-MoE, OLMoE, GPT-NeoX, Falcon.

:func:`decoder_fields` reads what a Llama-family configuration adds to the
Llama layout (OLMo's weightless layer norms, OLMo 2's norms after each
block and full-width query/key norms, Gemma 3's per-head query/key norms,
the Qwen-MoE experts, shared expert and dense layers); :func:`parallel_config`
reads GPT-NeoX and Falcon. :data:`REFUSED` says why the families memtheory
does not build are refused, and what to use instead. Each default is that of
the family's configuration class in transformers 5.

Examples
--------
>>> decoder_fields({"model_type": "qwen3_moe", "num_hidden_layers": 2,
...                 "moe_intermediate_size": 16, "intermediate_size": 48})["ffn_hidden"]
16
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.models._config_keys import config_flag, optional_int, required_value
from memtheory.models.parallel_decoder import ParallelDecoderConfig

__all__ = ["MOE_FAMILIES", "REFUSED", "decoder_fields", "parallel_config"]

MOE_FAMILIES = {"qwen2_moe": 4, "qwen3_moe": 8, "olmoe": 8}
"""Mixture-of-experts families read here, with transformers' default experts per token."""

_EXPERTS = {"qwen2_moe": 60, "qwen3_moe": 128, "olmoe": 64}

REFUSED = {
    "mllama": "Llama-3.2-Vision is a vision-language model (a vision encoder and "
    "cross-attention layers) that memtheory does not model; its text decoder is a llama: "
    "pass its text_config with \"model_type\": \"llama\" for the decoder alone; the nearest "
    "vision-language family memtheory builds is llava (a vision tower feeding image tokens "
    "into the decoder's sequence, no cross-attention)",
}
"""Why each family memtheory does not build is refused, and the nearest it builds.

DeepSeek V2 and V3 are built (:mod:`memtheory.models.deepseek`), and so are Qwen2-VL,
Qwen2.5-VL, LLaVA and Gemma 3 (:mod:`memtheory.models.vision_language`)."""


def decoder_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the :class:`~memtheory.models.DecoderConfig` fields a newer family sets.

    OLMo: layer norms without weights. OLMo and OLMoE: ``clip_qkv`` clamps the
    query, key and value projections in place (autograd keeps a copy of
    each). OLMo 2 and 3: norms after the attention and the MLP, and RMS
    norms over all query (key) features. OLMoE: those query/key norms, with
    pre-norms. Qwen3-MoE: Qwen3's per-head query/key norms. Gemma 3
    (``gemma3_text``): Gemma 2's layout with per-head query/key norms and no
    soft-capping unless set. Qwen2-MoE, Qwen3-MoE,
    OLMoE: ``num_experts`` experts of ``moe_intermediate_size`` (OLMoE:
    ``intermediate_size``), ``num_experts_per_tok`` per token, dense MLPs of
    ``intermediate_size`` in ``mlp_only_layers`` and off the
    ``decoder_sparse_step``, their routers casting the top-k weights back to
    the model's dtype and renormalising them only with ``norm_topk_prob``
    (False by default); Qwen2-MoE adds a gated shared expert.

    Examples
    --------
    >>> decoder_fields({"model_type": "olmo2", "num_hidden_layers": 2})["post_norms"]
    True
    """
    family = config.get("model_type")
    fields: dict[str, Any] = {}
    if family == "olmo":
        fields["norm"] = "plain"
    if family in ("olmo", "olmoe") and config.get("clip_qkv") is not None:
        fields["clip_qkv"] = config["clip_qkv"]
    if family in ("olmo", "olmo2", "olmo3"):
        fields["rotary_fp32"] = True  # cos and sin left in fp32, q_embed.to(q_type)
    if family in ("olmo3", "gemma3_text"):
        fields["rotary_per_attention"] = True  # a table per layer type
    if family in ("olmo2", "olmo3", "olmoe"):
        fields.update(qk_norm=True, qk_norm_width="full", post_norms=family != "olmoe")
        if family != "olmoe":
            fields["norm"] = "upcast"
    if family == "gemma3_text":
        fields.update(qk_norm=True, sandwich_norms=True)
    if family == "qwen3_moe":
        fields["qk_norm"] = True
    if family in MOE_FAMILIES:
        fields.update(_experts(config, str(family)))
    return fields


def _experts(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """Read the experts, the dense layers and Qwen2-MoE's shared expert."""
    layers = required_value(config, "num_hidden_layers")
    dense = required_value(config, "intermediate_size")
    width = dense if family == "olmoe" else required_value(config, "moe_intermediate_size")
    step = optional_int(config, "decoder_sparse_step", 1) or 1
    only = config.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(
        isinstance(i, bool) or not isinstance(i, int) for i in only
    ):
        raise InvalidArgumentError(
            f"from_config: 'mlp_only_layers' must list layer numbers, got {shown(only)}."
        )
    sparse = tuple(
        index not in only and (index + 1) % step == 0 for index in range(layers)
    )
    fields: dict[str, Any] = {
        "experts": optional_int(config, "num_experts", _EXPERTS[family]),
        "top_k": optional_int(config, "num_experts_per_tok", MOE_FAMILIES[family]),
        "ffn_hidden": width,
        "dense_ffn_hidden": dense,
        "sparse_layers": sparse if not all(sparse) else (),
        "moe_router": "qwen",
        "moe_renormalize": config_flag(config, "norm_topk_prob", False),
    }
    if family == "qwen2_moe":
        fields["shared_expert"] = optional_int(config, "shared_expert_intermediate_size", 5632)
    return fields


def parallel_config(config: Mapping[str, Any]) -> ParallelDecoderConfig:
    """Read a GPT-NeoX or Falcon configuration.

    GPT-NeoX: ``intermediate_size``, ``rotary_pct`` (or the rope parameters'
    ``partial_rotary_factor``; 0.25), ``use_parallel_residual`` (True),
    ``attention_bias`` (True), ``tie_word_embeddings`` (False). Falcon:
    ``ffn_hidden_size`` (4 h), ``new_decoder_architecture`` (False; then
    ``num_kv_heads`` key/value heads and two norms), ``multi_query`` (True: one
    key/value head), ``parallel_attn`` (True), ``bias`` (False),
    ``num_ln_in_parallel_attn``, ``tie_word_embeddings`` (True); ALiBi is
    refused (not modelled).

    Examples
    --------
    >>> parallel_config({"model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544,
    ...     "num_hidden_layers": 32, "num_attention_heads": 71}).kv_heads
    1
    """
    family = config.get("model_type")
    hidden = required_value(config, "hidden_size")
    heads = required_value(config, "num_attention_heads")
    common = {
        "vocabulary": required_value(config, "vocab_size"),
        "hidden": hidden,
        "layers": required_value(config, "num_hidden_layers"),
        "heads": heads,
        "positions": optional_int(config, "max_position_embeddings", None),
        "family": str(family),
    }
    if family == "gpt_neox":
        return ParallelDecoderConfig(
            **common,
            ffn_hidden=required_value(config, "intermediate_size"),
            rotary_dim=_rotary_dim(config, hidden // heads),
            tied=config_flag(config, "tie_word_embeddings", False),
            qkv_bias=config_flag(config, "attention_bias", True),
            bias=True,
            parallel=config_flag(config, "use_parallel_residual", True),
        )
    return _falcon(config, common)


def _rotary_dim(config: Mapping[str, Any], head: int) -> int:
    """GPT-NeoX's rotated features per head: ``int(head * rotary_pct)``."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    factor = config.get("rotary_pct")
    if factor is None and isinstance(rope, Mapping):
        factor = rope.get("partial_rotary_factor")
    factor = 0.25 if factor is None else factor
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise InvalidArgumentError(
            f"from_config: 'rotary_pct' must be a fraction in (0, 1], got {shown(factor)}."
        )
    return int(head * factor)


def _falcon(config: Mapping[str, Any], common: dict[str, Any]) -> ParallelDecoderConfig:
    """Read Falcon's variants: multi-query, new decoder architecture, parallel or not."""
    if config_flag(config, "alibi", False):
        raise UnsupportedError(
            "from_config: Falcon with alibi=true is not modelled (ALiBi biases in place of "
            "rotary embeddings); the nearest supported family is falcon with alibi=false."
        )
    hidden, heads = common["hidden"], common["heads"]
    new = config_flag(config, "new_decoder_architecture", False)
    parallel = config_flag(config, "parallel_attn", True)
    if new:
        kv = optional_int(config, "num_kv_heads", heads)
    else:
        kv = 1 if config_flag(config, "multi_query", True) else heads
    norms = optional_int(config, "num_ln_in_parallel_attn", 2 if new else 1)
    bias = config_flag(config, "bias", False)
    return ParallelDecoderConfig(
        **common,
        ffn_hidden=optional_int(config, "ffn_hidden_size", 4 * hidden) or 4 * hidden,
        kv_heads=kv,
        tied=config_flag(config, "tie_word_embeddings", True),
        qkv_bias=bias,
        bias=bias,
        parallel=parallel,
        norms=2 if norms == 2 else 1,
        broadcast_kv=new,
    )
