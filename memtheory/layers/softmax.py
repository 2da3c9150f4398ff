"""Softmax, log-softmax, and the cross-entropy loss that ends a classifier."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import dtype
from memtheory.errors import RankError
from memtheory.layers.base import (
    Autograd,
    Layer,
    Shape,
    Stage,
    TensorSpec,
    describe_shape,
    elements,
)

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
    autograd_checked = True

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
    ``(batch, classes)`` log-probabilities (kept for the backward pass), a
    scalar loss and a scalar total weight, and keeps the int64 targets. A
    language model's ``(batch, sequence, vocabulary)`` logits are flattened to
    ``(batch * sequence, vocabulary)`` (a view) against ``(batch, sequence)``
    targets; ``ignore_index`` changes no storage. Under CPU autocast it runs in
    fp32: bf16 logits are first cast to an fp32 copy.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> loss = CrossEntropyLoss()
    >>> loss.output_shape((B, 10)), loss.activation_count((B, 10))
    ((), 10*B + 1)
    """

    name: str | None = None
    ignore_index: int = -100
    kind = "CrossEntropyLoss"
    autograd_checked = True

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless the logits are 2-D or 3-D (a sequence)."""
        if len(input_shape) not in (2, 3):
            raise RankError(
                f"{self.label}: needs (batch, classes) or (batch, sequence, vocabulary) logits, "
                f"got {len(input_shape)}-D {describe_shape(tuple(input_shape))}. Insert "
                "Flatten() before it."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the empty shape of a scalar."""
        self.check_input(input_shape)
        return ()

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the log-probabilities plus the scalar loss."""
        return elements(input_shape) + 1

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the log-probabilities, the scalar total weight and the int64 targets.

        (Checked with ``saved_tensors_hooks`` on PyTorch 2.13.)

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> [(t.role, t.shape) for t in CrossEntropyLoss().saved_for_backward((B, S, 50))]
        [('intermediate', (B, S, 50)), ('intermediate', ()), ('target', (B, S))]
        """
        return (
            TensorSpec("intermediate", tuple(input_shape), label="log-probabilities"),
            TensorSpec("intermediate", (), label="total weight"),
            TensorSpec("target", tuple(input_shape[:-1]), dtype("int64")),
        )

    def autograd(self, input_shapes: tuple[Shape, ...], *, training: bool = True) -> Autograd:
        """Two nodes: log-softmax keeps its output; NLL keeps it, the total weight, the targets."""
        saved = self.saved_for_backward(tuple(input_shapes[0]))
        return Autograd(
            saved=saved,
            target=saved[2],
            autocast="fp32",
            stages=(Stage("log_softmax", (0,)), Stage("nll_loss", (0, 1, 2))),
        )
