"""Trace a module from shapes alone: ``(B, 3, H, H)`` in, a traced footprint out.

:func:`trace_shapes` is what :func:`memtheory.torch.from_module` does with a
module that is not a stack of layers: it builds meta example tensors of the
given shape, picks an example value for each symbol, and calls
:func:`~memtheory.torch.tracing.trace`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy as sp
import torch
from torch import nn

from memtheory.errors import InvalidArgumentError, MissingArgumentError
from memtheory.torch.tracing.api import OptimizerChoice, trace
from memtheory.torch.tracing.result import TracedMemory

__all__ = ["BATCH_EXAMPLE", "OTHER_EXAMPLES", "trace_shapes"]

BATCH_EXAMPLE = 5
"""Example value of a symbolic batch size (small: some kernels pick their algorithm by batch)."""

OTHER_EXAMPLES = (97, 101, 103, 107, 109, 113)
"""Example values of other symbolic sizes: primes, unlikely to equal a model's fixed sizes."""

_CLASS_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


def trace_shapes(
    module: nn.Module,
    input_shape: Sequence[Any],
    *,
    loss: Any = None,
    target_shape: Sequence[Any] | None = None,
    input_dtype: torch.dtype = torch.float32,
    optimizer: OptimizerChoice = "adamw",
    sizes: Mapping[str, int] | None = None,
) -> TracedMemory:
    """Trace ``module`` on an input of ``input_shape`` (sizes may be symbols).

    Parameters
    ----------
    module : torch.nn.Module
    input_shape : sequence of ints and sympy symbols
        Batch first, as PyTorch writes it: ``(B, 3, H, H)``.
    loss : callable, optional
        ``loss(output, target)``; without it the model's output must be the loss.
    target_shape : sequence, optional
        Shape of the targets; by default ``(batch,)`` class indices for
        ``CrossEntropyLoss`` and ``NLLLoss``.
    input_dtype : torch.dtype, default torch.float32
        ``torch.long`` for token ids.
    optimizer : str or callable, default "adamw"
    sizes : mapping of str to int, optional
        Example value of each symbol (``{"H": 224}``); by default
        :data:`BATCH_EXAMPLE` for the batch and :data:`OTHER_EXAMPLES` in turn
        for the others.

    Examples
    --------
    >>> from torch import nn
    >>> from memtheory.symbols import B
    >>> class Twice(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = nn.Linear(8, 3)
    ...     def forward(self, x):
    ...         return self.fc(x) * 2
    >>> memory = trace_shapes(Twice(), (B, 8), loss=nn.CrossEntropyLoss(), optimizer="sgd")
    >>> memory["saved_activations"]
    12*B + 4
    """
    shape = [sp.sympify(s) for s in input_shape]
    if target_shape is None:
        if loss is not None and not isinstance(loss, _CLASS_LOSSES):
            raise MissingArgumentError(
                f"give target_shape= for {type(loss).__name__}: the targets' shape cannot be "
                "guessed (it is (batch,) only for class-index losses such as CrossEntropyLoss)."
            )
        target = [shape[0]] if loss is not None else None
    else:
        target = [sp.sympify(s) for s in target_shape]
    symbols = sorted(
        {s for size in [*shape, *(target or [])] for s in size.free_symbols}, key=lambda s: s.name
    )
    examples = _examples(symbols, shape, dict(sizes or {}))
    for size in [*shape, *(target or [])]:
        if not (size.is_Integer or size.is_Symbol):
            raise InvalidArgumentError(
                f"each size must be a whole number or a symbol, got {size}: write the size as "
                "a symbol and let the model compute the rest."
            )

    def example(sizes_: list[sp.Expr], dtype: torch.dtype) -> torch.Tensor:
        concrete = [int(examples[s]) if s.is_Symbol else int(s) for s in sizes_]
        return torch.empty(concrete, dtype=dtype, device="meta")

    inputs = example(shape, input_dtype)
    targets = None if target is None else example(target, torch.long)
    dims = {s: examples[s] for s in symbols}
    return trace(module, inputs, dims, loss=loss, target=targets, optimizer=optimizer)


def _examples(
    symbols: list[sp.Symbol], shape: list[sp.Expr], given: dict[str, int]
) -> dict[sp.Symbol, int]:
    fixed = {int(s) for s in shape if s.is_Integer}
    unknown = set(given) - {s.name for s in symbols}
    if unknown:
        raise InvalidArgumentError(
            f"sizes names {sorted(unknown)}, which are not symbols of the shapes "
            f"({', '.join(s.name for s in symbols) or 'none'})."
        )
    taken = fixed | set(given.values())
    spare = [v for v in OTHER_EXAMPLES if v not in taken]
    chosen: dict[sp.Symbol, int] = {}
    for symbol in symbols:
        if symbol.name in given:
            chosen[symbol] = given[symbol.name]
        elif shape and symbol == shape[0] and BATCH_EXAMPLE not in taken:
            chosen[symbol] = BATCH_EXAMPLE
            taken.add(BATCH_EXAMPLE)
        else:
            chosen[symbol] = spare.pop(0)
    return chosen
