r"""Inference memory of a language model: the weights plus the key/value cache.

Generating text one token at a time, a decoder keeps the keys and values of
every earlier position in every attention layer, so that each new token
attends to them without recomputing them. For :math:`L` layers with
:math:`a_{kv}` key/value heads of width :math:`d`, :math:`S` cached positions
and a batch of :math:`B`, the cache holds

.. math:: 2 \cdot L \cdot a_{kv} \cdot d \cdot S \cdot B

elements (the 2: keys and values). :func:`kv_cache_bytes` derives it from a
network's attention layers (:meth:`~memtheory.layers.MultiHeadAttention.cache_tensors`),
and :func:`generation_memory` adds the weights. Batch and sequence limits
follow from :func:`memtheory.whatif.max_value`. Derived in the book's chapter
"Inference and the KV cache".

Examples
--------
>>> from memtheory.models import gpt2
>>> kv_cache_bytes(gpt2("small"))
36864*B*S
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import cast

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as _dtype
from memtheory.footprint import Footprint
from memtheory.layers import MultiHeadAttention, PositionEmbedding
from memtheory.network import Network
from memtheory.symbols import B, S

__all__ = [
    "GenerationMemory",
    "generation_memory",
    "kv_cache_bytes",
    "kv_cache_formula",
    "positions_limit",
]


def kv_cache_bytes(model: Network, *, dtype: DTypeLike = "fp16") -> sp.Expr:
    """Bytes of the key/value cache of every attention layer of ``model``.

    The cache covers the positions of the network's input (its sequence
    length ``S``) for its batch.

    Parameters
    ----------
    model : Network
    dtype : dtype, default "fp16"
        Element type of the cache.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> kv_cache_bytes(gpt2("xl", batch=1, sequence=1024))
    314572800
    """
    element = _dtype(dtype)
    return sp.expand(
        sp.Add(
            *(
                spec.nbytes(element)
                for row in model.rows
                if isinstance(row.layer, MultiHeadAttention)
                for spec in row.layer.cache_tensors(row.input_shape)
            )
        )
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
    """Weights and key/value cache of a model generating text, in bytes.

    A :class:`~memtheory.footprint.Footprint` with two components,
    ``weights`` and ``kv_cache``; its peak is their total (activations of the
    one new token per step are not counted).

    Attributes
    ----------
    weights, kv_cache : sympy expression
    positions : int or None
        The longest sequence the model takes (its position-embedding rows), if limited.

    Examples
    --------
    >>> memory = GenerationMemory(sp.Integer(10), 4 * B)
    >>> memory.total, memory.evaluate(B=2).format("B", name="kv_cache", digits=0)
    (4*B + 10, '8 B')
    """

    weights: sp.Expr
    kv_cache: sp.Expr
    positions: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", sp.sympify(self.weights))
        object.__setattr__(self, "kv_cache", sp.sympify(self.kv_cache))

    @property
    def components(self) -> Mapping[str, sp.Expr]:
        """``weights`` and ``kv_cache``, in bytes."""
        return {"weights": self.weights, "kv_cache": self.kv_cache}

    def evaluate(self, **values: object) -> GenerationMemory:
        """Substitute values by symbol name (``B=8, S=1024``).

        Examples
        --------
        >>> GenerationMemory(sp.Integer(10), 4 * B).evaluate(B=2).total
        18
        """
        (weights, kv_cache), _ = self.substituted(values, [self.weights, self.kv_cache])
        return replace(self, weights=weights, kv_cache=kv_cache)


def generation_memory(
    model: Network, *, weights: DTypeLike = "fp16", cache: DTypeLike | None = None
) -> GenerationMemory:
    """Weights plus key/value cache for generating ``S`` positions of ``B`` sequences.

    Activations of the one new token per step are small beside these and not
    counted.

    Parameters
    ----------
    model : Network
        A decoder (e.g. :func:`memtheory.models.gpt2`), built over the sequence
        length to cache.
    weights : dtype, default "fp16"
    cache : dtype, optional
        Defaults to ``weights``.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> memory = generation_memory(gpt2("small"))
    >>> memory.total
    36864*B*S + 248879616
    """
    low = _dtype(weights)
    return GenerationMemory(
        weights=sp.sympify(model.parameter_count * low.bytes),
        kv_cache=kv_cache_bytes(model, dtype=cache or low),
        positions=positions_limit(model),
    )


def positions_limit(model: Network) -> int | None:
    """Return the longest sequence ``model``'s position embeddings allow, or None.

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
    return min(sizes) if sizes else None
