r"""One served model's share of a GPU: weights in a format, paged cache, working memory.

:func:`served_model` derives, for one model (the target, or a speculative
decoding draft) on one of ``tensor`` GPUs, what
:func:`~memtheory.estimate.serving.serving_memory` adds up: the weights in
the chosen format, one sequence's key/value cache in whole blocks, one
block's bytes, the profiled prefill pass's working memory and a decoding
step's (in the batch ``B``).

Weight formats (:data:`WEIGHT_FORMATS`) and what each stores:

* ``bf16``, ``fp16``: two bytes a weight;
* ``int8``: one byte a weight and one fp32 scale per output row
  (:func:`~memtheory.techniques.quantization.quantization` ``"int8"``);
* ``int4`` and ``gptq``: GPTQ in AutoGPTQ's layout: 4-bit weights, an fp16
  scale and a packed 4-bit zero per group of 128 input weights of each
  output column, an int32 group index per input feature;
* ``awq``: AutoAWQ's GEMM layout: the same without the group index;
* ``nf4``: bitsandbytes' 4-bit NormalFloat with double-quantized constants
  (QLoRA, Section 3; :func:`memtheory.finetuning.nf4_bytes`);
* ``gguf-q4_k_m``, ``gguf-q8_0``, ... (every
  :data:`~memtheory.estimate.serving_gguf.GGUF_MIXES` name after ``gguf-``):
  each tensor as llama.cpp's ``llama-quantize`` stores it in a GGUF file, the
  embedding and the output projection included
  (:mod:`memtheory.estimate.serving_gguf`); dense Llama, Mistral, Qwen and
  Gemma decoders on one GPU. ``gguf`` alone says nothing about the bits and is
  refused.

For the other formats only the linear maps inside the decoder layers are quantised: the token
embedding, the norms and the output projection (``lm_head``) stay 16-bit.
AutoAWQ and AutoGPTQ quantise the linear layers of each decoder layer only,
and transformers' quantizers keep the output embedding unquantised
(``modules_to_not_convert``; see :mod:`memtheory.techniques.quantization`).
AWQ and GPTQ compute in fp16, the other formats in the checkpoint's dtype
(bf16 for a bf16 checkpoint, else fp16, as vLLM's ``--dtype auto``).

Under tensor parallelism over :math:`t` GPUs the model is rebuilt with one
GPU's share of its configuration: :math:`1/t` of the query heads, of the MLP
width and of the vocabulary rows, :math:`a_{kv}/t` key/value heads (one copy
when :math:`t > a_{kv}`), the whole hidden size, as vLLM's column- and
row-parallel layers and vocab-parallel embedding hold them
(:func:`~memtheory.techniques.tensor_parallel.decoder_split` checks the split).

Examples
--------
>>> served = served_model("llama-3-8b", context=4096)
>>> served.kv_per_sequence == 2 * 32 * 8 * 128 * 4096 * 2   # layers, KV heads, head_dim, bf16
True
>>> split = served_model("llama-3-8b", context=4096, tensor=2)   # 4 KV heads per GPU
>>> 2 * split.kv_per_sequence == served.kv_per_sequence
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sympy as sp

from memtheory._shown import shown
from memtheory.dtypes import DType
from memtheory.errors import UnknownNameError, UnsupportedError
from memtheory.estimate.resolve import ResolvedModel, resolve_model
from memtheory.estimate.resolve import config_of as _resolved_config
from memtheory.estimate.serving_gguf import GGUF_MIXES
from memtheory.network import Network
from memtheory.symbols import B

__all__ = [
    "KV_FORMATS",
    "WEIGHT_FORMATS",
    "ServedModel",
    "kv_format",
    "served_model",
    "weight_format",
]

WEIGHT_FORMATS: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "fp16",
    "int8": "int8: 1 byte per weight, one fp32 scale per output row",
    "int4": "int4 (GPTQ): 4-bit, fp16 scale and 4-bit zero per group of 128, int32 g_idx",
    "gptq": "GPTQ: 4-bit, fp16 scale and 4-bit zero per group of 128, int32 g_idx",
    "awq": "AWQ: 4-bit, fp16 scale and 4-bit zero per group of 128",
    "nf4": "bitsandbytes NF4: 4-bit codes, double-quantized constants per 64",
    **{
        f"gguf-{mix}": f"GGUF {mix.upper()}: llama-quantize's per-tensor types (mostly {kind})"
        for mix, kind in GGUF_MIXES.items()
    },
}
"""The weight formats :func:`served_model` knows, with what each stores."""

KV_FORMATS: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8_e4m3"}
"""KV-cache dtypes (vLLM's ``--kv-cache-dtype``): 16-bit, or fp8 (one byte)."""

_SCHEMES = {"int8": "int8", "int4": "int4", "gptq": "int4", "awq": "awq"}


@dataclass(frozen=True)
class ServedModel:
    """One model's per-GPU figures, in bytes.

    Attributes
    ----------
    name : str
    weights, kv_per_sequence, block_bytes, prefill : sympy.Integer
        Weights in their format; one sequence's cache in whole blocks; one
        block of ``block_size`` tokens over every attention layer; the
        profiled pass's (or sampler's) working memory.
    decode : sympy.Expr
        A decoding step's working memory, in the batch ``B``.
    compute : str
        The compute dtype.
    notes : tuple of str
        What the working memory assumes beyond the common serving assumptions
        (latent attention: an estimate, with its measured error).
    """

    name: str
    weights: sp.Expr
    kv_per_sequence: sp.Expr
    block_bytes: sp.Expr
    prefill: sp.Expr
    decode: sp.Expr
    compute: str
    notes: tuple[str, ...] = ()


def weight_format(name: str | None) -> str | None:
    """Return a :data:`WEIGHT_FORMATS` name (None stays None), or say which exist.

    Examples
    --------
    >>> weight_format(" AWQ ")
    'awq'
    >>> weight_format("q4_k_m")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownNameError: unknown weight format 'q4_k_m'; did you mean ...
    >>> weight_format("gguf")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownNameError: weight format 'gguf' does not say the bits: ...
    """
    if name is None:
        return None
    key = str(name).strip().lower()
    if key == "gguf":
        raise UnknownNameError(
            "weight format 'gguf' does not say the bits: a GGUF file is one of llama-quantize's "
            f"mixes; pass one of {', '.join(f'gguf-{m}' for m in GGUF_MIXES)} "
            "(gguf-q4_k_m is the common one).",
            name=name,
            known=tuple(WEIGHT_FORMATS),
        )
    if key in GGUF_MIXES:
        raise UnknownNameError(
            f"unknown weight format {shown(name)}; did you mean 'gguf-{key}'? (a GGUF mix is "
            "named after its container: gguf-q4_k_m, gguf-q8_0, ...)",
            name=name,
            known=tuple(WEIGHT_FORMATS),
        )
    if key not in WEIGHT_FORMATS:
        raise UnknownNameError(
            f"unknown weight format {name!r}; known: {', '.join(WEIGHT_FORMATS)} (int4 and "
            "gptq are the same GPTQ layout).",
            name=name,
            known=tuple(WEIGHT_FORMATS),
        )
    return key


def kv_format(name: str | None) -> str | None:
    """Return a :data:`KV_FORMATS` name; None and ``"auto"`` (the compute dtype) give None.

    Examples
    --------
    >>> kv_format("FP8"), kv_format("auto")
    ('fp8', None)
    """
    if name is None:
        return None
    key = str(name).strip().lower()
    if key == "auto":
        return None
    if key not in KV_FORMATS:
        raise UnknownNameError(
            f"unknown KV-cache dtype {name!r}; known: {', '.join(KV_FORMATS)} (or auto: the "
            "compute dtype).",
            name=name,
            known=tuple(KV_FORMATS),
        )
    return key


def served_model(
    spec: str | Mapping[str, Any],
    *,
    context: int,
    tensor: int = 1,
    weights: str | None = None,
    kv_cache: str | None = None,
    block_size: int = 16,
    batched_tokens: int = 8192,
    max_sequences: int = 256,
    compute: str | None = None,
) -> ServedModel:
    """Derive one model's per-GPU weights, cache and working memory (see the module doc).

    Parameters
    ----------
    spec : str or mapping
        As :func:`~memtheory.estimate.resolve_model`.
    context : int
        Tokens per sequence.
    tensor : int, default 1
    weights : str, optional
        A :data:`WEIGHT_FORMATS` name (checked already); default the compute dtype.
    kv_cache : str, optional
        A :data:`KV_FORMATS` name (checked already); default the compute dtype.
    block_size, batched_tokens, max_sequences : int
        vLLM's ``block_size``, ``max_num_batched_tokens`` and ``max_num_seqs``.
    compute : str, optional
        The compute dtype; default from the format and the checkpoint (module doc).

    Raises
    ------
    UnsupportedError
        A context beyond the model's positions; tensor parallelism of a model
        that is not a Hugging Face decoder, or that does not divide its heads;
        NF4 of a mixture of experts; a model without an output projection.
    """
    from memtheory.dtypes import dtype
    from memtheory.techniques.kv_cache import kv_cache_bytes, positions_limit, weight_bytes
    from memtheory.techniques.working_memory import working_memory

    whole = resolve_model(spec, batch=1, sequence=context)
    name = spec if isinstance(spec, str) else whole.name
    limit = positions_limit(whole.network) or whole.positions
    if limit is not None and context > limit:
        raise UnsupportedError(
            f"context {context} is longer than {name}'s {limit} positions "
            f"(max_position_embeddings); pass a context of at most {limit}."
        )
    if compute is None:
        if weights in ("awq", "gptq", "int4"):
            compute = "fp16"
        elif weights in ("bf16", "fp16"):
            compute = weights
        else:
            compute = "bf16" if whole.dtype == "bf16" else "fp16"
    source: Any = spec if tensor == 1 else per_device_config(spec, whole, tensor)

    def build(batch: object, sequence: int) -> Network:
        return resolve_model(source, batch=batch, sequence=sequence).network

    net = build(1, context)
    cache = dtype(KV_FORMATS[kv_cache] if kv_cache is not None else compute)
    stored_notes: tuple[str, ...] = ()
    if weights is not None and weights.startswith("gguf-"):
        stored, stored_notes = _gguf_weights(spec, net, weights, tensor)
    elif weights == "nf4":
        stored = _nf4_weights(net, compute)
    else:
        stored = weight_bytes(net, dtype=compute, quantization=_SCHEMES.get(weights or ""))
    per_sequence = kv_cache_bytes(net, dtype=cache, block_size=block_size)
    block = kv_cache_bytes(build(1, block_size), dtype=cache)
    length = min(batched_tokens, context)  # the pass as sequences of at most the context
    sequences = max(1, batched_tokens // length)
    chunk = build(sequences, length)
    prefill = working_memory(chunk, prompt=length, dtype=compute, cache=cache, flash=True,
                             block_size=block_size).prefill
    hidden = int(chunk.rows[1].output_shape[-1])
    c = dtype(compute).bytes
    # the sampler: the pass's hidden states, then max_num_seqs rows of logits in the compute
    # dtype, their fp32 copy and fp32 probabilities (the vocabulary whole, as gathered)
    sampler = sequences * length * hidden * c + max_sequences * _vocabulary(whole) * (c + 8)
    decoding = working_memory(build(B, context), prompt=context, dtype=compute, cache=cache,
                              flash=True, block_size=block_size)
    notes = stored_notes + _latent_cache_note(net, cache) + tuple(
        a for a in decoding.assumptions if a.startswith("latent attention")
    )
    return ServedModel(
        name=str(name),
        weights=sp.sympify(stored),
        kv_per_sequence=sp.sympify(per_sequence),
        block_bytes=sp.sympify(block),
        prefill=sp.Max(sp.sympify(prefill), sp.Integer(sampler)),
        decode=sp.sympify(decoding.decode),
        compute=compute,
        notes=notes,
    )


def _latent_cache_note(net: Network, cache: DType) -> tuple[str, ...]:
    """Say what a latent-attention model caches per token, and which engines cache it so.

    Examples
    --------
    >>> from memtheory.dtypes import dtype
    >>> from memtheory.models import gpt2, preset
    >>> _latent_cache_note(gpt2("small"), dtype("bf16"))
    ()
    >>> print(_latent_cache_note(preset("deepseek-v3", batch=1, sequence=1), dtype("bf16"))[0])
    latent attention KV cache: the compressed latent, as vLLM's MLA backends cache it \
(transformers 5.24's DeepseekV2/V3Attention cache the same and expand it at every step): \
61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes = 70272 bytes per token
    """
    from memtheory.techniques.kv_cache import cache_layers

    latent = [layer for layer in cache_layers(net) if layer.latent]
    if not latent:
        return ()
    first = latent[0]
    per_token = sum(int(layer.kv_heads * (layer.head_dim + (layer.value_dim or 0)))
                    for layer in latent) * cache.bytes
    return (
        "latent attention KV cache: the compressed latent, as vLLM's MLA backends cache it "
        "(transformers 5.24's DeepseekV2/V3Attention cache the same and expand it at every "
        f"step): {len(latent)} layers x (kv_lora_rank {first.head_dim} + qk_rope_head_dim "
        f"{first.value_dim}) x {cache.bytes} bytes = {per_token} bytes per token",
    )


def config_of(spec: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the Hugging Face configuration a preset, ``config.json`` path or dict names.

    :func:`~memtheory.estimate.resolve.config_of`, with an
    :class:`~memtheory.errors.UnknownNameError` (a ``KeyError``) where ``spec``
    names no configuration (a built-in model or a factory).

    Examples
    --------
    >>> config_of("llama-3-8b")["num_key_value_heads"]
    8
    """
    found = _resolved_config(spec)
    if found is None:
        raise UnknownNameError(
            f"{shown(str(spec))} names no Hugging Face configuration (a preset, a config.json "
            "or a folder holding one); built-in models and factories have none.",
            name=spec,
        )
    return found


def per_device_config(
    spec: str | Mapping[str, Any], resolved: ResolvedModel, tensor: int
) -> dict[str, Any]:
    """Return one GPU's share of a decoder's configuration under ``tensor``-way parallelism.

    Examples
    --------
    >>> from memtheory.estimate import resolve_model
    >>> share = per_device_config("llama-3-8b", resolve_model("llama-3-8b"), 2)
    >>> [share[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim")]
    [16, 4, 128]
    """
    from memtheory.techniques.kv_cache import cache_layers
    from memtheory.techniques.tensor_parallel import decoder_split

    if any(layer.latent for layer in cache_layers(resolved.network)):
        raise UnsupportedError(
            f"tensor-parallel serving of {resolved.name!r} (DeepSeek's latent attention: every "
            "GPU caches the whole latent, the heads split) is not modelled; pass tensor=1 "
            "(--tp 1)."
        )
    if resolved.source != "config":
        raise UnsupportedError(
            f"tensor parallelism is modelled for Hugging Face decoders (presets and config.json "
            f"files), not {resolved.name!r}; pass tensor=1 (--tp 1)."
        )
    split = decoder_split(resolved.network, tensor)
    config = dict(config_of(spec))
    config.update(
        num_attention_heads=split.heads // tensor,
        num_key_value_heads=split.kv_heads_per_device,
        intermediate_size=int(config["intermediate_size"]) // tensor,
        vocab_size=-(-split.vocabulary // tensor),
        head_dim=int(cache_layers(resolved.network)[0].head_dim),
    )
    return config


def _vocabulary(resolved: ResolvedModel) -> int:
    from memtheory.layers import Unembedding

    for row in resolved.network.rows:
        if isinstance(row.layer, Unembedding):
            return int(row.layer.num_embeddings)
    raise UnsupportedError(f"{resolved.name!r} has no output projection (lm_head): not a decoder.")


def _gguf_weights(
    spec: str | Mapping[str, Any], net: Network, weights: str, tensor: int
) -> tuple[sp.Expr, tuple[str, ...]]:
    """Return the GGUF file's tensor bytes in ``weights``' mix, and a note of their types."""
    from memtheory.estimate.serving_gguf import gguf_weight_bytes

    if tensor > 1:
        raise UnsupportedError(
            f"{weights} under tensor parallelism is not modelled (llama-quantize picks each "
            "tensor's type for the whole tensor; a split row need not hold whole blocks); pass "
            "tensor=1 (--tp 1), or awq or gptq."
        )
    total, counts = gguf_weight_bytes(spec, weights, network=net)
    return sp.Integer(total), (f"{weights} tensors by type: {counts}",)


def _nf4_weights(net: Network, compute: str) -> sp.Expr:
    """Weights with every linear map inside the decoder layers in NF4, the rest in ``compute``."""
    from memtheory.dtypes import dtype
    from memtheory.finetuning import nf4_bytes
    from memtheory.layers.core import Dense
    from memtheory.layers.moe import MixtureOfExperts
    from memtheory.techniques.kv_cache import weight_bytes

    total = sp.sympify(weight_bytes(net, dtype=compute))
    element = dtype(compute).bytes
    for row in net.rows:
        if isinstance(row.layer, MixtureOfExperts):
            raise UnsupportedError(
                f"NF4 weights of a mixture of experts ({row.name!r}) are not modelled; use awq, "
                "gptq or int8."
            )
        if isinstance(row.layer, Dense) and row.name != "lm_head":
            for part, shape in row.layer.parameter_shapes(row.input_shape):
                if part == "weight":
                    count = sp.Mul(*shape)
                    total += nf4_bytes(count) - count * element
    return sp.expand(total)
