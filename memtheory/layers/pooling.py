"""Max and average pooling: no parameters, fixed-size windows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import sympy as sp

from memtheory._validation import Pair, PairLike, as_pair
from memtheory.dtypes import dtype
from memtheory.errors import InvalidSizeError, KernelTooLargeError
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape
from memtheory.layers.conv import check_window_fits
from memtheory.sliding_window import effective_kernel, pool_output_size

__all__ = ["AvgPool2d", "MaxPool2d", "Pool2d"]


@dataclass(frozen=True)
class Pool2d(Layer):
    """What max and average pooling share: the window, its stride, padding and ceil mode."""

    kernel_size: PairLike
    stride: PairLike | None = None
    padding: PairLike = 0
    ceil_mode: bool = False
    name: str | None = None
    input_rank = 4
    autograd_checked = True

    def __post_init__(self) -> None:
        owner = self.label
        object.__setattr__(self, "kernel_size", as_pair(self.kernel_size, "kernel_size", owner))
        stride = self.kernel_size if self.stride is None else self.stride
        object.__setattr__(self, "stride", as_pair(stride, "stride", owner))
        object.__setattr__(self, "padding", as_pair(self.padding, "padding", owner, minimum=0))
        for k, p, d in zip(self._kernel_size(), self._padding(), self._dilation(), strict=True):
            span = effective_kernel(k, d)
            if sp.sympify(2 * p > span) is sp.true:
                raise InvalidSizeError(
                    f"{owner}: padding {p} is more than half the window ({span}); "
                    "PyTorch refuses that. Use padding <= kernel_size // 2."
                )

    # __post_init__ made kernel_size, stride and padding pairs: these say so to the type checker.
    def _kernel_size(self) -> Pair:
        return cast(Pair, self.kernel_size)

    def _stride(self) -> Pair:
        return cast(Pair, self.stride)

    def _padding(self) -> Pair:
        return cast(Pair, self.padding)

    def _dilation(self) -> Pair:
        return (sp.Integer(1), sp.Integer(1))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, channels, h_out, w_out)``; floor unless ``ceil_mode``."""
        self.check_input(input_shape)
        batch, channels, height, width = input_shape
        sizes = []
        for axis, size, k, s, p, d in zip(
            ("height", "width"),
            (height, width),
            self._kernel_size(),
            self._stride(),
            self._padding(),
            self._dilation(),
            strict=True,
        ):
            if not self.ceil_mode:
                check_window_fits(self.label, axis, size, k, p, d, input_shape)
            out = pool_output_size(size, k, s, p, d, ceil_mode=self.ceil_mode)
            if self.ceil_mode and out.is_number and out < 1:
                raise KernelTooLargeError(
                    f"{self.label}: the window does not fit along the {axis} of the input "
                    f"{describe_shape(input_shape)}, even rounding up. Use a smaller kernel, "
                    "add padding, or feed a larger input."
                )
            sizes.append(out)
        return (batch, channels, *sizes)

    def describe(self) -> str:
        """Window, stride, padding and rounding."""
        kh, kw = self._kernel_size()
        sh, sw = self._stride()
        text = f"{kh}x{kw}, stride {sh if sh == sw else f'{sh}x{sw}'}"
        if self.padding != (0, 0):
            text += f", pad {self._padding()[0]}"
        return text + (", ceil" if self.ceil_mode else "")


@dataclass(frozen=True)
class MaxPool2d(Pool2d):
    """Max pooling: each output is the largest value in its window.

    Training keeps the input and, for each output, the int64 index of the
    winning input, so the gradient can be routed back to it.

    Parameters
    ----------
    kernel_size : size or (height, width)
    stride : size or (height, width), optional
        Defaults to ``kernel_size``.
    padding : size or (height, width), default 0
        At most half the window.
    ceil_mode : bool, default False
        Round the output size up (a partial window at the edge counts).
    dilation : size or (height, width), default 1
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> pool = MaxPool2d(2, stride=2)
    >>> pool.output_shape((B, 64, 25, 25))
    (B, 64, 12, 12)
    >>> saved = pool.saved_for_backward((B, 64, 25, 25))
    >>> [(s.role, s.dtype.name if s.dtype else None) for s in saved]
    [('input', None), ('indices', 'int64')]
    """

    dilation: PairLike = 1
    kind = "MaxPool2d"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dilation", as_pair(self.dilation, "dilation", self.label))
        super().__post_init__()

    def _dilation(self) -> Pair:
        return cast(Pair, self.dilation)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input and int64 indices of the maxima, one per output element."""
        return (
            TensorSpec("input", input_shape),
            TensorSpec("indices", self.output_shape(input_shape), dtype("int64")),
        )


@dataclass(frozen=True)
class AvgPool2d(Pool2d):
    """Average pooling: each output is the mean of its window.

    Parameters
    ----------
    kernel_size : size or (height, width)
    stride : size or (height, width), optional
        Defaults to ``kernel_size``.
    padding : size or (height, width), default 0
    ceil_mode : bool, default False
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> AvgPool2d(7).output_shape((B, 2048, 7, 7))
    (B, 2048, 1, 1)
    """

    kind = "AvgPool2d"

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """PyTorch's autograd keeps the input (its backward reads the input's shape from it)."""
        return (TensorSpec("input", input_shape),)
