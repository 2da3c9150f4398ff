"""Two-dimensional convolution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, cast

import sympy as sp

from memtheory._validation import Pair, PairLike, SizeLike, as_pair, as_size
from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidSizeError, KernelTooLargeError, ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape
from memtheory.sliding_window import conv_output_size, effective_kernel

__all__ = ["Conv2d", "check_window_fits"]

PaddingLike: TypeAlias = PairLike | str


@dataclass(frozen=True)
class Conv2d(Layer):
    r"""2-D convolution over a ``(batch, channels, height, width)`` input.

    Each of the ``out_channels`` filters spans ``in_channels / groups`` input
    channels and a ``kh x kw`` window, so the layer has
    :math:`c_\text{out} \cdot (c_\text{in}/g) \cdot k_h k_w` weights and
    :math:`c_\text{out}` biases. The input channel count comes from the input
    shape. Derived in the book's chapter "Counting parameters"; output sizes in
    "Shapes and activations".

    Parameters
    ----------
    out_channels : size
        Number of filters (output feature maps).
    kernel_size : size or (height, width)
    stride : size or (height, width), default 1
    padding : size, (height, width), ``"same"`` or ``"valid"``, default 0
        Zeros added on each side. ``"same"`` keeps the spatial size and, as in
        PyTorch, needs stride 1; ``"valid"`` is no padding.
    dilation : size or (height, width), default 1
    groups : size, default 1
        Input and output channels are split into this many independent groups.
    bias : bool, default True
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> c1 = Conv2d(32, 3, padding=1)
    >>> c1.output_shape((B, 3, 50, 50))
    (B, 32, 50, 50)
    >>> c1.weight_count((B, 3, 50, 50)), c1.bias_count((B, 3, 50, 50))
    (864, 32)
    >>> Conv2d(64, 7, stride=2, padding=3).output_shape((B, 3, 224, 224))
    (B, 64, 112, 112)
    """

    out_channels: SizeLike
    kernel_size: PairLike
    stride: PairLike = 1
    padding: PaddingLike = 0
    dilation: PairLike = 1
    groups: SizeLike = 1
    bias: bool = True
    name: str | None = None
    kind = "Conv2d"
    autograd_checked = True
    input_rank = 4

    def __post_init__(self) -> None:
        owner = self.label
        set_ = object.__setattr__
        set_(self, "out_channels", as_size(self.out_channels, "out_channels", owner))
        set_(self, "kernel_size", as_pair(self.kernel_size, "kernel_size", owner))
        set_(self, "stride", as_pair(self.stride, "stride", owner))
        set_(self, "dilation", as_pair(self.dilation, "dilation", owner))
        set_(self, "groups", as_size(self.groups, "groups", owner))
        if isinstance(self.padding, str):
            mode = self.padding.lower()
            if mode not in ("same", "valid"):
                raise InvalidSizeError(
                    f"{owner}: padding must be a size, a pair, 'same' or 'valid', got "
                    f"{self.padding!r}."
                )
            if mode == "same" and any(s != 1 for s in self._stride()):
                raise InvalidSizeError(
                    f"{owner}: padding='same' needs stride 1 (as in PyTorch), got stride "
                    f"{self.stride}. Give the padding as a number for a strided convolution."
                )
            set_(self, "padding", mode if mode == "same" else (sp.Integer(0), sp.Integer(0)))
        else:
            set_(self, "padding", as_pair(self.padding, "padding", owner, minimum=0))
        _check_divides(self.groups, self.out_channels, "out_channels", owner)

    # __post_init__ made kernel_size, stride and dilation pairs: these say so to the type checker.
    def _kernel_size(self) -> Pair:
        return cast(Pair, self.kernel_size)

    def _stride(self) -> Pair:
        return cast(Pair, self.stride)

    def _dilation(self) -> Pair:
        return cast(Pair, self.dilation)

    def _padding(self) -> Pair:
        if self.padding == "same":
            # PyTorch pads d*(k-1) in total, the extra one (if odd) on the far side.
            (kh, kw), (dh, dw) = self._kernel_size(), self._dilation()
            return (effective_kernel(kh, dh) - 1, effective_kernel(kw, dw) - 1)
        return cast(Pair, self.padding)

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, out_channels, h_out, w_out)``."""
        self.check_input(input_shape)
        batch, channels, height, width = input_shape
        _check_divides(self.groups, channels, "the input's channel count", self.label)
        if self.padding == "same":
            return (batch, self.out_channels, height, width)
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
            check_window_fits(self.label, axis, size, k, p, d, input_shape)
            sizes.append(conv_output_size(size, k, s, p, d))
        return (batch, self.out_channels, *sizes)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """``out_channels * (in_channels / groups) * kh * kw``."""
        self.check_input(input_shape)
        in_channels = input_shape[1]
        kh, kw = self._kernel_size()
        return self.out_channels * (in_channels / self.groups) * kh * kw

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """``out_channels`` if the layer has a bias."""
        return self.out_channels if self.bias else sp.Integer(0)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(out, in / groups, kh, kw)``, then ``bias`` of ``(out,)``.

        Examples
        --------
        >>> from memtheory.symbols import B
        >>> Conv2d(96, 3, groups=96, bias=False).parameter_shapes((B, 96, 8, 8))
        (('weight', (96, 1, 3, 3)),)
        """
        self.check_input(input_shape)
        kh, kw = self._kernel_size()
        weight: tuple[str, Shape] = (
            "weight",
            (self.out_channels, input_shape[1] / self.groups, kh, kw),
        )
        return (weight, ("bias", (self.out_channels,))) if self.bias else (weight,)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input (for the weight gradient); the weight is a parameter."""
        return (TensorSpec("input", input_shape),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its input; under autocast it runs in low precision and always keeps the weight copy."""
        return Autograd(
            saved=self.saved_for_backward(tuple(input_shapes[0])),
            autocast="low",
            weight_copy="always",
        )

    def describe(self) -> str:
        """Describe filters, kernel, and any non-default stride, padding, dilation, groups."""
        kh, kw = self._kernel_size()
        parts = [f"{self.out_channels}", f"{kh}x{kw}"]
        if self.stride != (1, 1):
            parts.append(f"stride {_pair_text(self._stride())}")
        if self.padding == "same":
            parts.append("same")
        elif self.padding != (0, 0):
            parts.append(f"pad {_pair_text(self._padding())}")
        if self.dilation != (1, 1):
            parts.append(f"dil {_pair_text(self._dilation())}")
        if self.groups != 1:
            parts.append(f"groups {self.groups}")
        if not self.bias:
            parts.append("no bias")
        return ", ".join(parts)


def _pair_text(pair: Pair) -> str:
    return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}x{pair[1]}"


def _check_divides(groups: sp.Expr, channels: sp.Expr, what: str, owner: str) -> None:
    remainder = sp.Mod(channels, groups)
    if remainder.is_number and remainder != 0:
        raise ShapeError(
            f"{owner}: {what} ({channels}) is not divisible by groups ({groups}). "
            "Choose groups that divides both channel counts."
        )


def check_window_fits(
    owner: str,
    axis: str,
    size: sp.Expr,
    kernel: sp.Expr,
    padding: sp.Expr,
    dilation: sp.Expr,
    input_shape: Shape,
) -> None:
    """Raise :class:`KernelTooLargeError` if the window is wider than the padded input.

    Only numeric sizes can be checked here; symbolic ones are checked when the
    network is evaluated.

    Examples
    --------
    >>> check_window_fits("Conv2d 'c'", "height", 3, 5, 0, 1, (1, 1, 3, 3))
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: Conv2d 'c': the window spans 5 positions along ...
    """
    window = (sp.sympify(kernel), sp.sympify(padding), sp.sympify(dilation))
    if not sp.sympify(size).is_number and all(part.is_number for part in window):
        return  # a symbolic side against a numeric window: checked when it is evaluated
    span = effective_kernel(kernel, dilation)
    room = size + 2 * padding
    excess = span - room  # a number when both are, or when the symbols cancel
    if excess.is_Number and excess > 0:
        raise KernelTooLargeError(
            f"{owner}: the window spans {span} positions along the {axis}, but the input "
            f"{describe_shape(input_shape)} offers only {room} ({size} plus padding {padding} "
            "on each side). Use a smaller kernel or dilation, add padding, or feed a larger input."
        )
