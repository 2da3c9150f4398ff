"""Falcon's eager attention: the counts of grouped-query attention, a backward of its own.

Falcon computes its attention with code of its own (transformers 5.24
``models/falcon/modeling_falcon.py``, ``FalconAttention.forward``): the
multi-query key and value are indexed out of the fused projection
(``fused_qkv[..., [-2], :]``, copies that keep a one-element int64 index
each) and never repeated per head (``matmul`` broadcasts them, and sums
their per-head gradients right after its ``bmm``), the scores are divided in
place, and the softmax runs in the model's dtype
(``F.softmax(..., dtype=hidden_states.dtype)``) where Llama's eager attention
takes it in fp32. Its parameters and activations are those of
:class:`~memtheory.layers.GroupedQueryAttention`; what PyTorch keeps is its
kernel plan's to say,
:func:`memtheory.conventions.autograd.kernels.torch_2_13.attention.falcon_attention`.

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

    Measured on tiny Falcon models (CPU, PyTorch 2.13, transformers 5.24,
    ``tests/pytorch/test_family_autograd.py``): with the kernel plan, a
    6-token step of each layout (7B-style multi-query, 40B
    ``new_decoder_architecture``, sequential) at two sizes, in fp32, bf16
    and under autocast, is exact in every component, and but for the 40B
    layout in its peak too; the backward of a 160-token multi-query or
    sequential step peaks exactly. Two things are
    not modelled, so the autograd convention still refuses it: the forward
    peaks inside it at the softmax, where the eager causal mask
    ``(B, 1, S, S)`` and the two score-sized tensors are alive and the
    values' copy and the output are not yet (one forward moment cannot show
    that: a 160-token bf16 multi-query step peaks 65,272 bytes above the
    prediction); and ``new_decoder_architecture`` broadcasts its keys and
    values to every head before the rotary embedding, copies not modelled
    (its 160-token bf16 backward peaks 31,872 bytes above).

    Examples
    --------
    >>> FalconAttention(4, kv_heads=1, head_dim=8).autograd_checked
    False
    """

    kind = "FalconAttention"
    autograd_checked = False
    autograd_refusal = (
        "Falcon's eager attention (transformers 5.24 modeling_falcon.py) peaks in its forward, "
        "at the softmax, with the causal mask (B, 1, S, S) alive, which the autograd "
        "convention's one forward moment does not show: a 160-token bf16 multi-query step "
        "peaks 65,272 bytes above it (CPU, PyTorch 2.13); new_decoder_architecture's keys and "
        "values, broadcast to every head before the rotary embedding, are not modelled either. "
        "Its saved tensors and the multi-query backward are exact. "
        "convention='breakdown' gives an estimate."
    )
