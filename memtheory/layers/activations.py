"""Element-wise activation functions: no parameters, output shaped like the input.

What the backward pass keeps follows PyTorch's autograd formulas: functions
whose derivative is cheapest from their output (ReLU, sigmoid, tanh) keep the
output; the others keep the input. An in-place activation overwrites its input,
creates no new activation memory, and so keeps its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from memtheory.errors import InvalidSizeError
from memtheory.layers.base import Layer, Shape, TensorSpec

__all__ = ["ELU", "GELU", "LeakyReLU", "ReLU", "SiLU", "Sigmoid", "Tanh"]


@dataclass(frozen=True)
class _Elementwise(Layer):
    inplace: bool = False
    name: str | None = None
    saves: ClassVar[Literal["input", "output"]] = "input"
    supports_inplace: ClassVar[bool] = False

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
