"""Picking one position out of a sequence (BERT's pooler reads the first token)."""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.errors import InvalidSizeError, RankError
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape

__all__ = ["SelectToken"]


@dataclass(frozen=True)
class SelectToken(Layer):
    """Take the vector at one position of every sequence: ``x[:, index]``, a view.

    Parameters
    ----------
    index : int, default 0
        The position (0 is BERT's ``[CLS]`` token).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> SelectToken().output_shape((B, S, 768)), SelectToken().activation_count((B, S, 768))
    ((B, 768), 0)
    """

    index: int = 0
    name: str | None = None
    kind = "SelectToken"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise InvalidSizeError(
                f"{self.label}: index must be a position >= 0, got {self.index!r}."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, features)``."""
        if len(input_shape) != 3:
            raise RankError(
                f"{self.label}: needs a 3-D input (batch, sequence, features), got "
                f"{len(input_shape)}-D {describe_shape(tuple(input_shape))}."
            )
        return (input_shape[0], input_shape[2])

    def stores_output(self) -> bool:
        """Return False: the output is a view of the input."""
        return False

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: the gradient goes back to one position."""
        return ()

    def describe(self) -> str:
        """Describe the position."""
        return f"position {self.index}"
