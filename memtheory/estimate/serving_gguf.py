r"""GGUF weights as llama.cpp's ``llama-quantize`` stores them: block types and mixes.

A GGUF file stores each tensor's rows in *blocks*: a fixed number of weights
(32, or :math:`Q_K = 256` for the k-quants) packed with their scales into a
fixed number of bytes. A row of :math:`n` weights of a type with blocks of
:math:`k` weights in :math:`s` bytes takes :math:`s\,n/k` bytes, so a
:math:`r \times n` matrix :math:`r\,s\,n/k`. The block sizes
(:data:`GGML_TYPES`) are the ``sizeof`` of llama.cpp's block structs, summed
here from their fields as ``ggml/src/ggml-common.h`` declares them
(https://github.com/ggml-org/llama.cpp, with a ``static_assert`` on each), with
``ggml_half`` two bytes, ``QK_K = 256`` and ``K_SCALE_SIZE = 12``:

=======  ======  =====  ===============================================
type     block   bytes  fields
=======  ======  =====  ===============================================
Q4_0     32      18     ``d``; ``qs[QK4_0/2]``
Q4_1     32      20     ``d, m``; ``qs[QK4_1/2]``
Q5_0     32      22     ``d``; ``qh[4]``; ``qs[QK5_0/2]``
Q5_1     32      24     ``d, m``; ``qh[4]``; ``qs[QK5_1/2]``
Q8_0     32      34     ``d``; ``qs[QK8_0]``
Q2_K     256     84     ``scales[QK_K/16]``; ``qs[QK_K/4]``; ``d, dmin``
Q3_K     256     110    ``hmask[QK_K/8]``; ``qs[QK_K/4]``; ``scales[12]``; ``d``
Q4_K     256     144    ``d, dmin``; ``scales[K_SCALE_SIZE]``; ``qs[QK_K/2]``
Q5_K     256     176    ``d, dmin``; ``scales``; ``qh[QK_K/8]``; ``qs[QK_K/2]``
Q6_K     256     210    ``ql[QK_K/2]``; ``qh[QK_K/4]``; ``scales[QK_K/16]``; ``d``
=======  ======  =====  ===============================================

A *mix* (the file type a user asks ``llama-quantize`` for: ``Q4_K_M``,
``Q8_0``, ...) picks each tensor's type by its role and layer, in
``src/llama-quant.cpp`` (``llama_ftype_get_default_type``,
``llama_tensor_get_type_impl``, ``tensor_type_fallback``; read at commit
007dbbf3). For the dense Llama, Mistral, Qwen2/Qwen3 and Gemma 1/2 decoders,
without an importance matrix:

* one-dimensional tensors (norms, biases) stay F32, as ``convert_hf_to_gguf.py``
  writes every tensor of at most one dimension;
* ``output.weight`` (``lm_head``), or ``token_embd.weight`` when the two are
  tied, becomes Q6_K, or Q8_0 in a Q8_0 file or when its row (the hidden size)
  is not a multiple of the mix's block;
* ``attn_v`` and ``ffn_down`` of the "more bits" layers :math:`i` of
  :math:`n` (:math:`i < n/8`, :math:`i \ge 7n/8`, or :math:`(i - n/8) \bmod 3 = 2`)
  become Q6_K in Q4_K_M and Q5_K_M; Q4_K_S raises ``attn_v`` of the first
  four layers and ``ffn_down`` of the first :math:`n/8` to Q5_K; Q3_K_M, Q3_K_L
  and Q2_K raise ``attn_v``, ``attn_output`` and ``ffn_down`` as the source says;
  in a 70B model (80 layers; Llama with grouped-query attention, or Qwen2)
  a Q3_K or Q4_K ``attn_v`` becomes Q5_K;
* every other matrix takes the mix's type; a row whose length is not a
  multiple of that type's block falls back (Q2_K, Q3_K to Q4_0; Q4_K to Q5_0;
  Q5_K to Q5_1; Q6_K to Q8_0; F16 when even 32 does not divide it).

Examples
--------
>>> GGML_TYPES["Q4_K"].size, GGML_TYPES["Q8_0"].size
(144, 34)
>>> types = gguf_tensor_types("llama-3-8b", "q4_k_m")
>>> types["output.weight"], types["blk.0.attn_v.weight"], types["blk.4.attn_v.weight"]
('Q6_K', 'Q6_K', 'Q4_K')
>>> types["blk.0.attn_norm.weight"], types["token_embd.weight"]
('F32', 'Q4_K')
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memtheory._shown import shown
from memtheory.errors import UnknownNameError, UnsupportedError
from memtheory.network import Network

__all__ = [
    "GGML_TYPES",
    "GGUF_MIXES",
    "GGMLType",
    "GGUFTensor",
    "gguf_mix",
    "gguf_tensor_types",
    "gguf_tensors",
    "gguf_weight_bytes",
]

_HALF = 2  # sizeof(ggml_half)
QK_K = 256
K_SCALE_SIZE = 12


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type: ``block`` weights stored in ``size`` bytes.

    Examples
    --------
    >>> GGML_TYPES["Q6_K"].row_bytes(4096)   # 16 blocks of 210 bytes
    3360
    """

    name: str
    block: int
    size: int

    def row_bytes(self, length: int) -> int:
        """Bytes of one row of ``length`` weights (a whole number of blocks)."""
        return length // self.block * self.size


GGML_TYPES: dict[str, GGMLType] = {
    t.name: t
    for t in (
        GGMLType("F32", 1, 4),
        GGMLType("F16", 1, _HALF),
        GGMLType("Q4_0", 32, _HALF + 32 // 2),
        GGMLType("Q4_1", 32, 2 * _HALF + 32 // 2),
        GGMLType("Q5_0", 32, _HALF + 4 + 32 // 2),
        GGMLType("Q5_1", 32, 2 * _HALF + 4 + 32 // 2),
        GGMLType("Q8_0", 32, _HALF + 32),
        GGMLType("Q2_K", QK_K, QK_K // 16 + QK_K // 4 + 2 * _HALF),
        GGMLType("Q3_K", QK_K, QK_K // 8 + QK_K // 4 + 12 + _HALF),
        GGMLType("Q4_K", QK_K, 2 * _HALF + K_SCALE_SIZE + QK_K // 2),
        GGMLType("Q5_K", QK_K, 2 * _HALF + K_SCALE_SIZE + QK_K // 8 + QK_K // 2),
        GGMLType("Q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + _HALF),
    )
}
"""ggml's tensor types by name, with their block sizes from ``ggml-common.h`` (module doc)."""

GGUF_MIXES: dict[str, str] = {
    "q2_k": "Q2_K",
    "q3_k_s": "Q3_K",
    "q3_k_m": "Q3_K",
    "q3_k_l": "Q3_K",
    "q4_0": "Q4_0",
    "q4_1": "Q4_1",
    "q5_0": "Q5_0",
    "q5_1": "Q5_1",
    "q4_k_s": "Q4_K",
    "q4_k_m": "Q4_K",
    "q5_k_s": "Q5_K",
    "q5_k_m": "Q5_K",
    "q6_k": "Q6_K",
    "q8_0": "Q8_0",
}
"""``llama-quantize``'s mixes by name, with each one's default tensor type
(``llama_ftype_get_default_type``)."""

_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}

_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")

_ROLES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
_GEMMA2 = {  # Gemma 2's four norms a layer, as convert_hf_to_gguf.py names them
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file: llama.cpp's name, PyTorch's shape, its ggml type.

    Examples
    --------
    >>> GGUFTensor("blk.0.attn_q.weight", (4096, 4096), "Q8_0").bytes   # 4096 rows of 128 blocks
    17825792
    """

    name: str
    shape: tuple[int, ...]
    type: str

    @property
    def bytes(self) -> int:
        """Bytes of the tensor's data: rows of whole blocks."""
        rows = 1
        for extent in self.shape[:-1]:
            rows *= extent
        return rows * GGML_TYPES[self.type].row_bytes(self.shape[-1])


def gguf_mix(name: str) -> str:
    """Return a :data:`GGUF_MIXES` name from ``q4_k_m``, ``Q4_K_M`` or ``gguf-q4_k_m``.

    Examples
    --------
    >>> gguf_mix("GGUF-Q4_K_M")
    'q4_k_m'
    >>> gguf_mix("q4_k_xl")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownNameError: unknown GGUF mix 'q4_k_xl'; known: q2_k, ...
    """
    key = str(name).strip().lower().removeprefix("gguf-")
    if key not in GGUF_MIXES:
        raise UnknownNameError(
            f"unknown GGUF mix {shown(name)}; known: {', '.join(GGUF_MIXES)} (llama-quantize's "
            "file types; the IQ types and imatrix mixes are not modelled).",
            name=name,
            known=tuple(GGUF_MIXES),
        )
    return key


def gguf_tensors(
    spec: str | Mapping[str, Any], mix: str, *, network: Network | None = None
) -> tuple[GGUFTensor, ...]:
    """Return every tensor of ``spec``'s GGUF file in ``mix``, with its type (module doc).

    Parameters
    ----------
    spec : str or mapping
        A preset, ``config.json`` path or configuration dict of a dense Llama,
        Mistral, Qwen2, Qwen3, Gemma or Gemma 2 decoder.
    mix : str
        A :data:`GGUF_MIXES` name (``gguf-`` prefix allowed).
    network : Network, optional
        ``spec`` already resolved (any batch and sequence).

    Raises
    ------
    UnsupportedError
        Another family (mixtures of experts and latent attention get their own
        rules in llama.cpp), or a row no fallback type divides.

    Examples
    --------
    >>> tensors = gguf_tensors("qwen2.5-0.5b", "q4_k_m")   # hidden 896: not a multiple of 256
    >>> sorted({t.type for t in tensors if t.name.endswith("attn_q.weight")})
    ['Q5_0']
    >>> [t.type for t in tensors if t.name == "token_embd.weight"]   # tied: output's rule
    ['Q8_0']
    """
    from memtheory.estimate.resolve import config_of, resolve_model

    chosen = gguf_mix(mix)
    config = config_of(spec) or {}  # a built-in model or a factory: no configuration
    family = str(config.get("model_type", ""))
    if family not in _FAMILIES:
        raise UnsupportedError(
            f"GGUF weights of {shown(family) if family else shown(spec)} models are not "
            "modelled: llama.cpp's llama-quantize has its own rules for mixtures of experts, "
            "latent attention and "
            f"other architectures; modelled: {', '.join(_FAMILIES)}. Pass awq, gptq, int8 or "
            "bf16 instead."
        )
    net = network if network is not None else resolve_model(spec, batch=1, sequence=1).network
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    big = layers == 80 and (family == "qwen2" or heads != kv_heads)  # LLM_TYPE_70B
    rule = _Rule(chosen, layers, heads // kv_heads, big)
    named = list(_named_parameters(net, {**_ROLES, **(_GEMMA2 if family == "gemma2" else {})}))
    tied = not any(name == "output.weight" for name, _ in named)
    found = [
        GGUFTensor(name, shape, rule.type_of(name, shape, tied=tied)) for name, shape in named
    ]
    scaling = config.get("rope_scaling") or {}
    if family == "llama" and str(scaling.get("rope_type", scaling.get("type", ""))) == "llama3":
        # convert_hf_to_gguf.py's LlamaModel writes one F32 factor per rotary frequency
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        found.append(GGUFTensor("rope_freqs.weight", (head_dim // 2,), "F32"))
    return tuple(found)


def gguf_tensor_types(spec: str | Mapping[str, Any], mix: str) -> dict[str, str]:
    """Return each tensor's ggml type by its llama.cpp name (see :func:`gguf_tensors`).

    Examples
    --------
    >>> gguf_tensor_types("llama-3-8b", "q8_0")["output.weight"]
    'Q8_0'
    """
    return {t.name: t.type for t in gguf_tensors(spec, mix)}


def gguf_weight_bytes(
    spec: str | Mapping[str, Any], mix: str, *, network: Network | None = None
) -> tuple[int, str]:
    """Return the bytes of the GGUF file's tensors and a count of tensors per type.

    Examples
    --------
    >>> total, counts = gguf_weight_bytes("llama-3-8b", "q4_k_m")
    >>> counts
    'Q4_K 193, Q6_K 33, F32 65'
    >>> round(total / 2**30, 2)
    4.58
    """
    tensors = gguf_tensors(spec, mix, network=network)
    counts = Counter(t.type for t in tensors)
    order = sorted(counts, key=lambda name: (name == "F32", name))
    return sum(t.bytes for t in tensors), ", ".join(f"{n} {counts[n]}" for n in order)


def _named_parameters(
    net: Network, roles: Mapping[str, str]
) -> list[tuple[str, tuple[int, ...]]]:
    """Each stored parameter of a dense decoder under its GGUF name, in PyTorch's shape."""
    from memtheory.layers.moe import MixtureOfExperts

    found = []
    for row in net.rows:
        parts = list(row.layer.parameter_shapes(row.input_shape))
        if not parts:
            continue
        if isinstance(row.layer, MixtureOfExperts):
            raise UnsupportedError(
                f"GGUF weights of a mixture of experts ({row.name!r}) are not modelled; use "
                "awq, gptq or int8."
            )
        match = _LAYER.match(row.name)
        role = roles.get(match.group(2)) if match else _TOP.get(row.name)
        if role is None:
            raise UnsupportedError(
                f"GGUF weights: no llama.cpp tensor name for {row.name!r} is modelled; the "
                f"modelled families are {', '.join(_FAMILIES)}."
            )
        prefix = f"blk.{match.group(1)}." if match else ""
        for part, shape in parts:
            found.append((f"{prefix}{role}.{part}", tuple(int(s) for s in shape)))
    return found


@dataclass(frozen=True)
class _Rule:
    """``llama_tensor_get_type_impl`` for one mix of a dense decoder without an imatrix."""

    mix: str
    layers: int
    gqa: int
    big: bool

    def type_of(self, name: str, shape: tuple[int, ...], *, tied: bool) -> str:
        if len(shape) < 2 or "_norm." in name:
            return "F32"
        default = GGUF_MIXES[self.mix]
        role = name.split(".")[-2]
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        if role == "output" or (tied and role == "token_embd"):
            if shape[-1] % GGML_TYPES[default].block:
                chosen = "Q8_0"
            else:
                chosen = "Q8_0" if default == "Q8_0" else "Q6_K"
        elif role == "attn_v":
            chosen = self._value(default, layer)
        elif role == "ffn_down":
            chosen = self._down(default, layer)
        elif role == "attn_output":
            chosen = {"q2_k": "Q3_K", "q3_k_m": "Q4_K", "q3_k_l": "Q5_K"}.get(self.mix, default)
        else:
            chosen = default
        return _fallback(name, shape[-1], chosen)

    def _more_bits(self, layer: int) -> bool:
        n = self.layers
        return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2

    def _value(self, default: str, layer: int) -> str:
        chosen = {
            "q2_k": "Q4_K" if self.gqa >= 4 else "Q3_K",
            "q3_k_m": "Q5_K" if layer < 2 else "Q4_K",
            "q3_k_l": "Q5_K",
            "q4_k_s": "Q5_K" if layer < 4 else default,
        }.get(self.mix, default)
        if self.mix in ("q4_k_m", "q5_k_m") and self._more_bits(layer):
            chosen = "Q6_K"
        if self.big and chosen in ("Q3_K", "Q4_K"):
            chosen = "Q5_K"
        return chosen

    def _down(self, default: str, layer: int) -> str:
        n = self.layers
        if self.mix == "q2_k":
            return "Q3_K"
        if self.mix == "q3_k_m":
            return "Q5_K" if layer < n // 16 else "Q4_K"
        if self.mix == "q3_k_l":
            return "Q5_K"
        if self.mix in ("q4_k_m", "q5_k_m") and self._more_bits(layer):
            return "Q6_K"
        if self.mix == "q4_k_s" and layer < n // 8:
            return "Q5_K"
        return default


def _fallback(name: str, length: int, chosen: str) -> str:
    """``tensor_type_fallback``: a type whose block divides the row, or a refusal."""
    if length % GGML_TYPES[chosen].block == 0:
        return chosen
    if chosen not in _FALLBACK:
        raise UnsupportedError(
            f"GGUF: {name}'s rows of {length} weights are not a multiple of {chosen}'s block "
            f"of {GGML_TYPES[chosen].block}, and llama-quantize defines no fallback for "
            f"{chosen} (it stops); pick a k-quant mix (gguf-q4_k_m, gguf-q6_k) instead."
        )
    second = _FALLBACK[chosen]
    return second if length % GGML_TYPES[second].block == 0 else "F16"
