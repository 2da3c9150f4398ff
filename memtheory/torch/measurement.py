"""Measure what a PyTorch training step really keeps, on CPU, to the byte.

:func:`measure` runs a few training steps of a module and then tracks one
steady-state step (``zero_grad``, forward, loss, backward, ``step``):

* every tensor storage is followed with a :class:`~torch.utils._python_dispatch.TorchDispatchMode`:
  each operation's outputs are registered by storage, with a weak reference
  that says when the storage is freed, and the live total is read after every
  operation (when its inputs and outputs are both alive). Storages are
  counted once however many views share them (``untyped_storage().nbytes()``,
  keyed by ``data_ptr()``);
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

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from memtheory.conventions.autograd.convention import Implementation
from memtheory.cuda_allocator import block_size
from memtheory.errors import InvalidArgumentError
from memtheory.footprint import COMPONENT_TITLES
from memtheory.torch.allocator_counters import (
    AllocatorCounters,
    AllocatorReport,
    CudaCounters,
    PhaseRecorder,
)
from memtheory.torch.step_state import eval_without_gradients, state_tensors

__all__ = ["Measurement", "StorageTracker", "measure", "optimizer_implementation"]

LossFunction = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Measurement:
    """Bytes a training step of a PyTorch module really held, by category (CPU, exact).

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
    peak: int
    peak_moment: str
    step_start: int
    inference_peak: int
    implementation: Implementation
    autocast: str | None = None
    timeline: tuple[tuple[str, str, int], ...] = field(default=(), repr=False)
    device: str = "cpu"
    block_peak: int = 0
    allocator: AllocatorReport | None = None

    @property
    def components(self) -> dict[str, int]:
        """The categories that are not zero, named as memtheory's breakdown components.

        Examples
        --------
        >>> Measurement(1, 0, 1, 0, 0, 0, 5, 2, 0, 9, "forward", 4, 3, "for-loop").components
        {'parameters': 1, 'gradients': 1, 'saved_activations': 5, 'input': 2}
        """
        values = {name: getattr(self, name, 0) for name in COMPONENT_TITLES}
        return {name: int(value) for name, value in values.items() if value}


class StorageTracker(TorchDispatchMode):
    """Follow tensor storages op by op and record the most bytes alive at once.

    Storages that exist before the mode starts count only if :meth:`track`
    registers them (parameters, gradients, optimizer state, the data). Every
    storage an operation returns is registered with a weak reference, and the
    live total (storages whose weak reference has not expired) is read after
    each operation, so the peak includes an operation's inputs and outputs.

    Parameters
    ----------
    record : bool, default False
        Keep the live total after every operation in :attr:`timeline`.
    blocks_on : torch.device, optional
        Also follow the storages on this device rounded up to the CUDA caching
        allocator's blocks (:func:`memtheory.cuda_allocator.block_size`), and
        keep their most at once in :attr:`block_peak`.

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(1000)
    >>> with StorageTracker() as tracker:
    ...     tracker.track(x)
    ...     y = (x * 2).sum()
    >>> tracker.peak  # x and x * 2 (4000 bytes each), and their 4-byte sum
    8004
    >>> with StorageTracker(blocks_on=torch.device("cpu")) as tracker:
    ...     tracker.track(x)
    ...     y = (x * 2).sum()
    >>> tracker.block_peak  # the same three storages in 512-byte blocks
    8704
    """

    def __init__(self, record: bool = False, blocks_on: torch.device | None = None) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int, int]] = {}
        self.blocks_on = blocks_on
        self.block_peak = 0
        self.phase = ""
        self.peak = 0
        self.peak_moment = ""
        self.record = record
        self.timeline: list[tuple[str, str, int]] = []
        self.copies_of: set[int] = set()
        self._parameter_pointers: set[int] = set()

    def track(self, *tensors: Any) -> None:
        """Register the storages of ``tensors`` (None and non-tensors are ignored)."""
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided:
                storage = tensor.untyped_storage()
                pointer, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes == 0:
                    continue
                known = self._live.get(pointer)
                if known is None or known[0].expired():
                    on_device = self.blocks_on is not None and storage.device == self.blocks_on
                    blocks = block_size(nbytes) if on_device else 0
                    self._live[pointer] = (StorageWeakRef(storage), nbytes, blocks)

    def watch_parameters(self, parameters: Iterable[torch.Tensor]) -> None:
        """Remember parameter storages, to recognise casts of them (autocast's weight copies)."""
        self._parameter_pointers |= {p.untyped_storage().data_ptr() for p in parameters}

    def live_bytes(self) -> int:
        """Bytes of the registered storages that are still alive."""
        total = blocks = 0
        dead = []
        for pointer, (ref, nbytes, block) in self._live.items():
            if ref.expired():
                dead.append(pointer)
            else:
                total += nbytes
                blocks += block
        for pointer in dead:
            del self._live[pointer]
        self.block_peak = max(self.block_peak, blocks)
        return total

    def start(self, phase: str = "start") -> int:
        """Read the live total now, and make it the peak so far."""
        self.block_peak = 0
        live = self.live_bytes()
        self.peak, self.peak_moment = live, phase
        if self.record:
            self.timeline.append((phase, "", live))
        return live

    def __torch_dispatch__(  # noqa: D105
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.track(*outputs)
        if func is torch.ops.aten._to_copy.default and args:
            source = args[0]
            if source.untyped_storage().data_ptr() in self._parameter_pointers:
                self.copies_of |= {t.untyped_storage().data_ptr() for t in outputs}
        live = self.live_bytes()
        if live > self.peak:
            self.peak, self.peak_moment = live, f"{self.phase}: {func}"
        if self.record:
            self.timeline.append((self.phase, str(func), live))
        return out


def optimizer_implementation(optimizer: torch.optim.Optimizer) -> Implementation:
    """Return which implementation ``optimizer.step()`` runs: for-loop, foreach or fused.

    Examples
    --------
    >>> import torch
    >>> p = [torch.nn.Parameter(torch.ones(2))]
    >>> optimizer_implementation(torch.optim.Adam(p))  # PyTorch's default on CPU
    'for-loop'
    >>> optimizer_implementation(torch.optim.Adam(p, foreach=True))
    'foreach'
    """
    from torch.optim.optimizer import _default_to_fused_or_foreach

    defaults = optimizer.defaults
    if defaults.get("fused"):
        return "fused"
    foreach = defaults.get("foreach")
    if foreach is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return "foreach" if foreach else "for-loop"


def measure(
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002 (PyTorch's name)
    loss: LossFunction,
    optimizer: torch.optim.Optimizer,
    *,
    target: torch.Tensor | None = None,
    autocast: torch.dtype | None = None,
    warmup_steps: int = 2,
    record: bool = False,
    counters: AllocatorCounters | None = None,
) -> Measurement:
    """Measure one steady-state training step of ``module``, and one inference pass.

    The step is ``optimizer.zero_grad()`` (``set_to_none=True``), ``output =
    module(input)``, ``loss(output, target)`` (or ``loss(output)`` without a
    target), ``backward()`` and ``optimizer.step()``, run in a function, so the
    output and loss die when it returns. ``warmup_steps`` steps run first, so
    that the optimizer state exists and the previous step's gradients are
    allocated, as in the middle of training. The parameters change: pass a
    copy of the module if that matters.

    The module and the input may be on the CPU or on one CUDA device. The
    tensor storages are counted the same way on both; on CUDA the caching
    allocator's statistics are also read around each phase
    (:attr:`Measurement.allocator`), after ``torch.cuda.synchronize``.

    Parameters
    ----------
    module : torch.nn.Module
        In training mode, on the CPU or one CUDA device.
    input : torch.Tensor
        The input batch, on the module's device.
    loss : callable
        ``loss(output, target)``, e.g. ``torch.nn.CrossEntropyLoss()``.
    optimizer : torch.optim.Optimizer
        Over the module's parameters.
    target : torch.Tensor, optional
    autocast : torch.dtype, optional
        Run the forward and the loss under ``torch.autocast(device_type,
        dtype=autocast)``.
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
    """
    parameters = [p for p in module.parameters()]
    device = _device_of(module, input, target)
    if not module.training:
        raise InvalidArgumentError("measure() measures a training step: call module.train() first.")
    if counters is None and device.type == "cuda":
        counters = CudaCounters(device)
    if counters is not None and not isinstance(counters, AllocatorCounters):
        raise InvalidArgumentError(
            f"counters must have the methods of AllocatorCounters, got {type(counters).__name__}."
        )
    context = _autocast(autocast, device.type)
    for _ in range(warmup_steps):
        _step(module, input, loss, optimizer, target, context, None, None)

    tracker = StorageTracker(record=record, blocks_on=device)
    tracker.watch_parameters(parameters)
    tracker.track(*parameters, *module.buffers(), input, target)
    tracker.track(*(p.grad for p in parameters))
    tracker.track(*state_tensors(optimizer))
    recorder = PhaseRecorder(counters) if counters is not None else None
    start = tracker.start("step start")
    saved: dict[int, int] = {}
    with tracker:
        _step(module, input, loss, optimizer, target, context, (tracker, saved), recorder)
    block_peak = tracker.block_peak
    device_in_use = counters.device_in_use() if counters is not None else None

    param_ptrs = _pointers(parameters)
    buffer_ptrs = _pointers(module.buffers())
    data_ptrs = _pointers([input, target])
    copies = {p: n for p, n in saved.items() if p in tracker.copies_of}
    activations = {
        p: n
        for p, n in saved.items()
        if p not in param_ptrs | buffer_ptrs | data_ptrs and p not in copies
    }
    state, counter_bytes = _state_bytes(optimizer)
    inference_peak = _inference_peak(module, input, context, recorder)
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
        input=_bytes([input]),
        targets=_bytes([target]),
        peak=tracker.peak,
        peak_moment=tracker.peak_moment,
        step_start=start,
        inference_peak=inference_peak,
        implementation=optimizer_implementation(optimizer),
        autocast=None if autocast is None else str(autocast).removeprefix("torch."),
        timeline=tuple(tracker.timeline),
        device=str(device),
        block_peak=block_peak,
        allocator=allocator,
    )


def _device_of(
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002
    target: torch.Tensor | None,
) -> torch.device:
    """Return the one device of the module's tensors, the input and the target (CPU or CUDA)."""
    places: dict[str, str] = {}
    for name, parameter in module.named_parameters():
        places.setdefault(str(parameter.device), f"parameter {name!r}")
    for name, buffer in module.named_buffers():
        places.setdefault(str(buffer.device), f"buffer {name!r}")
    for what, data in (("input", input), ("target", target)):
        if isinstance(data, torch.Tensor):
            places.setdefault(str(data.device), f"the {what}")
    if not isinstance(input, torch.Tensor):
        raise InvalidArgumentError(
            f"measure() needs the input batch as a tensor, got {type(input).__name__}."
        )
    if len(places) > 1:
        where = ", ".join(f"{what} on {device}" for device, what in places.items())
        raise InvalidArgumentError(
            f"measure() needs the module, the input and the target on one device: {where}. "
            "Move them with .to(device)."
        )
    device = input.device
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


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _autocast(dtype: torch.dtype | None, device_type: str = "cpu") -> Callable[[], Any]:
    if dtype is None:
        return nullcontext
    return lambda: torch.autocast(device_type, dtype=dtype)


def _step(
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002
    loss: LossFunction,
    optimizer: torch.optim.Optimizer,
    target: torch.Tensor | None,
    context: Callable[[], Any],
    tracking: tuple[StorageTracker, dict[int, int]] | None,
    recorder: PhaseRecorder | None,
) -> None:
    """One training step; its output and loss die when it returns."""
    tracker, saved = tracking if tracking is not None else (None, {})

    def phase(name: str) -> Any:
        return _phase(tracker, recorder, name)

    with phase("zero_grad"):
        optimizer.zero_grad(set_to_none=True)
    with _saving(saved, tracking is not None), context():
        with phase("forward"):
            output = module(input)
        with phase("loss"):
            value = loss(output) if target is None else loss(output, target)
    with phase("backward"):
        value.backward()
    with phase("optimizer step"):
        optimizer.step()
    del output, value


@contextmanager
def _phase(
    tracker: StorageTracker | None, recorder: PhaseRecorder | None, name: str
) -> Iterator[None]:
    if tracker is not None:
        tracker.phase = name
    if recorder is None:
        yield
        return
    with recorder.phase(name):
        yield


def _saving(saved: dict[int, int], active: bool) -> Any:
    """Record the storage of every tensor autograd saves (without keeping the tensor)."""
    if not active:
        return nullcontext()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.nbytes():
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


def _inference_peak(
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002
    context: Callable[[], Any],
    recorder: PhaseRecorder | None = None,
) -> int:
    """Peak of ``module(input)`` in eval mode under no_grad; gradients set aside meanwhile."""
    with eval_without_gradients(module) as parameters:
        tracker = StorageTracker()
        tracker.track(*parameters, *module.buffers(), input)
        tracker.start()
        with torch.no_grad(), tracker, context(), _phase(None, recorder, "inference"):
            output = module(input)
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
