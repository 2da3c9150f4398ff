"""The live tensors of a step: a timeline of bytes through training and through inference.

A training step runs the storage plan
(:mod:`memtheory.conventions.autograd.storage_plan`) forward and backward:
each layer allocates its output and the tensors it saves, frees its input once
nothing reads or keeps it, and in the backward allocates gradients and frees
what its node kept; the optimizer step adds its implementation's temporaries.
Inference (eval mode under ``no_grad``) frees each input once its output
exists. The live total at each labelled moment is the timeline that
:class:`~memtheory.conventions.autograd.AutogradConvention` hands to
:class:`~memtheory.memory_breakdown.MemoryBreakdown`, whose maximum is the peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy as sp

from memtheory.conventions.autograd.optimizer_step import _step_temporaries, _step_text
from memtheory.conventions.autograd.storage_plan import _Plan, _Row
from memtheory.layers.base import Shape, elements
from memtheory.layers.core import Flatten
from memtheory.optimizers import Optimizer

__all__: list[str] = []


@dataclass
class _Timeline:
    """Live storages (name -> bytes) and the live total at labelled moments."""

    live: dict[str, sp.Expr] = field(default_factory=dict)
    moments: dict[str, sp.Expr] = field(default_factory=dict)

    def alloc(self, key: str, nbytes: sp.Expr) -> None:
        if key in self.live:
            raise AssertionError(f"storage {key!r} allocated twice")
        self.live[key] = sp.sympify(nbytes)

    def free(self, key: str) -> None:
        self.live.pop(key)

    def total(self) -> sp.Expr:
        return sp.Add(*self.live.values())

    def mark(self, label: str, extra: sp.Expr | int = 0) -> None:
        self.moments[label] = self.total() + extra


def _forward(plan: _Plan, timeline: _Timeline, holders: dict[str, set[str]]) -> None:
    """Run the forward (and the loss): allocate, mark, free what nothing reads or keeps."""
    cached: list[str] = []
    for entry in plan.rows:
        for key, nbytes in (*entry.allocs.items(), *entry.copies.items()):
            timeline.alloc(key, nbytes)
        if entry.out_key not in timeline.live:
            timeline.alloc(entry.out_key, plan.sizes[entry.out_key])
        timeline.mark(f"forward {entry.row.name}")
        for key in entry.allocs:
            if _unheld(key, plan, holders, timeline):
                timeline.free(key)
        cached += [key for key in entry.copies if not holders.get(key)]
        if entry.in_key != entry.out_key and _unheld(entry.in_key, plan, holders, timeline):
            timeline.free(entry.in_key)
    if plan.loss is None:  # the network alone is trained on output.sum()
        timeline.alloc("loss", plan.sizes["loss"])
        timeline.mark("forward output.sum()")
    for key in cached:  # autocast's cache of parameter casts empties when the forward ends
        timeline.free(key)


def _unheld(key: str, plan: _Plan, holders: dict[str, set[str]], timeline: _Timeline) -> bool:
    return key in timeline.live and key not in plan.held and not holders.get(key)


def _backward(
    plan: _Plan,
    timeline: _Timeline,
    holders: dict[str, set[str]],
    tensors: dict[str, sp.Expr],
) -> None:
    """Run the backward node by node; parameter gradients stay, everything else is freed."""
    precision = plan.precision
    seed = plan.sizes[plan.loss.out_key] if plan.loss is not None else plan.sizes["loss"]
    timeline.alloc("seed gradient", seed)
    incoming: str | None = "seed gradient"
    for entry in reversed(plan.rows):
        if incoming is None or not entry.records:  # None: no gradient flows further back
            break
        name = entry.row.name
        if entry is plan.loss:
            incoming = _loss_backward(entry, timeline, holders, plan, incoming)
            continue
        grad_read = None
        if entry.input_requires_grad:
            if isinstance(entry.row.layer, Flatten):
                grad_read = incoming
            else:
                grad_read = f"grad {name}:input"
                timeline.alloc(grad_read, elements(entry.row.input_shape) * entry.read_dtype.bytes)
        casts = []
        for part in ("weight", "bias"):
            tensor = f"{name}.{part}"
            if tensor not in tensors:
                continue
            if entry.copies:  # autocast: a low-precision gradient, cast by its own node
                timeline.alloc(f"grad {tensor} (low)", tensors[tensor] * entry.out_dtype.bytes)
                casts.append(tensor)
            else:
                timeline.alloc(f"grad {tensor}", tensors[tensor] * precision.gradients.bytes)
        timeline.mark(f"backward {name}")
        if grad_read != incoming and incoming != "seed gradient":
            timeline.free(incoming)
        for key in entry.saved:
            holders[key].discard(name)
            if _unheld(key, plan, holders, timeline):
                timeline.free(key)
        incoming = grad_read
        if grad_read is not None and entry.read_key != entry.in_key:
            incoming = f"grad {name}:input (cast back)"
            timeline.alloc(incoming, elements(entry.row.input_shape) * entry.in_dtype.bytes)
            timeline.mark(f"backward {name} input cast")
            timeline.free(grad_read)
        for tensor in casts:
            timeline.alloc(f"grad {tensor}", tensors[tensor] * precision.gradients.bytes)
            timeline.mark(f"backward {tensor} cast")
            timeline.free(f"grad {tensor} (low)")
    if incoming is not None and incoming != "seed gradient":
        timeline.free(incoming)
    timeline.free("seed gradient")  # backward() holds it (ones_like(loss)) until it returns


def _loss_backward(
    entry: _Row,
    timeline: _Timeline,
    holders: dict[str, set[str]],
    plan: _Plan,
    seed: str,
) -> str:
    """NllLossBackward, LogSoftmaxBackward, and under autocast the cast back to the logits."""
    name = entry.row.name
    logits = elements(entry.row.input_shape)
    timeline.alloc(f"grad {name}:log-probabilities", logits * entry.out_dtype.bytes)
    timeline.mark(f"backward {name} (nll_loss)")
    for key in (f"{name}:total weight", "targets"):
        holders[key].discard(name)
        if _unheld(key, plan, holders, timeline):
            timeline.free(key)
    timeline.alloc(f"grad {name}:input", logits * entry.out_dtype.bytes)
    timeline.mark(f"backward {name} (log_softmax)")
    timeline.free(f"grad {name}:log-probabilities")
    holders[f"{name}:log-probabilities"].discard(name)
    timeline.free(f"{name}:log-probabilities")
    grad = f"grad {name}:input"
    if entry.read_key != entry.in_key:
        timeline.alloc(f"grad {name}:logits", logits * entry.in_dtype.bytes)
        timeline.mark(f"backward {name} (cast to {entry.in_dtype})")
        timeline.free(grad)
        grad = f"grad {name}:logits"
    return grad


def _optimizer_temporaries(
    optimizer: Optimizer,
    implementation: str,
    tensor_bytes: Sequence[sp.Expr],
    shapes: Sequence[Shape] | None = None,
) -> sp.Expr:
    """Bytes of the temporaries alive at the optimizer step's own peak (its options included)."""
    return _step_temporaries(optimizer, implementation, tensor_bytes, shapes)


def _temporaries_text(optimizer: Optimizer, implementation: str) -> str:
    return _step_text(optimizer, implementation)


def _inference_timeline(plan: _Plan, base: sp.Expr) -> dict[str, sp.Expr]:
    """Eval mode under no_grad: each layer's input is freed once its output exists.

    Autocast caches its casts of the parameters (leaves that require grad) even
    under no_grad, so under autocast every weight and bias copy made so far
    stays until the forward ends.
    """
    timeline = _Timeline()
    timeline.alloc("weights, buffers and input", base)
    for entry in plan.rows:
        for key, nbytes in (*entry.allocs.items(), *entry.copies.items()):
            timeline.alloc(key, nbytes)
        if entry.out_key not in timeline.live and entry.out_key != "input":
            timeline.alloc(entry.out_key, plan.sizes[entry.out_key])
        timeline.mark(f"forward {entry.row.name}")
        for key in entry.allocs:  # autocast's cached weight and bias casts stay to the end
            if key != entry.out_key:
                timeline.free(key)
        if entry.in_key not in (entry.out_key, "input"):
            timeline.free(entry.in_key)
    return timeline.moments
