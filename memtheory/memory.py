"""Training and inference memory of a model: the front door to the conventions.

Examples
--------
>>> from memtheory import Dense, Input, Network
>>> net = Network([Input((784,)), Dense(100), Dense(10)])
>>> training_memory(net, optimizer="sgd").total
4016*B + 636080
>>> inference_memory(net).total
3576*B + 318040
"""

from __future__ import annotations

from dataclasses import replace

from memtheory._recursion import nesting_guard
from memtheory.constraints import carry
from memtheory.conventions import ConventionLike, Model
from memtheory.conventions import convention as _convention
from memtheory.counts import ModelCounts
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.optimizers import optimizer as _optimizer
from memtheory.precision import PrecisionLike
from memtheory.precision import precision as _precision

__all__ = ["MemoryBreakdown", "inference_memory", "training_memory"]


def training_memory(
    model: Model,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
) -> MemoryBreakdown:
    """Memory of one training step, by component, in bytes.

    Parameters
    ----------
    model : Network or ModelCounts
    optimizer : str or Optimizer, optional
        Required by the breakdown convention (``"sgd"``, ``"adam"``, ...); the
        rule of thumb counts three parameter copies whatever it is.
    precision : str or Precision, default "fp32"
        A dtype name for everything, ``"mixed-fp16"``/``"mixed-bf16"``, or a
        :class:`~memtheory.precision.Precision`.
    convention : str or Convention, default "breakdown"

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> counts = ModelCounts.per_sample(parameters=10**6, activations=10**5, input_elements=10**4)
    >>> training_memory(counts, optimizer="adam").total
    840000*B + 16000000
    >>> training_memory(counts, convention="rule_of_thumb").total
    840000*B + 12000000
    """
    chosen = _convention(convention)
    spec = None if optimizer is None else _optimizer(optimizer)
    with nesting_guard(f"training memory ({chosen.name} convention)"):
        return _checked_sizes(chosen.training(model, spec, _precision(precision)), model)


def inference_memory(
    model: Model, *, precision: PrecisionLike = "fp32", convention: ConventionLike = "breakdown"
) -> MemoryBreakdown:
    """Memory of one forward pass without gradients, by component, in bytes.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> inference_memory(ModelCounts(parameters=100, activations=10, input_elements=1),
    ...                  precision="fp16").total
    222
    """
    chosen = _convention(convention)
    with nesting_guard(f"inference memory ({chosen.name} convention)"):
        return _checked_sizes(chosen.inference(model, _precision(precision)), model)


def _checked_sizes(memory: MemoryBreakdown, model: Model) -> MemoryBreakdown:
    """Attach the network's symbolic output sizes, which every evaluation checks stay >= 1."""
    own = (
        {c.where: c.size for c in model.size_checks()}
        if isinstance(model, Network | ModelCounts)
        else {}
    )
    if not own:
        if isinstance(model, Network):  # it needs none: say so for its expressions
            for expression in (*memory.components.values(), memory.total):
                carry(expression, memory.size_checks(), vouch=True)
        return memory
    return replace(memory, constraints={**own, **memory.constraints})
