r"""Rotary position embeddings (Su et al. 2021), as Hugging Face's Llama family applies them.

A rotary model has no learned position vectors. Once per forward pass,
:class:`RotaryTable` (Hugging Face's ``model.rotary_emb``) turns the
positions :math:`0 \ldots s-1` into a cosine and a sine table of one row per
position and :math:`d` columns (the head width); every attention layer then
rotates its queries and keys with them (:class:`Rotary`):

.. math:: q' = q \odot \cos + \operatorname{rotate\_half}(q) \odot \sin

where ``rotate_half`` swaps the two halves of each head and negates the
second. The tables are shared by all layers, and the rotation has no
parameters: the only state is the two ``inv_freq`` buffers of :math:`d/2`
frequencies (``inv_freq`` and ``original_inv_freq``). Derived in the book's
chapter "Transformers".

Examples
--------
>>> from memtheory.symbols import B, S
>>> table = RotaryTable(128)
>>> table.output_shape((B, S))
(1, S, 256)
>>> Rotary(128).merged_shape(((B, S, 4096), (1, S, 256)))
(B, S, 4096)
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidSizeError, RankError, ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape
from memtheory.layers.merge import Merge

__all__ = ["Rotary", "RotaryTable"]


@dataclass(frozen=True)
class RotaryTable(Layer):
    r"""The cosine and sine tables of rotary embeddings, computed once per forward pass.

    It reads the token ids (only their sequence length matters: Hugging Face
    builds the positions as ``arange(S)[None]``, one row for the whole batch)
    and outputs both tables side by side, ``(1, S, 2d)``: two storages of
    :math:`S d` elements in the model's dtype (its parameters' dtype, fp32
    under autocast). It runs under ``torch.no_grad``, so nothing it makes needs
    a gradient.

    Parameters
    ----------
    head_dim : size
        Width :math:`d` of one attention head (even).
    positions : int, optional
        The longest context the model was trained for
        (``max_position_embeddings``): rotary tables have no fixed size, so it
        only bounds what-if answers.
    fp32 : bool, default False
        Keep the tables in fp32 whatever the model's dtype: OLMo's, OLMo 2's
        and OLMo 3's ``rotary_emb`` return them without Llama's cast to the
        input's dtype (transformers 5.24), and their :class:`Rotary` computes
        in fp32 (``Rotary(..., upcast=True)``).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> RotaryTable(64, fp32=True).autograd(((B, S),)).compute_dtype.name
    'fp32'
    >>> table = RotaryTable(64)
    >>> [(t.label, t.shape) for t in table.buffers((B, S))]
    [('inv_freq', (32,)), ('original_inv_freq', (32,))]
    """

    head_dim: SizeLike
    positions: int | None = None
    fp32: bool = False
    name: str | None = None
    kind = "RotaryTable"
    autograd_checked = True  # tests/pytorch/test_llama_autograd.py
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_dim", as_size(self.head_dim, "head_dim", self.label))
        half = sp.Mod(self.head_dim, 2)
        if half.is_number and half != 0:
            raise InvalidSizeError(
                f"{self.label}: head_dim must be even (rotary embeddings rotate pairs of "
                f"features), got {self.head_dim}."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(1, S, 2 * head_dim)``: the cosine and sine tables side by side."""
        if len(input_shape) != 2:
            raise RankError(
                f"{self.label}: reads the token ids, (batch, sequence), got "
                f"{describe_shape(tuple(input_shape))}. Wire it with "
                "Node(RotaryTable(...), inputs=('input_ids',))."
            )
        return (sp.Integer(1), input_shape[1], 2 * self.head_dim)

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """``inv_freq`` and ``original_inv_freq``: :math:`d/2` frequencies each.

        Hugging Face makes them in fp32, and ``model.to(torch.bfloat16)`` casts
        them as it casts every floating-point buffer: their dtype is the
        parameters' (``None`` here).
        """
        half = (self.head_dim / 2,)
        return (
            TensorSpec("buffer", half, label="inv_freq"),
            TensorSpec("buffer", half, label="original_inv_freq"),
        )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: it runs under ``torch.no_grad``."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Nothing saved; it reads the ids and makes its tables in the parameters' dtype.

        Its forward's fp32 temporaries (the positions as floats, the
        frequencies, the doubled angles, their cosine and sine before the scale
        and the cast) are freed before it returns. With ``fp32=True`` its
        tables are fp32 in every precision.
        """
        shape = self.output_shape(tuple(input_shapes[0]))
        fp32 = as_dtype("fp32")
        sequence = shape[1]
        return Autograd(
            reads_ids=True,
            autocast="parameters",
            compute_dtype=fp32 if self.fp32 else None,
            transients=(
                TensorSpec("intermediate", (1, sequence, 1), fp32, label="positions"),
                TensorSpec("intermediate", (1, sequence, self.head_dim / 2), fp32, label="freqs"),
                TensorSpec("intermediate", (1, sequence, self.head_dim), fp32, label="angles"),
            ),
        )

    def describe(self) -> str:
        """Head width, and fp32 tables."""
        return f"head_dim {self.head_dim}" + (", fp32" if self.fp32 else "")


@dataclass(frozen=True)
class Rotary(Merge):
    r"""Rotate queries or keys by their positions: ``x * cos + rotate_half(x) * sin``.

    A merge of two inputs: the projected queries (or keys), ``(B, S, n d)``
    for :math:`n` heads of width :math:`d`, and the :class:`RotaryTable`'s
    output. Its output is a new tensor of the first input's shape. Measured on
    CPU (PyTorch 2.13, Hugging Face's ``apply_rotary_pos_emb``): the backward
    keeps only the cosine and sine tables (the two ``mul`` nodes save the
    table, not the queries, which the tables' ``no_grad`` makes the only
    tensor needing a gradient); ``rotate_half``'s slices, negation and ``cat``
    keep nothing. The tables are shared by every layer, so they are counted
    once.

    Parameters
    ----------
    head_dim : size
        Width of one head; the first input's features must be a multiple.
    upcast : bool, default False
        OLMo's ``apply_rotary_pos_emb`` (OLMo 1, 2 and 3, transformers 5.24):
        the products with fp32 tables (``RotaryTable(..., fp32=True)``) are
        fp32 and the sum is cast back to the queries' dtype
        (``q_embed.to(q_type)``). It keeps the same tensors, the tables in
        fp32; its forward's temporaries are fp32.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> spec = Rotary(8).autograd(((B, S, 32), (1, S, 16)))
    >>> [(t.role, t.operand, t.shape) for t in spec.saved]
    [('input', 1, (1, S, 16))]
    """

    head_dim: SizeLike
    upcast: bool = False
    name: str | None = None
    kind = "Rotary"
    autograd_checked = True  # tests/pytorch/test_llama_autograd.py
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_dim", as_size(self.head_dim, "head_dim", self.label))

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the first input's shape, after checking the table's width."""
        if len(input_shapes) != 2:
            raise ShapeError(
                f"{self.label}: reads two tensors, the queries or keys and the rotary table "
                f"(Node(Rotary(...), inputs=('q_proj', 'rotary_emb'))), got {len(input_shapes)}."
            )
        first, table = (tuple(s) for s in input_shapes)
        if len(first) != 3:
            raise RankError(
                f"{self.label}: needs (batch, sequence, heads * head_dim), got "
                f"{describe_shape(first)}."
            )
        remainder = sp.Mod(first[-1], self.head_dim)
        width = sp.expand(table[-1] - 2 * self.head_dim)
        if (remainder.is_number and remainder != 0) or (width.is_number and width != 0):
            raise ShapeError(
                f"{self.label}: {first[-1]} features are not whole heads of {self.head_dim}, "
                f"or the table {describe_shape(table)} is not for head_dim {self.head_dim}."
            )
        return first

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Keep the cosine and sine tables (its second input); compute in its input's dtype.

        Its forward's temporaries (``x * cos``, the negated half, the ``cat``,
        ``rotate_half(x) * sin``) are freed once it has run. Under autocast the
        queries arrive in the low dtype and the tables in fp32: ``mul`` is on no
        autocast list, so it promotes to fp32 as it reads them (no cast is
        made), and the rotated queries come out in fp32.
        """
        first, table = (tuple(s) for s in input_shapes)
        half = (*first[:-1], first[-1] / 2)
        given = as_dtype(input_dtype) if input_dtype is not None else None
        products = as_dtype("fp32") if self.upcast else None
        transients: tuple[TensorSpec, ...] = (
            TensorSpec("intermediate", first, products, label="x * cos"),
            TensorSpec("intermediate", half, given, label="-x2"),
            TensorSpec("intermediate", first, given, label="rotate_half"),
            TensorSpec("intermediate", first, products, label="rotate_half * sin"),
        )
        if self.upcast and given not in (None, as_dtype("fp32")):
            transients += (TensorSpec("intermediate", first, products, label="q_embed"),)
        return Autograd(
            saved=(TensorSpec("input", table, operand=1, label="cos and sin"),),
            autocast="promote",
            casts_inputs=False,
            transients=transients,
        )

    def describe(self) -> str:
        """Head width, and OLMo's fp32 products."""
        return f"head_dim {self.head_dim}" + (", upcast" if self.upcast else "")
