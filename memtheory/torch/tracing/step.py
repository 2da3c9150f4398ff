"""Run one steady-state training step and one inference pass on fake tensors, and record them.

The protocol is :func:`memtheory.torch.measure`'s, so that a trace and a
measurement count the same storages at the same moments:

1. a warm-up step (untracked), so the optimizer state exists and the previous
   step's gradients are allocated, as in the middle of training;
2. the tracked step: ``optimizer.zero_grad(set_to_none=True)``, the forward
   and the loss under ``saved_tensors_hooks`` (and autocast, if asked), the
   backward, ``optimizer.step()``; the output and the loss stay alive until
   the step ends, as in ``measure``;
3. an inference pass: eval mode, ``torch.no_grad()``, gradients set aside,
   counting the parameters, buffers and input.

What autograd saves is sorted as ``measure`` sorts it: parameters, buffers,
autocast's weight copies and the data are not saved activations.

A trace at fixed sizes that only checks the formulas there (see
:mod:`memtheory.torch.tracing.verify`) may be given the bytes it should find
(:class:`Expected`): it stops with :class:`Departed` as soon as it cannot
match them: after the forward when the saved activations differ, at the first
moment above the expected peak, or after the step when its peak falls short,
instead of running the rest of the step and the inference pass for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import sympy as sp
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memtheory.errors import EvaluationError
from memtheory.torch.step_state import eval_without_gradients, state_tensors
from memtheory.torch.tracing.errors import untraceable
from memtheory.torch.tracing.kernels_onednn import Workspace
from memtheory.torch.tracing.modules import ModuleWatch
from memtheory.torch.tracing.sizes import Polynomial, SymbolMap, add_into
from memtheory.torch.tracing.storages import (
    Departed,
    SymbolicStorageTracker,
    storage_key,
    storage_size,
)

__all__ = ["Departed", "Expected", "StepRecord", "record_step"]


@dataclass(frozen=True)
class Expected:
    """Bytes a trace at fixed sizes should give: the formulas evaluated there.

    Examples
    --------
    >>> Expected(saved_activations=96, peak=4096)
    Expected(saved_activations=96, peak=4096)
    """

    saved_activations: int
    peak: int


@dataclass
class StepRecord:
    """Bytes of one traced step, by category, as polynomials; and its candidate moments."""

    components: dict[str, Polynomial]
    moments: list[tuple[str, Polynomial]]
    step_start: Polynomial
    inference: list[tuple[str, Polynomial]]
    watch: ModuleWatch
    operations: int = 0
    not_activations: set[int] = field(default_factory=set)
    workspaces: dict[sp.Symbol, Workspace] = field(default_factory=dict)
    """oneDNN LSTM workspaces of a fit's trace, by the marker their bytes ride on."""


def record_step(
    module: nn.Module,
    call: Callable[[], Any],
    loss: Callable[[Any], torch.Tensor],
    make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    data: list[torch.Tensor],
    targets: list[torch.Tensor],
    symbols: SymbolMap,
    autocast: torch.dtype | None = None,
    keep_all: bool = False,
    keeps_outputs: bool = True,
    inference_call: Callable[[], Any] | None = None,
    expected: Expected | None = None,
    warmed: bool = False,
) -> StepRecord:
    """Trace one steady-state training step and an inference pass of ``module``.

    Parameters
    ----------
    module : torch.nn.Module
        Its parameters and buffers already fake.
    call : callable
        ``call()`` runs the module on the fake example inputs.
    loss : callable
        ``loss(output)``: the scalar to differentiate.
    make_optimizer : callable
        Builds the optimizer over the (fake) parameters.
    data, targets : list of tensors
        The fake inputs the model is called with, and the targets the loss
        reads (counted as input and targets).
    symbols : SymbolMap
    autocast : torch.dtype, optional
    keep_all : bool, default False
        Keep one moment per operation (see :class:`SymbolicStorageTracker`).
    keeps_outputs : bool, default True
        Hold the model's output until the step ends (see :class:`memtheory.torch.loop.Loop`);
        False drops it once the loss is computed.
    inference_call : callable, optional
        What the inference pass runs, when not ``call`` (a Hugging Face batch
        without its labels).
    expected : Expected, optional
        At fixed sizes only: the bytes to find; raise :class:`Departed` as
        soon as the trace cannot give them.
    warmed : bool, default False
        ``make_optimizer`` returns an optimizer over these parameters that an
        earlier record already brought to its steady state (its state exists):
        only the gradients are allocated again, as the warm-up allocates them.

    Raises
    ------
    Departed
        When ``expected`` is given and the saved activations (known after the
        forward) or the step's peak (known before the inference pass) differ.
    """
    parameters: list[torch.Tensor] = list(module.parameters())
    watch = ModuleWatch(module)
    optimizer = make_optimizer(parameters)
    context = (lambda: torch.autocast("cpu", dtype=autocast)) if autocast else nullcontext
    with watch.watching():
        if warmed:
            _allocate_gradients(parameters)
        else:
            _warm_up(parameters, optimizer)

        tracker = SymbolicStorageTracker(symbols, watch.label, keep_all)
        tracker.watch_parameters(parameters)
        tracker.keep(*parameters, *module.buffers(), *data, *targets)
        tracker.track(*(p.grad for p in parameters))
        tracker.keep(*state_tensors(optimizer))
        start = tracker.start("step start")
        if expected is not None:  # a moment above the expected peak: departed, no need to go on
            tracker.ceiling = expected.peak
        saved: dict[int, Polynomial] = {}
        excluded = _keys([*parameters, *module.buffers(), *data, *targets])
        forward_done = None
        if expected is not None:
            forward_done = partial(_check_saved, expected, saved, excluded, tracker.saved_copies)
        watch.recording = True
        with tracker:
            _step(module, call, loss, optimizer, context, watch, (tracker, saved), keeps_outputs,
                  forward_done)
        watch.recording = False
        moments = tracker.moments
        if expected is not None:
            _check_peak(expected, moments)

        activations, copies = _sorted_saved(saved, excluded, tracker.saved_copies)
        state, counters = _state_bytes(optimizer, symbols)
        components = {
            "parameters": _bytes(parameters, symbols),
            "buffers": _bytes(module.buffers(), symbols),
            "gradients": _bytes([p.grad for p in parameters], symbols),
            "optimizer_state": state,
            "optimizer_step_counters": counters,
            "weight_copies": copies,
            "saved_activations": activations,
            "input": _bytes(data, symbols),
            "targets": _bytes(targets, symbols),
        }
        inference = _inference(module, inference_call or call, data, context, symbols, watch,
                               keep_all)
    return StepRecord(
        components, moments, start, inference, watch, tracker.operations,
        excluded | tracker.saved_copies, tracker.workspaces,
    )


def _sorted_saved(
    saved: dict[int, Polynomial], excluded: set[int], copies_of: set[int]
) -> tuple[Polynomial, Polynomial]:
    """Split what autograd saved into activations and autocast's weight copies."""
    activations: Polynomial = {}
    copies: Polynomial = {}
    for key, size in saved.items():
        if key in copies_of:
            add_into(copies, size)
        elif key not in excluded:
            add_into(activations, size)
    return activations, copies


def _check_saved(
    expected: Expected, saved: dict[int, Polynomial], excluded: set[int], copies_of: set[int]
) -> None:
    """After the forward, at fixed sizes: stop if the saved activations are not the expected."""
    found = _constant(_sorted_saved(saved, excluded, copies_of)[0])
    if found != expected.saved_activations:
        raise Departed(
            f"saved activations: {found} bytes, expected {expected.saved_activations}"
        )


def _check_peak(expected: Expected, moments: list[tuple[str, Polynomial]]) -> None:
    """After the step, at fixed sizes: stop if its peak is not the expected."""
    if moments:
        found = max(_constant(m) for _, m in moments)
        if found != expected.peak:
            raise Departed(f"peak: {found} bytes, expected {expected.peak}")


def _constant(bytes_: Polynomial) -> int:
    """Return the bytes of a polynomial at fixed sizes (only a constant term)."""
    if set(bytes_) - {sp.S.One}:
        raise EvaluationError(
            f"a check at fixed sizes found bytes still in sizes: {sorted(map(str, bytes_))}; "
            "this is a bug in memtheory's trace: please report it with the model"
        )
    return bytes_.get(sp.S.One, 0)


def _warm_up(parameters: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
    """Bring the optimizer to its steady state: gradients allocated, state created.

    ``measure`` runs whole warm-up steps for this. On fake tensors the values
    do not matter, so each gradient is allocated as backward allocates it (a
    tensor like its parameter) and one optimizer step creates the state; the
    forward and backward, which leave nothing behind, are not run twice.
    """
    _allocate_gradients(parameters)
    optimizer.step()


def _allocate_gradients(parameters: Sequence[torch.Tensor]) -> None:
    """Give every parameter that takes a gradient a new one, as backward allocates it."""
    for p in parameters:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)


def _step(
    module: nn.Module,
    call: Callable[[], Any],
    loss: Callable[[Any], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    context: Callable[[], Any],
    watch: ModuleWatch,
    tracking: tuple[SymbolicStorageTracker, dict[int, Polynomial]] | None,
    keeps_outputs: bool = True,
    forward_done: Callable[[], None] | None = None,
) -> None:
    """One training step, as ``measure`` runs it; its output and loss die when it returns.

    A loop that does not keep its outputs drops the output once the loss exists.
    ``forward_done()`` runs once the forward and the loss are done (nothing
    more is saved for the backward after that).
    """
    with _phase(watch, "zero_grad"):
        optimizer.zero_grad(set_to_none=True)
    with _phase(watch, "forward"), _saving(tracking, watch), context():
        output = _guarded(call, watch)
        watch.phase = "loss"
        value = _guarded(partial(loss, output), watch)
        if isinstance(value, torch.Tensor) and value.grad_fn is not None:
            watch.name_nodes([value], "loss")
        kept = [output] if keeps_outputs else []
        del output
    if forward_done is not None:
        forward_done()
    with _phase(watch, "backward"):
        _guarded(value.backward, watch)
    with _phase(watch, "optimizer step"):
        _guarded(optimizer.step, watch)
    del kept, value


def _guarded(function: Callable[[], Any], watch: ModuleWatch) -> Any:
    """Run ``function``, turning PyTorch's data-dependent errors into memtheory's (op, module)."""
    try:
        return function()
    except Exception as error:  # noqa: BLE001 (translated, or re-raised as it is)
        translated = untraceable(error, "", watch.label(""))
        if translated is error:
            raise
        raise translated from error


@contextmanager
def _phase(watch: ModuleWatch, phase: str) -> Iterator[None]:
    watch.phase = phase
    yield


def _saving(
    tracking: tuple[SymbolicStorageTracker, dict[int, Polynomial]] | None, watch: ModuleWatch
) -> Any:
    """Record the storage of every tensor autograd saves; keep it as autograd would.

    Of a saved output (a tensor the operation just run made, which autograd
    tracks) an alias without its autograd node is kept, as autograd keeps one
    (``tensor.data``: the same storage, no operation run; PyTorch's
    ``torch/csrc/autograd/saved_variable.cpp`` saves an output's ``tensor_data()``
    for the same reason, where no hooks are set): the tensor itself
    would hold its own node, a cycle through C++ that only a backward pass
    breaks, so a check stopped after its forward (:class:`Departed`) left its
    whole graph of fake tensors alive. Any other saved tensor is kept as it is
    (an alias of every one cost a tenth of GPT-2's trace).
    """
    if tracking is None:
        return nullcontext()
    tracker, saved = tracking

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        size = tracker.bytes_of(tensor)  # oneDNN's LSTM workspace at its CPU size
        if size:
            key = storage_key(tensor)
            if key not in saved:
                watch.saved(key, size)
            saved[key] = size
            # A weight copy or not is decided when saved (a later storage may take its key).
            if key in tracker.copies_of:
                tracker.saved_copies.add(key)
            else:
                tracker.saved_copies.discard(key)
        if id(tensor) not in tracker.last_outputs or tensor.grad_fn is None:
            return tensor  # no cycle: the tensor's node is not the one saving it
        return tensor.data  # its own output: the storage without the node, no operation run

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


def _inference(
    module: nn.Module,
    call: Callable[[], Any],
    data: list[torch.Tensor],
    context: Callable[[], Any],
    symbols: SymbolMap,
    watch: ModuleWatch,
    keep_all: bool,
) -> list[tuple[str, Polynomial]]:
    """Moments of ``call()`` in eval mode under no_grad; gradients set aside meanwhile."""
    with eval_without_gradients(module) as parameters:
        watch.phase = "inference"
        tracker = SymbolicStorageTracker(symbols, watch.label, keep_all)
        tracker.keep(*parameters, *module.buffers(), *data)
        tracker.start("inference start")
        with torch.no_grad(), tracker, context():
            output = _guarded(call, watch)
            del output
    return tracker.moments


def _state_bytes(
    optimizer: torch.optim.Optimizer, symbols: SymbolMap
) -> tuple[Polynomial, Polynomial]:
    state: dict[int, Polynomial] = {}
    counters: dict[int, Polynomial] = {}
    for per_parameter in optimizer.state.values():
        for name, value in per_parameter.items():
            if isinstance(value, torch.Tensor):
                target = counters if name == "step" else state
                target[storage_key(value)] = storage_size(value, symbols)
    return _sum(state.values()), _sum(counters.values())


def _keys(tensors: list[Any]) -> set[int]:
    return {storage_key(t) for t in tensors if isinstance(t, torch.Tensor)}


def _bytes(tensors: Any, symbols: SymbolMap) -> Polynomial:
    storages = {
        storage_key(t): storage_size(t, symbols)
        for t in tree_flatten(list(tensors))[0]
        if isinstance(t, torch.Tensor)
    }
    return _sum(storages.values())


def _sum(sizes: Any) -> Polynomial:
    total: Polynomial = {}
    for size in sizes:
        add_into(total, size)
    return total
