"""Track what any PyTorch code really holds, to the byte: by category, phase and module.

:func:`track` is a context manager in the spirit of PyTorch's ``MemTracker``
(``torch/distributed/_tools/mem_tracker.py``): whatever runs inside it (a
custom loop, gradient accumulation, a Hugging Face ``Trainer`` step) has its
tensor storages followed operation by operation with the machinery of
:func:`memtheory.torch.measure` (:class:`~memtheory.torch.storages.StorageTracker`),
so the peak is exact on CPU in the same sense. :func:`~memtheory.torch.measure`
itself is the standard step run inside :func:`track`.

At the peak, each live storage is put in one category, the first that holds:

==========================  =================================================================
component                   storages
==========================  =================================================================
``parameters``              the model's and the optimizers' parameters
``buffers``                 the model's buffers
``gradients``               a parameter's ``.grad`` at that moment
``optimizer_state``         an optimizer's per-parameter state (``optimizer_step_counters``:
                            its ``"step"`` entries)
``weight_copies``           casts of parameters (autocast's low-precision copies)
``input``                   the data: tensors given as ``inputs=``, and every tensor passed
                            to the model's ``forward`` (``labels`` included)
``saved_activations``       any other storage autograd saved for backward
``activations``             made during a module's forward and not saved (logits kept)
``activation_gradients``    made during the backward pass (activations' gradients, the
                            backward's temporaries)
``temporaries``             anything else: the optimizer step's temporaries, a loss computed
                            outside any module, ...
==========================  =================================================================

Each operation is labelled with a phase: the innermost ``tracker.phase(name)``
block it runs in, or else ``"optimizer step"`` (inside any optimizer's
``step()``, seen with its step hooks), ``"backward"`` (inside the autograd
engine), ``"forward"`` (inside any module's forward, seen with module hooks)
or ``"other"``. A phase that comes back after another gets a count
(``"forward (2)"``: the second micro-batch), except ``"other"``, which is
one phase however often it comes back. The bytes made in each module's
forward that are alive at the peak are kept by module (the innermost module
running when each storage was made).

What storages cannot see is what :func:`~memtheory.torch.measure` cannot: memory
a kernel takes without making a tensor, the CUDA context and the caching
allocator's blocks. Storages made before the block count only when they are the
model's or the optimizer's, given as ``inputs=``, or passed to the model's
forward (from then on). Derived in the book's chapter "Theory vs measurement".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import sympy as sp
import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils._pytree import tree_flatten

from memtheory.errors import InvalidArgumentError
from memtheory.footprint import Footprint
from memtheory.recipes import Setup
from memtheory.torch.fsdp import fsdp_resizes
from memtheory.torch.setup_step import DEFAULT_OPTIMIZER, setup_step
from memtheory.torch.step_state import state_tensors
from memtheory.torch.storages import StorageTracker, storage_of
from memtheory.torch.versions import warn_if_unchecked_torch

__all__ = ["TrackedMemory", "Tracker", "track"]

CATEGORIES = (
    "parameters",
    "buffers",
    "gradients",
    "optimizer_state",
    "optimizer_step_counters",
    "weight_copies",
    "activations",
    "saved_activations",
    "activation_gradients",
    "input",
    "temporaries",
)
"""The components of a :class:`TrackedMemory`, in table order."""

_AUTOMATIC = {
    "optimizer": "optimizer step",
    "backward": "backward",
    "forward": "forward",
    "other": "other",
}
_MADE_BY_THE_STEP = {
    "weight_copies",
    "activations",
    "saved_activations",
    "activation_gradients",
    "temporaries",
}


@dataclass(frozen=True)
class TrackedMemory(Footprint):
    """What tracked code held at its peak, by category, with each phase's peak (CPU, exact).

    A :class:`~memtheory.footprint.Footprint`: :attr:`components` are the live
    storages at the peak by category (see :mod:`memtheory.torch.tracker`), so
    their :attr:`total` is the :attr:`peak`; :attr:`timeline` holds the live
    bytes at the start and each phase's most, so :attr:`peak_moment` names the
    phase of the peak.

    Attributes
    ----------
    components : mapping of str to sympy Integer
        Bytes alive at the peak by category (those that are not zero).
    timeline : mapping of str to sympy Integer
        Live bytes at the start, then the most bytes alive during each phase,
        in the order the phases first ran.
    peak_operation : str
        Phase and operation at which the peak was first reached.
    modules : mapping of str to int
        Bytes alive at the peak that each module's forward made (the innermost
        module running), parameters, gradients, state and the data excluded.
    operations : tuple of (phase, operation, live bytes)
        Live bytes after every operation (when tracked with ``record=True``).
    setup : Setup or None
        The :class:`~memtheory.recipes.Setup` the model was checked against
        (``track(..., setup=)``).
    assumed : tuple of str
        The Setup's ``assumed:`` lines for the model, then what the tracked
        code decides itself.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    >>> with track(model, sgd, inputs=(x, y)) as tracker:
    ...     torch.nn.functional.cross_entropy(model(x), y).backward()
    ...     sgd.step()
    >>> memory = tracker.footprint
    >>> memory.timeline  # the loss, outside the model, runs in phase "other"
    {'start': 824, 'forward': 1336, 'other': 1344, 'backward': 1640, 'optimizer step': 1008}
    >>> memory.peak_moment, memory.total == memory.peak, memory.modules
    ('backward', True, {'1': 256})
    """

    components: Mapping[str, sp.Expr]
    timeline: Mapping[str, sp.Expr] = field(default_factory=dict)
    peak_operation: str = ""
    modules: Mapping[str, int] = field(default_factory=dict)
    operations: tuple[tuple[str, str, int], ...] = field(default=(), repr=False)
    setup: Setup | None = None
    assumed: tuple[str, ...] = ()

    def evaluate(self, **values: object) -> TrackedMemory:
        """Return the result itself: measured bytes are numbers already (no name is a symbol).

        Raises
        ------
        EvaluationError
            For any name given: there is no symbol to fill in.
        """
        self.substituted(values, [])
        return self


class _Tag:
    """What made a storage: the kind of code running, the module, and what became of it."""

    __slots__ = ("copy", "input", "kind", "module", "saved")

    def __init__(self, kind: str, module: str) -> None:
        self.kind = kind
        self.module = module
        self.saved = self.copy = self.input = False


class _Storages(StorageTracker):
    """The storage tracker of a :class:`Tracker`: labels each operation, notes each storage."""

    def __init__(self, owner: Tracker, record: bool, blocks_on: torch.device | None) -> None:
        super().__init__(record=record, blocks_on=blocks_on)
        self.owner = owner
        self.alive_now: dict[int, int] = {}
        self.live_now = 0

    def on_register(self, pointer: int) -> None:  # noqa: D102
        self.owner._tag_new(pointer)

    def live_bytes(self) -> int:
        """Bytes alive now; at a new peak, also which storages (:attr:`alive_now`)."""
        live = super().live_bytes()
        if live > self.peak:
            # Read again storage by storage, and count what was read: nothing ran in between
            # but the garbage collector, so this is the peak and its storages.
            self.alive_now = self.alive()
            live = sum(self.alive_now.values())
        self.live_now = live
        return live

    def __torch_dispatch__(  # noqa: D105
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.phase = self.owner._label(getattr(func, "namespace", "") == "profiler")
        before = self.peak
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.owner._after(func, args, out, self.peak > before)
        return out


class Tracker:
    """Follows the code run inside :func:`track`; read :attr:`peak` and :attr:`footprint` after.

    Made by :func:`track`, which documents the parameters.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    >>> with track(model, sgd, inputs=(x, y)) as tracker:
    ...     torch.nn.functional.cross_entropy(model(x), y).backward()
    ...     sgd.step()
    >>> isinstance(tracker, Tracker), tracker.step_start  # 184 bytes of weights, 640 of data
    (True, 824)
    >>> tracker.peak, tracker.peak_moment
    (1640, 'backward: aten.threshold_backward.default')
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        inputs: Any = (),
        record: bool = False,
        blocks_on: torch.device | None = None,
        start: str = "start",
    ) -> None:
        if model is not None and not isinstance(model, nn.Module):
            raise InvalidArgumentError(
                f"track() takes the model as a torch.nn.Module, got {type(model).__name__}."
            )
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidArgumentError(
                "track() takes the optimizer as a torch.optim.Optimizer, got "
                f"{type(optimizer).__name__}."
            )
        self.model = model
        self.optimizers: list[torch.optim.Optimizer] = [] if optimizer is None else [optimizer]
        self.saved: dict[int, int] = {}
        self.saved_copies: set[int] = set()
        """``data_ptr()`` of the saved storages that were casts of a parameter when saved."""
        """Bytes of every storage autograd saved in the block, by ``data_ptr()``."""
        self._storages = _Storages(self, record, blocks_on)
        self._data = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
        self._start = start
        self._names: dict[int, str] = {}
        if model is not None:
            self._names = {id(m): name for name, m in model.named_modules()}
            self._names[id(model)] = type(model).__name__
        self._parameters: dict[int, torch.Tensor] = {}
        self._parameter_pointers: set[int] = set()
        self._buffer_pointers: set[int] = set()
        self._tags: dict[int, _Tag] = {}
        self._explicit: list[str] = []
        self._running: list[str] = []
        self._in_step = 0
        self._kind = "other"
        self._name = ""
        self._label_now = ""
        self._runs: dict[str, int] = {}
        self._phase_peaks: dict[str, int] = {}
        self._at_peak: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self._exits = ExitStack()
        self._state = "new"
        self.setup: Setup | None = None
        """The Setup the model was checked against (:func:`track`'s ``setup=``)."""
        self.assumed: tuple[str, ...] = ()
        """Its ``assumed:`` lines, then what the tracked code decides itself."""

    # -- the block ----------------------------------------------------------------------
    def __enter__(self) -> Tracker:
        if self._state != "new":
            raise InvalidArgumentError("a tracker follows one block: call track() again.")
        self._state = "open"
        warn_if_unchecked_torch()
        storages = self._storages
        if self.model is not None:
            self._add_parameters(self.model.parameters())
            buffers = list(self.model.buffers())
            self._buffer_pointers = _pointers(buffers)
            storages.track(*buffers)
        for optimizer in self.optimizers:
            self._add_optimizer(optimizer)
        storages.track(*self._data)
        self._mark_input(self._data)
        self._hooks()
        live = storages.start(self._start)
        self._phase_peaks[self._start] = live
        self._snapshot(storages.alive_now)
        self._exits.enter_context(
            torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)
        )
        self._exits.enter_context(storages)
        self._exits.enter_context(fsdp_resizes(storages))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._state = "closed"
        self._exits.close()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Label the operations run inside with the phase ``name`` (innermost block wins).

        Examples
        --------
        >>> import torch
        >>> x = torch.ones(1000)
        >>> with track(inputs=x) as tracker:
        ...     with tracker.phase("double"):
        ...         y = x * 2
        >>> tracker.footprint.peak_moment, tracker.peak  # x and x * 2, 4,000 bytes each
        ('double', 8000)
        """
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a phase needs a name, a non-empty str; got {name!r}.")
        self._explicit.append(name)
        try:
            yield
        finally:
            self._explicit.pop()

    # -- results ------------------------------------------------------------------------
    @property
    def peak(self) -> int:
        """Most bytes of tensor storage alive at once so far, those alive at the start included."""
        return self._storages.peak

    @property
    def peak_moment(self) -> str:
        """Phase and operation at which the peak was first reached (``"backward: aten.mm..."``)."""
        return self._storages.peak_moment

    @property
    def step_start(self) -> int:
        """Live bytes when the block started."""
        return self._phase_peaks.get(self._start, 0)

    @property
    def block_peak(self) -> int:
        """The peak with each storage on ``blocks_on`` rounded up to CUDA allocator blocks."""
        return self._storages.block_peak

    @property
    def timeline(self) -> tuple[tuple[str, str, int], ...]:
        """Live bytes after every operation, as (phase, operation, bytes) (``record=True``)."""
        return tuple(self._storages.timeline)

    @property
    def weight_copies(self) -> set[int]:
        """``data_ptr()`` of every cast of a parameter made in the block (autocast's copies)."""
        return self._storages.copies_of

    @property
    def footprint(self) -> TrackedMemory:
        """What was alive at the peak by category, with each phase's peak and each module's part."""
        components, modules = self._at_peak
        return TrackedMemory(
            components={k: sp.Integer(v) for k, v in components.items() if v},
            timeline={k: sp.Integer(v) for k, v in self._phase_peaks.items()},
            peak_operation=self.peak_moment,
            modules=dict(modules),
            operations=self.timeline,
            setup=self.setup,
            assumed=self.assumed,
        )

    # -- what the hooks see -------------------------------------------------------------
    def _hooks(self) -> None:
        exits = self._exits
        exits.callback(register_module_forward_pre_hook(self._module_starts).remove)
        exits.callback(register_module_forward_hook(self._module_ends, always_call=True).remove)
        exits.callback(register_optimizer_step_pre_hook(self._step_starts).remove)
        exits.callback(register_optimizer_step_post_hook(self._step_ends).remove)
        if self.model is not None:
            handle = self.model.register_forward_pre_hook(self._model_inputs, with_kwargs=True)
            exits.callback(handle.remove)

    def _module_starts(self, module: nn.Module, args: Any) -> None:
        self._running.append(self._names.get(id(module)) or type(module).__name__)

    def _module_ends(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._running:
            self._running.pop()

    def _step_starts(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._in_step += 1
        if not any(optimizer is known for known in self.optimizers):
            self.optimizers.append(optimizer)
            self._add_optimizer(optimizer)

    def _step_ends(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._in_step = max(0, self._in_step - 1)

    def _model_inputs(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        self._storages.track(*tensors)
        self._mark_input(tensors)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = storage_of(tensor)
        nbytes = storage.nbytes()
        if nbytes:
            pointer = storage.data_ptr()
            self.saved[pointer] = nbytes
            # Decided when saved: the address may later hold another storage (the allocator
            # reuses it), which must not make the copy an activation, nor an activation a copy.
            if pointer in self._storages.copies_of:
                self.saved_copies.add(pointer)
            else:
                self.saved_copies.discard(pointer)
            tag = self._tags.get(pointer)
            if tag is not None:
                tag.saved = True
        return tensor

    # -- bookkeeping --------------------------------------------------------------------
    def _add_parameters(self, parameters: Any) -> None:
        new = [p for p in parameters if id(p) not in self._parameters]
        self._parameters.update((id(p), p) for p in new)
        self._parameter_pointers |= _pointers(new)
        self._storages.watch_parameters(new)
        self._storages.track(*new)
        self._storages.track(*(p.grad for p in new))

    def _add_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self._add_parameters(p for group in optimizer.param_groups for p in group["params"])
        self._storages.track(*state_tensors(optimizer))

    def _mark_input(self, tensors: list[torch.Tensor]) -> None:
        for tensor in tensors:
            tag = self._tags.get(storage_of(tensor).data_ptr())
            if tag is not None:
                tag.input = True

    def _label(self, bookkeeping: bool = False) -> str:
        """Return the current operation's phase; keep the kind of code running it.

        A ``bookkeeping`` operation (a profiler record, such as the one
        ``optimizer.step()`` opens before its hooks run) keeps the phase of the
        operation before it (the start's, before any), unless a ``phase()`` block
        names one.
        """
        if bookkeeping and not self._explicit:
            return self._label_now or self._start
        if self._in_step:
            self._kind = "optimizer"
        elif torch._C._current_graph_task_id() != -1:
            self._kind = "backward"
        elif self._running:
            self._kind = "forward"
        else:
            self._kind = "other"
        name = self._explicit[-1] if self._explicit else _AUTOMATIC[self._kind]
        if name != self._name:
            self._name = name
            runs = self._runs[name] = self._runs.get(name, 0) + 1
            other = name == "other" and not self._explicit
            self._label_now = name if runs == 1 or other else f"{name} ({runs})"
        return self._label_now

    def _tag_new(self, pointer: int) -> None:
        module = self._running[-1] if self._running else ""
        self._tags[pointer] = _Tag(self._kind, module)

    def _after(self, func: Any, args: Any, out: Any, new_peak: bool) -> None:
        storages = self._storages
        if func is torch.ops.aten._to_copy.default and args and isinstance(args[0], torch.Tensor):
            if storage_of(args[0]).data_ptr() in self._parameter_pointers:
                for tensor in tree_flatten(out)[0]:
                    if isinstance(tensor, torch.Tensor):
                        tag = self._tags.get(storage_of(tensor).data_ptr())
                        if tag is not None:
                            tag.copy = True
        label = storages.phase
        self._phase_peaks[label] = max(self._phase_peaks.get(label, 0), storages.live_now)
        if new_peak:
            self._snapshot(storages.alive_now)

    def _snapshot(self, alive: dict[int, int]) -> None:
        """Sort the storages alive at a new peak into categories and modules."""
        owned = self._owned()
        components = dict.fromkeys(CATEGORIES, 0)
        modules: dict[str, int] = {}
        for pointer, nbytes in alive.items():
            tag = self._tags.get(pointer)
            category = owned.get(pointer) or ("temporaries" if tag is None else _category(tag))
            components[category] += nbytes
            if tag is not None and tag.module and category in _MADE_BY_THE_STEP:
                modules[tag.module] = modules.get(tag.module, 0) + nbytes
        order = {name: index for index, name in enumerate(self._names.values())}
        ordered = sorted(modules, key=lambda name: order.get(name, len(order)))
        self._at_peak = (components, {name: modules[name] for name in ordered})

    def _owned(self) -> dict[int, str]:
        """Return the category of each storage the model or an optimizer holds, by ``data_ptr()``.

        Where one storage is several things, the first category of the table wins.
        """
        state = [
            (key, value)
            for optimizer in self.optimizers
            for per_parameter in optimizer.state.values()
            for key, value in per_parameter.items()
            if isinstance(value, torch.Tensor)
        ]
        # Later assignments win: from the last category of the table to the first.
        owned = {
            storage_of(value).data_ptr(): "optimizer_step_counters"
            for key, value in state
            if key == "step"
        }
        owned.update(
            (storage_of(value).data_ptr(), "optimizer_state")
            for key, value in state
            if key != "step"
        )
        owned.update(
            dict.fromkeys(_pointers(p.grad for p in self._parameters.values()), "gradients")
        )
        owned.update(dict.fromkeys(self._buffer_pointers, "buffers"))
        owned.update(dict.fromkeys(self._parameter_pointers, "parameters"))
        return owned


def _category(tag: _Tag) -> str:
    if tag.copy:
        return "weight_copies"
    if tag.input:
        return "input"
    if tag.saved:
        return "saved_activations"
    return {"forward": "activations", "backward": "activation_gradients"}.get(
        tag.kind, "temporaries"
    )


def _pointers(tensors: Any) -> set[int]:
    return {storage_of(t).data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def track(
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    inputs: Any = (),
    record: bool = False,
    blocks_on: torch.device | None = None,
    setup: Setup | str | Mapping[str, Any] | None = None,
) -> Tracker:
    """Follow every tensor storage of the code run inside: the peak, by category, phase and module.

    Use it as a context manager around any training code: a custom loop,
    gradient accumulation, ``transformers.Trainer.train()``. Afterwards
    :attr:`Tracker.peak` is the most bytes alive at once (exact on CPU, as
    :func:`~memtheory.torch.measure` counts them) and :attr:`Tracker.footprint`
    a :class:`TrackedMemory`: what was alive at the peak by category, the
    peak of each phase, and each module's part. See :mod:`memtheory.torch.tracker`
    for the categories and phases.

    Parameters
    ----------
    model : torch.nn.Module, optional
        Its parameters, gradients and buffers count from the start; tensors
        passed to its forward count as ``input``; its modules name the
        per-module parts.
    optimizer : torch.optim.Optimizer, optional
        Its parameters and state count from the start. An optimizer that is
        not given is found when its ``step()`` runs (a ``Trainer`` makes its
        own), and counts from then.
    inputs : tensor or (nested) tuple, list or dict of tensors, optional
        Data made before the block that it uses (the batch, the targets): counted
        from the start as ``input``.
    record : bool, default False
        Keep the live bytes after every operation (:attr:`Tracker.timeline`).
    blocks_on : torch.device, optional
        Also follow the storages on this device in CUDA allocator blocks
        (:attr:`Tracker.block_peak`).
    setup : Setup, str or mapping, optional
        A :class:`memtheory.recipes.Setup` or a recipe's name to check the
        model (and the optimizer, if given) against, as
        :func:`~memtheory.torch.measure` checks them: the weights' dtype, a
        Hugging Face model's attention and checkpointing, the optimizer's
        class and implementation. The code inside runs as written, so its
        autocast and its loop are its own; the footprint keeps the Setup and
        its ``assumed:`` lines.

    Returns
    -------
    Tracker
        The context manager; read it after the block.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    >>> with track(model, sgd, inputs=(x, y)) as tracker:
    ...     loss = torch.nn.functional.cross_entropy(model(x), y)
    ...     loss.backward()
    ...     sgd.step()
    ...     sgd.zero_grad()
    >>> tracker.peak, tracker.peak_moment  # reached in the ReLU's backward
    (2304, 'backward: aten.threshold_backward.default')
    >>> memory = tracker.footprint  # a Footprint: its categories add up to the peak
    >>> memory.total == memory.peak == tracker.peak, memory.peak_moment
    (True, 'backward')
    >>> print(memory.table("B", 0))
    component                           B  share
    -------------------------------  ----  -----
    parameters (weights and biases)   268  11.6%
    parameter gradients               108   4.7%
    activations saved for backward    512  22.2%
    activation gradients             1024  44.4%
    input batch                       384  16.7%
    temporaries                         8   0.3%
    -------------------------------  ----  -----
    total                            2304   100%
    peak live (backward)             2304
    >>> memory.modules  # the ReLU's output, kept for backward, made in module "1"
    {'1': 512}

    Checked against a recipe: ``pytorch-fp32`` runs AdamW with ``foreach=True``:

    >>> adamw = torch.optim.AdamW(model.parameters(), foreach=True)
    >>> with track(model, adamw, inputs=(x, y), setup="pytorch-fp32") as tracker:
    ...     torch.nn.functional.cross_entropy(model(x), y).backward()
    ...     adamw.step()
    >>> tracker.footprint.setup.label, tracker.footprint.assumed[-1]
    ('pytorch-fp32', 'the code inside track() decides its own autocast and loop')
    """
    tracker = Tracker(model, optimizer, inputs=inputs, record=record, blocks_on=blocks_on)
    if setup is not None:
        if model is None:
            raise InvalidArgumentError(
                "track(setup=...) checks the model against the Setup: pass the model, "
                "track(model, optimizer, setup=...)."
            )
        device = next((str(p.device) for p in model.parameters()), "cpu")
        mapped = setup_step(setup, model, optimizer=optimizer or DEFAULT_OPTIMIZER, casts=False,
                            device=device)
        tracker.setup = mapped.setup
        tracker.assumed = (*mapped.assumed,
                           "the code inside track() decides its own autocast and loop")
    return tracker
