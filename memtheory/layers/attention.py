r"""Multi-head self-attention, with or without the :math:`s^2` score tensors.

For an input of :math:`b` sequences of :math:`s` positions and :math:`h`
features, :math:`a` heads of width :math:`d = h/a` compute queries, keys and
values (one fused projection), the :math:`a \times s \times s` attention
probabilities of every sequence, a weighted sum of the values, and an output
projection. The probabilities grow with :math:`s^2`: a memory-efficient
(flash) kernel never stores them, and recomputes them in the backward pass.
Derived in the book's chapter "Transformers".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy as sp

from memtheory._validation import SizeLike, as_size, check_kv_heads, check_probability
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidSizeError, RankError, ShapeError
from memtheory.layers.base import (
    Autograd,
    Layer,
    Shape,
    TensorSpec,
    describe_shape,
    elements,
)
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["MultiHeadAttention"]

_BOOL = as_dtype("bool")


@dataclass(frozen=True)
class MultiHeadAttention(Layer):
    r"""Self-attention over a ``(batch, sequence, features)`` input, projections included.

    Parameters: the query, key and value projections and the output
    projection, :math:`4h^2` weights and :math:`4h` biases when the heads span
    the features (fewer key/value heads shrink the key and value projections).

    What the backward pass keeps depends on the implementation, and is
    measured on CPU (PyTorch 2.13). The layer only records the kernel choices
    (``flash``, ``implementation``, ``device``, ``causal`` with
    ``mask_buffer``, ``additive_mask``, ``packed``); how each runs is the
    kernel plan's to say
    (:mod:`memtheory.conventions.autograd.kernels.torch_2_13.attention`, which
    :meth:`autograd` asks, storage by storage for any dtype, mode and autocast
    setting):

    * ``implementation="eager"`` (default): attention written out with
      ``matmul`` and ``softmax``, as Hugging Face's GPT-2 and BERT eager paths
      do. It keeps the input of the fused query/key/value projection; copies of
      the queries and keys (for :math:`QK^\top`); the softmax output :math:`P`;
      with attention dropout, its mask (one ``bool`` byte per element from
      CUDA's fused dropout, the default as for :class:`Dropout`; the activation
      dtype on CPU, ``device="cpu"``) and the dropped probabilities; a copy of the values (for
      :math:`PV`); and the heads' output (the input of the output projection).
      These are the tensors of Korthikanti et al. 2022, Section 4.1.
    * ``implementation="torch"``: ``torch.nn.MultiheadAttention`` (batch first,
      ``need_weights=False``). On CPU, without active dropout, PyTorch runs its
      CPU flash kernel (no :math:`s^2` tensor kept; Q, K and V are views of the
      packed projection, which stays alive whole); with dropout in training its
      math path, which keeps fp32 copies at 16 bits.
    * ``flash=True``: a CUDA flash kernel (Dao et al. 2022), an assumption this
      CPU-measured library cannot check: it keeps the input, queries, keys,
      values and output, plus one fp32 log-sum-exp per row and head, and
      regenerates the dropout mask from the random seed.

    Parameters
    ----------
    heads : size
        Number of attention heads :math:`a`.
    head_dim : size, optional
        Width of one head; defaults to ``features / heads``.
    kv_heads : size, optional
        Key/value heads (grouped-query attention); defaults to ``heads``.
    dropout : float, default 0.0
        Dropout probability on the attention probabilities.
    bias : bool, default True
        Whether the projections have biases.
    flash : bool, default False
        A CUDA memory-efficient kernel that does not keep the :math:`s^2`
        tensors (documented assumption, not measured). With ``device="cpu"``:
        transformers' SDPA call on the CPU, whose flash kernel keeps the same
        tensors, except in training with ``dropout``, which that kernel
        refuses: then SDPA's math path keeps the :math:`s^2` probabilities,
        the dropout noise and the dropped probabilities, in fp32 with Q, K
        and V at 16 bits (measured against transformers' GPT-2).
    implementation : {"eager", "torch"}, default "eager"
        Hugging Face-style eager attention, or ``torch.nn.MultiheadAttention``
        (which needs ``head_dim`` and ``kv_heads`` left unset).
    device : {"cuda", "cpu"} or None, default None
        Where the eager attention's dropout runs: its mask is ``bool`` on CUDA
        (and by default), the activation dtype on CPU (measured).
    causal : bool, default False
        Each position attends to itself and earlier ones (GPT-2): the eager
        path masks the scores with ``torch.where(causal_mask, scores,
        finfo.min)``, whose backward keeps the ``bool`` condition. Measured on
        CPU for ``implementation="eager"`` only.
    mask_buffer : size, optional
        With ``causal``: the condition is a slice of a registered ``(1, 1, n,
        n)`` ``bool`` buffer (Hugging Face's GPT-2 ``bias`` buffer, ``n`` =
        ``n_positions``), which the backward keeps whole as a buffer. Unset,
        the condition is built in every forward pass, ``(S, S)``, and kept as
        a saved activation.
    packed : bool, default True
        One fused query/key/value projection (``nn.MultiheadAttention``'s
        ``in_proj``, GPT-2's ``c_attn``); ``False``: three (Hugging Face's
        BERT ``query``, ``key``, ``value``), each a parameter tensor of its
        own, and under autocast each casting the input again (autocast caches
        only its casts of parameters). Eager only.
    additive_mask : bool, default False
        The eager path adds a float mask to the scores, as Hugging Face 5's
        eager attention does with the fp32 mask of ``create_causal_mask``
        (GPT-2's causal mask). The sum saves nothing, but under autocast it
        is fp32: the softmax keeps fp32 probabilities, which are cast back to
        the values' dtype (``attn_weights.type(value.dtype)``) before the
        dropout. Measured on CPU against ``GPT2LMHeadModel``
        (``tests/pytorch/test_hugging_face.py``). Mutually exclusive with
        ``causal`` (``torch.where``, Hugging Face 4).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> attn = MultiHeadAttention(12, dropout=0.1)
    >>> attn.output_shape((B, S, 768)), attn.parameter_count((B, S, 768))
    ((B, S, 768), 2362368)
    >>> [t.shape for t in attn.saved_for_backward((B, S, 768)) if t.role == "mask"]
    [(B, 12, S, S)]
    >>> MultiHeadAttention(12, flash=True).activation_count((B, S, 768))
    3840*B*S
    >>> torch_attn = MultiHeadAttention(12, implementation="torch")
    >>> [t.shape for t in torch_attn.saved_for_backward((B, S, 768))][1]  # packed Q, K, V
    (B, S, 2304)
    """

    heads: SizeLike
    head_dim: SizeLike | None = None
    kv_heads: SizeLike | None = None
    dropout: float = 0.0
    bias: bool = True
    flash: bool = False
    implementation: Literal["eager", "torch"] = "eager"
    device: Literal["cuda", "cpu"] | None = None
    causal: bool = False
    mask_buffer: SizeLike | None = None
    additive_mask: bool = False
    packed: bool = True
    name: str | None = None
    kind = "MultiHeadAttention"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py
    input_rank = 3

    def __post_init__(self) -> None:
        owner = self.label
        set_ = object.__setattr__
        set_(self, "heads", as_size(self.heads, "heads", owner))
        if self.head_dim is not None:
            set_(self, "head_dim", as_size(self.head_dim, "head_dim", owner))
        if self.kv_heads is not None:
            set_(self, "kv_heads", as_size(self.kv_heads, "kv_heads", owner))
            check_kv_heads(self.heads, self.kv_heads, owner)
        check_probability(self.dropout, "dropout", owner)
        if self.implementation not in ("eager", "torch"):
            raise InvalidSizeError(
                f"{owner}: implementation must be 'eager' or 'torch', got {self.implementation!r}."
            )
        if self.device not in (None, "cuda", "cpu"):
            raise InvalidSizeError(
                f"{owner}: device must be 'cuda' or 'cpu', got {self.device!r}."
            )
        if self.mask_buffer is not None:
            set_(self, "mask_buffer", as_size(self.mask_buffer, "mask_buffer", owner))
            if not self.causal:
                raise InvalidSizeError(
                    f"{owner}: mask_buffer holds a causal mask; set causal=True."
                )
        if self.additive_mask and (self.causal or self.implementation != "eager" or self.flash):
            raise InvalidSizeError(
                f"{owner}: additive_mask is Hugging Face 5's eager attention (a float mask "
                "added to the scores); it needs implementation='eager', and replaces causal "
                "(torch.where) rather than joining it."
            )
        if not self.packed and (self.implementation != "eager" or self.flash):
            raise InvalidSizeError(
                f"{owner}: separate query/key/value projections (packed=False) are measured "
                "for implementation='eager' only."
            )
        if self.causal and (self.implementation != "eager" or self.flash):
            raise InvalidSizeError(
                f"{owner}: a causal mask is measured for implementation='eager' (Hugging "
                "Face's torch.where on the scores) only; the torch and flash kernels take "
                "is_causal, which memtheory has not measured."
            )
        if self.implementation == "torch" and (
            self.kv_heads is not None or self.head_dim is not None
        ):
            raise InvalidSizeError(
                f"{owner}: torch.nn.MultiheadAttention splits the features evenly over its "
                "heads and has no key/value heads; leave head_dim and kv_heads unset or use "
                "implementation='eager'."
            )

    # -- sizes -------------------------------------------------------------------------
    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless the input is ``(batch, sequence, features)``."""
        if len(input_shape) != 3:
            raise RankError(
                f"{self.label}: needs a 3-D input (batch, sequence, features), got "
                f"{len(input_shape)}-D {describe_shape(tuple(input_shape))}. Feed it token "
                "embeddings, e.g. Input((S,)) then Embedding(vocab, width)."
            )

    def width(self, input_shape: Shape) -> sp.Expr:
        """Return the width of one head: ``head_dim``, or features / heads.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> MultiHeadAttention(12).width((B, S, 768))
        64
        """
        if self.head_dim is not None:
            return self.head_dim
        features = input_shape[-1]
        remainder = sp.Mod(features, self.heads)
        if remainder.is_number and remainder != 0:
            raise ShapeError(
                f"{self.label}: {features} features do not split into {self.heads} heads. "
                "Choose heads that divide the width, or pass head_dim."
            )
        return features / self.heads

    def _key_heads(self) -> sp.Expr:
        return self.heads if self.kv_heads is None else self.kv_heads

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape: one output vector per position."""
        self.check_input(input_shape)
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """Query, key, value and output projection weights."""
        self.check_input(input_shape)
        features, width = input_shape[-1], self.width(input_shape)
        inner, kv_inner = self.heads * width, self._key_heads() * width
        return features * inner + 2 * features * kv_inner + inner * features

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """Query, key, value and output projection biases, if any."""
        if not self.bias:
            return sp.Integer(0)
        width = self.width(input_shape)
        return self.heads * width + 2 * self._key_heads() * width + input_shape[-1]

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """Return the packed query/key/value projection, then the output projection.

        Names and shapes as ``torch.nn.MultiheadAttention`` registers them.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> [shape for _, shape in MultiHeadAttention(12).parameter_shapes((B, S, 768))]
        [(2304, 768), (2304,), (768, 768), (768,)]
        """
        self.check_input(input_shape)
        features, width = input_shape[-1], self.width(input_shape)
        inner = self.heads * width
        packed = inner + 2 * self._key_heads() * width
        shapes: list[tuple[str, Shape]] = []
        if self.packed:
            shapes.append(("in_proj_weight", (packed, features)))
            if self.bias:
                shapes.append(("in_proj_bias", (packed,)))
        kv_inner = self._key_heads() * width
        separate = (("query", inner), ("key", kv_inner), ("value", kv_inner))
        for part, rows in separate if not self.packed else ():
            shapes.append((f"{part}.weight", (rows, features)))
            if self.bias:
                shapes.append((f"{part}.bias", (rows,)))
        shapes.append(("out_proj.weight", (features, inner)))
        if self.bias:
            shapes.append(("out_proj.bias", (features,)))
        return tuple(shapes)

    # -- memory ------------------------------------------------------------------------
    def tensor_shapes(self, input_shape: Shape) -> dict[str, Shape]:
        """Return the shape of each tensor attention computes, by name (``"queries"``).

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> MultiHeadAttention(12).tensor_shapes((B, S, 768))["probabilities"]
        (B, 12, S, S)
        """
        batch, sequence, features = input_shape
        width = self.width(input_shape)
        heads, key_heads = self.heads, self._key_heads()
        return {
            "queries": (batch, heads, sequence, width),
            "keys": (batch, key_heads, sequence, width),
            "values": (batch, key_heads, sequence, width),
            "probabilities": (batch, heads, sequence, sequence),
            "heads_output": (batch, sequence, heads * width),
            "packed": (batch, sequence, (heads + 2 * key_heads) * width),
            "row_statistics": (batch, heads, sequence),
            "input": (batch, sequence, features),
        }

    def cache_tensors(self, input_shape: Shape) -> tuple[TensorSpec, TensorSpec]:
        """Return the keys and values an inference cache keeps for ``input_shape``'s positions.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> [t.shape for t in MultiHeadAttention(12).cache_tensors((B, S, 768))]
        [(B, 12, S, 64), (B, 12, S, 64)]
        """
        self.check_input(input_shape)
        shapes = self.tensor_shapes(input_shape)
        return (
            TensorSpec("intermediate", shapes["keys"]),
            TensorSpec("intermediate", shapes["values"]),
        )

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return every storage the backward pass keeps, once each, with its dtype.

        How PyTorch runs attention (eager, ``scaled_dot_product_attention``'s
        CPU flash or math path, the eval fast path, a CUDA flash kernel) is
        not the layer's to know: it asks its kernel plan,
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.attention.multi_head_attention`,
        which lists the storages path by path. The projection weights and
        their autocast copies are not listed (the autograd convention adds
        them, as for :class:`~memtheory.layers.Dense`).

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> attn = MultiHeadAttention(12, dropout=0.1, implementation="torch")
        >>> [(s.shape, s.dtype.name) for s in attn.autograd(((B, S, 768),), input_dtype="bf16")
        ...  .saved if s.role == "mask"]
        [((B, 12, S, S), 'fp32')]
        >>> eager = MultiHeadAttention(12, dropout=0.1, device="cpu")
        >>> [s.dtype.name for s in eager.autograd(((B, S, 768),), input_dtype="bf16").saved
        ...  if s.role == "mask"]
        ['bf16']
        >>> flash = MultiHeadAttention(12, implementation="torch")  # no dropout: the flash path
        >>> [s.shape for s in flash.autograd(((B, S, 768),)).saved][:2]
        [(B, S, 768), (B, S, 2304)]
        >>> attn.autograd(((B, S, 768),), training=False).no_grad  # eval, no_grad: the fast path
        ()
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what a training step keeps, in the order the forward pass makes it.

        :meth:`autograd` for an fp32 run, with the activation dtype left
        unspecified (``None``) where it follows the run's dtype. At 16 bits the
        torch implementation keeps a different set (its CPU math path
        upcasts): ask :meth:`autograd` with the input dtype.
        """
        return self.autograd((tuple(input_shape),)).saved

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of the tensors a training step creates and keeps, its output included.

        Every storage of :meth:`saved_for_backward` in the activation dtype
        except the input (it belongs to the layer before), plus the output.
        fp32 statistics are left to the saved tensors.
        """
        count = elements(self.output_shape(input_shape))
        for spec in self.saved_for_backward(input_shape):
            if spec.role != "input" and spec.dtype is None:
                count += spec.elements
        return sp.expand(count)

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the causal mask's ``bool`` buffer, with ``mask_buffer``.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> attn = MultiHeadAttention(12, causal=True, mask_buffer=1024)
        >>> [(t.shape, t.dtype.name) for t in attn.buffers((B, S, 768))]
        [((1, 1, 1024, 1024), 'bool')]
        """
        if self.causal and self.mask_buffer is not None:
            side = self.mask_buffer
            return (TensorSpec("buffer", (sp.Integer(1), sp.Integer(1), side, side), _BOOL),)
        return ()

    def describe(self) -> str:
        """Heads, and any grouped keys, dropout or flash kernel."""
        parts = [f"{self.heads} heads"]
        if self.kv_heads is not None:
            parts.append(f"{self.kv_heads} kv heads")
        if self.dropout:
            parts.append(f"dropout {self.dropout}")
        if self.causal:
            parts.append("causal")
        if self.additive_mask:
            parts.append("additive mask")
        if self.flash:
            parts.append("flash")
        if self.implementation != "eager":
            parts.append(self.implementation)
        return ", ".join(parts)
