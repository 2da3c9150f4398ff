"""Softmax, log-softmax, and the cross-entropy loss that ends a classifier."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import dtype
from memtheory.layers.base import Layer, Shape, TensorSpec, elements

__all__ = ["CrossEntropyLoss", "LogSoftmax", "Softmax"]


@dataclass(frozen=True)
class Softmax(Layer):
    """Softmax over the last dimension; keeps its output for the backward pass.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> Softmax().activation_count((B, 10))
    10*B
    """

    name: str | None = None
    kind = "Softmax"

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        return tuple(input_shape)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its output."""
        return (TensorSpec("output", tuple(input_shape)),)


@dataclass(frozen=True)
class LogSoftmax(Softmax):
    """Log-softmax over the last dimension; keeps its output.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> LogSoftmax().output_shape((B, 10))
    (B, 10)
    """

    kind = "LogSoftmax"


@dataclass(frozen=True)
class CrossEntropyLoss(Layer):
    """Mean cross-entropy of ``(batch, classes)`` logits against integer class labels.

    Computed as log-softmax followed by negative log-likelihood: it creates the
    ``(batch, classes)`` log-probabilities (kept for the backward pass) and a
    scalar loss, and keeps the int64 targets.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> loss = CrossEntropyLoss()
    >>> loss.output_shape((B, 10)), loss.activation_count((B, 10))
    ((), 10*B + 1)
    """

    name: str | None = None
    kind = "CrossEntropyLoss"
    input_rank = 2

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the empty shape of a scalar."""
        self.check_input(input_shape)
        return ()

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the log-probabilities plus the scalar loss."""
        return elements(input_shape) + 1

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the log-probabilities and the int64 targets.

        PyTorch's NLL loss also keeps a one-element ``total_weight`` in the loss
        dtype; :class:`~memtheory.conventions.autograd.AutogradConvention` adds it
        (checked with ``saved_tensors_hooks`` on PyTorch 2.13).
        """
        return (
            TensorSpec("intermediate", tuple(input_shape)),
            TensorSpec("target", (input_shape[0],), dtype("int64")),
        )
