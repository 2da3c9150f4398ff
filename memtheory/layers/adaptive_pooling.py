"""Adaptive average pooling: a fixed output size whatever the input size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from memtheory._validation import Pair, PairLike, as_pair
from memtheory.layers.base import Layer, Shape, TensorSpec

__all__ = ["AdaptiveAvgPool2d"]


@dataclass(frozen=True)
class AdaptiveAvgPool2d(Layer):
    """Average pooling to ``output_size`` positions per channel (ResNet's global pooling).

    Parameters
    ----------
    output_size : size or (height, width), default 1
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> AdaptiveAvgPool2d().output_shape((B, 2048, H, H))
    (B, 2048, 1, 1)
    """

    output_size: PairLike = 1
    name: str | None = None
    kind = "AdaptiveAvgPool2d"
    autograd_checked = True
    input_rank = 4

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "output_size", as_pair(self.output_size, "output_size", self.label)
        )

    def _output_size(self) -> Pair:
        # __post_init__ made output_size a pair: this says so to the type checker.
        return cast(Pair, self.output_size)

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, channels, *output_size)``."""
        self.check_input(input_shape)
        return (input_shape[0], input_shape[1], *self._output_size())

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Keep the input, or nothing for a 1x1 output (global pooling).

        PyTorch's ``adaptive_avg_pool2d`` computes a 1x1 output as
        ``input.mean((-1, -2), keepdim=True)``, whose backward needs only the
        sizes (checked on PyTorch 2.13 with ``saved_tensors_hooks``); other
        output sizes run ``_adaptive_avg_pool2d``, whose backward keeps the input.

        Examples
        --------
        >>> from memtheory.symbols import B
        >>> AdaptiveAvgPool2d(1).saved_for_backward((B, 2048, 7, 7))
        ()
        >>> [t.role for t in AdaptiveAvgPool2d(2).saved_for_backward((B, 2048, 7, 7))]
        ['input']
        """
        if self._output_size() == (1, 1):
            return ()
        return (TensorSpec("input", tuple(input_shape)),)

    def describe(self) -> str:
        """Describe the output size."""
        height, width = self._output_size()
        return f"{height}x{width}"
