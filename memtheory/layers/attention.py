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

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import dtype
from memtheory.errors import InvalidSizeError, RankError, ShapeError
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape, elements

__all__ = ["MultiHeadAttention"]


@dataclass(frozen=True)
class MultiHeadAttention(Layer):
    r"""Self-attention over a ``(batch, sequence, features)`` input, projections included.

    Parameters: the query, key and value projections and the output
    projection, :math:`4h^2` weights and :math:`4h` biases when the heads span
    the features (fewer key/value heads shrink the key and value projections).

    What the backward pass keeps (Korthikanti et al. 2022, Section 4.1): the
    input of the fused query/key/value projection; the queries and keys (for
    :math:`QK^\top`); the softmax output :math:`P` (for the softmax); with
    attention dropout, its one-byte mask and the dropped probabilities; the
    values (for :math:`PV`); and the heads' output (the input of the output
    projection). A flash kernel (``flash=True``, Dao et al. 2022) keeps the
    input, queries, keys, values and output, plus one fp32 log-sum-exp per
    row and head, and regenerates the dropout mask from the random seed.

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
        Memory-efficient attention that does not keep the :math:`s^2` tensors.
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
    """

    heads: SizeLike
    head_dim: SizeLike | None = None
    kv_heads: SizeLike | None = None
    dropout: float = 0.0
    bias: bool = True
    flash: bool = False
    name: str | None = None
    kind = "MultiHeadAttention"
    input_rank = 3

    def __post_init__(self) -> None:
        owner = self.label
        set_ = object.__setattr__
        set_(self, "heads", as_size(self.heads, "heads", owner))
        if self.head_dim is not None:
            set_(self, "head_dim", as_size(self.head_dim, "head_dim", owner))
        if self.kv_heads is not None:
            set_(self, "kv_heads", as_size(self.kv_heads, "kv_heads", owner))
            remainder = sp.Mod(self.heads, self.kv_heads)
            if remainder.is_number and remainder != 0:
                raise InvalidSizeError(
                    f"{owner}: kv_heads ({self.kv_heads}) must divide heads ({self.heads}); "
                    "each key/value head serves a whole group of query heads."
                )
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, int | float)
            or not 0 <= self.dropout < 1
        ):
            raise InvalidSizeError(f"{owner}: dropout must be in [0, 1), got {self.dropout!r}.")

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
        shapes: list[tuple[str, Shape]] = [("in_proj_weight", (packed, features))]
        if self.bias:
            shapes.append(("in_proj_bias", (packed,)))
        shapes.append(("out_proj.weight", (features, inner)))
        if self.bias:
            shapes.append(("out_proj.bias", (features,)))
        return tuple(shapes)

    # -- memory ------------------------------------------------------------------------
    def _tensors(self, input_shape: Shape) -> dict[str, Shape]:
        batch, sequence, _ = input_shape
        width = self.width(input_shape)
        heads, key_heads = self.heads, self._key_heads()
        return {
            "queries": (batch, heads, sequence, width),
            "keys": (batch, key_heads, sequence, width),
            "values": (batch, key_heads, sequence, width),
            "probabilities": (batch, heads, sequence, sequence),
            "heads_output": (batch, sequence, heads * width),
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
        shapes = self._tensors(input_shape)
        return (
            TensorSpec("intermediate", shapes["keys"]),
            TensorSpec("intermediate", shapes["values"]),
        )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what the backward pass keeps, in the order the forward pass makes it."""
        self.check_input(input_shape)
        shapes = self._tensors(input_shape)
        saved = [
            TensorSpec("input", tuple(input_shape)),
            TensorSpec("intermediate", shapes["queries"]),
            TensorSpec("intermediate", shapes["keys"]),
        ]
        if self.flash:
            batch, heads, sequence, _ = shapes["queries"]
            saved += [
                TensorSpec("intermediate", shapes["values"]),
                TensorSpec("intermediate", shapes["heads_output"]),
                TensorSpec("statistics", (batch, heads, sequence), dtype("fp32")),
            ]
            return tuple(saved)
        saved.append(TensorSpec("intermediate", shapes["probabilities"]))
        if self.dropout:
            saved += [
                TensorSpec("mask", shapes["probabilities"], dtype("bool")),
                TensorSpec("intermediate", shapes["probabilities"]),
            ]
        saved += [
            TensorSpec("intermediate", shapes["values"]),
            TensorSpec("intermediate", shapes["heads_output"]),
        ]
        return tuple(saved)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of the tensors it creates and keeps, its output included.

        Queries, keys and values, the probabilities (twice with dropout:
        before and after it) unless ``flash``, the heads' output and the
        output. One-byte masks and fp32 statistics are not activation-dtype
        elements and are left to the saved tensors.
        """
        shapes = self._tensors(input_shape)
        count = sum(
            (elements(shapes[key]) for key in ("queries", "keys", "values", "heads_output")),
            start=elements(self.output_shape(input_shape)),
        )
        if not self.flash:
            count += elements(shapes["probabilities"]) * (2 if self.dropout else 1)
        return sp.expand(count)

    def describe(self) -> str:
        """Heads, and any grouped keys, dropout or flash kernel."""
        parts = [f"{self.heads} heads"]
        if self.kv_heads is not None:
            parts.append(f"{self.kv_heads} kv heads")
        if self.dropout:
            parts.append(f"dropout {self.dropout}")
        if self.flash:
            parts.append("flash")
        return ", ".join(parts)
