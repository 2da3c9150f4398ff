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

This reading of the code path has not been checked to the byte:
``tests/pytorch/test_latent_cache.py`` measures a tiny DeepSeek V3 on CPU
and checks that the working memory estimated here is within
:data:`MEASURED_ERROR` of the measured one (the experts' routing, which this
module does not follow, is part of the gap). Serving engines (vLLM's MLA
kernels) absorb ``kv_b_proj`` into the query and the output and never
expand the cache: there the estimate is high.

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

__all__ = ["MEASURED_ERROR", "decode_step", "expansion", "prefill_attention"]

MEASURED_ERROR = 0.25
"""The largest relative error of the working memory, measured on a tiny DeepSeek V3 on CPU.

Checked by ``tests/pytorch/test_latent_cache.py`` (prefill and a decoding
step, fp32 and bf16); a tolerance, not a bound: the estimate may be low.
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


def prefill_attention(
    layer: LatentAttention, batch: sp.Expr, prompt: sp.Expr, hidden: sp.Expr, c: DType,
    flash: bool,
) -> sp.Expr:
    """Bytes at the latent attention's peak in the prefill, beside the weights and cache."""
    heads = sp.sympify(layer.heads)
    qk = sp.sympify(layer.nope_dim) + sp.sympify(layer.rope_dim)
    residual = 2 * batch * prompt * hidden * c.bytes
    queries = 2 * batch * prompt * heads * qk * c.bytes  # projected, rotated and concatenated
    held = residual + queries + expansion(layer, batch, prompt, c)
    if flash:
        return held + batch * prompt * heads * sp.sympify(layer.value_dim) * c.bytes
    return held + batch * heads * prompt * prompt * _per_score(c)


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
    throughout = token + 8 + 2 * sp.sympify(layer.rope_dim) * c.bytes
    # the stream, its normalised copy, the queries, the output and one position's expansion
    attention = prefill_attention(layer, batch, sp.Integer(1), hidden, c, True)
    attention += expansion(layer, batch, cached - 1, c)  # the rest of the expanded cache
    probabilities = sp.Integer(0)
    if not flash:
        throughout += batch * cached * c.bytes  # the (b, 1, 1, S) mask
        attention += batch * heads * cached * _per_score(c)
        probabilities = batch * heads * cached * c.bytes
    fp32 = as_dtype("fp32")
    moments = (
        attention,
        3 * token + probabilities + mlp,
        2 * token + batch * vocabulary * c.bytes,
    )
    return sp.Max(throughout + sp.Max(*moments), batch * vocabulary * (c.bytes + fp32.bytes))
