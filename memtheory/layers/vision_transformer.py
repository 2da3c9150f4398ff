"""The layers a vision transformer adds: patches to a sequence, a class token, learned positions.

As torchvision's ``VisionTransformer``: a strided convolution cuts the image
into patches (``conv_proj``); its ``(batch, hidden, n_h, n_w)`` output is
reshaped and permuted into a ``(batch, n_h * n_w, hidden)`` sequence (a view);
a learned class token is concatenated in front of every sequence; and a
learned ``(1, positions, hidden)`` tensor is added to every sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.errors import RankError, ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape

__all__ = ["ClassToken", "LearnedPositions", "PatchSequence"]


def _check_sequence(layer: Layer, input_shape: Shape) -> None:
    if len(input_shape) != 3:
        raise RankError(
            f"{layer.label}: needs a 3-D input (batch, sequence, features), got "
            f"{len(input_shape)}-D {describe_shape(tuple(input_shape))}. Put PatchSequence "
            "after the patch convolution first."
        )


@dataclass(frozen=True)
class PatchSequence(Layer):
    """Turn a ``(batch, channels, height, width)`` feature map into a sequence of positions.

    ``x.reshape(b, c, h * w).permute(0, 2, 1)``: a view of its input, so it
    creates no memory and its backward pass keeps nothing.

    Parameters
    ----------
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> PatchSequence().output_shape((B, 768, 14, 14))
    (B, 196, 768)
    >>> PatchSequence().activation_count((B, 768, 14, 14))
    0
    """

    name: str | None = None
    kind = "PatchSequence"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py
    input_rank = 4

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, height * width, channels)``."""
        self.check_input(input_shape)
        batch, channels, height, width = input_shape
        return (batch, height * width, channels)

    def stores_output(self) -> bool:
        """Return False: the output is a view of the input."""
        return False

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: the gradient is permuted and reshaped back."""
        return ()


@dataclass(frozen=True)
class ClassToken(Layer):
    """Put a learned token in front of every sequence: ``cat([token.expand(b, -1, -1), x], 1)``.

    One parameter per feature (torchvision's ``class_token`` of shape
    ``(1, 1, hidden)``). The concatenation is a new tensor one position longer
    than its input; its backward pass slices the gradient and keeps nothing.

    Parameters
    ----------
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> token = ClassToken()
    >>> token.output_shape((B, 196, 768)), token.parameter_count((B, 196, 768))
    ((B, 197, 768), 768)
    """

    name: str | None = None
    kind = "ClassToken"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, sequence + 1, features)``."""
        _check_sequence(self, input_shape)
        batch, sequence, features = input_shape
        return (batch, sequence + 1, features)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """One value per feature."""
        _check_sequence(self, input_shape)
        return input_shape[-1]

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``class_token`` of ``(1, 1, features)``."""
        _check_sequence(self, input_shape)
        return (("class_token", (sp.Integer(1), sp.Integer(1), input_shape[-1])),)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: the backward pass of a concatenation needs only the sizes."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Nothing saved, gradient slices; under autocast ``cat`` promotes to the token's dtype."""
        return Autograd(autocast="promote", gradient_is_view=True)


@dataclass(frozen=True)
class LearnedPositions(Layer):
    """Add a learned ``(1, positions, features)`` tensor to every sequence (ViT's positions).

    Unlike :class:`~memtheory.layers.PositionEmbedding` (GPT-2's ``wpe``, a
    lookup by position ids) the table is added directly, broadcast over the
    batch: ``x + pos_embedding``, a new tensor; the sum keeps nothing for its
    backward pass. The sequence must have exactly ``positions`` positions.

    Parameters
    ----------
    positions : size
        Sequence length the table is made for (197 in ViT-B/16 at 224x224).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> LearnedPositions(197).parameter_count((B, 197, 768))
    151296
    >>> LearnedPositions(197, name="pos").output_shape((B, 50, 768))
    Traceback (most recent call last):
    ...
    memtheory.errors.ShapeError: LearnedPositions 'pos': a table of 197 positions cannot ...
    """

    positions: SizeLike
    name: str | None = None
    kind = "LearnedPositions"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", as_size(self.positions, "positions", self.label))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape; refuse a sequence of another length."""
        _check_sequence(self, input_shape)
        gap = sp.expand(input_shape[1] - self.positions)
        if gap.is_number and gap != 0:
            raise ShapeError(
                f"{self.label}: a table of {self.positions} positions cannot be added to "
                f"sequences of {input_shape[1]}. Build it for the sequence length "
                "(patches plus the class token)."
            )
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """``positions * features``."""
        _check_sequence(self, input_shape)
        return self.positions * input_shape[-1]

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``pos_embedding`` of ``(1, positions, features)``."""
        _check_sequence(self, input_shape)
        return (("pos_embedding", (sp.Integer(1), self.positions, input_shape[-1])),)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: a sum's backward pass needs no tensor (the table's gradient sums the batch)."""
        return ()

    def describe(self) -> str:
        """Describe the number of positions."""
        return f"{self.positions}"
