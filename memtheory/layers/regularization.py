"""Dropout."""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.dtypes import DType, DTypeLike, dtype
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import Layer, Shape, TensorSpec

__all__ = ["Dropout"]


@dataclass(frozen=True)
class Dropout(Layer):
    """Zero each element with probability ``p`` during training (and rescale the rest).

    Training keeps a mask the size of the input. Its element type depends on
    the implementation: PyTorch's fused GPU kernel keeps a one-byte ``bool``
    mask (the default here); its CPU path keeps the scaled noise in the
    activation dtype (pass ``mask_dtype=None`` for that).

    Parameters
    ----------
    p : float, default 0.5
        Probability of dropping an element, in ``[0, 1)``.
    inplace : bool, default False
    mask_dtype : dtype name or None, default ``"bool"``
        ``None`` means the activation dtype.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> [s.role for s in Dropout(0.5).saved_for_backward((B, 500))]
    ['mask']
    >>> Dropout(1.5)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: Dropout: p must be in [0, 1), got 1.5.
    """

    p: float = 0.5
    inplace: bool = False
    mask_dtype: DTypeLike | None = "bool"
    name: str | None = None
    kind = "Dropout"

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, int | float) or not 0 <= self.p < 1:
            raise InvalidSizeError(f"{self.label}: p must be in [0, 1), got {self.p!r}.")
        if self.mask_dtype is not None:
            object.__setattr__(self, "mask_dtype", dtype(self.mask_dtype))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        return tuple(input_shape)

    def stores_output(self) -> bool:
        """Return False when in place."""
        return not self.inplace

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the mask (nothing when ``p`` is 0: PyTorch then passes the input through)."""
        if self.p == 0:
            return ()
        mask_dtype = self.mask_dtype if isinstance(self.mask_dtype, DType) else None
        return (TensorSpec("mask", tuple(input_shape), mask_dtype),)

    def describe(self) -> str:
        """Drop probability."""
        return f"p={self.p}" + (", in place" if self.inplace else "")
