r"""Gradient accumulation: the memory of a micro-batch, the update of a larger batch.

Running :math:`m` micro-batches of :math:`b` samples and adding their
gradients before one optimizer step gives the update of an effective batch
of :math:`mb` samples, with the activation memory of :math:`b`: activations
are freed after each micro-batch's backward pass, while the gradients (and
the optimizer state) are parameter-sized and do not grow with the batch. The
gradient buffer must persist across the micro-batches, which plain training
already counts. Derived in the book's chapter "Batch size".

Examples
--------
>>> from memtheory import ModelCounts
>>> counts = ModelCounts.per_sample(parameters=10**6, activations=10**5, input_elements=10**3)
>>> plan = gradient_accumulation(counts, micro_batch=8, steps=4, optimizer="adam")
>>> plan.effective_batch, plan.memory.format("MB"), plan.full_batch.format("MB")
(32, '22.43 MB', '41.73 MB')
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.conventions import ConventionLike, Model, model_counts
from memtheory.errors import UnsupportedError
from memtheory.memory import training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike

__all__ = ["Accumulation", "gradient_accumulation"]


@dataclass(frozen=True)
class Accumulation:
    """Memory of training with gradient accumulation, beside one big batch.

    Attributes
    ----------
    micro_batch : sympy expression
        Samples per forward/backward pass :math:`b`.
    steps : sympy expression
        Micro-batches per optimizer step :math:`m`.
    memory : MemoryBreakdown
        Memory of training on micro-batches of :math:`b`.
    full_batch : MemoryBreakdown
        Memory of training on the effective batch :math:`mb` at once.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> plan = gradient_accumulation(Network([Input((784,)), Dense(10)]), 8, 4, optimizer="sgd")
    >>> plan.effective_batch, plan.saved
    (32, 77184)
    """

    micro_batch: sp.Expr
    steps: sp.Expr
    memory: MemoryBreakdown
    full_batch: MemoryBreakdown

    @property
    def effective_batch(self) -> sp.Expr:
        """Samples per optimizer step: ``micro_batch * steps``."""
        return self.micro_batch * self.steps

    @property
    def saved(self) -> sp.Expr:
        """Bytes saved against the full batch: the activations of the other samples."""
        return sp.expand(self.full_batch.total - self.memory.total)


def gradient_accumulation(
    model: Model,
    micro_batch: SizeLike,
    steps: SizeLike,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
) -> Accumulation:
    """Memory of accumulating ``steps`` micro-batches of ``micro_batch`` samples per update.

    Parameters
    ----------
    model : Network or ModelCounts
        Built over a symbolic batch (the default ``B``).
    micro_batch, steps : size
        :math:`b` and :math:`m`; symbols are fine.
    optimizer, precision, convention
        As for :func:`~memtheory.memory.training_memory`.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> from memtheory.symbols import size_symbol
    >>> b, m = size_symbol("b"), size_symbol("m")
    >>> plan = gradient_accumulation(Network([Input((4,)), Dense(3)]), b, m, optimizer="sgd")
    >>> plan.memory.total, plan.saved
    (40*b + 120, 40*b*m - 40*b)
    """
    batch = model_counts(model).batch
    if not isinstance(batch, sp.Symbol):
        raise UnsupportedError(
            f"the model's batch is fixed at {batch}; build it over a symbolic batch (the "
            "default B) to vary the micro-batch."
        )
    b = as_size(micro_batch, "micro_batch", "gradient_accumulation")
    m = as_size(steps, "steps", "gradient_accumulation")
    memory = training_memory(model, optimizer=optimizer, precision=precision, convention=convention)

    def at(size: sp.Expr) -> MemoryBreakdown:
        return MemoryBreakdown(
            {k: sp.expand(v.xreplace({batch: size})) for k, v in memory.components.items()},
            memory.mode,
            memory.convention,
            memory.precision,
            memory.optimizer,
            memory.notes,
        )

    return Accumulation(b, m, at(b), at(b * m))
