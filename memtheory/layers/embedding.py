"""Embeddings: token ids to vectors, learned position and segment vectors, and the way back.

Token ids are whole numbers: an :class:`Embedding` keeps them (as int64) for
its backward pass, which adds each position's gradient into the row of its
token. Derived in the book's chapter "Transformers".
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike, dtype
from memtheory.errors import InvalidSizeError, RankError, ShapeError
from memtheory.layers.base import (
    Autograd,
    Layer,
    ReadParameter,
    Shape,
    TensorSpec,
    describe_shape,
)

__all__ = ["Embedding", "PositionEmbedding", "TokenTypeEmbedding", "Unembedding"]


def _check_sequence(layer: Layer, input_shape: Shape) -> None:
    if len(input_shape) != 3:
        raise RankError(
            f"{layer.label}: needs a 3-D input (batch, sequence, features), got "
            f"{len(input_shape)}-D {describe_shape(tuple(input_shape))}. Put it after an "
            "Embedding of the token ids."
        )


@dataclass(frozen=True)
class Embedding(Layer):
    """A lookup table: each token id selects one row of ``num_embeddings x embedding_dim``.

    Parameters
    ----------
    num_embeddings : size
        Vocabulary size.
    embedding_dim : size
        Width of each vector.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> wte = Embedding(50257, 768)
    >>> wte.output_shape((B, S)), wte.parameter_count((B, S))
    ((B, S, 768), 38597376)
    >>> [(t.role, t.dtype.name) for t in wte.saved_for_backward((B, S))]
    [('input', 'int64')]
    """

    num_embeddings: SizeLike
    embedding_dim: SizeLike
    name: str | None = None
    kind = "Embedding"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def __post_init__(self) -> None:
        owner = self.label
        object.__setattr__(
            self, "num_embeddings", as_size(self.num_embeddings, "num_embeddings", owner)
        )
        object.__setattr__(
            self, "embedding_dim", as_size(self.embedding_dim, "embedding_dim", owner)
        )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the ids' shape with a feature dimension appended."""
        if len(input_shape) < 1:
            raise RankError(f"{self.label}: needs token ids with a batch dimension, got a scalar.")
        return (*input_shape, self.embedding_dim)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """``num_embeddings * embedding_dim``."""
        return self.num_embeddings * self.embedding_dim

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(num_embeddings, embedding_dim)``."""
        return (("weight", (self.num_embeddings, self.embedding_dim)),)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the int64 token ids (its input)."""
        return (TensorSpec("input", tuple(input_shape), dtype("int64")),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its int64 ids; its output rows have the table's dtype (autocast leaves it alone).

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> spec = Embedding(100, 8).autograd(((B, S),))
        >>> spec.reads_ids, spec.autocast
        (True, 'parameters')
        """
        return Autograd(
            saved=self.saved_for_backward(tuple(input_shapes[0])),
            autocast="parameters",
            reads_ids=True,
        )

    def describe(self) -> str:
        """Vocabulary x width."""
        return f"{self.num_embeddings}x{self.embedding_dim}"


@dataclass(frozen=True)
class _AddedEmbedding(Layer):
    """A learned table whose rows are added to a ``(batch, sequence, features)`` input."""

    num_embeddings: SizeLike
    inplace: bool = False
    name: str | None = None
    ids_buffer: SizeLike | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "num_embeddings", as_size(self.num_embeddings, "num_embeddings", self.label)
        )
        if self.ids_buffer is not None:
            object.__setattr__(
                self, "ids_buffer", as_size(self.ids_buffer, "ids_buffer", self.label)
            )

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the registered ``(1, ids_buffer)`` int64 id buffer, if the ids come from one."""
        if self.ids_buffer is None:
            return ()
        return (TensorSpec("buffer", (sp.Integer(1), self.ids_buffer), dtype("int64")),)

    def _ids(self, shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the ids it keeps: none of its own when they are a view of its id buffer."""
        if self.ids_buffer is not None:
            return ()
        return (TensorSpec("indices", shape, dtype("int64")),)

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        _check_sequence(self, input_shape)
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """``num_embeddings * features``."""
        _check_sequence(self, input_shape)
        return self.num_embeddings * input_shape[-1]

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(num_embeddings, features)``."""
        _check_sequence(self, input_shape)
        return (("weight", (self.num_embeddings, input_shape[-1])),)

    def stores_output(self) -> bool:
        """Return False when the rows are added in place."""
        return not self.inplace

    def _rows(self, input_shape: Shape) -> Shape:
        """Shape of the rows it looks up (then adds): one per token, unless shared by position."""
        return tuple(input_shape)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its ids (unless they are a view of its id buffer); the rows it adds, a transient.

        The looked-up rows are freed once they are added (measured on CPU,
        PyTorch 2.13); the sum is a new tensor, or the input again in place.
        """
        shape = tuple(input_shapes[0])
        return Autograd(
            saved=self.saved_for_backward(shape),
            aliases_input=self.inplace,
            transients=(TensorSpec("intermediate", self._rows(shape), label="rows"),),
        )

    def describe(self) -> str:
        """Table size, and whether it adds in place."""
        return f"{self.num_embeddings}" + (", in place" if self.inplace else "")


@dataclass(frozen=True)
class PositionEmbedding(_AddedEmbedding):
    """Learned position vectors (GPT-2's ``wpe``, BERT's ``position_embeddings``), added.

    Parameters
    ----------
    num_embeddings : size
        The longest sequence it has a row for (``n_positions``).
    inplace : bool, default False
        BERT adds them in place (``embeddings += position_embeddings``).
    name : str, optional
    ids_buffer : size, optional
        Hugging Face's BERT reads the ids from a registered ``(1,
        max_position_embeddings)`` int64 buffer (``position_ids``), and the
        backward pass keeps that whole buffer rather than ids of its own
        (measured on CPU, PyTorch 2.13). GPT-2 makes them with ``arange`` in
        every forward pass: leave it unset.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> PositionEmbedding(1024).parameter_count((B, S, 768))
    786432
    >>> PositionEmbedding(1024, name="wpe").output_shape((B, 2048, 768))
    Traceback (most recent call last):
    ...
    memtheory.errors.ShapeError: PositionEmbedding 'wpe': sequences of 2048 positions ...
    """

    kind = "PositionEmbedding"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape; refuse a sequence longer than the table."""
        shape = super().output_shape(input_shape)
        if sp.sympify(shape[1] > self.num_embeddings) is sp.true:
            raise ShapeError(
                f"{self.label}: sequences of {shape[1]} positions need more than its "
                f"{self.num_embeddings} position rows. Use sequences of at most "
                f"{self.num_embeddings} tokens."
            )
        return shape

    def size_limits(self, input_shape: Shape) -> tuple[tuple[str, sp.Expr], ...]:
        """Return the longest sequence it takes: no more positions than its rows.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> PositionEmbedding(1024).size_limits((B, S, 768))
        (('at most 1024 positions (its rows)', 1025 - S),)
        """
        sequence = sp.sympify(input_shape[1])
        if sequence.is_number:
            return ()  # output_shape refuses a fixed sequence that is too long
        words = f"at most {self.num_embeddings} positions (its rows)"
        return ((words, self.num_embeddings + 1 - sequence),)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the int64 position ids, one per position (shared by the batch).

        With ``ids_buffer`` the ids are a slice of the id buffer, which the
        backward pass keeps whole (a buffer, not a saved activation).
        """
        return self._ids((input_shape[1],))

    def _rows(self, input_shape: Shape) -> Shape:
        return (input_shape[1], input_shape[2])


@dataclass(frozen=True)
class TokenTypeEmbedding(_AddedEmbedding):
    """Learned segment vectors (BERT's ``token_type_embeddings``), added per token.

    Parameters
    ----------
    num_embeddings : size
        Number of segment types (2 in BERT).
    inplace : bool, default False
    name : str, optional
    ids_buffer : size, optional
        Length of the registered int64 id buffer the ids are a view of
        (Hugging Face's BERT: ``token_type_ids``, ``max_position_embeddings``
        long, when no ids are passed); the backward pass keeps that buffer.
    gathered : bool, default False
        With ``ids_buffer``: the ids are gathered from the buffer at the
        position ids (Hugging Face 5's ``BertEmbeddings``: ``torch.gather``,
        then ``expand`` over the batch), a new ``(1, S)`` int64 tensor that the
        backward pass keeps (measured on CPU against ``BertForMaskedLM``).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> TokenTypeEmbedding(2).parameter_count((B, S, 768))
    1536
    >>> bert = TokenTypeEmbedding(2, ids_buffer=512)
    >>> bert.saved_for_backward((B, S, 768)), [t.shape for t in bert.buffers((B, S, 768))]
    ((), [(1, 512)])
    """

    gathered: bool = False
    kind = "TokenTypeEmbedding"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gathered and self.ids_buffer is None:
            raise InvalidSizeError(
                f"{self.label}: gathered ids come from an id buffer; pass ids_buffer too."
            )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the int64 segment id of every token (none of its own with ``ids_buffer``)."""
        if self.gathered:
            return (TensorSpec("indices", (sp.Integer(1), input_shape[1]), dtype("int64")),)
        return self._ids(tuple(input_shape[:2]))


@dataclass(frozen=True)
class Unembedding(Layer):
    """The output projection of a language model: features to one logit per vocabulary entry.

    GPT-2's ``lm_head`` reuses the token embedding matrix (``tied=True``), so it
    adds no weights; untied, it has ``features * vocabulary`` weights. BERT's
    masked-LM decoder is tied too but adds a bias of one value per vocabulary
    entry (``bias=True``, Hugging Face's ``cls.predictions.bias``).

    Parameters
    ----------
    num_embeddings : size
        Vocabulary size.
    tied : bool, default True
    bias : bool, default False
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> head = Unembedding(50257)
    >>> head.output_shape((B, S, 768)), head.parameter_count((B, S, 768))
    ((B, S, 50257), 0)
    >>> Unembedding(50257, tied=False).parameter_count((B, S, 768))
    38597376
    >>> Unembedding(30522, bias=True).parameter_shapes((B, S, 768))
    (('bias', (30522,)),)
    """

    num_embeddings: SizeLike
    tied: bool = True
    bias: bool = False
    name: str | None = None
    kind = "Unembedding"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "num_embeddings", as_size(self.num_embeddings, "num_embeddings", self.label)
        )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, sequence, vocabulary)``."""
        _check_sequence(self, input_shape)
        return (*input_shape[:-1], self.num_embeddings)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """None when tied to the token embedding; ``features * vocabulary`` otherwise."""
        _check_sequence(self, input_shape)
        return sp.Integer(0) if self.tied else input_shape[-1] * self.num_embeddings

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """``vocabulary`` with a bias."""
        return self.num_embeddings if self.bias else sp.Integer(0)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(vocabulary, features)`` unless tied, then ``bias`` if any."""
        _check_sequence(self, input_shape)
        shapes: list[tuple[str, Shape]] = []
        if not self.tied:
            shapes.append(("weight", (self.num_embeddings, input_shape[-1])))
        if self.bias:
            shapes.append(("bias", (self.num_embeddings,)))
        return tuple(shapes)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input (for the weight gradient)."""
        return (TensorSpec("input", tuple(input_shape)),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Run as a linear layer (``F.linear``): keep its input, under autocast the low copy.

        Tied, the weight is the token embedding's matrix
        (:attr:`~memtheory.layers.base.Autograd.reads_parameter`): autocast
        casts that one, and its gradient is added to the embedding's (the
        autograd convention follows the tie).

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> Unembedding(50257).autograd(((B, S, 768),)).reads_parameter
        ReadParameter(kind='Embedding', parameter='weight', rows=50257)
        """
        return Autograd(
            saved=self.saved_for_backward(tuple(input_shapes[0])),
            autocast="low",
            weight_copy="if the input needs a gradient",
            reads_parameter=(
                ReadParameter("Embedding", "weight", self.num_embeddings) if self.tied else None
            ),
        )

    def describe(self) -> str:
        """Vocabulary, and whether the matrix is tied and has a bias."""
        return (
            f"{self.num_embeddings}"
            + (", tied" if self.tied else "")
            + (", bias" if self.bias else "")
        )
