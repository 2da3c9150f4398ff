"""The steps of a memory calculation, done correctly: what an exercise's solver calls.

An exercise computes its answer from a :class:`Reasoning` named ``how``,
only through memtheory and these steps: build the network, count its
parameters and activations, size a pooled map, pick the optimizer and the
precision, account for training memory, read and write units. The correct
answer is the solver run with :data:`CORRECT`. Each misconception
(:mod:`memtheory.exercises.misconceptions`) is a subclass that does one step
wrong, so the same solver gives the answer a learner with that misconception
would write.

Examples
--------
>>> from memtheory import Dense, Input
>>> net = CORRECT.network([Input((784,)), Dense(100)])
>>> CORRECT.parameter_count(net)
78500
>>> CORRECT.in_unit(3 * 2**20, "MiB")
3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import sympy as sp

from memtheory.conventions import Convention, ConventionLike, Model, convention, model_counts
from memtheory.counts import ModelCounts
from memtheory.exercises.step_log import took
from memtheory.layers import Layer
from memtheory.memory import inference_memory, training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import Optimizer, OptimizerLike, optimizer
from memtheory.precision import Precision, PrecisionLike, precision
from memtheory.sliding_window import pool_output_size
from memtheory.units import unit_bytes

__all__ = ["CORRECT", "OwnStep", "Reasoning", "own_step"]


class Reasoning:
    """How a memory answer is computed, step by step; this base class does every step right.

    Subclasses override one step to model one misconception, and say in
    :attr:`detail` what they did.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
    >>> Reasoning().training_memory(counts, optimizer="adam").total
    28*B + 160
    """

    detail: str = "computed correctly"

    # -- layers and networks -------------------------------------------------------------
    def layer(self, layer: Layer) -> Layer:
        """Return the layer as the learner would build it."""
        return layer

    def network(self, layers: Sequence[Layer], *, name: str = "network") -> Network:
        """Build a network from ``layers`` (each passed through :meth:`layer`)."""
        return Network([self.layer(layer) for layer in layers], name=name)

    def parameter_count(self, network: Network) -> sp.Expr:
        """Trainable parameters of ``network``."""
        return network.parameter_count

    def activation_count(self, network: Network) -> sp.Expr:
        """Activation elements the forward pass keeps, batch included, input excluded."""
        return network.activation_count

    def input_elements(self, network: Network) -> sp.Expr:
        """Elements of the input batch."""
        return network.input_elements

    def pool_output_size(
        self,
        size: sp.Expr | int,
        kernel: int,
        stride: int | None = None,
        padding: int = 0,
        dilation: int = 1,
    ) -> sp.Expr:
        """Output size of a pooling window along one dimension (floor)."""
        return pool_output_size(size, kernel, stride, padding, dilation)

    # -- memory --------------------------------------------------------------------------
    def optimizer(self, spec: OptimizerLike) -> Optimizer:
        """Look up the optimizer, with the state it keeps."""
        return optimizer(spec)

    def precision(self, spec: PrecisionLike) -> Precision:
        """Choose the dtype of each memory component."""
        return precision(spec)

    def convention(self, spec: ConventionLike) -> Convention:
        """Look up the accounting convention."""
        return convention(spec)

    def counts(self, model: Model) -> ModelCounts:
        """Return the element counts a convention needs."""
        return model_counts(model)

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        """Change components after accounting (the correct way changes nothing)."""
        return memory

    def training_memory(
        self,
        model: Model,
        *,
        optimizer: OptimizerLike | None = None,
        precision: PrecisionLike = "fp32",
        convention: ConventionLike = "breakdown",
    ) -> MemoryBreakdown:
        """Memory of a training step by component: :func:`memtheory.training_memory`."""
        counts = self.counts(model)
        chosen = None if optimizer is None else self.optimizer(optimizer)
        memory = training_memory(
            counts,
            optimizer=chosen,
            precision=self.precision(precision),
            convention=self.convention(convention),
        )
        return self.adjust(memory, counts)

    def inference_memory(
        self, model: Model, *, precision: PrecisionLike = "fp32"
    ) -> MemoryBreakdown:
        """Memory of a forward pass by component: :func:`memtheory.inference_memory`."""
        counts = self.counts(model)
        return self.adjust(inference_memory(counts, precision=self.precision(precision)), counts)

    # -- units ---------------------------------------------------------------------------
    def unit_bytes(self, unit: str, *, reading: bool) -> int:
        """Bytes in one ``unit``, when reading a given size or when writing the answer."""
        return unit_bytes(unit)

    def to_bytes(self, value: sp.Expr | int | str, unit: str) -> sp.Expr:
        """Bytes in a size given in the question, such as a GPU's ``16 GB``."""
        return sp.Rational(str(value)) * self.unit_bytes(unit, reading=True)

    def in_unit(self, nbytes: sp.Expr | int, unit: str) -> sp.Expr:
        """Write a byte count in ``unit``, as the answer asks."""
        return sp.sympify(nbytes) / self.unit_bytes(unit, reading=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


CORRECT = Reasoning()
"""The correct computation."""


class OwnStep(Protocol):
    """A misconception's own version of one step of a set's helpers, called as that step is.

    The helpers of :mod:`~memtheory.exercises.steps_residual`,
    :mod:`~memtheory.exercises.steps_scaling`, :mod:`~memtheory.exercises.steps_trace`,
    :mod:`~memtheory.exercises.steps_gpu` and :mod:`~memtheory.exercises.technique_steps`
    do a step correctly unless ``how`` has its own version of it: a method of
    that step's name on a :class:`Reasoning` subclass (``def saved(self, specs, model)``).
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Do the step the misconception's way."""


def own_step(how: Reasoning, step: str) -> OwnStep | None:
    """Return ``how``'s own version of ``step`` (a misconception's), or ``None`` to do it right.

    A worked solution being recorded is told the step was taken (:func:`~.step_log.took`).

    Examples
    --------
    >>> class Halved(Reasoning):
    ...     def kv_cache_formula(self, **shape):
    ...         return 1
    >>> own_step(Halved(), "kv_cache_formula")()
    1
    >>> own_step(CORRECT, "kv_cache_formula") is None
    True
    """
    took(step)  # a worked solution names the section that teaches it
    found = getattr(how, step, None)
    return found if callable(found) else None
