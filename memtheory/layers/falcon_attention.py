"""Falcon's eager attention: the counts of grouped-query attention, a backward of its own.

Falcon computes its attention with code of its own (transformers 5.24
``models/falcon/modeling_falcon.py``, ``FalconAttention.forward``): the
multi-query key and value are indexed out of the fused projection
(``fused_qkv[..., [-2], :]``, copies that keep a one-element int64 index
each) and never repeated per head (``matmul`` broadcasts them, and sums
their per-head gradients right after its ``bmm``), the scores are divided in
place, and the softmax runs in the model's dtype
(``F.softmax(..., dtype=hidden_states.dtype)``) where Llama's eager attention
takes it in fp32. Its forward peaks inside it, at the softmax. The 40B
layout (``new_decoder_architecture``) copies its queries, keys and values to
every head first (:class:`FalconSplit`). Its parameters and activations are
those of :class:`~memtheory.layers.GroupedQueryAttention`; what PyTorch keeps
is its kernel plan's to say,
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
from typing import Literal

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidArgumentError, ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec, describe_shape
from memtheory.layers.grouped_attention import GroupedQueryAttention

__all__ = ["FalconAttention", "FalconSplit"]


@dataclass(frozen=True)
class FalconAttention(GroupedQueryAttention):
    """:class:`~memtheory.layers.GroupedQueryAttention` as Falcon's eager code runs it.

    Its forward peaks inside it, at the softmax, where the scores, their sum
    with the causal mask and the probabilities are alive and the values'
    per-head copy and the output are not yet: the kernel plan lists those
    moments (:class:`~memtheory.layers.base.ForwardMoment`). The causal mask
    ``(B, 1, S, S)`` and the positions are the model's
    (:mod:`memtheory.layers.causal_mask`). With ``broadcast``
    (``new_decoder_architecture``, the Falcon-40B/180B layout) its keys and
    values arrive broadcast to every head (:class:`FalconSplit`), so it
    computes as multi-head attention; its ``kv_heads`` stay the model's
    (the projection's, and what a serving cache keeps).

    Measured on tiny Falcon models (CPU, PyTorch 2.13, transformers 5.24,
    ``tests/pytorch/test_family_autograd.py``): a training step of each
    layout (7B-style multi-query, 40B ``new_decoder_architecture``,
    sequential), in fp32, bf16 and under autocast, at 6 and 160 positions
    and at a size tuned for none of them, is exact in every component and in
    its peak, whether that is at the forward's softmax or in the backward;
    so is transformers' ``Trainer`` step with eager attention (autocast over
    bf16 weights, fused AdamW; ``tests/pytorch/test_peft_tied.py``). With
    ``flash`` it is Falcon's SDPA call (``attn_implementation="sdpa"``,
    transformers' default), exact in the same steps: on fewer key/value
    heads than query heads PyTorch runs its math path (fp32 copies), on as
    many its CPU flash kernel with each layer's cast of the mask
    (:func:`~memtheory.conventions.autograd.kernels.torch_2_13.attention.falcon_attention`).

    Parameters
    ----------
    broadcast : bool, default False
        Keys and values of ``heads * head_dim`` features, broadcast to every
        head before it (``new_decoder_architecture``).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> FalconAttention(4, kv_heads=1, head_dim=8).autograd_checked
    True
    >>> FalconAttention(4, kv_heads=2, head_dim=8, broadcast=True).merged_shape(
    ...     ((B, S, 32), (B, S, 32), (B, S, 32)))
    (B, S, 32)
    """

    broadcast: bool = False
    kind = "FalconAttention"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py, test_peft_tied.py

    @property
    def sdpa_math(self) -> bool:
        """Whether Falcon's SDPA call runs PyTorch's math path (S x S probabilities kept).

        Falcon passes SDPA its boolean causal mask and never ``enable_gqa``: with
        fewer key/value heads than query heads (the 7B layout) only the math
        path takes the call; broadcast keys and values (the 40B layout) or as
        many heads as queries go to a fused kernel.

        Examples
        --------
        >>> FalconAttention(4, kv_heads=1, head_dim=8, flash=True).sdpa_math
        True
        >>> FalconAttention(4, kv_heads=1, head_dim=8, flash=True, broadcast=True).sdpa_math
        False
        """
        return bool(self.flash and not self.broadcast
                    and sp.sympify(self.kv_heads) != sp.sympify(self.heads))

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return ``(B, S, heads * head_dim)``; with ``broadcast`` keys and values as wide."""
        if not self.broadcast:
            return super().merged_shape(input_shapes)
        every = GroupedQueryAttention(self.heads, head_dim=self.head_dim, name=self.name)
        return every.merged_shape(input_shapes)

    def describe(self) -> str:
        """Heads, key/value heads, and whether they arrive broadcast."""
        return super().describe() + (", keys and values broadcast" if self.broadcast else "")


_PARTS = ("query", "key", "value")


@dataclass(frozen=True)
class FalconSplit(Layer):
    """One part of Falcon-40B's fused projection, copied to every head (``_split_heads``).

    transformers 5.24 ``FalconAttention._split_heads`` with
    ``new_decoder_architecture``: the projection is viewed as ``(B, S,
    kv_heads, groups + 2, head_dim)``; the queries ``[..., :-2, :]`` are
    flattened into a copy, ``(B, S, heads * head_dim)``; the keys (values)
    ``[..., [-2], :]`` are indexed into a copy of the key/value heads (which
    keeps its one-element int64 index for the backward), broadcast to the
    ``groups`` query heads of each and flattened into a copy of every head.
    The index copy is freed once the split returns. The backward of the
    queries' copy hands the gradient on as a view; that of the keys' (values')
    sums each group's gradients into a key/value-sized one. The slice of the
    projection before it is a :class:`~memtheory.layers.split.Slice`, whose
    backward makes the projection-sized gradient (the index's ``index_put``).

    Parameters
    ----------
    part : {"query", "key", "value"}
    groups : size
        Query heads per key/value head (``heads // kv_heads``).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> FalconSplit("key", 4).output_shape((B, S, 16))
    (B, S, 64)
    >>> [t.label for t in FalconSplit("key", 4).autograd(((B, S, 16),)).saved]
    ['index']
    """

    part: Literal["query", "key", "value"]
    groups: SizeLike = 1
    name: str | None = None
    kind = "FalconSplit"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        if self.part not in _PARTS:
            raise InvalidArgumentError(
                f"{self.label}: part must be one of {', '.join(_PARTS)}, got {self.part!r}."
            )
        object.__setattr__(self, "groups", as_size(self.groups, "groups", self.label))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape, its features times ``groups`` for keys and values."""
        if len(input_shape) != 3:
            raise ShapeError(
                f"{self.label}: reads (batch, sequence, features), got "
                f"{describe_shape(tuple(input_shape))}."
            )
        widen = 1 if self.part == "query" else self.groups
        return (*tuple(input_shape)[:2], sp.sympify(input_shape[2]) * widen)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the keys' (values') one-element int64 index; nothing for the queries."""
        if self.part == "query":
            return ()
        return (TensorSpec("intermediate", (1,), as_dtype("int64"), label="index"),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its copy; for keys and values the index copy (freed) and a group-summed gradient."""
        shape = tuple(input_shapes[0])
        saved = self.saved_for_backward(shape)
        if self.part == "query":
            return Autograd(gradient_is_view=True)
        if sp.sympify(self.groups) == 1:  # the flatten of the index copy is a view of it
            return Autograd(saved=saved, gradient_is_view=True)
        return Autograd(
            saved=saved,
            transients=(TensorSpec("intermediate", shape, label="index copy"),),
            stages=(Stage("broadcast", (0,), edges=((-1, TensorSpec("intermediate", shape)),)),),
        )

    def describe(self) -> str:
        """Say the part, and its groups."""
        return self.part + (f", {self.groups} groups" if self.part != "query" else "")
