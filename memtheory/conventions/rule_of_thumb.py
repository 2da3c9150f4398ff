"""The rule of thumb quoted in StackExchange answers: parameters x 3, activations x 2 x batch."""

from __future__ import annotations

import sympy as sp

from memtheory.conventions.base import Convention, Model, activation_elements, model_counts
from memtheory.errors import InvalidSizeError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = ["RuleOfThumbConvention"]


class RuleOfThumbConvention(Convention):
    """Parameters times three, activations times two, times the batch, plus the input batch.

    The "three" is the weights, their gradients and one optimizer-state copy
    (momentum), whatever optimizer is really used; the "two" is the forward
    activations and their gradients. This is the convention of the CS231n notes
    as StackExchange answers on training memory apply it. The input batch is
    the "miscellaneous" term. Derived in the book's chapter "Optimizers".

    Parameters
    ----------
    parameter_copies : int, default 3
        Copies of the parameters: 3 is the rule; 2 fits plain SGD, 4 fits Adam.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> from memtheory.precision import Precision
    >>> counts = ModelCounts.per_sample(parameters=19_072_984, activations=532_752,
    ...                                 input_elements=9_000, batch=128)
    >>> memory = RuleOfThumbConvention().training(counts, None, Precision())
    >>> memory.total
    779021856
    >>> memory.format("MiB")
    '742.93 MiB'
    """

    name = "rule_of_thumb"
    title = "rule of thumb (parameters x 3, activations x 2)"

    def __init__(self, parameter_copies: int = 3) -> None:
        if (
            isinstance(parameter_copies, bool)
            or not isinstance(parameter_copies, int)
            or parameter_copies < 1
        ):
            raise InvalidSizeError(
                f"parameter_copies must be a whole number >= 1, got {parameter_copies!r}."
            )
        self.parameter_copies = parameter_copies

    def training(
        self, model: Model, optimizer: Optimizer | None, precision: Precision
    ) -> MemoryBreakdown:
        """Weights, gradients and ``parameter_copies - 2`` state copies; activations x 2; input."""
        counts = model_counts(model)
        parameters = counts.parameters
        kept = activation_elements(model)
        notes = [f"parameters counted {self.parameter_copies} times, whatever the optimizer"]
        if optimizer is not None and optimizer.factored_state_names:
            notes.append(
                f"{optimizer.title} keeps factored state (a row and a column factor per "
                "matrix), far less than a copy; the breakdown convention counts it exactly"
            )
        elif optimizer is not None and optimizer.states_per_parameter != self.parameter_copies - 2:
            notes.append(
                f"{optimizer.title} keeps {optimizer.states_per_parameter} state copies; "
                "the breakdown convention counts them exactly"
            )
        components = {
            "parameters": parameters * precision.parameters.bytes,
            "gradients": parameters * precision.gradients.bytes if self.parameter_copies > 1 else 0,
            "optimizer_state": (
                sp.Max(self.parameter_copies - 2, 0) * parameters * precision.optimizer_state.bytes
            ),
            "activations": kept * precision.activations.bytes,
            "activation_gradients": kept * precision.activation_gradients.bytes,
            "input": counts.input_elements * precision.input.bytes,
        }
        return MemoryBreakdown(
            components, "training", self.name, precision, optimizer, tuple(notes)
        )

    def inference(self, model: Model, precision: Precision) -> MemoryBreakdown:
        """Weights, forward activations and the input."""
        counts = model_counts(model)
        components = {
            "parameters": counts.parameters * precision.parameters.bytes,
            "activations": activation_elements(model) * precision.activations.bytes,
            "input": counts.input_elements * precision.input.bytes,
        }
        return MemoryBreakdown(components, "inference", self.name, precision)

    def __repr__(self) -> str:
        return f"RuleOfThumbConvention(parameter_copies={self.parameter_copies})"
