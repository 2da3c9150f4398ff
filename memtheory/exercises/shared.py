"""Models and helpers shared by the exercise sets, defined once.

The sets describe three models by their per-sample counts (batch ``B``), all
derived by memtheory: the network of a StackExchange question on training
memory (its own figures), the small CNN of another StackExchange question,
and VGG-16. A set's parameter lists the descriptions; :func:`model_values`
fills a question's template with the counts.

Examples
--------
>>> values = model_values({"model": model_names()[1], "optimizer": "adam"})
>>> values["parameters"], values["optimizer_title"]
(4632902, 'Adam')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy as sp

from memtheory.counts import ModelCounts
from memtheory.exercises.derivation import quantity_text
from memtheory.exercises.step_log import note, took
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.models import vgg16
from memtheory.optimizers import optimizer
from memtheory.symbols import B
from memtheory.whatif import max_value as _max_value
from memtheory.whatif import max_value_formula as _max_value_formula
from memtheory.worked_examples import small_cnn_network
from memtheory.worked_examples.training_memory_question import question_counts

__all__ = [
    "MODELS",
    "noted_max_value",
    "noted_max_value_formula",
    "model_names",
    "model_values",
    "parameter_side",
    "parameters_only",
]

MODELS: dict[str, ModelCounts] = {
    "the network of a StackExchange question on training memory": question_counts(),
    "the small CNN of a StackExchange question (50x50x3 images)": small_cnn_network().counts(),
    "VGG-16 on 224x224x3 images": vgg16().counts(),
}
"""Models by description: per-sample counts, all derived by memtheory."""


def model_names(*order: int) -> tuple[str, ...]:
    """Return the descriptions of :data:`MODELS` in ``order`` (indices; the first is the book's).

    Examples
    --------
    >>> model_names(2, 0, 1)[0]
    'VGG-16 on 224x224x3 images'
    >>> model_names() == tuple(MODELS)
    True
    """
    names = tuple(MODELS)
    return tuple(names[i] for i in order) if order else names


def model_values(p: Mapping[str, Any]) -> dict[str, object]:
    """Template values of ``p["model"]``: its counts per image and titles.

    Examples
    --------
    >>> model_values({"model": model_names()[2]})["model_title"]
    'VGG-16 on 224x224x3 images'
    """
    counts = MODELS[p["model"]]
    model = str(p["model"])
    return {
        "parameters": int(counts.parameters),
        "activations": int(counts.activations / B),
        "inputs": int(counts.input_elements / B),
        "optimizer_title": optimizer(p["optimizer"]).title if "optimizer" in p else "",
        "model_title": model[0].upper() + model[1:],
    }


def parameters_only(parameters: sp.Expr | int) -> ModelCounts:
    """Return the counts of a model with ``parameters`` only (no activations, no input).

    Examples
    --------
    >>> parameters_only(10).parameters
    10
    """
    return ModelCounts(parameters=parameters, activations=0, input_elements=0)


def parameter_side(memory: MemoryBreakdown) -> sp.Expr:
    """Weights, their gradients, the optimizer state and any master weights of ``memory``.

    Examples
    --------
    >>> from memtheory import training_memory
    >>> parameter_side(training_memory(parameters_only(10), optimizer="adam"))
    160
    """
    names = ("parameters", "gradients", "optimizer_state", "master_weights")
    return sp.sympify(sum(memory.components.get(name, 0) for name in names))


def noted_max_value(expression: Any, symbol: sp.Symbol, limit: Any, **options: Any) -> int:
    """:func:`memtheory.whatif.max_value`, the step noted for a worked solution.

    The largest ``symbol`` whose ``expression`` fits ``limit``; a worked solution records
    the step (:func:`~memtheory.exercises.step_log.note`).

    Examples
    --------
    >>> noted_max_value(4 * B + 10, B, 50)
    10
    """
    value = _max_value(expression, symbol, limit, **options)
    took("largest_value")
    shown = limit if isinstance(limit, str) else f"{quantity_text(sp.sympify(limit))} bytes"
    note(f"Largest {symbol} with {sp.sstr(sp.sympify(expression))} <= {shown}", value)
    return value


def noted_max_value_formula(
    expression: Any, symbol: sp.Symbol, memory_symbol: sp.Symbol, **options: Any
) -> sp.Expr:
    """Largest ``symbol`` as a formula in the memory: :func:`memtheory.whatif.max_value_formula`.

    Examples
    --------
    >>> from memtheory.symbols import size_symbol
    >>> noted_max_value_formula(4 * B + 10, B, size_symbol("M"))
    floor(M/4 - 5/2)
    """
    value = _max_value_formula(expression, symbol, memory_symbol, **options)
    took("largest_value")
    note(
        f"Largest {symbol} with {sp.sstr(sp.sympify(expression))} <= {memory_symbol} "
        "(rounded down from where they are equal)",
        value,
    )
    return value
