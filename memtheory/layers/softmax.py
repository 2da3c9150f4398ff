"""Softmax, log-softmax, and the cross-entropy losses that end a classifier or a language model."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DTypeLike, dtype
from memtheory.errors import RankError
from memtheory.layers.base import (
    Autograd,
    Layer,
    Shape,
    TensorSpec,
    describe_shape,
    elements,
)
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["CrossEntropyLoss", "LanguageModelLoss", "LogSoftmax", "Softmax"]


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

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Two nodes: log-softmax keeps its output; NLL keeps it, the total weight, the targets.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.losses.cross_entropy_loss`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )


@dataclass(frozen=True)
class LanguageModelLoss(CrossEntropyLoss):
    """Cross-entropy of ``(batch, sequence, vocabulary)`` logits, as Hugging Face computes it.

    With ``shift=True`` and ``upcast=True`` (the defaults) it is the causal-LM
    loss of ``GPT2LMHeadModel(labels=...)``: the logits are upcast to fp32 (a
    copy only when they are not fp32 already), the int64 labels are shifted
    one position left into a new ``(batch, sequence)`` tensor (the last
    position padded with ``ignore_index``), and the cross-entropy is taken over
    the ``batch * sequence`` positions, skipping targets equal to
    ``ignore_index``. The backward pass keeps the fp32 log-probabilities, one
    per logit, and the shifted labels (and PyTorch's one-element
    ``total_weight``, as for :class:`CrossEntropyLoss`).

    With ``shift=False`` and ``upcast=False`` it is ``BertForMaskedLM``'s
    loss: ``cross_entropy(logits.view(-1, V), labels.view(-1))``, which keeps
    the log-probabilities in the logits' dtype and the labels themselves.

    Parameters
    ----------
    shift : bool, default True
        Predict the next token (a shifted copy of the labels is made and kept).
    upcast : bool, default True
        Compute in fp32 whatever the logits' dtype.
    ignore_index : int, default -100
        Label value that contributes nothing (memory does not depend on it).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> loss = LanguageModelLoss()
    >>> loss.output_shape((B, S, 50257))
    ()
    >>> [(t.role, t.shape, t.dtype.name) for t in loss.saved_for_backward((B, S, 50257))]
    [('intermediate', (B, S, 50257), 'fp32'), ('intermediate', (B, S), 'int64')]
    >>> [t.role for t in LanguageModelLoss(shift=False).saved_for_backward((B, S, 30522))]
    ['intermediate', 'target']
    """

    shift: bool = True
    upcast: bool = True
    ignore_index: int = -100
    kind = "LanguageModelLoss"
    input_rank = 3
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless the logits are ``(batch, sequence, vocabulary)``."""
        if len(input_shape) != 3:
            raise RankError(
                f"{self.label}: needs 3-D logits (batch, sequence, vocabulary), got "
                f"{len(input_shape)}-D {describe_shape(tuple(input_shape))}. Use "
                "CrossEntropyLoss for (batch, classes) logits."
            )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the log-probabilities and the (shifted copy of the) int64 labels."""
        self.check_input(input_shape)
        return (
            TensorSpec("intermediate", tuple(input_shape), dtype("fp32") if self.upcast else None),
            TensorSpec(
                "intermediate" if self.shift else "target", tuple(input_shape[:2]), dtype("int64")
            ),
        )

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Log-softmax and NLL as for :class:`CrossEntropyLoss`, fp32 when upcast; the labels.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.losses.language_model_loss`.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> spec = LanguageModelLoss().autograd(((B, S, 97),))
        >>> [(t.label or t.role, t.dtype.name) for t in spec.saved]
        [('log-probabilities', 'fp32'), ('total weight', 'fp32'), ('shifted labels', 'int64')]
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def describe(self) -> str:
        """Describe the shift and the upcast."""
        return ", ".join(
            part for part, on in (("next token", self.shift), ("fp32", self.upcast)) if on
        )
