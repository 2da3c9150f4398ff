"""Misconceptions of chapters 3, 4 and 7: output sizes, a ReLU's output, 2 bytes for 4.

Each is a :class:`~memtheory.exercises.reasoning.Reasoning` that does one
step wrong, as in :mod:`memtheory.exercises.misconceptions`:

- ``output_size_off_by_one``: the output size of a convolution or a pooling
  without the ``+ 1``, or with the window's span one short (``d(k-1)``);
- ``floor_ceil_swapped``: the output size rounded up where it is floored, or
  floored where ``ceil_mode=True`` rounds it up;
- ``forgot_relu_output``: a ReLU that keeps its own output counted as if it
  ran in place;
- ``half_vs_single``: 2 bytes where 4 are asked (fp32 as fp16), or 4 where 2
  (fp16 and bf16 as fp32).

Importing this module registers them in
:data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`.

Examples
--------
>>> wrong_window_count("no_plus_one", 224, 7, 2, 3)
111
>>> wrong_window_count("swapped_rounding", 25, 2, 2, ceil=True)
12
>>> from memtheory import Input, MaxPool2d
>>> way = MISCONCEPTIONS["floor_ceil_swapped"].ways[0]
>>> way.network([Input((8, 25, 25)), MaxPool2d(2, stride=2, ceil_mode=True)]).output_shape
(B, 8, 12, 12)
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

import sympy as sp

from memtheory.dtypes import DType, dtype
from memtheory.exercises.misconceptions import (  # noqa: F401 (MISCONCEPTIONS: the doctests)
    MISCONCEPTIONS,
    Misconception,
    register,
)
from memtheory.exercises.reasoning import Reasoning
from memtheory.layers import AvgPool2d, Conv2d, Layer, MaxPool2d, ReLU
from memtheory.layers.base import Shape
from memtheory.precision import Precision, PrecisionLike
from memtheory.sliding_window import effective_kernel

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["SIZE_MISCONCEPTIONS", "wrong_window_count"]

_RULES = {
    "no_plus_one": "the output size taken as floor((n + 2p - d(k-1) - 1)/s), without the + 1",
    "short_span": "the window's span taken as d(k-1) (k-1 undilated) instead of d(k-1) + 1",
    "swapped_rounding": "the output size rounded up where it is floored, or floored where "
    "ceil_mode rounds it up",
}


def wrong_window_count(
    rule: str,
    size: sp.Expr | int,
    kernel: sp.Expr | int,
    stride: sp.Expr | int,
    padding: sp.Expr | int = 0,
    dilation: sp.Expr | int = 1,
    *,
    ceil: bool = False,
) -> sp.Expr:
    """How many windows fit along one dimension, computed with the mistake ``rule``.

    Parameters
    ----------
    rule : str
        ``"no_plus_one"``, ``"short_span"`` or ``"swapped_rounding"``.
    size, kernel, stride, padding, dilation : int or sympy expression
    ceil : bool
        The layer rounds up (a pooling with ``ceil_mode=True``).

    Examples
    --------
    >>> wrong_window_count("short_span", 32, 3, 1, 0, dilation=2)
    29
    """
    span = effective_kernel(kernel, dilation) - (1 if rule == "short_span" else 0)
    raw = (sp.sympify(size) + 2 * sp.sympify(padding) - span) / sp.sympify(stride)
    up = ceil != (rule == "swapped_rounding")
    count = sp.ceiling(raw) if up else sp.floor(raw)
    return count if rule == "no_plus_one" else count + 1


class _Missized(Layer):
    """Mixin: a convolution or pooling whose spatial output sizes follow :attr:`window_rule`."""

    window_rule: ClassVar[str] = ""

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the right batch and channels, with the sizes computed with the mistake."""
        shape = super().output_shape(input_shape)  # type: ignore[safe-super]  # the layer's own
        layer: Any = self  # a Conv2d or a pooling: the mixin comes first in their bases
        if getattr(layer, "padding", None) == "same":
            return shape
        sizes = [
            wrong_window_count(
                self.window_rule, n, k, s, p, d, ceil=bool(getattr(layer, "ceil_mode", False))
            )
            for n, k, s, p, d in zip(
                input_shape[2:],
                layer._kernel_size(),
                layer._stride(),
                layer._padding(),
                layer._dilation(),
                strict=True,
            )
        ]
        return (*shape[:2], *sizes)


_MISSIZED: dict[tuple[type[Layer], str], type[Layer]] = {
    (base, rule): type(
        f"{rule.title().replace('_', '')}{base.__name__}",
        (_Missized, base),
        {
            "window_rule": rule,
            "__doc__": f"{base.__name__} with {_RULES[rule]}.",
        },
    )
    for base in (Conv2d, MaxPool2d, AvgPool2d)
    for rule in _RULES
}


def _rebuilt(layer: Layer, cls: type[Layer]) -> Layer:
    concrete = cast("DataclassInstance", layer)  # every concrete layer is a dataclass
    return cls(**{f.name: getattr(layer, f.name) for f in fields(concrete)})


class _WindowRule(Reasoning):
    def __init__(self, rule: str) -> None:
        self.rule = rule
        self.detail = _RULES[rule]

    def layer(self, layer: Layer) -> Layer:
        layer = super().layer(layer)
        cls = _MISSIZED.get((type(layer), self.rule))
        return layer if cls is None else _rebuilt(layer, cls)

    def pool_output_size(
        self,
        size: sp.Expr | int,
        kernel: int,
        stride: int | None = None,
        padding: int = 0,
        dilation: int = 1,
    ) -> sp.Expr:
        stride = kernel if stride is None else stride
        return wrong_window_count(self.rule, size, kernel, stride, padding, dilation)


class _ReluInPlace(Reasoning):
    detail = "the ReLU's output not counted, as if it ran in place"

    def layer(self, layer: Layer) -> Layer:
        layer = super().layer(layer)
        if type(layer) is ReLU and not layer.inplace:
            return replace(layer, inplace=True)
        return layer


_HALF = ("fp16", "bf16")


class _HalfVsSingle(Reasoning):
    def __init__(self, *, half_as_single: bool) -> None:
        self.half_as_single = half_as_single
        self.detail = (
            "every 2-byte float (fp16, bf16) counted at 4 bytes"
            if half_as_single
            else "every 4-byte float (fp32) counted at 2 bytes"
        )

    def _swapped(self, chosen: DType) -> DType:
        if self.half_as_single and chosen.name in _HALF:
            return dtype("fp32")
        if not self.half_as_single and chosen.name == "fp32":
            return dtype("fp16")
        return chosen

    def precision(self, spec: PrecisionLike) -> Precision:
        chosen = super().precision(spec)
        swap = self._swapped
        return Precision(
            parameters=swap(chosen.parameters),
            gradients=swap(chosen.gradients),
            optimizer_state=swap(chosen.optimizer_state),
            activations=swap(chosen.activations),
            activation_gradients=swap(chosen.activation_gradients),
            input=swap(chosen.input),
            master_weights=None if chosen.master_weights is None else swap(chosen.master_weights),
        )


SIZE_MISCONCEPTIONS = (
    Misconception(
        "output_size_off_by_one",
        "was off by one in the output-size formula",
        "The first window starts at 0 and each stride fits one more: floor((n + 2p - d(k-1) - "
        "1)/s) + 1 windows, a window spanning d(k-1) + 1 inputs (k when not dilated).",
        (_WindowRule("no_plus_one"), _WindowRule("short_span")),
    ),
    Misconception(
        "floor_ceil_swapped",
        "rounded the output size the wrong way",
        "A convolution, and a pooling in its default floor mode, drop a window that does not "
        "fit: floor. With ceil_mode=True a partial window at the edge counts: ceil (as long as "
        "it starts inside the input or its left padding).",
        (_WindowRule("swapped_rounding"),),
    ),
    Misconception(
        "forgot_relu_output",
        "forgot the ReLU's own output",
        "A ReLU that is not in place writes a new tensor and keeps it for the backward pass: "
        "count its output like any layer's, with its gradient when training.",
        (_ReluInPlace(),),
    ),
    Misconception(
        "half_vs_single",
        "used 2 bytes where 4 were asked, or 4 where 2",
        "fp32 takes 4 bytes per value; fp16 and bf16 take 2 (int8 1, fp64 and int64 8). In "
        "mixed precision the weights, gradients and activations are 2 bytes, the master "
        "weights and the optimizer state 4.",
        (_HalfVsSingle(half_as_single=True), _HalfVsSingle(half_as_single=False)),
    ),
)
"""The misconceptions this module adds."""


register(SIZE_MISCONCEPTIONS)
