"""Element-wise activation functions: no parameters, output shaped like the input.

What the backward pass keeps follows PyTorch's autograd formulas: functions
whose derivative is cheapest from their output (ReLU, sigmoid, tanh) keep the
output; the others keep the input. An in-place activation overwrites its input,
creates no new activation memory, and so keeps its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, elements
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["ELU", "GELU", "LeakyReLU", "NewGELU", "ReLU", "ReLU6", "SiLU", "Sigmoid", "Tanh"]


@dataclass(frozen=True)
class _Elementwise(Layer):
    inplace: bool = False
    name: str | None = None
    saves: ClassVar[Literal["input", "output"]] = "input"
    supports_inplace: ClassVar[bool] = False
    autograd_checked = True

    def __post_init__(self) -> None:
        if self.inplace and not self.supports_inplace:
            raise InvalidSizeError(
                f"{self.label}: has no in-place variant in PyTorch; drop inplace=True."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        return tuple(input_shape)

    def stores_output(self) -> bool:
        """Return False when in place: the output overwrites the input."""
        return not self.inplace

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the output (or input) its derivative is computed from."""
        role = "output" if self.inplace else self.saves
        return (TensorSpec(role, tuple(input_shape)),)

    def describe(self) -> str:
        """``in place`` when it is."""
        return "in place" if self.inplace else ""


@dataclass(frozen=True)
class ReLU(_Elementwise):
    """``max(0, x)``; keeps its output (the gradient passes where the output is positive).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> shape = (B, 32, 50, 50)
    >>> ReLU().activation_count(shape), ReLU(inplace=True).activation_count(shape)
    (80000*B, 0)
    """

    kind = "ReLU"
    saves = "output"
    supports_inplace = True


@dataclass(frozen=True)
class ReLU6(_Elementwise):
    """``min(max(0, x), 6)`` (MobileNetV2); keeps its input, a copy of it when in place.

    PyTorch computes it as ``hardtanh(x, 0, 6)``, whose derivative reads the
    input (``derivatives.yaml``). The in-place ``hardtanh_`` overwrites the
    input, so autograd first saves a copy of it (``original_self``): in place,
    the output costs nothing new but the saved copy is an input-sized tensor
    of its own (checked on PyTorch 2.13 with ``saved_tensors_hooks``: the saved
    tensor's storage is neither the input's nor the output's).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> [t.role for t in ReLU6().saved_for_backward((B, 32, 8, 8))]
    ['input']
    >>> relu6 = ReLU6(inplace=True)
    >>> relu6.stores_output(), [t.role for t in relu6.saved_for_backward((B, 32, 8, 8))]
    (False, ['intermediate'])
    >>> relu6.activation_count((B, 32, 8, 8))
    2048*B
    """

    kind = "ReLU6"
    supports_inplace = True

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return its input, or (in place) the copy of its input autograd makes first."""
        return (TensorSpec("intermediate" if self.inplace else "input", tuple(input_shape)),)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the output, or (in place) the saved copy of the input: input-sized either way."""
        return elements(tuple(input_shape))


@dataclass(frozen=True)
class LeakyReLU(_Elementwise):
    """``x`` if positive else ``negative_slope * x``; keeps its input (its output when in place).

    Examples
    --------
    >>> LeakyReLU(inplace=True).describe()
    'in place'
    """

    negative_slope: float = 0.01
    kind = "LeakyReLU"
    supports_inplace = True


@dataclass(frozen=True)
class ELU(_Elementwise):
    """Exponential linear unit; keeps its input (its output when in place).

    Examples
    --------
    >>> ELU().saves
    'input'
    """

    alpha: float = 1.0
    kind = "ELU"
    supports_inplace = True


@dataclass(frozen=True)
class GELU(_Elementwise):
    """Gaussian error linear unit; keeps its input. No in-place variant.

    Exact (``approximate="none"``) or with the tanh approximation (GPT-2's
    ``gelu_new``, ``approximate="tanh"``): both keep their input, in its dtype
    (measured on CPU, PyTorch 2.13).

    Examples
    --------
    >>> GELU(approximate="tanh").describe()
    'tanh'
    >>> GELU(inplace=True)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: GELU: has no in-place variant in PyTorch; drop inplace=True.
    """

    approximate: Literal["none", "tanh"] = "none"
    kind = "GELU"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.approximate not in ("none", "tanh"):
            raise InvalidSizeError(
                f"{self.label}: approximate must be 'none' or 'tanh', got {self.approximate!r}."
            )

    def describe(self) -> str:
        """``tanh`` for the tanh approximation."""
        return "tanh" if self.approximate == "tanh" else ""


@dataclass(frozen=True)
class NewGELU(_Elementwise):
    r"""Hugging Face's ``gelu_new`` written out: GPT-2's default activation, seven operations.

    ``NewGELUActivation`` (transformers 5.24, ``activations.py``) computes
    :math:`0.5x\,(1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715\,x^3)))` as separate
    element-wise PyTorch operations rather than one fused kernel
    (:class:`GELU` with ``approximate="tanh"``, Hugging Face's
    ``gelu_pytorch_tanh``). Each operation keeps its own tensors for the
    backward pass: ``pow`` keeps :math:`x`, ``tanh`` its output :math:`t`,
    and the last product both of its factors, :math:`0.5x` and :math:`1 + t`:
    three input-sized tensors more than the fused GELU. How PyTorch's
    backward runs them, with the temporaries each node allocates, is the
    kernel plan
    :func:`memtheory.conventions.autograd.kernels.torch_2_13.activations.new_gelu`.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> [t.label for t in NewGELU().saved_for_backward((B, S, 128))]
    ['x', '0.5 x', 't = tanh(...)', '1 + t']
    """

    kind = "NewGELU"
    autograd_checked = True

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return :math:`x`, :math:`0.5x`, :math:`t` and :math:`1 + t`, each input-sized."""
        shape = tuple(input_shape)
        return (
            TensorSpec("input", shape, label="x"),
            TensorSpec("intermediate", shape, label="0.5 x"),
            TensorSpec("intermediate", shape, label="t = tanh(...)"),
            TensorSpec("intermediate", shape, label="1 + t"),
        )

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return its backward nodes, as its kernel plan says PyTorch runs them."""
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )


@dataclass(frozen=True)
class SiLU(_Elementwise):
    """``x * sigmoid(x)`` (swish); keeps its input.

    Examples
    --------
    >>> SiLU().saves
    'input'
    """

    kind = "SiLU"


@dataclass(frozen=True)
class Sigmoid(_Elementwise):
    """Logistic sigmoid; keeps its output (its derivative is ``y(1-y)``).

    Examples
    --------
    >>> Sigmoid().saves
    'output'
    """

    kind = "Sigmoid"
    saves = "output"


@dataclass(frozen=True)
class Tanh(_Elementwise):
    """Hyperbolic tangent; keeps its output (its derivative is ``1 - y**2``).

    Examples
    --------
    >>> Tanh().saves
    'output'
    """

    kind = "Tanh"
    saves = "output"
