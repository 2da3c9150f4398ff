"""Input values that decide a branch fake tensors cannot take: a Hugging Face all-ones mask.

A fake tensor has a shape and a dtype but no values, so code that reads an
input's values to choose its path cannot follow the real run. The common
case is Hugging Face's attention mask: transformers 5's mask code
(``masking_utils``) drops a mask with no padding (``padding_mask.all()``)
and attends without one, but on a fake tensor it cannot read the values
(``is_tracing`` is true for fake tensors) and builds the full
``B x 1 x S x S`` mask instead. On tiny Llama, GPT-2 and BERT models, eager
and SDPA, a real step with an all-ones ``attention_mask`` holds exactly what
the same step without the mask holds, plus the mask itself (measured in
``tests/pytorch/test_trace_loops.py``).

So when a transformers model is given an ``attention_mask`` whose example
values are all ones, :func:`mask_branches` says to call the model without it
(the mask is still counted as input), and the result says so in its
conditions: the formulas are for batches without padding. A model of one's
own that wraps a transformers model (``forward(self, input_ids,
attention_mask=None)`` calling ``self.inner(...)``, as a PEFT model does)
passes the mask on: the inner model skips it in the real run, so the trace
drops it where it enters each outermost transformers module
(:func:`branches_taken`); before, a wrapped tiny Llama traced 18,432 bytes
(3.1%) above ``measure`` with no word. A mask with padding is traced as
given, and the conditions say the formulas are for padded batches. A mask on
the meta device has no values to read: the masked path is traced, and a note
says so.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["MASK", "ValueBranches", "branches_taken", "mask_branches"]

MASK = "attention_mask"
"""The keyword argument whose all-ones value Hugging Face models skip."""


@dataclass(frozen=True)
class ValueBranches:
    """What the example inputs' values decide: keywords left out of the call, and why.

    Attributes
    ----------
    skipped : frozenset of str
        Keyword arguments counted as input but not passed to the model.
    conditions : tuple of str
        Where the formulas hold because of it, in words.
    notes : tuple of str
        Values that could not be read.
    dropped_inside : bool
        Whether the mask is dropped where it enters each transformers model
        inside the model (a model of one's own that wraps one).
    """

    skipped: frozenset[str] = frozenset()
    conditions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    dropped_inside: bool = False


def mask_branches(model: nn.Module, inputs: Any) -> ValueBranches:
    """Say which branch the real values of a Hugging Face model's ``attention_mask`` take.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> mask_branches(nn.Linear(2, 2), {"attention_mask": torch.ones(2, 3)})  # not transformers
    ValueBranches(skipped=frozenset(), conditions=(), notes=(), dropped_inside=False)
    """
    mask = inputs.get(MASK) if isinstance(inputs, Mapping) else None
    if not isinstance(mask, torch.Tensor) or not _outermost(model):
        return ValueBranches()
    if mask.is_meta:
        return ValueBranches(notes=(
            f"{MASK} is on the meta device, so its values are unknown: the masked path was "
            "traced. A real batch without padding (an all-ones mask) takes the unmasked path, "
            "which holds less (no B x 1 x S x S mask): pass a real all-ones mask to trace that.",
        ))
    if not bool((mask != 0).all()):
        return ValueBranches(conditions=(
            f"{MASK} with padding, as in the example batch: the masked path was traced; a "
            "batch without padding (an all-ones mask) may take the unmasked path, which holds "
            "less: trace an all-ones mask for that",
        ))
    if not _from_transformers(model):
        return ValueBranches(dropped_inside=True, conditions=(
            f"{MASK} all ones (no padding), as in the example batch: the transformers model "
            "inside skips such a mask, so the step was traced with the mask dropped where it "
            "enters that model; for padded batches trace one with padding",
        ))
    return ValueBranches(
        skipped=frozenset({MASK}),
        conditions=(
            f"{MASK} all ones (no padding), as in the example batch: the model skips such a "
            "mask, so the step was traced without it (the mask still counts as input); for "
            "padded batches trace one with padding",
        ),
    )


@contextmanager
def branches_taken(model: nn.Module, branches: ValueBranches) -> Iterator[None]:
    """Within the block, drop the mask where it enters each transformers model inside ``model``.

    Only where ``branches.dropped_inside``: the real run's inner model skips
    an all-ones mask, which a fake tensor cannot show it.

    Examples
    --------
    >>> from torch import nn
    >>> with branches_taken(nn.Linear(2, 2), ValueBranches()):
    ...     pass
    """
    if not branches.dropped_inside:
        yield
        return
    handles = [
        inner.register_forward_pre_hook(_without_mask, with_kwargs=True)
        for inner in _outermost(model)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _without_mask(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """Return the call without the attention mask, by keyword or position (a forward pre-hook)."""
    if kwargs.get(MASK) is not None:
        return args, {k: v for k, v in kwargs.items() if k != MASK}
    names = list(inspect.signature(module.forward).parameters)
    at = names.index(MASK) if MASK in names else len(args)
    if at >= len(args) or args[at] is None:
        return None
    return (*args[:at], None, *args[at + 1:]), kwargs


def _outermost(model: nn.Module) -> list[nn.Module]:
    """Return the transformers models in ``model`` not inside another (``model``, if one)."""
    if _from_transformers(model):
        return [model]
    return [inner for child in model.children() for inner in _outermost(child)]


def _from_transformers(model: nn.Module) -> bool:
    """Whether ``model`` is a Hugging Face transformers model (its class or a base class)."""
    return any(kind.__module__.startswith("transformers.") for kind in type(model).__mro__)
