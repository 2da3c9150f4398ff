r"""Inference memory of a language model: the weights plus the key/value cache.

Generating text one token at a time, a decoder keeps the keys and values of
every earlier position in every attention layer, so that each new token
attends to them without recomputing them. For :math:`L` layers with
:math:`a_{kv}` key/value heads of width :math:`d`, :math:`S` cached positions
and a batch of :math:`B`, the cache holds

.. math:: 2 \cdot L \cdot a_{kv} \cdot d \cdot S \cdot B

elements (the 2: keys and values). Grouped-query attention caches only its
:math:`a_{kv}` key/value heads (multi-query: one), and a sliding window of
:math:`w` positions caps :math:`S` at :math:`\min(S, w)` in its layers.
A paged cache (vLLM's PagedAttention, Kwon et al. 2023) allocates each
sequence's positions in blocks of ``block_size``, so the cached positions
round up to a whole number of blocks.

:func:`kv_cache_bytes` derives the cache from a network's attention layers
(:class:`~memtheory.layers.MultiHeadAttention`,
:class:`~memtheory.layers.GroupedQueryAttention`, and DeepSeek's
:class:`~memtheory.layers.latent_attention.LatentAttention`, which caches
:math:`L \cdot (d_c + d_{rope}) \cdot S \cdot B` elements: its latent and
rotary key), and
:func:`generation_memory` adds the weights (optionally quantised, see
:mod:`memtheory.techniques.quantization`) and, given a prompt length, the
working memory of the prefill (the whole prompt in one forward pass) and of
each decoding step. Batch and context limits follow from
:func:`memtheory.whatif.max_value`. Derived in the book's chapter
"Inference and the KV cache".

Examples
--------
>>> from memtheory.models import gpt2
>>> kv_cache_bytes(gpt2("small"))
36864*B*S
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.constraints import as_constraints
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as _dtype
from memtheory.errors import UnsupportedError
from memtheory.footprint import Footprint
from memtheory.layers import MultiHeadAttention, PositionEmbedding
from memtheory.layers.core import Dense
from memtheory.layers.moe import MixtureOfExperts
from memtheory.layers.rotary import RotaryTable
from memtheory.network import Network
from memtheory.symbols import B, S
from memtheory.techniques.cache_layers import CacheLayer, cache_layers
from memtheory.techniques.quantization import WeightQuantization
from memtheory.techniques.quantization import quantization as _scheme
from memtheory.techniques.working_memory import working_memory

__all__ = [
    "CacheLayer",
    "GenerationMemory",
    "cache_layers",
    "generation_memory",
    "kv_cache_bytes",
    "kv_cache_formula",
    "positions_limit",
    "weight_bytes",
]


def kv_cache_bytes(
    model: Network, *, dtype: DTypeLike = "fp16", block_size: SizeLike | None = None
) -> sp.Expr:
    """Bytes of the key/value cache of every attention layer of ``model``.

    The cache covers the positions of the network's input (its sequence
    length ``S``, at most each layer's sliding window) for its batch.

    Parameters
    ----------
    model : Network
    dtype : dtype, default "fp16"
        Element type of the cache.
    block_size : size, optional
        A paged cache's block: each sequence's positions round up to whole
        blocks (vLLM's default is 16). None: exactly the positions.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> kv_cache_bytes(gpt2("xl", batch=1, sequence=1024))
    314572800
    >>> from memtheory.models import preset
    >>> kv_cache_bytes(preset("llama-3-8b", batch=1, sequence=8000), block_size=16)
    1048576000
    """
    return sp.expand(
        sp.Add(*(layer.nbytes(dtype, block_size) for layer in cache_layers(model)))
    )


def kv_cache_formula(
    *,
    layers: SizeLike,
    heads: SizeLike,
    head_dim: SizeLike,
    kv_heads: SizeLike | None = None,
    sequence: SizeLike = S,
    batch: SizeLike = B,
    dtype: DTypeLike = "fp16",
) -> sp.Expr:
    """Cache bytes of ``layers`` identical attention layers, derived from one of them.

    Examples
    --------
    >>> from memtheory.symbols import L, size_symbol
    >>> a, d = size_symbol("a"), size_symbol("d")
    >>> kv_cache_formula(layers=L, heads=a, head_dim=d)
    4*B*L*S*a*d
    """
    attention = MultiHeadAttention(heads, head_dim=head_dim, kv_heads=kv_heads)
    width = cast(sp.Expr, attention.head_dim)  # given, so not None
    shape = (sp.sympify(batch), sp.sympify(sequence), attention.heads * width)
    one = sum(spec.nbytes(_dtype(dtype)) for spec in attention.cache_tensors(shape))
    return sp.expand(sp.sympify(layers) * one)


@dataclass(frozen=True)
class GenerationMemory(Footprint):
    """Weights, key/value cache and (given a prompt) working memory of a model generating text.

    A :class:`~memtheory.footprint.Footprint` with components ``weights`` and
    ``kv_cache`` (the cache at the network's full sequence ``S``), and, when
    the prefill and decode working memory are counted, ``activations`` (the
    larger of the two). Its timeline then has two moments, the prefill's peak
    (weights, the prompt's cache, the prefill's working set) and a decoding
    step's (weights, the full cache, the step's working set); without them
    the peak is the total.

    Attributes
    ----------
    weights, kv_cache : sympy expression
    positions : int or None
        The longest sequence the model takes (its position-embedding rows), if limited.
    prompt_cache : sympy expression or None
        The cache after the prefill (the prompt's positions).
    prefill, decode : sympy expression or None
        Working memory of the prefill and of one decoding step, beyond the
        weights and the cache.
    assumptions : tuple of str
        What the figures assume (attention kernel, logits kept, cache layout).
    constraints : mapping of str to sympy expression
        The network's sizes that must stay at least 1, its position limit
        included (:mod:`memtheory.constraints`): evaluating at a longer
        sequence than the model takes is refused.

    Examples
    --------
    >>> memory = GenerationMemory(sp.Integer(10), 4 * B)
    >>> memory.total, memory.evaluate(B=2).format("B", name="kv_cache", digits=0)
    (4*B + 10, '8 B')
    """

    weights: sp.Expr
    kv_cache: sp.Expr
    positions: int | None = None
    prompt_cache: sp.Expr | None = None
    prefill: sp.Expr | None = None
    decode: sp.Expr | None = None
    assumptions: tuple[str, ...] = ()
    constraints: Mapping[str, sp.Expr] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("weights", "kv_cache", "prompt_cache", "prefill", "decode"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, sp.sympify(value))
        object.__setattr__(
            self, "constraints", {c.where: c.size for c in as_constraints(self.constraints)}
        )

    @property
    def components(self) -> Mapping[str, sp.Expr]:
        """``weights``, ``kv_cache`` and, when counted, ``activations``, in bytes."""
        parts = {"weights": self.weights, "kv_cache": self.kv_cache}
        if self.prefill is not None and self.decode is not None:
            parts["activations"] = sp.Max(self.prefill, self.decode)
        return parts

    @property
    def timeline(self) -> Mapping[str, sp.Expr]:  # type: ignore[override]
        """The prefill's and a decoding step's peaks, when the working memory is counted."""
        if self.prefill is None or self.decode is None or self.prompt_cache is None:
            return {}
        return {
            "prefill": self.weights + self.prompt_cache + self.prefill,
            "decode": self.weights + self.kv_cache + self.decode,
        }

    def evaluate(self, **values: object) -> GenerationMemory:
        """Substitute values by symbol name (``B=8, S=1024``).

        Examples
        --------
        >>> GenerationMemory(sp.Integer(10), 4 * B).evaluate(B=2).total
        18
        """
        fields = {
            name: getattr(self, name)
            for name in ("weights", "kv_cache", "prompt_cache", "prefill", "decode")
            if getattr(self, name) is not None
        }
        done, remaining = self.substituted(values, list(fields.values()))
        return replace(
            self,
            **dict(zip(fields, done, strict=True)),
            constraints={c.where: c.size for c in remaining},
        )


def weight_bytes(
    model: Network,
    *,
    dtype: DTypeLike = "fp16",
    quantization: str | WeightQuantization | None = None,
) -> sp.Expr:
    """Bytes of the model's parameters in ``dtype``, linear weights quantised if asked.

    With a scheme (:func:`memtheory.techniques.quantization.quantization`),
    every :class:`~memtheory.layers.Dense` weight matrix and every expert
    matrix of a :class:`~memtheory.layers.MixtureOfExperts` is stored as that
    scheme stores it; embeddings, norms, biases, routers and the layers the
    scheme skips (``lm_head``) stay in ``dtype``.

    Examples
    --------
    >>> from memtheory.models import preset
    >>> llama = preset("llama-2-7b")
    >>> weight_bytes(llama) == 2 * llama.parameter_count
    True
    >>> weight_bytes(llama, quantization="int8")   # int8 matrices, fp32 row scales
    7006265344
    """
    element = _dtype(dtype)
    scheme = None if quantization is None else _scheme(quantization)
    total = sp.Integer(0)
    for row in model.rows:
        layer, name = row.layer, row.name
        for part, shape in _shapes(row):
            count = sp.Mul(*shape)
            skipped = scheme is None or any(
                name == s or name.startswith(f"{s}.") for s in scheme.skip
            )
            if not skipped and isinstance(layer, Dense) and part == "weight":
                total += scheme.matrix_bytes(shape[0], shape[1])  # type: ignore[union-attr]
            elif not skipped and isinstance(layer, MixtureOfExperts) and part.startswith(
                "experts."
            ):
                experts, rows, columns = shape
                if part == "experts.gate_up_proj":  # two matrices, gate and up, per expert
                    total += 2 * experts * scheme.matrix_bytes(rows / 2, columns)  # type: ignore[union-attr]
                else:
                    total += experts * scheme.matrix_bytes(rows, columns)  # type: ignore[union-attr]
            else:
                total += count * element.bytes
    return sp.expand(total)


def _shapes(row: object) -> tuple[tuple[str, tuple[sp.Expr, ...]], ...]:
    """Return a row's parameter tensors, ``(name, shape)``, or one count if it states none."""
    layer = row.layer  # type: ignore[attr-defined]
    try:
        return tuple(layer.parameter_shapes(row.input_shape))  # type: ignore[attr-defined]
    except UnsupportedError:
        count = row.weights + row.biases  # type: ignore[attr-defined]
        return (("parameters", (count,)),) if count != 0 else ()


def generation_memory(
    model: Network,
    *,
    weights: DTypeLike = "fp16",
    cache: DTypeLike | None = None,
    prompt: SizeLike | None = None,
    flash: bool = False,
    logits: str = "last",
    block_size: SizeLike | None = None,
    quantization: str | WeightQuantization | None = None,
) -> GenerationMemory:
    """Weights plus key/value cache for generating ``S`` positions of ``B`` sequences.

    Without ``prompt`` only those two are counted (the cache dominates a long
    generation). With ``prompt``, the working memory of the prefill (the
    whole prompt in one forward pass) and of a decoding step is added, with
    the assumptions of :func:`working_memory` (Hugging Face's eager attention
    unless ``flash``).

    Parameters
    ----------
    model : Network
        A decoder (e.g. :func:`memtheory.models.from_config`), built over the
        sequence length to cache (prompt plus generated tokens).
    weights : dtype, default "fp16"
        The weights' dtype, and the compute dtype.
    cache : dtype, optional
        Defaults to ``weights``.
    prompt : size, optional
        Prompt length processed by the prefill (at most the network's sequence).
    flash : bool, default False
        A memory-efficient attention kernel (FlashAttention-2, or PyTorch's
        SDPA memory-efficient path): no :math:`S^2` tensor and no mask.
        False: Hugging Face's eager attention.
    logits : {"last", "all"}, default "last"
        ``"last"``: ``generate()``'s prefill, which computes the last
        position's logits only (``logits_to_keep=1``) and copies them to fp32;
        ``"all"``: a plain forward over the prompt, ``(B, prompt, V)`` logits.
    block_size : size, optional
        Paged cache: positions round up to whole blocks per sequence.
    quantization : str or WeightQuantization, optional
        ``"int8"``, ``"int4"`` (GPTQ, groups of 128), ``"awq"``, or a scheme
        with its group size (:func:`memtheory.techniques.quantization.quantization`).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> memory = generation_memory(gpt2("small"))
    >>> memory.total
    36864*B*S + 248879616
    >>> from memtheory.models import preset
    >>> llama = generation_memory(preset("llama-3-8b", batch=1, sequence=8192), prompt=8192)
    >>> llama.evaluate().format("GiB", name="peak"), llama.evaluate().peak_moment
    ('36.46 GiB', 'prefill')
    """
    low = _dtype(weights)
    stored = weight_bytes(model, dtype=low, quantization=quantization)
    kv = kv_cache_bytes(model, dtype=cache or low, block_size=block_size)
    positions = positions_limit(model)
    checks = {c.where: c.size for c in model.size_checks()}
    if prompt is None:
        return GenerationMemory(
            weights=sp.sympify(stored), kv_cache=kv, positions=positions, constraints=checks
        )
    work = working_memory(
        model, prompt=prompt, dtype=low, cache=_dtype(cache or low), flash=flash,
        logits=logits, block_size=block_size,
    )
    return GenerationMemory(
        weights=sp.sympify(stored),
        kv_cache=kv,
        positions=positions,
        prompt_cache=work.prompt_cache,
        prefill=work.prefill,
        decode=work.decode,
        assumptions=work.assumptions,
        constraints=checks,
    )


def positions_limit(model: Network) -> int | None:
    """Return the longest sequence ``model``'s position embeddings allow, or None.

    Learned position embeddings (GPT-2) have that many rows; a rotary model
    states the context it was trained for (``max_position_embeddings``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> positions_limit(gpt2("small"))
    1024
    """
    sizes = []
    for row in model.rows:
        if isinstance(row.layer, PositionEmbedding):
            positions = sp.sympify(row.layer.num_embeddings)  # a sympy size already
            if positions.is_number:
                sizes.append(int(positions))
        elif isinstance(row.layer, RotaryTable) and row.layer.positions is not None:
            sizes.append(int(row.layer.positions))
    return min(sizes) if sizes else None
