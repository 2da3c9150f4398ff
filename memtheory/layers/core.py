"""The input of a network, Flatten, and the fully connected layer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy as sp

from memtheory._numpy_types import numpy_types
from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.errors import RankError, UnsupportedError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape, elements
from memtheory.symbols import B

__all__ = ["Dense", "Flatten", "Input", "Linear"]


@dataclass(frozen=True)
class Input(Layer):
    """The data a network is fed: one sample's shape, and the batch size.

    Parameters
    ----------
    shape : sequence of sizes
        One sample's shape, channels first for images: ``(3, 50, 50)``.
    batch : size, default ``B``
        Samples per step; symbolic unless given.
    name : str, optional
        Defaults to ``"input"``.

    Examples
    --------
    >>> Input((3, 50, 50)).output_shape(())
    (B, 3, 50, 50)
    >>> Input((240_000,), batch=128).output_shape(())
    (128, 240000)
    """

    shape: Sequence[SizeLike]
    batch: SizeLike = field(default=B)
    name: str | None = None
    kind = "Input"
    autograd_checked = True

    def __post_init__(self) -> None:
        if (
            isinstance(self.shape, int | sp.Basic | str | bytes | Mapping)
            or not isinstance(self.shape, (Sequence, *numpy_types("ndarray")))
            or getattr(self.shape, "ndim", 1) != 1  # a NumPy array of sizes: one axis
        ):
            raise UnsupportedError(
                f"Input: shape must be a sequence of sizes such as (3, 50, 50), got {self.shape!r}."
            )
        if len(self.shape) == 0:
            raise UnsupportedError("Input: shape must have at least one dimension, such as (784,).")
        sizes = tuple(as_size(s, f"shape[{i}]", self.label) for i, s in enumerate(self.shape))
        object.__setattr__(self, "shape", sizes)
        object.__setattr__(self, "batch", as_size(self.batch, "batch", self.label))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, *shape)``; the input shape is ignored."""
        return (self.batch, *self.shape)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: the input needs no gradient."""
        return ()

    def describe(self) -> str:
        """Sample shape."""
        return "x".join(str(s) for s in self.shape)


@dataclass(frozen=True)
class Flatten(Layer):
    """Collapse every dimension after the batch into one: a view, no new memory.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> Flatten().output_shape((B, 64, 12, 12))
    (B, 9216)
    >>> Flatten().activation_count((B, 64, 12, 12))
    0
    """

    name: str | None = None
    kind = "Flatten"
    autograd_checked = True

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, product of the rest)``."""
        return (input_shape[0], elements(input_shape[1:]))

    def stores_output(self) -> bool:
        """Return False: the output is a view of the input."""
        return False

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: reshaping back needs only the shape."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return a view: no storage, nothing saved, the gradient reshaped on the way back."""
        return Autograd(aliases_input=True, gradient_is_view=True)


@dataclass(frozen=True)
class Dense(Layer):
    r"""Fully connected layer: ``units`` outputs, each a weighted sum of every input plus a bias.

    Parameters: :math:`n_\text{in} n_\text{out}` weights and :math:`n_\text{out}`
    biases. Derived in the book's chapter "Counting parameters".

    The input is ``(batch, features)``, or a sequence ``(batch, sequence,
    features)``: as PyTorch's ``Linear``, the layer then acts on the last
    dimension of every position. An image-shaped 4-D input is refused: insert
    :class:`Flatten` first.

    Parameters
    ----------
    units : size
        Number of outputs (PyTorch's ``out_features``).
    bias : bool
        Whether the layer adds a bias.
    name : str, optional
        Set by :class:`~memtheory.network.Network` when omitted.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> fc = Dense(500)
    >>> fc.output_shape((B, 9216)), fc.weight_count((B, 9216)), fc.bias_count((B, 9216))
    ((B, 500), 4608000, 500)
    >>> from memtheory.symbols import S
    >>> Dense(3072).output_shape((B, S, 768))
    (B, S, 3072)
    """

    units: SizeLike
    bias: bool = True
    name: str | None = None
    kind = "Dense"
    autograd_checked = True
    input_rank = 2  # the usual rank; check_input also accepts a 3-D sequence

    def __post_init__(self) -> None:
        object.__setattr__(self, "units", as_size(self.units, "units", self.label))

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless the input is 2-D, or a 3-D sequence."""
        if len(input_shape) in (2, 3):
            return
        fix = (
            "Insert Flatten() before it." if len(input_shape) > 3 else "Check the layers before it."
        )
        raise RankError(
            f"{self.label}: needs a 2-D input (batch, features) or a 3-D sequence "
            f"(batch, sequence, features), got {len(input_shape)}-D "
            f"{describe_shape(tuple(input_shape))}. {fix}"
        )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, units)``, or ``(batch, sequence, units)`` for a sequence."""
        self.check_input(input_shape)
        return (*input_shape[:-1], self.units)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """``in_features * units``."""
        self.check_input(input_shape)
        return input_shape[-1] * self.units

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """``units`` if the layer has a bias."""
        return self.units if self.bias else sp.Integer(0)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(units, in_features)``, then ``bias`` of ``(units,)``.

        Examples
        --------
        >>> from memtheory.symbols import B
        >>> Dense(10).parameter_shapes((B, 500))
        (('weight', (10, 500)), ('bias', (10,)))
        """
        self.check_input(input_shape)
        weight: tuple[str, Shape] = ("weight", (self.units, input_shape[-1]))
        return (weight, ("bias", (self.units,))) if self.bias else (weight,)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input (for the weight gradient); the weight itself is a parameter."""
        return (TensorSpec("input", input_shape),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its input; under autocast it runs in low precision and keeps the weight copy.

        The copy is kept only when the input needs a gradient (``grad_input =
        grad @ weight``).
        """
        return Autograd(
            saved=self.saved_for_backward(tuple(input_shapes[0])),
            autocast="low",
            weight_copy="if the input needs a gradient",
        )

    def describe(self) -> str:
        """Units, and whether the bias is off."""
        return f"{self.units}" + ("" if self.bias else ", no bias")


Linear = Dense
"""PyTorch's name for :class:`Dense`."""
