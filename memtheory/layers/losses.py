"""Regression and binary losses: mean squared error, mean absolute error, BCE with logits.

Each ends a network with a scalar; what PyTorch 2.13 keeps for it on CPU is
its kernel plan's to say
(:mod:`memtheory.conventions.autograd.kernels.torch_2_13.losses`). The
targets are the caller's, in the input's dtype.
Cross-entropy is :class:`~memtheory.layers.CrossEntropyLoss`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.errors import RankError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec
from memtheory.layers.kernel_plans import planned_autograd

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
        """Input and targets; the output storage input-sized; fp32 under autocast.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.losses.mse_loss`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
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
        """Return the difference kept by ``abs``, its result a transient; fp32 under autocast.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.losses.l1_loss`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
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
        """Input and targets; one input-sized temporary in backward; fp32 under autocast.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.losses.bce_with_logits_loss`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )
