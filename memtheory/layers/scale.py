"""Multiplication by a 0-dimensional buffer: Gemma scales its token embeddings by sqrt(width).

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

    Gemma multiplies the embeddings by its ``embed_scale`` buffer (transformers
    5.24: ``nn.Buffer(torch.tensor(hidden_size ** 0.5))``, cast with the model,
    read as ``self.embed_scale.to(self.weight.dtype)``): a 0-dimensional tensor
    of the parameters' dtype, which the product's backward keeps, its own
    storage and no new one. Measured against Gemma 1, 2 and 3 on CPU
    (``tests/pytorch/test_family_autograd.py``).

    Parameters
    ----------
    factor : float
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> [(t.role, t.shape) for t in TensorScale(2.0).saved_for_backward((B, S, 8))]
    [('buffer', ())]
    """

    factor: float
    name: str | None = None
    kind = "TensorScale"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (Gemma 1, 2, 3)
    #: Checked in training only (Gemma's norms refuse inference anyway).
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise InvalidSizeError(f"{self.label}: factor must be a number, got {self.factor!r}.")

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input's shape."""
        return tuple(input_shape)

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the 0-dimensional factor, a buffer in the parameters' dtype."""
        return (TensorSpec("buffer", (), label="factor"),)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the factor buffer, which the product's backward keeps."""
        return self.buffers(input_shape)

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
