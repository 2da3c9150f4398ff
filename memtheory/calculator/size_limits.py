"""The sizes the calculator page refuses: BatchNorm's one value per channel, the smallest input.

Examples
--------
>>> batchnorm_counts("gpt2")
()
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from memtheory.calculator.choice_steps import resolved_model
from memtheory.calculator.choices import CALCULATOR_MODELS, calculator_model
from memtheory.errors import MemtheoryError, UnsupportedError
from memtheory.evaluation import evaluate
from memtheory.layers import BatchNorm2d
from memtheory.memory import training_memory
from memtheory.symbols import B

__all__ = ["batchnorm_counts", "smallest_size"]


@cache
def batchnorm_counts(model: str) -> tuple[tuple[sp.Expr, str], ...]:
    """Return the values per channel each ``BatchNorm2d`` normalizes over, with its layer's label.

    In training, PyTorch refuses a batch norm whose input has one value per
    channel ("Expected more than 1 value per channel when training"): the
    count (``batch x height x width``) must be at least 2. One entry per
    distinct count.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> counts = batchnorm_counts("resnet50")
    >>> min(count.subs({B: 1, H: 32}) for count, _ in counts), min(
    ...     count.subs({B: 1, H: 33}) for count, _ in counts)
    (1, 4)
    >>> batchnorm_counts("gpt2")
    ()
    """
    found: dict[sp.Expr, str] = {}
    calculator_model(model)
    for row in resolved_model(model, False).network.rows:
        if isinstance(row.layer, BatchNorm2d):
            shape = [sp.sympify(size) for size in row.input_shape]
            count = sp.Mul(shape[0], *shape[2:])
            found.setdefault(count, row.layer.label)
    return tuple(found.items())


def smallest_size(key: str, batch: int = 1) -> int:
    """Return the smallest image side or sequence every layer takes, BatchNorm's at ``batch``."""
    model = CALCULATOR_MODELS[key]
    total = training_memory(resolved_model(key, False).network, optimizer="sgd").total
    counts = batchnorm_counts(key)
    for size in range(1, model.max_size + 1):
        values = {B: batch, model.size_symbol: size}
        try:
            evaluate(total, B=batch, **{model.size_symbol.name: size})
        except MemtheoryError:
            continue
        if all(count.xreplace(values) >= 2 for count, _ in counts):
            return size
    raise UnsupportedError(f"{model.title} takes no size up to {model.max_size}")
