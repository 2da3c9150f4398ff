"""Regression and binary losses: mean squared error, mean absolute error, BCE with logits.

Each ends a network with a scalar and states what PyTorch 2.13 keeps on CPU
(``derivatives.yaml``, measured with :func:`memtheory.torch.measure`): MSE keeps
its input and the targets and returns its scalar in an input-sized storage;
L1 runs as ``(input - target).abs().mean()`` and keeps the difference; BCE with
logits keeps its input and the targets, and its backward makes one input-sized
temporary (the sigmoid). Under CPU autocast each runs in fp32 (a bf16 input is
first cast to an fp32 copy). The targets are the caller's, in the input's dtype.
Cross-entropy is :class:`~memtheory.layers.CrossEntropyLoss`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.errors import RankError
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec, elements

__all__ = ["BCEWithLogitsLoss", "L1Loss", "MSELoss"]


@dataclass(frozen=True)
class _Loss(Layer):
    name: str | None = None
    autograd_checked = True

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` for a scalar input (a loss needs a batch)."""
        if len(input_shape) == 0:
            raise RankError(f"{self.label}: needs a batched input, got a scalar.")

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the empty shape of a scalar (mean reduction)."""
        self.check_input(input_shape)
        return ()

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the scalar loss."""
        return sp.Integer(1)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return its input and the targets (same shape, the caller's dtype)."""
        return (TensorSpec("input", tuple(input_shape)), TensorSpec("target", tuple(input_shape)))


@dataclass(frozen=True)
class MSELoss(_Loss):
    """Mean squared error against targets of the input's shape.

    Keeps its input and the targets; its scalar result lives in an
    input-sized storage (``mse_loss`` reduces its element-wise buffer in place;
    measured on PyTorch 2.13 CPU).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> spec = MSELoss().autograd(((B, 10),))
    >>> [t.role for t in spec.saved], spec.output_elements
    (['input', 'target'], 10*B)
    """

    kind = "MSELoss"

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Input and targets; the output storage input-sized; fp32 under autocast."""
        shape = tuple(input_shapes[0])
        return Autograd(
            saved=self.saved_for_backward(shape),
            autocast="fp32",
            output_elements=elements(shape),
            target=TensorSpec("target", shape),
        )


@dataclass(frozen=True)
class L1Loss(_Loss):
    """Mean absolute error: ``(input - target).abs().mean()``, three backward nodes.

    Keeps the difference (for the sign); the absolute values live until the
    mean is taken. Backward: the mean's gradient (input-sized), then ``grad *
    diff.sgn()`` (the sign is an input-sized temporary), then the subtraction
    hands its gradient on.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> [s.label for s in L1Loss().autograd(((B, 10),)).stages]
    ['sub', 'abs', 'mean']
    """

    kind = "L1Loss"

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the difference ``input - target``."""
        return (TensorSpec("intermediate", tuple(input_shape), label="difference"),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return the difference kept by ``abs``, its result a transient; fp32 under autocast."""
        shape = tuple(input_shapes[0])
        return Autograd(
            saved=self.saved_for_backward(shape),
            autocast="fp32",
            target=TensorSpec("target", shape),
            transients=(TensorSpec("intermediate", shape, label="absolute values"),),
            stages=(
                Stage("sub", (), gradient_is_view=True),
                Stage("abs", (0,), temporaries=(TensorSpec("intermediate", shape),)),
                Stage("mean"),
            ),
        )


@dataclass(frozen=True)
class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy on logits against targets in [0, 1] of the input's shape.

    Keeps its input and the targets; its backward, ``(sigmoid(x) - y) * grad / n``,
    makes one input-sized temporary.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> spec = BCEWithLogitsLoss().autograd(((B, 10),))
    >>> [t.role for t in spec.saved], len(spec.stages[0].temporaries)
    (['input', 'target'], 1)
    """

    kind = "BCEWithLogitsLoss"

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Input and targets; one input-sized temporary in backward; fp32 under autocast."""
        shape = tuple(input_shapes[0])
        return Autograd(
            saved=self.saved_for_backward(shape),
            autocast="fp32",
            target=TensorSpec("target", shape),
            stages=(Stage("", (0, 1), temporaries=(TensorSpec("intermediate", shape),)),),
        )
