"""The breakdown convention: every component counted for what it is."""

from __future__ import annotations

from memtheory.conventions.base import (
    Convention,
    Model,
    activation_elements,
    attention_mask_bytes,
    buffer_bytes,
    model_counts,
    optimizer_state_bytes,
)
from memtheory.errors import MissingArgumentError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = ["BreakdownConvention"]


class BreakdownConvention(Convention):
    """Parameters, gradients, the optimizer's real state, activations and their gradients, input.

    Each component has its own dtype (:class:`~memtheory.precision.Precision`),
    and the optimizer state is as many parameter-sized buffers as the optimizer
    keeps (SGD none, momentum one, Adam two). Every forward activation is
    counted as kept until the backward pass, and each gets a gradient of the
    same size: the "x2" rule. Attention counts what it keeps inside
    (:func:`~memtheory.conventions.base.activation_elements`: eager
    attention's :math:`S^2` scores, which a flash kernel does not keep) and
    its dropout masks in their own dtype
    (:func:`~memtheory.conventions.base.attention_mask_bytes`).

    An estimate, not a bound: against the exact autograd convention's peak
    it ranged from 0.37x (eager attention at long sequences, whose backward
    holds several score-sized gradients at once) to 4.3x (small CNNs) on
    random small networks (:data:`memtheory.estimate.step.BREAKDOWN_RATIO`).

    Buffers count in their own dtype (BatchNorm's running statistics in the
    parameters', BERT's id buffers int64); Adafactor's factored state is
    counted from each parameter's shape (a network is needed).

    Examples
    --------
    >>> from memtheory import ModelCounts, optimizer
    >>> from memtheory.precision import Precision
    >>> counts = ModelCounts(parameters=100, activations=0, input_elements=0)
    >>> BreakdownConvention().training(counts, optimizer("adam"), Precision()).total
    1600
    >>> BreakdownConvention().training(counts, optimizer("adam"), Precision.mixed("fp16")).total
    1600
    """

    name = "breakdown"
    title = "breakdown (each component counted, an estimate)"

    def training(
        self, model: Model, optimizer: Optimizer | None, precision: Precision
    ) -> MemoryBreakdown:
        """All components of a training step."""
        if optimizer is None:
            raise MissingArgumentError(
                "training memory needs an optimizer: pass optimizer=\"adam\" (or \"sgd\", "
                "\"sgd+momentum\", \"adamw\", ...); list the known ones with "
                "list(memtheory.optimizers.OPTIMIZERS)."
            )
        counts = model_counts(model)
        parameters = counts.parameters
        kept = activation_elements(model)
        components = {
            "parameters": parameters * precision.parameters.bytes,
            "gradients": parameters * precision.gradients.bytes,
            "optimizer_state": optimizer_state_bytes(model, optimizer, precision),
            "activations": kept * precision.activations.bytes + attention_mask_bytes(model),
            "activation_gradients": kept * precision.activation_gradients.bytes,
            "input": counts.input_elements * precision.input.bytes,
        }
        buffers = buffer_bytes(model, precision)
        if buffers != 0:
            components["buffers"] = buffers
        if precision.master_weights is not None:
            components["master_weights"] = parameters * precision.master_weights.bytes
        notes = (
            f"{optimizer.title}: "
            + (
                "factored state (a row and a column factor per matrix)"
                if optimizer.factored_state_names
                else f"{optimizer.states_per_parameter} state value(s) per parameter"
            ),
        )
        return MemoryBreakdown(components, "training", self.name, precision, optimizer, notes)

    def inference(self, model: Model, precision: Precision) -> MemoryBreakdown:
        """Weights, buffers, every forward activation (all counted as kept), and the input."""
        counts = model_counts(model)
        components = {
            "parameters": counts.parameters * precision.parameters.bytes,
            "activations": activation_elements(model) * precision.activations.bytes,
            "input": counts.input_elements * precision.input.bytes,
        }
        buffers = buffer_bytes(model, precision)
        if buffers != 0:
            components["buffers"] = buffers
        notes = ("every forward activation counted as kept: an estimate of the inference peak",)
        return MemoryBreakdown(components, "inference", self.name, precision, notes=notes)
