r"""Causal attention over projected queries, keys and values, with grouped key/value heads.

The attention of the Llama family (Llama, Mistral, Qwen2, Gemma, Mixtral):
the projections are separate :class:`~memtheory.layers.Dense` layers and the
rotation is :class:`~memtheory.layers.Rotary`, so this layer is only what
Hugging Face's ``eager_attention_forward`` does between them. :math:`a` query
heads share :math:`a_{kv}` key/value heads (grouped-query attention;
:math:`a_{kv} = 1` is multi-query attention, :math:`a_{kv} = a` ordinary
multi-head attention); ``repeat_kv`` copies each key/value head to its group
before the scores. A sliding window (Mistral) limits how far back a position
attends; it changes the mask and the key/value cache, not the tensors a
training step keeps (the eager path still computes every score). Derived in
the book's chapter "Transformers".

Examples
--------
>>> from memtheory.symbols import B, S
>>> attn = GroupedQueryAttention(32, kv_heads=8, head_dim=128)
>>> attn.merged_shape(((B, S, 4096), (B, S, 1024), (B, S, 1024)))
(B, S, 4096)
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._validation import SizeLike, as_size, check_kv_heads, check_probability
from memtheory.dtypes import DTypeLike
from memtheory.errors import ShapeError
from memtheory.layers.base import Autograd, Shape, describe_shape
from memtheory.layers.kernel_plans import planned_autograd
from memtheory.layers.merge import Merge

__all__ = ["GroupedQueryAttention"]


@dataclass(frozen=True)
class GroupedQueryAttention(Merge):
    r"""Scaled dot-product attention of rotated queries and keys, and values; no parameters.

    A merge of three inputs: queries ``(B, S, a d)``, keys and values
    ``(B, S, a_kv d)``; its output ``(B, S, a d)`` is the heads' output in
    the layout the output projection reads.

    What a training step keeps (``flash=False``, Hugging Face's eager path,
    measured on CPU with PyTorch 2.13 on ``LlamaForCausalLM``): contiguous
    copies of the queries and of the keys for :math:`QK^\top` (``matmul``
    reshapes the head-split views; with groups, ``repeat_kv``'s copy), the
    softmax output in fp32 (Hugging Face's ``softmax(..., dtype=float32)``),
    its cast back to the compute dtype when that is not fp32 (which the second
    ``matmul`` keeps), with dropout its mask and the dropped probabilities, and
    a contiguous copy of the values (``repeat_kv``'s, or ``matmul``'s).

    With ``flash=True`` (a CUDA memory-efficient kernel, FlashAttention-2 or
    PyTorch's SDPA memory-efficient path: an assumption this CPU-measured
    library cannot check) no :math:`S^2` tensor is kept: the queries, keys and
    values as they arrive, the output and one fp32 log-sum-exp per row and head.

    Parameters
    ----------
    heads : size
        Query heads :math:`a`.
    kv_heads : size, optional
        Key/value heads :math:`a_{kv}`, dividing ``heads``; default ``heads``.
    head_dim : size
        Width :math:`d` of one head.
    window : size, optional
        Sliding window: each position attends to at most this many positions
        (itself included), as Mistral's ``sliding_window``. None: all earlier ones.
    dropout : float, default 0.0
        Dropout on the attention probabilities (``attention_dropout``).
    flash : bool, default False
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> attn = GroupedQueryAttention(4, kv_heads=2, head_dim=8)
    >>> [(t.shape, t.dtype.name) for t in attn.autograd(
    ...     ((B, S, 32), (B, S, 16), (B, S, 16)), input_dtype="bf16").saved]
    ... # doctest: +NORMALIZE_WHITESPACE
    [((B, 4, S, 8), 'bf16'), ((B, 4, S, 8), 'bf16'), ((B, 4, S, S), 'fp32'),
     ((B, 4, S, S), 'bf16'), ((B, 4, S, 8), 'bf16')]
    """

    heads: SizeLike
    kv_heads: SizeLike | None = None
    head_dim: SizeLike = 64
    window: SizeLike | None = None
    dropout: float = 0.0
    flash: bool = False
    name: str | None = None
    kind = "GroupedQueryAttention"
    autograd_checked = True  # tests/pytorch/test_llama_autograd.py
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        owner = self.label
        set_ = object.__setattr__
        set_(self, "heads", as_size(self.heads, "heads", owner))
        set_(self, "head_dim", as_size(self.head_dim, "head_dim", owner))
        set_(self, "kv_heads", as_size(self.kv_heads or self.heads, "kv_heads", owner))
        if self.window is not None:
            set_(self, "window", as_size(self.window, "window", owner))
        check_kv_heads(self.heads, self.kv_heads, owner)
        check_probability(self.dropout, "dropout", owner)

    @property
    def groups(self) -> sp.Expr:
        """Query heads per key/value head (``num_key_value_groups``)."""
        return sp.sympify(self.heads) / sp.sympify(self.kv_heads)

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return ``(B, S, heads * head_dim)`` after checking the three inputs' widths."""
        if len(input_shapes) != 3:
            raise ShapeError(
                f"{self.label}: reads three tensors, queries, keys and values, got "
                f"{len(input_shapes)}."
            )
        query, key, value = (tuple(s) for s in input_shapes)
        heads, kv_heads, width = (
            sp.sympify(self.heads), sp.sympify(self.kv_heads), sp.sympify(self.head_dim)
        )
        wanted = (heads * width, kv_heads * width, kv_heads * width)
        for what, shape, width in zip(("queries", "keys", "values"), (query, key, value), wanted,
                                      strict=True):
            gap = sp.expand(shape[-1] - width) if len(shape) == 3 else sp.Integer(1)
            if gap.is_number and gap != 0:
                raise ShapeError(
                    f"{self.label}: its {what} should be (batch, sequence, {width}) for "
                    f"{self.heads} heads, {self.kv_heads} key/value heads of {self.head_dim}, "
                    f"got {describe_shape(shape)}. Check heads, kv_heads and head_dim."
                )
        return query

    def attended(self, sequence: SizeLike) -> sp.Expr:
        """Return how many positions the last one attends to: the sequence, or the window.

        Examples
        --------
        >>> from memtheory.symbols import S
        >>> GroupedQueryAttention(8, head_dim=4, window=4096).attended(S)
        Min(4096, S)
        """
        sequence = sp.sympify(sequence)
        return sequence if self.window is None else sp.Min(sequence, self.window)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return the storages its backward keeps (see the class docstring), with their dtypes.

        Its forward runs as one moment of the autograd convention, with its
        saved tensors, its output and one fp32 score tensor alive together: an
        upper bound of the forward's real peak inside it (at the softmax, before
        the values' copy and the output exist), high by exactly those two
        ``(B, H, S, d)`` tensors (measured). Not modelled: the eager causal mask
        ``(B, 1, S, S)`` and the positions that ``LlamaModel.forward`` keeps
        for its whole duration (they matter only where the step peaks in the
        forward pass; the backward peak is exact).

        Under autocast the rotated queries and keys arrive in fp32 (see
        :class:`~memtheory.layers.Rotary`) and ``matmul`` casts them to the low
        dtype, its compute dtype, as it does the fp32 probabilities. The
        formulas assume at least two sequences of at least two positions (at
        batch 1 or
        sequence 1 PyTorch's reshapes become views and the copies are not made).
        How PyTorch runs it is its kernel plan's to say,
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.attention.grouped_query_attention`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def describe(self) -> str:
        """Heads, key/value heads, window, dropout, flash."""
        parts = [f"{self.heads} heads", f"{self.kv_heads} kv heads", f"head_dim {self.head_dim}"]
        if self.window is not None:
            parts.append(f"window {self.window}")
        if self.dropout:
            parts.append(f"dropout {self.dropout}")
        if self.flash:
            parts.append("flash")
        return ", ".join(parts)
