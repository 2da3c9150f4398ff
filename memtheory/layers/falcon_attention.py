"""Falcon's eager attention: the counts of grouped-query attention, a different backward.

Falcon computes its attention with code of its own (transformers 5.24
``models/falcon/modeling_falcon.py``, ``FalconAttention.forward``): the
multi-query key and value are indexed out of the fused projection
(``fused_qkv[..., [-2], :]``, copies) and never repeated per head (the
matmul broadcasts them), the scores are divided in place, and the softmax
runs in the model's dtype (``F.softmax(..., dtype=hidden_states.dtype)``)
where Llama's eager attention takes it in fp32. Its parameters and
activations are those of :class:`~memtheory.layers.GroupedQueryAttention`;
what its backward keeps is not modelled, so the autograd convention refuses it.

Examples
--------
>>> from memtheory.symbols import B, S
>>> attn = FalconAttention(4, kv_heads=1, head_dim=8)
>>> attn.merged_shape(((B, S, 32), (B, S, 8), (B, S, 8)))
(B, S, 32)
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.layers.grouped_attention import GroupedQueryAttention

__all__ = ["FalconAttention"]


@dataclass(frozen=True)
class FalconAttention(GroupedQueryAttention):
    """:class:`~memtheory.layers.GroupedQueryAttention` as Falcon's eager code runs it.

    Measured on tiny Falcon models (CPU, PyTorch 2.13, batch 2, 6 tokens,
    ``tests/pytorch/test_family_autograd.py``), the grouped-query plan keeps
    32 bytes too few in fp32 and 2,272 bytes too many in bf16, every other
    component exact: the autograd convention refuses it. The saved tensors
    match once the softmax is kept in the model's dtype alone (Llama's keeps
    an fp32 one too: 1,152 bytes a layer there) but for 32 bytes, which fit
    the two one-element int64 indices each multi-query layer's
    ``[..., [-2], :]`` and ``[..., [-1], :]`` keep. With the softmax and its
    gradient in the model's dtype, the backward of a 160-token bf16 step
    still peaks 49,944 bytes below the measured one: its backward nodes are
    not those of Llama's eager attention, and are not modelled.

    Examples
    --------
    >>> FalconAttention(4, kv_heads=1, head_dim=8).autograd_checked
    False
    """

    kind = "FalconAttention"
    autograd_checked = False
    autograd_refusal = (
        "Falcon's eager attention is its own code (transformers 5.24 modeling_falcon.py): "
        "multi-query keys and values indexed out of the fused projection and broadcast by the "
        "matmul, not repeated per head, and the softmax in the model's dtype, not fp32. "
        "Measured on a tiny Falcon (CPU, PyTorch 2.13) the grouped-query plan's saved "
        "activations are 32 bytes low in fp32 and 2,272 bytes high in bf16, every other "
        "component exact. convention='breakdown' gives an estimate."
    )
