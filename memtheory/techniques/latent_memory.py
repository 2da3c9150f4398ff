r"""Working memory of DeepSeek's latent attention while generating: an estimate, not exact.

transformers' ``DeepseekV3Attention`` (and V2's) caches the compressed latent
(``kv_lora_rank`` features) and the shared rotary key per position, and at
every forward pass *expands* the whole cache with ``kv_b_proj`` into each
head's keys and values (``expand_kv``): the projection's output
:math:`(b, S, a (d_{nope} + d_v))` (the values are a view of it) and a new
key tensor :math:`(b, a, S, d_{qk})`. Those transients, beside the queries
(the projection's :math:`(b, P, a d_{qk})` and their rotated concatenation)
and the eager path's :math:`b a P S` scores (compute dtype, fp32 softmax and
probabilities, as Llama's), are what :func:`prefill_attention` and
:func:`decode_step` add to the residual stream.

Measured on CPU (``tests/pytorch/test_latent_cache.py``, tiny DeepSeek V3,
fp32 and bf16), the prefill and a decoding step are exact to the byte
whenever the attention or the logits hold the peak, with or without experts.
Where the mixture of experts holds it, the estimate is low: memtheory's
expert MLP (every token through one expert) is not transformers' routed,
grouped ``grouped_mm`` path; the largest gap measured is
:data:`MEASURED_ERROR` of the working memory. So the result is an
estimate, never a bound. Serving engines (vLLM's MLA kernels) absorb
``kv_b_proj`` into the query and the output and never expand the cache: for
them the decode term is likely high.

Examples
--------
>>> import sympy as sp
>>> from memtheory.dtypes import dtype
>>> from memtheory.layers.latent_attention import LatentAttention
>>> mla = LatentAttention(128, 128, 64, 128, latent_dim=512)
>>> expansion(mla, sp.Integer(1), sp.Integer(4096), dtype("bf16"))  # bytes, one sequence
469762048
"""

from __future__ import annotations

import sympy as sp

from memtheory.dtypes import DType
from memtheory.dtypes import dtype as as_dtype
from memtheory.layers.latent_attention import LatentAttention

__all__ = ["MEASURED_ERROR", "attention", "decode_step", "expansion", "prefill_attention"]

MEASURED_ERROR = 0.3
"""Largest relative error measured for the working memory (a tiny DeepSeek V3 on CPU, low).

0 where the attention or the logits hold the peak; up to 28% low where the
experts' MLP holds it (``tests/pytorch/test_latent_cache.py``). A tolerance,
not a bound.
"""


def expansion(layer: LatentAttention, batch: sp.Expr, positions: sp.Expr, c: DType) -> sp.Expr:
    """Bytes of ``expand_kv``'s ``kv_b_proj`` output and its key tensor over ``positions``."""
    heads, nope, rope, value = (sp.sympify(v) for v in (layer.heads, layer.nope_dim,
                                                         layer.rope_dim, layer.value_dim))
    return batch * positions * heads * (2 * nope + value + rope) * c.bytes


def _per_score(c: DType) -> sp.Expr:
    """Bytes per attention score in the eager path: its dtype, the fp32 softmax and the cast."""
    fp32 = as_dtype("fp32")
    return sp.Integer(c.bytes + fp32.bytes + (fp32.bytes if c != fp32 else 0))


def attention(
    layer: LatentAttention,
    batch: sp.Expr,
    queries: sp.Expr,
    positions: sp.Expr,
    hidden: sp.Expr,
    c: DType,
    flash: bool,
) -> sp.Expr:
    """Bytes at the attention's peak: ``queries`` tokens per sequence over ``positions`` cached.

    Beside the residual stream and its normalised copy: the query projection
    and its rotated concatenation (``q_pass`` is a view of the projection),
    the rotated rotary queries, ``kv_a_proj_with_mqa``'s output (the rotary
    key is a view of it), the expanded cache, and then the scores (in the
    compute dtype, fp32 softmax and its cast) or, at the value product, the
    probabilities, ``matmul``'s contiguous copy of the values (a view of the
    expansion; none for one sequence) and the output; with ``flash``, the output.
    """
    heads, nope, rope, value = (sp.sympify(v) for v in (layer.heads, layer.nope_dim,
                                                         layer.rope_dim, layer.value_dim))
    latent = sp.sympify(layer.latent_dim if layer.latent_dim is not None else 0)
    rows = batch * queries
    held = (2 * rows * hidden + 2 * rows * heads * (nope + rope) + rows * heads * rope
            + rows * (latent + rope)) * c.bytes + expansion(layer, batch, positions, c)
    output = rows * heads * value * c.bytes
    if flash:
        return held + output
    scores = rows * heads * positions
    # matmul folds (batch, heads) of the values, a view of the expansion, into one dimension:
    # a view for one sequence (or one head), else a contiguous copy
    copies = sp.Min(batch - 1, 1) if heads != 1 else sp.Integer(0)
    at_product = scores * c.bytes + copies * batch * heads * positions * value * c.bytes + output
    return held + sp.Max(scores * _per_score(c), at_product)


def prefill_attention(
    layer: LatentAttention, batch: sp.Expr, prompt: sp.Expr, hidden: sp.Expr, c: DType,
    flash: bool,
) -> sp.Expr:
    """Bytes at the latent attention's peak in the prefill, beside the weights and cache."""
    return attention(layer, batch, prompt, prompt, hidden, c, flash)


def decode_step(
    layer: LatentAttention,
    *,
    batch: sp.Expr,
    cached: sp.Expr,
    hidden: sp.Expr,
    vocabulary: sp.Expr,
    mlp: sp.Expr,
    c: DType,
    flash: bool,
) -> sp.Expr:
    """Bytes a decoding step holds beyond the weights and the cache of ``cached`` positions.

    The largest of the attention (the expanded cache, the queries, the
    scores), the MLP (``mlp``: its largest moment for ``batch`` tokens) and
    the logits, beside what the step keeps throughout (the token's embeddings,
    its int64 position, the mask and one position's rotary tables).
    """
    token = batch * hidden * c.bytes
    heads = sp.sympify(layer.heads)
    throughout = token + 8 + layer.rotary_bytes(1, c)
    held = attention(layer, batch, sp.Integer(1), cached, hidden, c, flash)
    probabilities = sp.Integer(0)
    if not flash:
        throughout += batch * cached * c.bytes  # the (b, 1, 1, S) mask
        probabilities = batch * heads * cached * c.bytes
    fp32 = as_dtype("fp32")
    moments = (
        held,
        3 * token + probabilities + mlp,
        2 * token + batch * vocabulary * c.bytes,
    )
    return sp.Max(throughout + sp.Max(*moments), batch * vocabulary * (c.bytes + fp32.bytes))
