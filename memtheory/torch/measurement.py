"""Measure what a PyTorch training step really keeps, on CPU, to the byte.

:func:`measure` runs a few training steps of a module and then runs one
steady-state step (``zero_grad``, forward, loss, backward, ``step``) inside
:func:`memtheory.torch.track`, with a phase for each:

* every tensor storage is followed with a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
  (:class:`~memtheory.torch.storages.StorageTracker`): each operation's outputs
  are registered by storage, with a weak reference that says when the storage
  is freed, and the live total is read after every operation (when its inputs
  and outputs are both alive). Storages are counted once however many views
  share them (``untyped_storage().nbytes()``, keyed by ``data_ptr()``);
* the tensors autograd saves are recorded with
  :func:`torch.autograd.graph.saved_tensors_hooks`, deduplicated by storage and
  sorted into parameters (not counted again), autocast's weight copies, the
  caller's input and targets, and saved activations;
* parameters, buffers, gradients and optimizer state are read from the module
  and the optimizer after the step.

What storages cannot see: memory a kernel allocates without making a tensor (im2col
buffers, oneDNN scratchpads, cuDNN workspaces), the CUDA context, and the CUDA
caching allocator's rounding and reserved-but-free blocks. On CPU the default
allocator frees immediately, so tensor storages are what the process holds for
the step's data. Derived in the book's chapter "Theory vs measurement".

On a CUDA device the same storages are counted, and the caching allocator's
own statistics are read as well, around each phase (an
:class:`~memtheory.torch.allocator_counters.AllocatorReport`): the allocated
and reserved peaks, and the live storages rounded to the allocator's blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import sympy as sp
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memtheory.constraints import SizeConstraint
from memtheory.conventions.autograd.convention import Implementation
from memtheory.errors import InvalidArgumentError, MissingArgumentError
from memtheory.evaluation import substitution
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.recipes import Setup
from memtheory.tables import Table
from memtheory.torch.allocator_counters import (
    AllocatorCounters,
    AllocatorReport,
    CudaCounters,
    PhaseRecorder,
)
from memtheory.torch.loop import Loop
from memtheory.torch.setup_step import DEFAULT_OPTIMIZER, optimizer_implementation, setup_step
from memtheory.torch.step_state import eval_without_gradients
from memtheory.torch.storages import StorageTracker
from memtheory.torch.tracker import Tracker
from memtheory.units import convert, round_half_up

__all__ = ["Measurement", "StorageTracker", "measure", "optimizer_implementation"]

LossFunction = Callable[..., torch.Tensor]
Batch = torch.Tensor | Mapping[str, Any]


@dataclass(frozen=True)
class Measurement(Footprint):
    """Bytes a training step of a PyTorch module really held, by category (CPU, exact).

    A :class:`~memtheory.footprint.Footprint`, like the autograd convention's
    prediction it is checked against: :attr:`components` are the categories
    below that are not zero, :attr:`total` their sum (the state after the step,
    the saved activations and the data, as if all were alive together), and
    :attr:`peak` the most bytes really alive at once, reached at
    :attr:`peak_moment`. All are measured bytes, so :meth:`evaluate` has no
    symbol to fill in.

    Attributes
    ----------
    parameters, buffers, gradients : int
        Storages of ``module.parameters()``, ``module.buffers()`` and the
        parameters' ``.grad`` after the step.
    optimizer_state, optimizer_step_counters : int
        The optimizer's per-parameter state tensors; ``"step"`` entries (Adam's
        scalar step counts) are the counters.
    weight_copies : int
        Low-precision parameter copies that autograd saved (autocast).
    saved_activations : int
        Every other storage autograd saved in the forward and the loss, once
        each: not parameters, buffers, weight copies, the input or the targets.
    input, targets : int
        The input batch and the targets the step was fed.
    peak : int
        Most bytes of tensor storage alive at once during the step, the state
        it starts with included.
    peak_moment : str
        Phase and operation at which the peak was reached.
    step_start : int
        Live bytes when the step starts (before ``zero_grad``).
    inference_peak : int
        Most bytes alive during a forward pass in eval mode under
        ``torch.no_grad()`` (parameters, buffers and input included).
    implementation : {"for-loop", "foreach", "fused"}
        The optimizer implementation that ran: ``"for-loop"``, ``"foreach"``
        or ``"fused"``.
    autocast : str or None
        The autocast dtype (``"bfloat16"``) or None.
    timeline : tuple of (phase, operation, live bytes)
        Live bytes after every operation of the step.
    device : str
        Where the step ran: ``"cpu"`` or ``"cuda:0"``.
    block_peak : int
        The step's live storages on its device, each rounded up to the CUDA
        caching allocator's 512-byte blocks
        (:func:`memtheory.cuda_allocator.block_size`), at their most at once:
        on a GPU, ``torch.cuda.max_memory_allocated()`` without workspaces; on
        the CPU, what the same storages would take in CUDA blocks.
    allocator : AllocatorReport or None
        The device allocator's statistics around each phase (on CUDA, or when
        counters were given); None on CPU.
    loop : Loop or None
        The training loop measured (:class:`memtheory.torch.loop.Loop`).
    setup : Setup or None
        The :class:`~memtheory.recipes.Setup` measured (``measure(..., setup=)``).
    assumed : tuple of str
        The Setup's ``assumed:`` lines for this model, as ``memtheory
        estimate`` prints them, then what the measurement could not check.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    >>> m = measure(model, x, loss=torch.nn.CrossEntropyLoss(), target=y,
    ...             optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    >>> m.components  # 46 fp32 parameters; the ReLU's output, log-probs and total weight
    {'parameters': 184, 'gradients': 184, 'saved_activations': 388, 'input': 512, 'targets': 128}
    >>> m.total, m.peak, m.peak_moment
    (1396, 1768, 'backward: aten.threshold_backward.default')
    """

    parameters: int
    buffers: int
    gradients: int
    optimizer_state: int
    optimizer_step_counters: int
    weight_copies: int
    saved_activations: int
    input: int
    targets: int
    # Footprint derives peak and peak_moment from a labelled timeline; here they were measured,
    # and the timeline is every operation's live bytes. A default keeps Footprint's
    # descriptors from shadowing these fields; measure() always gives them.
    peak: int = 0
    peak_moment: str = ""
    step_start: int = 0
    inference_peak: int = 0
    implementation: Implementation = "for-loop"
    autocast: str | None = None
    timeline: tuple[tuple[str, str, int], ...] = field(  # type: ignore[assignment]
        default=(), repr=False
    )
    device: str = "cpu"
    block_peak: int = 0
    allocator: AllocatorReport | None = None
    loop: Loop | None = None
    setup: Setup | None = None
    assumed: tuple[str, ...] = ()

    @property
    def components(self) -> dict[str, int]:
        """The categories that are not zero, named as memtheory's breakdown components.

        Plain ``int`` bytes (sympy accepts them wherever a Footprint's numbers go).

        Examples
        --------
        >>> m = Measurement(1, 0, 1, 0, 0, 0, 5, 2, 0, 9, "forward", 4, 3, "for-loop")
        >>> m.components, m.total, m.peak
        ({'parameters': 1, 'gradients': 1, 'saved_activations': 5, 'input': 2}, 9, 9)
        """
        values = {name: getattr(self, name, 0) for name in COMPONENT_TITLES}
        return {name: int(value) for name, value in values.items() if value}

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        """None: every figure is measured bytes."""
        return set()

    def evaluate(self, **values: object) -> Measurement:
        """Return the measurement itself: its bytes are numbers already.

        Raises
        ------
        EvaluationError
            For any name given: there is no symbol to fill in.
        """
        self.substituted(values, [])
        return self

    def substituted(
        self, values: Mapping[str, object], expressions: Sequence[sp.Expr]
    ) -> tuple[list[sp.Expr], tuple[SizeConstraint, ...]]:
        """Check ``values`` (with no symbol here, any name is an error); return ``expressions``."""
        substitution(list(self.components.values()), values)
        return list(expressions), ()

    def table(self, unit: str = "MiB", digits: int = 2) -> Table:
        """Tabulate the components, their total, and the measured peak with its moment.

        Examples
        --------
        >>> m = Measurement(1000, 0, 1000, 0, 0, 0, 500, 200, 0, 2600, "backward: aten.mm", 2200)
        >>> print(m.table("B", 0))
        component                           B  share
        -------------------------------  ----  -----
        parameters (weights and biases)  1000  37.0%
        parameter gradients              1000  37.0%
        activations saved for backward    500  18.5%
        input batch                       200   7.4%
        -------------------------------  ----  -----
        total                            2700   100%
        peak live (backward: aten.mm)    2600
        """
        table = super().table(unit, digits)
        footer = list(table.footer)
        if not self.timeline:
            peak = str(round_half_up(convert(self.peak, unit), digits))
            footer.append((f"peak live ({self.peak_moment})", peak, ""))
        notes = [*table.notes, *(f"assumed: {line}" for line in self.assumed)]
        return Table(table.columns, table.rows, footer=footer, title=table.title, notes=notes)

    def __str__(self) -> str:
        """Print the table, the loop measured and the Setup's ``assumed:`` lines.

        Examples
        --------
        >>> m = Measurement(8, 0, 8, 0, 0, 0, 4, 4, 0, 24, "loss", 16,
        ...                 assumed=("optimizer adamw, fused implementation",))
        >>> print(str(m).splitlines()[-1])
        assumed: optimizer adamw, fused implementation
        """
        loop = [] if self.loop is None else [f"loop: {self.loop}"]
        return "\n".join([str(self.table()), *loop])


def measure(
    model: nn.Module,
    example_inputs: Batch,
    *positional: Any,
    loss: LossFunction | None = None,
    target: torch.Tensor | None = None,
    optimizer: Any = DEFAULT_OPTIMIZER,
    autocast: torch.dtype | None = None,
    keeps_outputs: bool | None = None,
    setup: Setup | str | Mapping[str, Any] | None = None,
    warmup_steps: int = 2,
    record: bool = False,
    counters: AllocatorCounters | None = None,
) -> Measurement:
    """Measure one steady-state training step of ``module``, and one inference pass.

    The calling convention is :func:`memtheory.torch.trace`'s, so one call
    traces or measures the same step: ``measure(model, batch, loss=...,
    target=..., optimizer="adamw", keeps_outputs=...)`` (a ``dims`` mapping
    in third place, as ``trace`` takes it, is accepted and not needed). The
    older form ``measure(module, input, loss, optimizer)`` still works.

    The step is ``optimizer.zero_grad()`` (``set_to_none=True``), ``output =
    model(input)``, ``loss(output, target)`` (or ``loss(output)`` without a
    target), ``backward()`` and ``optimizer.step()``, run in a function, so the
    output and loss die when it returns (the output once the loss exists, with
    ``keeps_outputs=False``), inside :func:`memtheory.torch.track`
    with a phase each (``"zero_grad"``, ``"forward"``, ``"loss"``,
    ``"backward"``, ``"optimizer step"``). ``warmup_steps`` steps run first, so
    that the optimizer state exists and the previous step's gradients are
    allocated, as in the middle of training. The parameters change: pass a
    copy of the module if that matters.

    A Hugging Face style batch works too: with a mapping the step calls
    ``model(**input)`` (with a tuple, ``model(*input)``), and without a loss
    function the loss is the output's ``.loss``. Its ``"labels"`` entry is
    then the targets (counted as ``targets``, and left out of the inference
    pass) unless ``target`` is given.

    The module and the input may be on the CPU or on one CUDA device. The
    tensor storages are counted the same way on both; on CUDA the caching
    allocator's statistics are also read around each phase
    (:attr:`Measurement.allocator`), after ``torch.cuda.synchronize``.

    Parameters
    ----------
    model : torch.nn.Module
        In training mode, on the CPU or one CUDA device.
    example_inputs : torch.Tensor, tuple or mapping of str to tensors
        The input batch, on the model's device: a tensor, positional
        arguments, or keyword arguments of ``model`` (``{"input_ids": ...,
        "labels": ...}``).
    *positional
        The older form's ``loss, optimizer``, or ``trace``'s ``dims`` (unused).
    loss : callable, optional
        ``loss(output, target)``, e.g. ``torch.nn.CrossEntropyLoss()``. Without
        it, the output's ``.loss`` (a Hugging Face model given ``labels``).
    target : torch.Tensor, optional
    optimizer : torch.optim.Optimizer, str, memtheory Optimizer or callable, default "adamw"
        An optimizer over the model's parameters, or what ``trace`` takes: a
        name built with :func:`memtheory.torch.torch_optimizer`, or
        ``factory(parameters)``.
    autocast : torch.dtype, optional
        Run the forward and the loss under ``torch.autocast(device_type,
        dtype=autocast)``.
    keeps_outputs : bool, default True
        Whether the loop holds the model's output until the step ends
        (:class:`memtheory.torch.loop.Loop`); False frees it once the loss exists.
    setup : Setup, str or mapping, optional
        A :class:`memtheory.recipes.Setup` or a recipe's name (``"pytorch-amp"``,
        ``"hf-trainer"``), as :func:`~memtheory.torch.trace` takes it
        (:func:`memtheory.torch.setup_step.setup_step`): ``autocast``, the
        optimizer (a ``torch.optim`` class with the Setup's ``foreach=`` or
        ``fused=``) and ``keeps_outputs`` are the Setup's. The model runs as
        it is, so its weights must already be in the Setup's dtype, and a
        Hugging Face model's attention and gradient checkpointing must be the
        Setup's; an optimizer instance must be the Setup's class and
        implementation. Fields one process cannot run (``zero``, ``offload``,
        ``quantization``, ``mixed-*``) and explicit keywords that say otherwise
        are refused. The result keeps the Setup and prints its ``assumed:`` lines.
    warmup_steps : int, default 2
    record : bool, default False
        Keep the live bytes after every operation in ``timeline``.
    counters : AllocatorCounters, optional
        The allocator statistics to read around each phase. By default
        :class:`~memtheory.torch.allocator_counters.CudaCounters` on a CUDA
        device, and none on the CPU (PyTorch keeps no CPU allocator
        statistics).

    Returns
    -------
    Measurement

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    >>> x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    >>> m = measure(model, x, torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()),
    ...             target=y)
    >>> m.parameters, m.optimizer_state, m.optimizer_step_counters  # 67 fp32 values, 4 tensors
    (268, 536, 16)
    >>> m.saved_activations  # ReLU output (kept by the 2nd Linear too), log-probs, total weight
    708
    >>> m.device, m.allocator
    ('cpu', None)
    >>> m.peak, m.block_peak  # up to 27 small storages at once, each in a 512-byte block
    (3048, 13824)

    A recipe's step: ``"hf-trainer"`` keeps an fp32 model's weights, runs
    ``torch.autocast(bfloat16)``, fused AdamW, and keeps only the loss:

    >>> trainer = measure(model, x, loss=torch.nn.CrossEntropyLoss(), target=y,
    ...                   setup="hf-trainer")
    >>> trainer.implementation, trainer.autocast, trainer.loop.keeps_outputs
    ('fused', 'bfloat16', False)
    >>> print(trainer.setup.label, trainer.assumed[2], sep="; ")
    hf-trainer; optimizer adamw, fused implementation
    """
    module, input = model, example_inputs  # noqa: A001 (PyTorch's name)
    if not isinstance(module, nn.Module):
        raise InvalidArgumentError(
            f"measure() takes a torch.nn.Module, got {type(module).__name__}."
        )
    loss, optimizer = _positional(positional, loss, optimizer)
    if optimizer is None:
        raise MissingArgumentError(
            "measure() runs a training step and needs the optimizer: "
            'measure(model, batch, loss=..., optimizer="adamw") or an optimizer instance.'
        )
    device = _device_of(module, input, target)
    chosen: Setup | None = None
    assumed: tuple[str, ...] = ()
    if setup is not None:
        mapped = setup_step(setup, module, autocast=autocast, optimizer=optimizer,
                            keeps_outputs=keeps_outputs, casts=False, device=str(device))
        chosen, assumed = mapped.setup, mapped.assumed
        optimizer, autocast, keeps_outputs = mapped.optimizer, mapped.autocast, mapped.keeps_outputs
    optimizer = _built("adamw" if optimizer is DEFAULT_OPTIMIZER else optimizer, module)
    loop = Loop(keeps_outputs=True if keeps_outputs is None else bool(keeps_outputs),
                loss_inside=loss is None)
    parameters = [p for p in module.parameters()]
    if not module.training:
        raise InvalidArgumentError("measure() measures a training step: call module.train() first.")
    if counters is None and device.type == "cuda":
        counters = CudaCounters(device)
    if counters is not None and not isinstance(counters, AllocatorCounters):
        raise InvalidArgumentError(
            f"counters must have the methods of AllocatorCounters, got {type(counters).__name__}."
        )
    features, targets = _split(input, target)
    context = _autocast(autocast, device.type)
    for _ in range(warmup_steps):
        _step(module, input, loss, optimizer, target, context, None, None, loop.keeps_outputs)

    recorder = PhaseRecorder(counters) if counters is not None else None
    tracker = Tracker(
        module,
        optimizer,
        inputs=(input, target),
        record=record,
        blocks_on=device,
        start="step start",
    )
    with tracker:
        _step(module, input, loss, optimizer, target, context, tracker, recorder,
              loop.keeps_outputs)
    block_peak = tracker.block_peak
    device_in_use = counters.device_in_use() if counters is not None else None

    saved = tracker.saved
    param_ptrs = _pointers(parameters)
    buffer_ptrs = _pointers(module.buffers())
    data_ptrs = _pointers(_tensors((input, target)))
    copies = {p: n for p, n in saved.items() if p in tracker.saved_copies}
    activations = {
        p: n
        for p, n in saved.items()
        if p not in param_ptrs | buffer_ptrs | data_ptrs and p not in copies
    }
    state, counter_bytes = _state_bytes(optimizer)
    inference_peak = _inference_peak(module, features, context, recorder)
    allocator = None
    if recorder is not None:
        allocator = AllocatorReport(
            device=_device_name(device),
            phases=tuple(recorder.phases),
            block_peak=block_peak,
            device_in_use=device_in_use,
        )
    return Measurement(
        parameters=_bytes(parameters),
        buffers=_bytes(module.buffers()),
        gradients=_bytes(p.grad for p in parameters),
        optimizer_state=state,
        optimizer_step_counters=counter_bytes,
        weight_copies=sum(copies.values()),
        saved_activations=sum(activations.values()),
        input=_bytes(_tensors(features)),
        targets=_bytes(_tensors(targets)),
        peak=tracker.peak,
        peak_moment=tracker.peak_moment,
        step_start=tracker.step_start,
        inference_peak=inference_peak,
        implementation=optimizer_implementation(optimizer),
        autocast=None if autocast is None else str(autocast).removeprefix("torch."),
        timeline=tracker.timeline,
        device=str(device),
        block_peak=block_peak,
        allocator=allocator,
        loop=loop,
        setup=chosen,
        assumed=assumed,
    )


def _positional(
    positional: tuple[Any, ...], loss: LossFunction | None, optimizer: Any
) -> tuple[LossFunction | None, Any]:
    """Read the older ``measure(module, input, loss, optimizer)`` form, or trace's ``dims``."""
    given = list(positional)
    if given and isinstance(given[0], Mapping):
        given.pop(0)  # trace's dims: measure runs at the example inputs' sizes
    new_form = ('measure(model, batch, loss=loss_fn, target=labels, optimizer="adamw") '
                "(trace's arguments, with dims optional)")
    if len(given) > 2:
        raise InvalidArgumentError(
            f"measure() takes at most loss and optimizer after the input, got {len(given)} "
            f"more arguments: call {new_form}."
        )
    if (given and loss is not None) or (len(given) == 2 and optimizer is not DEFAULT_OPTIMIZER):
        raise InvalidArgumentError(
            f"measure() was given the loss or the optimizer both by position and by name: call "
            f"{new_form}."
        )
    if given:
        loss = given[0]
    if len(given) == 2:
        optimizer = given[1]
    return loss, optimizer


def _built(optimizer: Any, module: nn.Module) -> torch.optim.Optimizer:
    """Return the optimizer, or the one a name (``"adamw"``) or a factory builds over the module."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if callable(optimizer) and not isinstance(optimizer, str):
        built = optimizer(list(module.parameters()))
        if not isinstance(built, torch.optim.Optimizer):
            raise InvalidArgumentError(
                f"the optimizer factory returned {type(built).__name__}, not a torch.optim "
                "optimizer: pass a function of the parameters that builds one, or a name."
            )
        return built
    from memtheory.torch.optimizers import torch_optimizer

    return torch_optimizer(optimizer, module.parameters())


def _tensors(data: Any) -> list[torch.Tensor]:
    """Every tensor in ``data``: a tensor, None, or a (nested) tuple, list or dict of them."""
    return [t for t in tree_flatten(data)[0] if isinstance(t, torch.Tensor)]


def _split(input: Batch, target: torch.Tensor | None) -> tuple[Batch, Any]:  # noqa: A002
    """Return the batch without its targets, and the targets (a mapping's ``"labels"``)."""
    if target is not None or not isinstance(input, Mapping) or "labels" not in input:
        return input, target
    return {k: v for k, v in input.items() if k != "labels"}, input["labels"]


def _device_of(
    module: nn.Module,
    input: Batch,  # noqa: A002
    target: torch.Tensor | None,
) -> torch.device:
    """Return the one device of the module's tensors, the input and the target (CPU or CUDA)."""
    places: dict[str, str] = {}
    for name, parameter in module.named_parameters():
        places.setdefault(str(parameter.device), f"parameter {name!r}")
    for name, buffer in module.named_buffers():
        places.setdefault(str(buffer.device), f"buffer {name!r}")
    batch = _named(input)
    for key, data in batch.items():
        if isinstance(data, torch.Tensor):
            places.setdefault(str(data.device), f"the input {key!r}" if key else "the input")
    if isinstance(target, torch.Tensor):
        places.setdefault(str(target.device), "the target")
    tensors = [t for t in batch.values() if isinstance(t, torch.Tensor)]
    if not tensors:
        raise InvalidArgumentError(
            "measure() needs the input batch as a tensor or a mapping of keyword arguments "
            f"to tensors, got {type(input).__name__}"
            + (" with no tensor in it." if isinstance(input, Mapping) else ".")
        )
    if len(places) > 1:
        where = ", ".join(f"{what} on {device}" for device, what in places.items())
        raise InvalidArgumentError(
            f"measure() needs the module, the input and the target on one device: {where}. "
            "Move them with .to(device)."
        )
    device = tensors[0].device
    if device.type == "meta":
        raise InvalidArgumentError(
            "measure() runs the step, and meta tensors have no data: use "
            "memtheory.torch.trace() to derive the memory without running it."
        )
    if device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(
            f"measure() runs on the CPU or a CUDA device, not {device.type}: move the module "
            "and the input to one of them."
        )
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _named(input: Batch) -> dict[str, Any]:  # noqa: A002
    """Name the batch's parts: a mapping's keys, a tuple's positions, ``""`` for a tensor."""
    if isinstance(input, Mapping):
        return dict(input)
    if isinstance(input, tuple | list):
        return {f"#{i}": value for i, value in enumerate(input)}
    return {"": input}


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _autocast(dtype: torch.dtype | None, device_type: str = "cpu") -> Callable[[], Any]:
    if dtype is None:
        return nullcontext
    return lambda: torch.autocast(device_type, dtype=dtype)


def _forward(module: nn.Module, batch: Batch) -> Any:
    """Call ``module(**batch)`` (a mapping), ``module(*batch)`` (a tuple) or ``module(batch)``."""
    if isinstance(batch, Mapping):
        return module(**batch)
    if isinstance(batch, tuple | list):
        return module(*batch)
    return module(batch)


def _loss(loss: LossFunction | None, output: Any, target: torch.Tensor | None) -> torch.Tensor:
    """Return the step's loss: ``loss(output[, target])``, or the output's own ``.loss``."""
    if loss is not None:
        return loss(output) if target is None else loss(output, target)
    value = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if not isinstance(value, torch.Tensor):
        raise InvalidArgumentError(
            f"measure() was given no loss function, and the model's output "
            f"({type(output).__name__}) has no .loss tensor: pass a loss function, or labels in "
            "the batch to a model that computes its loss (a Hugging Face model given labels=)."
        )
    return value


def _step(
    module: nn.Module,
    input: Batch,  # noqa: A002
    loss: LossFunction | None,
    optimizer: torch.optim.Optimizer,
    target: torch.Tensor | None,
    context: Callable[[], Any],
    tracker: Tracker | None,
    recorder: PhaseRecorder | None,
    keeps_outputs: bool = True,
) -> None:
    """One training step; its output (unless not kept) and its loss die when it returns."""

    def phase(name: str) -> Any:
        return _phase(tracker, recorder, name)

    with phase("zero_grad"):
        optimizer.zero_grad(set_to_none=True)
    with context():
        with phase("forward"):
            output = _forward(module, input)
        with phase("loss"):
            value = _loss(loss, output, target)
            kept = [output] if keeps_outputs else []
            del output
    with phase("backward"):
        value.backward()
    with phase("optimizer step"):
        optimizer.step()
    del kept, value


@contextmanager
def _phase(tracker: Tracker | None, recorder: PhaseRecorder | None, name: str) -> Iterator[None]:
    with nullcontext() if tracker is None else tracker.phase(name):
        if recorder is None:
            yield
            return
        with recorder.phase(name):
            yield


def _inference_peak(
    module: nn.Module,
    input: Batch,  # noqa: A002
    context: Callable[[], Any],
    recorder: PhaseRecorder | None = None,
) -> int:
    """Peak of ``module(input)`` in eval mode under no_grad; gradients set aside meanwhile."""
    with eval_without_gradients(module) as parameters:
        tracker = StorageTracker()
        tracker.track(*parameters, *module.buffers(), *_tensors(input))
        tracker.start()
        with torch.no_grad(), tracker, context(), _phase(None, recorder, "inference"):
            output = _forward(module, input)
            del output
    return tracker.peak


def _state_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int]:
    state: dict[int, int] = {}
    counters: dict[int, int] = {}
    for per_parameter in optimizer.state.values():
        for key, value in per_parameter.items():
            if isinstance(value, torch.Tensor):
                storage = value.untyped_storage()
                target = counters if key == "step" else state
                target[storage.data_ptr()] = storage.nbytes()
    return sum(state.values()), sum(counters.values())


def _pointers(tensors: Iterable[torch.Tensor | None]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def _bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tensors
        if isinstance(t, torch.Tensor)
    }
    return sum(storages.values())
