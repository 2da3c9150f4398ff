"""What every layer knows about itself: shapes, parameters, activations, saved tensors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import sympy as sp

from memtheory.dtypes import DType
from memtheory.errors import RankError, UnsupportedError

__all__ = ["Layer", "Shape", "TensorSpec", "describe_shape", "elements"]

Shape = tuple[sp.Expr, ...]
"""A tensor shape, batch first: ``(B, C, H, W)`` for images, ``(B, F)`` for features."""

Role = Literal[
    "input", "output", "indices", "mask", "statistics", "target", "buffer", "intermediate"
]


def elements(shape: Shape) -> sp.Expr:
    """Return the number of elements of a tensor of ``shape``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> elements((B, 3, 50, 50))
    7500*B
    """
    return sp.Mul(*shape) if shape else sp.Integer(1)


def describe_shape(shape: Shape) -> str:
    """Write a shape as ``(B, 32, 50, 50)``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> describe_shape((B, 500))
    '(B, 500)'
    """
    return "(" + ", ".join(str(d) for d in shape) + ")"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor a layer keeps: a saved tensor for the backward pass, or a buffer.

    Parameters
    ----------
    role : str
        What it is. ``"input"`` and ``"output"`` are the layer's own input or
        output tensor (shared storage with the neighbouring layer, so an
        accounting convention can count it once); ``"indices"``, ``"mask"``,
        ``"statistics"``, ``"target"``, ``"buffer"`` and ``"intermediate"`` are
        tensors the layer allocates itself.
    shape : tuple of sympy expressions
        Its shape, batch first where it has a batch dimension.
    dtype : DType or None
        Its element type; ``None`` means "the activation dtype of the run"
        (or the parameter dtype, for buffers).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> from memtheory.dtypes import dtype
    >>> spec = TensorSpec("indices", (B, 32, 25, 25), dtype("int64"))
    >>> spec.elements, spec.nbytes(dtype("fp32"))
    (20000*B, 160000*B)
    """

    role: Role
    shape: Shape
    dtype: DType | None = None

    @property
    def elements(self) -> sp.Expr:
        """Number of elements."""
        return elements(self.shape)

    def nbytes(self, default: DType) -> sp.Expr:
        """Bytes, with ``default`` standing in for an unspecified dtype."""
        return self.elements * (self.dtype or default).bytes


class Layer(ABC):
    """Base of every layer: a pure description that derives its formulas from an input shape.

    Layers are frozen dataclasses: hyperparameters are fixed at construction
    and validated there. Every formula takes the input shape (batch first,
    entries may be symbolic) and returns sympy expressions.
    """

    kind: ClassVar[str] = "Layer"
    #: Number of dimensions the input must have (batch included), or None for any.
    input_rank: ClassVar[int | None] = None
    name: str | None

    @property
    def label(self) -> str:
        """``Kind 'name'`` for messages and tables (just ``Kind`` while unnamed)."""
        return f"{self.kind} {self.name!r}" if self.name else self.kind

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless ``input_shape`` has the rank this layer needs."""
        if self.input_rank is not None and len(input_shape) != self.input_rank:
            raise RankError(
                f"{self.label}: needs a {self.input_rank}-D input "
                f"{self._rank_words()}, got {len(input_shape)}-D {describe_shape(input_shape)}. "
                f"{self._rank_fix(len(input_shape))}"
            )

    def _rank_words(self) -> str:
        return {2: "(batch, features)", 4: "(batch, channels, height, width)"}.get(
            self.input_rank or 0, ""
        )

    def _rank_fix(self, got: int) -> str:
        if self.input_rank == 2 and got > 2:
            return "Insert Flatten() before it."
        if self.input_rank == 4 and got == 2:
            return "It cannot follow Flatten or Dense; move it before them."
        return "Check the layers before it."

    @abstractmethod
    def output_shape(self, input_shape: Shape) -> Shape:
        """Shape of the output for an input of ``input_shape``."""

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """Return the number of trainable weights (biases excluded)."""
        return sp.Integer(0)

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """Return the number of trainable biases."""
        return sp.Integer(0)

    def parameter_count(self, input_shape: Shape) -> sp.Expr:
        """Weights plus biases."""
        return self.weight_count(input_shape) + self.bias_count(input_shape)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """Return the trainable tensors as PyTorch registers them: ``(name, shape)``, in order.

        Names are relative to the layer (``"weight"``, ``"bias"``,
        ``"in_proj_weight"``, ...); their elements sum to
        :meth:`parameter_count`. A layer without parameters has none.
        """
        if self.parameter_count(input_shape) == 0:
            return ()
        raise UnsupportedError(f"{self.label}: does not state the shapes of its parameters.")

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Non-trainable state saved with the model (e.g. BatchNorm's running statistics)."""
        return ()

    def stores_output(self) -> bool:
        """Whether the output is a new tensor (False for views and in-place layers)."""
        return True

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of new activation memory the forward pass creates and keeps.

        The output's elements, or zero for a view (Flatten) or an in-place layer,
        which reuse their input's storage.
        """
        if not self.stores_output():
            return sp.Integer(0)
        return elements(self.output_shape(input_shape))

    @abstractmethod
    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Tensors the backward pass needs, as PyTorch's autograd keeps them."""

    def describe(self) -> str:
        """Hyperparameters in a few characters, for tables."""
        return ""
