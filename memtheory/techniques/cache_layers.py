"""What each attention layer of a network caches while generating: heads, width, positions.

A decoder generating one token at a time keeps the keys and values of every
earlier position in every attention layer. :func:`cache_layers` reads, for each
attention layer of a network, its key/value heads, their width and the
positions it caches (a sliding window caps them); :class:`CacheLayer` sizes
one layer's keys plus values. DeepSeek's latent attention
(:class:`~memtheory.layers.latent_attention.LatentAttention`) caches, as
transformers' ``DeepseekV3Attention`` does, one "head" of the compressed
latent (``kv_lora_rank`` features, in the keys' place) and the shared rotary
key (``qk_rope_head_dim``, in the values'), and expands them at every step.
:func:`~memtheory.techniques.kv_cache.kv_cache_bytes` sums them and
:func:`~memtheory.techniques.working_memory.working_memory` reads
them for the decoding steps.

Examples
--------
>>> from memtheory.models import gpt2
>>> cache_layers(gpt2("small"))[0].nbytes()
3072*B*S
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._shown import shown
from memtheory._validation import SizeLike
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as _dtype
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.layers import MultiHeadAttention
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.latent_attention import LatentAttention
from memtheory.layers.vision_language import EncoderAttention
from memtheory.network import Network

__all__ = ["CacheLayer", "cache_layers"]


@dataclass(frozen=True)
class CacheLayer:
    """What one attention layer caches per sequence: its key/value heads and positions.

    Attributes
    ----------
    name : str
        The attention layer's name.
    batch : sympy expression
        Sequences cached.
    kv_heads, head_dim : sympy expression
        Key/value heads and their width.
    positions : sympy expression
        Positions cached per sequence: the network's sequence, or at most its window.
    window : sympy expression or None
        Its sliding window, if any.
    value_dim : sympy expression or None
        Width of the cached values when it differs from the keys' ``head_dim``
        (latent attention: the rotary key's ``qk_rope_head_dim`` beside the
        latent's ``kv_lora_rank``); None: as wide as the keys.

    Examples
    --------
    >>> from memtheory.models import preset
    >>> layer = cache_layers(preset("mistral-7b-v0.1"))[0]
    >>> layer.kv_heads, layer.head_dim, layer.positions
    (8, 128, Min(4096, S))
    """

    name: str
    batch: sp.Expr
    kv_heads: sp.Expr
    head_dim: sp.Expr
    positions: sp.Expr
    window: sp.Expr | None = None
    value_dim: sp.Expr | None = None

    @property
    def latent(self) -> bool:
        """Whether the layer caches a compressed latent (keys and values of other widths)."""
        return self.value_dim is not None

    def nbytes(self, dtype: DTypeLike = "fp16", block_size: SizeLike | None = None) -> sp.Expr:
        """Keys plus values, in bytes, with positions rounded up to blocks if paged.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> layer = CacheLayer("attn", B, sp.Integer(8), sp.Integer(128), S)
        >>> layer.nbytes(), layer.nbytes(block_size=16)
        (4096*B*S, 65536*B*ceiling(S/16))

        DeepSeek V3's latent (512 features) and rotary key (64), per position:

        >>> one = sp.Integer(1)
        >>> CacheLayer("mla", B, one, sp.Integer(512), S, value_dim=sp.Integer(64)).nbytes()
        1152*B*S
        """
        positions = self.positions
        if block_size is not None:
            block = sp.sympify(block_size)
            if not (block.is_integer and block.is_positive):
                raise InvalidArgumentError(
                    "block_size must be a positive whole number of positions, got "
                    f"{shown(block_size)}."
                )
            positions = block * sp.ceiling(positions / block)
        element = _dtype(dtype).bytes
        if self.value_dim is None:
            return 2 * self.batch * self.kv_heads * self.head_dim * positions * element
        width = self.head_dim + self.value_dim
        return self.batch * self.kv_heads * width * positions * element


def cache_layers(model: Network) -> tuple[CacheLayer, ...]:
    """Return every attention layer's cache: key/value heads, width and cached positions.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> [(c.kv_heads, c.head_dim) for c in cache_layers(gpt2("small"))][:1]
    [(12, 64)]
    """
    found = []
    for row in model.rows:
        layer = row.layer
        if isinstance(layer, EncoderAttention):  # a vision tower's: runs once, caches nothing
            continue
        if isinstance(layer, LatentAttention):
            found.append(_latent(row.name, layer, row.input_shapes[0]))
        elif isinstance(layer, MultiHeadAttention):
            keys = layer.cache_tensors(row.input_shape)[0].shape  # (B, heads, S, d)
            found.append(CacheLayer(row.name, keys[0], keys[1], keys[3], keys[2]))
        elif isinstance(layer, GroupedQueryAttention):
            batch, sequence = row.input_shapes[0][:2]
            window = None if layer.window is None else sp.sympify(layer.window)
            found.append(
                CacheLayer(
                    row.name,
                    batch,
                    sp.sympify(layer.kv_heads),
                    sp.sympify(layer.head_dim),
                    layer.attended(sequence),
                    window,
                )
            )
    return tuple(found)


def _latent(name: str, layer: LatentAttention, query: tuple[sp.Expr, ...]) -> CacheLayer:
    """Return the cache of the latent (as one key head) and the rotary key (as its value)."""
    if layer.latent_dim is None:
        raise UnsupportedError(
            f"{layer.label}: its cache is the compressed latent (kv_lora_rank features) plus "
            "the rotary key, and this layer was built without latent_dim; pass "
            "LatentAttention(..., latent_dim=kv_lora_rank) or build it with "
            "memtheory.models.deepseek."
        )
    return CacheLayer(
        name,
        query[0],
        sp.Integer(1),
        sp.sympify(layer.latent_dim),
        query[1],
        value_dim=sp.sympify(layer.rope_dim),
    )
