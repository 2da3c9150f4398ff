"""The live tensors of a step: a timeline of bytes through training and through inference.

A training step runs the storage plan
(:mod:`memtheory.conventions.autograd.storage_plan`) forward and backward:
each layer allocates its output and the tensors it saves, frees its input once
nothing reads or keeps it, and in the backward allocates gradients and frees
what its node kept; the optimizer step adds its implementation's temporaries.
Inference (eval mode under ``no_grad``) frees each input once its output
exists (:mod:`~memtheory.conventions.autograd.backward` runs the backward
pass). The live total at each labelled moment is the timeline that
:class:`~memtheory.conventions.autograd.AutogradConvention` hands to
:class:`~memtheory.memory_breakdown.MemoryBreakdown`, whose maximum is the peak.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import sympy as sp

from memtheory.conventions.autograd.live_bytes import Holders, Timeline, freeable
from memtheory.conventions.autograd.storage_plan import PlannedRow, StepPlan

__all__ = ["inference_timeline", "run_forward"]


def _last_reads(plan: StepPlan) -> dict[str, int]:
    """Return the position of the last layer that reads or holds each storage.

    A block with branches is written as a function of its input (torchvision's
    ``identity = x``, MobileNetV2's ``x + self.conv(x)``), so the input, where
    the branches fork, stays alive until the merge that joins them has run.
    """
    last: dict[str, int] = {}
    storage = {entry.row.name: entry.out_key for entry in plan.rows}
    inputs = {entry.row.name: entry.row.inputs for entry in plan.rows}
    index = {entry.row.name: entry.row.index for entry in plan.rows}
    ancestry = _Ancestry(inputs, index)
    for position, entry in enumerate(plan.rows):
        for key in (*entry.in_keys, *entry.read_keys):
            last[key] = position
        if len(entry.in_keys) > 1:
            fork = ancestry.fork(entry.row.inputs)
            if fork in storage:
                last[storage[fork]] = position
    _hold_call_arguments(plan, last)
    return last


def _hold_call_arguments(plan: StepPlan, last: dict[str, int]) -> None:
    """Keep what a module call reads from before it alive until the call returns.

    ``nn.Module.__call__`` holds its arguments, and the caller its variables,
    until ``forward`` returns (:attr:`~memtheory.network.Network.calls`). So
    does the call's own forward with a tensor it makes and keeps in a variable
    that no layer of the network reads (the causal mask and the positions
    that ``FalconModel.forward`` makes and hands every layer).
    """
    position = {entry.row.name: number for number, entry in enumerate(plan.rows)}
    made: dict[str, int] = {}
    for number, entry in enumerate(plan.rows):
        for key in (*entry.allocs, entry.out_key):
            made.setdefault(key, number)
    for first, end in plan.calls:
        if first not in position:  # a call around the loss, in inference
            continue
        start, stop = position[first], position.get(end, len(plan.rows) - 1)
        for entry in plan.rows[start : stop + 1]:
            for key in entry.in_keys:
                if made.get(key, -1) < start and last.get(key, -1) < stop:
                    last[key] = stop
            if entry.out_key not in last and entry is not plan.rows[-1]:
                last[entry.out_key] = stop  # a variable of the call that no layer reads


def _done(ends: dict[int, list[str]], position: int, reads: tuple[str, ...]) -> list[str]:
    """Return the layer's inputs and the storages whose last reader or holder it is."""
    return [*reads, *ends.get(position, ())]


def _ends(last: dict[str, int]) -> dict[int, list[str]]:
    ends: dict[int, list[str]] = {}
    for key, position in last.items():
        ends.setdefault(position, []).append(key)
    return ends


def _fork(
    reads: tuple[str, ...], inputs: dict[str, tuple[str, ...]], index: dict[str, int]
) -> str | None:
    """Return the nearest layer every one of ``reads`` descends from (where branches fork).

    Only layers in ``index`` (name -> running position) count.
    """
    return _Ancestry(inputs, index).fork(reads)


class _Ancestry:
    """Each layer's ancestors, itself included, as the bits of one integer (bit = position).

    Built once, in running order, so a network's every fork costs one
    intersection of two integers, not a walk back to the input.
    """

    def __init__(self, inputs: dict[str, tuple[str, ...]], index: dict[str, int]) -> None:
        self.names = {position: name for name, position in index.items()}
        self.bits: dict[str, int] = {}
        for name in sorted(index, key=index.__getitem__):
            bits = 1 << index[name]
            for source in inputs.get(name, ()):
                bits |= self.bits.get(source, 0)
            self.bits[name] = bits

    def fork(self, reads: tuple[str, ...]) -> str | None:
        """Return the latest layer that every one of ``reads`` is or descends from."""
        common = -1
        for name in reads:
            common &= self.bits.get(name, 0)
        common &= ~1  # position 0 is the network's input, no layer of the plan
        return self.names.get(common.bit_length() - 1) if common > 0 else None


def run_forward(plan: StepPlan, timeline: Timeline, holders: Holders, *,
                autocast_cache: bool = True) -> None:
    """Run the forward (and the loss) in topological order: allocate, mark, free what is done.

    A storage is freed once the last layer that reads it has run, unless a
    backward node keeps it or the caller holds it. Autocast's casts of the
    parameters that no backward node keeps stay in its cache until the
    forward ends; with ``autocast_cache=False`` (``torch.autocast(...,
    cache_enabled=False)``, as Lightning runs it) each is freed once its layer ran.
    """
    last = _last_reads(plan)
    ends = _ends(last)
    cached: list[str] = []
    for position, entry in enumerate(plan.rows):
        for label, frees in _inner_moments(entry, timeline):
            timeline.mark(f"forward {entry.row.name} ({label})")
            for key in frees:
                if freeable(key, plan, holders, timeline):
                    timeline.free(key)
        if entry.out_key not in timeline.live:
            timeline.alloc(entry.out_key, plan.sizes[entry.out_key])
        timeline.mark(f"forward {entry.row.name}")
        for key in dict.fromkeys((*entry.allocs, *_done(ends, position, entry.in_keys))):
            if key != entry.out_key and last.get(key, -1) <= position:
                if freeable(key, plan, holders, timeline):
                    timeline.free(key)
        unkept = [key for key in entry.copies if not holders.get(key)]
        for key in () if autocast_cache else unkept:
            timeline.free(key)
        cached += unkept if autocast_cache else []
    if plan.loss is None:  # the network alone is trained on output.sum()
        timeline.alloc("loss", plan.sizes["loss"])
        timeline.mark("forward output.sum()")
    for key in cached:  # autocast's cache of parameter casts empties when the forward ends
        timeline.free(key)


def _inner_moments(entry: PlannedRow, timeline: Timeline) -> Iterator[tuple[str, list[str]]]:
    """Allocate the layer's storages; yield each moment inside its forward, and what it frees.

    Storages no :class:`~memtheory.layers.base.ForwardMoment` names (autocast's
    casts first) are allocated at once; each moment then allocates those it
    names (matched by label, or by an autocast cast's name: ``"input cast"``) and
    is yielded, with the storages to free after it.
    Storages named by no moment yet allocated are left to the layer's own moment.
    """
    moments = entry.spec.forward_moments
    prefix = f"{entry.row.name}:"
    by_label: dict[str, list[str]] = {}
    for key in entry.allocs:
        if moments and key.startswith(prefix):
            name = key[len(prefix):]  # "<label> <position>", or an autocast cast's name
            label, _, position = name.rpartition(" ")
            by_label.setdefault(label if position.isdigit() else name, []).append(key)
    named = [[key for label in moment.makes for key in by_label.get(label, ())]
             for moment in moments]
    later = {key for keys in named for key in keys}
    for key, nbytes in (*entry.allocs.items(), *entry.copies.items()):
        if key not in later:
            timeline.alloc(key, nbytes)
    for moment, makes in zip(moments, named, strict=True):
        for key in makes:
            timeline.alloc(key, entry.allocs[key])
        yield moment.label, [key for label in moment.frees for key in by_label.get(label, ())]


def inference_timeline(plan: StepPlan, base: sp.Expr) -> Mapping[str, sp.Expr]:
    """Eval mode under no_grad: a storage is freed once the last layer that reads it has run.

    Autocast caches its casts of the parameters (leaves that require grad) even
    under no_grad, so under autocast every weight and bias copy made so far
    stays until the forward ends.
    """
    timeline = Timeline()
    timeline.alloc("weights, buffers and input", base)
    last = _last_reads(plan)
    ends = _ends(last)
    held = {plan.rows[-1].out_key} if plan.rows else set()
    for position, entry in enumerate(plan.rows):
        for label, frees in _inner_moments(entry, timeline):
            timeline.mark(f"forward {entry.row.name} ({label})")
            for key in frees:
                if key in timeline.live and key not in held:
                    timeline.free(key)
        if entry.out_key not in timeline.live and entry.out_key != "input":
            timeline.alloc(entry.out_key, plan.sizes[entry.out_key])
        timeline.mark(f"forward {entry.row.name}")
        for key in dict.fromkeys((*entry.allocs, *_done(ends, position, entry.in_keys))):
            if key in (entry.out_key, "input") or key in held or key not in timeline.live:
                continue
            if last.get(key, -1) <= position:
                timeline.free(key)
    return timeline.moments
