"""Multiplication by a 0-dimensional tensor: Gemma scales its token embeddings by sqrt(width).

Not :class:`~memtheory.finetuning.ConstantScale` (LoRA's multiplication by a Python number,
which keeps nothing): this one keeps its factor tensor for backward.

Examples
--------
>>> from memtheory.symbols import B, S
>>> TensorScale(2048 ** 0.5).output_shape((B, S, 2048))
(B, S, 2048)
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec

__all__ = ["TensorScale"]


@dataclass(frozen=True)
class TensorScale(Layer):
    """``x * factor``: a new tensor of the input's shape, no parameters.

    Gemma multiplies the embeddings by ``torch.tensor(hidden_size ** 0.5,
    dtype=hidden.dtype)``: a 0-dimensional tensor, which the product's
    backward keeps (one element of the compute dtype). Not measured against
    PyTorch: the autograd convention refuses it.

    Parameters
    ----------
    factor : float
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> [t.shape for t in TensorScale(2.0).saved_for_backward((B, S, 8))]
    [()]
    """

    factor: float
    name: str | None = None
    kind = "TensorScale"

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise InvalidSizeError(f"{self.label}: factor must be a number, got {self.factor!r}.")

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input's shape."""
        return tuple(input_shape)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the 0-dimensional factor tensor."""
        return (TensorSpec("intermediate", (), label="factor"),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Keep the factor; compute in its input's dtype."""
        return Autograd(saved=self.saved_for_backward(tuple(input_shapes[0])))

    def describe(self) -> str:
        """Show the factor."""
        return f"x {self.factor:g}"
