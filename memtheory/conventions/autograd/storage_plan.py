"""The autograd convention: the tensors PyTorch really keeps, and the peak of a training step.

The rule of thumb counts every activation twice and the parameters three
times. PyTorch keeps something else: each operation saves exactly the tensors
its derivative formula reads (``tools/autograd/derivatives.yaml``), a tensor
saved by two operations is stored once, and the gradients, the optimizer's
temporaries and the activations' gradients come and go during the step. This
convention follows a training step tensor by tensor:

* **saved activations**: every layer's saved tensors
  (:meth:`~memtheory.layers.Layer.saved_for_backward`), counted once per
  storage. A layer's ``"input"`` is the storage of the layer before it (a view
  such as Flatten, and an in-place layer, share their input's storage), so a
  ReLU's output that the next Dense layer also keeps counts once. The input
  batch and the targets are the caller's, not the graph's, and are counted as
  ``input`` and ``targets``; parameters a layer saves are not counted again.
* **the peak**: a timeline of live bytes through one steady-state step,
  ``zero_grad(set_to_none=True)``, forward, loss, backward, ``optimizer.step()``
  (see :class:`AutogradConvention` for the rules), carried by the
  :class:`~memtheory.breakdown.MemoryBreakdown` as ``timeline`` and ``peak``.

Every rule was checked against PyTorch 2.13 on CPU with
:func:`memtheory.torch.measure`, which tracks tensor storages op by op. Derived
in the book's chapter "Theory vs measurement".

Examples
--------
>>> from memtheory import Conv2d, CrossEntropyLoss, Dense, Flatten, Input, MaxPool2d, ReLU
>>> from memtheory import Network, training_memory
>>> net = Network([Input((3, 32, 32), batch=8), Conv2d(8, 3, padding=1), ReLU(),
...                MaxPool2d(2), Flatten(), Dense(10), CrossEntropyLoss()])
>>> memory = training_memory(net, "adam", convention="autograd")
>>> memory["saved_activations"]  # ReLU output (the pool keeps it too), indices, pool output, loss
459076
>>> memory.peak, memory.peak_moment
(1215672, 'backward relu_1')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import sympy as sp

from memtheory.breakdown import MemoryBreakdown
from memtheory.conventions.base import Convention, Model
from memtheory.counts import ModelCounts
from memtheory.dtypes import DType, dtype
from memtheory.errors import UnknownOptimizerError, UnsupportedError
from memtheory.layers.activations import _Elementwise
from memtheory.layers.base import elements
from memtheory.layers.conv import Conv2d
from memtheory.layers.core import Dense, Flatten, Input
from memtheory.layers.normalization import BatchNorm2d
from memtheory.layers.pooling import AvgPool2d, MaxPool2d
from memtheory.layers.regularization import Dropout
from memtheory.layers.softmax import CrossEntropyLoss, Softmax
from memtheory.network import LayerRow, Network
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision, PrecisionLike
from memtheory.precision import precision as precision_of

__all__ = [
    "IMPLEMENTATIONS",
    "AutogradConvention",
    "ForwardStorage",
    "Implementation",
    "autocast_precision",
    "forward_storages",
]

Implementation = Literal["for-loop", "foreach", "fused"]

IMPLEMENTATIONS: dict[str, str] = {
    "for-loop": "one parameter at a time (torch.optim's default on CPU)",
    "foreach": "each operation over the list of all parameters (the default on CUDA)",
    "fused": "one kernel per step (fused=True)",
}
"""The implementations of ``torch.optim`` optimizers, which differ in their temporaries."""

_KNOWN_LAYERS = (
    Input,
    Conv2d,
    Dense,
    Flatten,
    MaxPool2d,
    AvgPool2d,
    BatchNorm2d,
    Dropout,
    Softmax,
    CrossEntropyLoss,
    _Elementwise,
)
_LOW_PRECISION_OPS = (Conv2d, Dense)
"""Layers that CPU autocast runs in the low-precision dtype (casting inputs and weights)."""

_STEP_COUNTER = dtype("fp32")
"""torch.optim keeps each ``state["step"]`` as a float32 scalar tensor (``_get_scalar_dtype()``)."""


_SGD_FAMILY = ("sgd", "sgd+momentum", "nesterov")
_ADAM_FAMILY = ("adam", "adamw")


def autocast_precision(low: str = "bf16") -> Precision:
    """Return the precision of ``torch.autocast``: fp32 weights, gradients, state and input.

    Under autocast the parameters, their gradients and the optimizer state stay
    fp32 and the input batch is fed in fp32; convolutions and linear layers cast
    their inputs and weights to ``low`` and compute in it, and the layers after
    them inherit ``low``. The autograd convention recognises this precision
    (activations narrower than the parameters, no master copy).

    Examples
    --------
    >>> p = autocast_precision("bf16")
    >>> p.parameters.name, p.activations.name, p.input.name, p.master_weights
    ('fp32', 'bf16', 'fp32', None)
    """
    return Precision(parameters="fp32", activations=low, input="fp32")


@dataclass(frozen=True)
class ForwardStorage:
    """One storage a training forward pass allocates (or is fed), and who keeps it.

    Attributes
    ----------
    layer : str
        The layer that allocates it (``"input"`` for the input batch, and
        ``"targets"``).
    role : str
        ``"output"``, a saved tensor's role (``"indices"``, ``"mask"``,
        ``"statistics"``), a loss intermediate (``"log-probabilities"``,
        ``"total weight"``), an autocast cast (``"input cast"``, ``"weight
        copy"``, ``"bias copy"``, ``"logits cast"``), or ``"data"``.
    nbytes : sympy expression
    kept_by : tuple of str
        The layers whose backward nodes keep it, in running order; empty when
        nothing saves it (it is freed during the forward, unless the caller
        holds it).
    held_by_caller : bool
        The input batch, the targets, and the logits and loss a training loop
        keeps in its variables.
    """

    layer: str
    role: str
    nbytes: sp.Expr
    kept_by: tuple[str, ...]
    held_by_caller: bool

    @property
    def category(self) -> str:
        """Its breakdown component if kept for backward, else ``"freed in the forward"``.

        Examples
        --------
        >>> ForwardStorage("relu_1", "output", 400, ("relu_1", "dense_2"), False).category
        'saved_activations'
        """
        if self.role == "data":
            return "targets" if self.layer == "targets" else "input"
        if not self.kept_by:
            return "held by the caller" if self.held_by_caller else "freed in the forward"
        return "weight_copies" if self.role == "weight copy" else "saved_activations"


def forward_storages(
    network: Network, precision: PrecisionLike = "fp32"
) -> tuple[ForwardStorage, ...]:
    """List every storage of a training forward pass: its size and which backward nodes keep it.

    Views and in-place layers add no storage; a storage kept by several layers
    (a ReLU's output, which the next layer keeps as its input) appears once.
    The saved activations of :class:`AutogradConvention` are the storages
    whose category is ``"saved_activations"``.

    Examples
    --------
    >>> from memtheory import Dense, Dropout, Input, Network, ReLU
    >>> net = Network([Input((8,), batch=2), Dense(4), ReLU(), Dropout(0.5, device="cpu"),
    ...                Dense(3)])
    >>> for s in forward_storages(net):
    ...     print(f"{s.layer:10} {s.role:7} {s.nbytes!s:>3} {s.category:21}", *s.kept_by)
    input      data     64 input                 dense_1
    dense_1    output   32 freed in the forward
    relu_1     output   32 saved_activations     relu_1
    dropout_1  mask     32 saved_activations     dropout_1
    dropout_1  output   32 saved_activations     dense_2
    dense_2    output   24 held by the caller
    """
    plan = _plan(_network(network), precision_of(precision), training=True)
    holders = _holders(plan)
    order = {entry.row.name: i for i, entry in enumerate(plan.rows)}
    keys = list(dict.fromkeys(["input", *plan.data, *_forward_keys(plan)]))
    storages = []
    for key in keys:
        if key == "loss":
            continue
        layer, _, suffix = key.partition(":")
        role = (
            "data"
            if key in plan.data
            else suffix.rsplit(" ", 1)[0]
            if suffix[-1:].isdigit()
            else suffix
        )
        kept = tuple(sorted(holders.get(key, ()), key=order.__getitem__))
        storages.append(ForwardStorage(layer, role, plan.sizes[key], kept, key in plan.held))
    return tuple(storages)


def _forward_keys(plan: _Plan) -> list[str]:
    keys: list[str] = []
    for entry in plan.rows:
        keys += [*entry.allocs, *entry.copies, entry.out_key]
    return keys


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


@dataclass
class _Row:
    """What the simulation needs to know about one layer of the step.

    ``in_key`` is the storage the layer receives (its predecessor's output);
    ``read_key`` is the one it computes from: the same, or under autocast a
    low-precision cast of it. ``allocs`` are the storages it allocates in the
    forward besides its output (casts, pooling indices, dropout masks, batch
    statistics, the loss's intermediates).
    """

    row: LayerRow
    in_key: str
    read_key: str
    out_key: str
    records: bool
    input_requires_grad: bool
    allocs: dict[str, sp.Expr]
    saved: set[str]
    in_dtype: DType
    read_dtype: DType
    out_dtype: DType
    copies: dict[str, sp.Expr] = field(default_factory=dict)


@dataclass
class _Plan:
    """The storages of a step: their sizes, which nodes keep them, and what the caller holds."""

    precision: Precision
    sizes: dict[str, sp.Expr]
    rows: list[_Row]
    loss: _Row | None
    held: set[str]
    data: set[str]

    @property
    def weight_copies(self) -> dict[str, sp.Expr]:
        """Autocast's low-precision weight copies that a backward node keeps."""
        return {
            key: nbytes
            for entry in self.rows
            for key, nbytes in entry.copies.items()
            if key in entry.saved
        }


class AutogradConvention(Convention):
    r"""What PyTorch's autograd keeps, storage by storage, and the live-tensor peak of a step.

    Parameters
    ----------
    implementation : {"for-loop", "foreach", "fused"}, default "for-loop"
        Which ``torch.optim`` implementation the peak assumes. They keep the
        same state but different temporaries: the for-loop Adam computes
        ``denom = (exp_avg_sq.sqrt() / c).add_(eps)`` one parameter at a time,
        so two temporaries of one parameter tensor are alive with the previous
        tensor's ``denom``; the foreach Adam takes the square root of every
        second moment at once (one temporary per parameter); fused kernels
        and SGD (with or without momentum) allocate none. PyTorch picks
        for-loop on CPU and foreach on CUDA unless told.

    Notes
    -----
    The timeline of one steady-state step (the optimizer state exists, the
    previous step's gradients are still allocated):

    1. **step start**: parameters, buffers, gradients, optimizer state and
       step counters, input batch and targets. ``zero_grad()`` frees the
       gradients (``set_to_none=True``, PyTorch's default).
    2. **forward**, layer by layer: the layer allocates its output (not a view
       or an in-place layer) and the tensors it saves for itself (pooling
       indices, dropout masks, batch statistics); its input is freed when no
       later layer reads it and no backward node keeps it. Layers before the
       first one with parameters record nothing. The loss (cross-entropy:
       log-softmax output, then the scalar loss and the scalar total weight)
       ends the forward; the caller keeps the logits and the loss until the
       step ends. A network without a loss layer is trained on
       ``output.sum()``, which saves nothing.
    3. **backward**, node by node in reverse: a node allocates its input's
       gradient (unless its input needs none, or it is a view: Flatten) and its
       parameters' gradients (which become ``.grad`` without a copy), then
       frees the incoming gradient and the saved tensors no other node keeps.
       Cross-entropy is two nodes (NLL, then log-softmax); ``backward()``
       holds the seed gradient, ``ones_like(loss)``, until it returns.
    4. **optimizer step**: everything the step ends with, plus the
       implementation's temporaries.

    Peaks are read at the moment after each allocation and before the frees
    that follow it, the live total's local maxima. Workspaces that kernels
    allocate internally (im2col buffers, cuDNN workspaces) are not tensors and
    are not counted; nor is the CUDA context or the caching allocator's slack.

    Precisions: one dtype for everything (``model.to(torch.bfloat16)``) or
    :func:`autocast_precision` (``torch.autocast``): then convolutions and
    linear layers save low-precision copies of their input (a new storage when
    the input was fp32) and of their weight (``weight_copies``), the casts of
    the biases live until the forward ends (autocast's cache), and the loss
    runs in fp32.

    Limits: sequential networks of the layers listed in the error message;
    SGD (plain, momentum, Nesterov) and Adam/AdamW without weight decay,
    AMSGrad or ``maximize`` for the step's temporaries.

    Examples
    --------
    >>> from memtheory import Dense, Dropout, Input, Network, ReLU, training_memory
    >>> mlp = Network([Input((784,), batch=64), Dense(256), ReLU(), Dropout(0.2, device="cpu"),
    ...                Dense(10)])
    >>> memory = training_memory(mlp, "sgd", convention="autograd")
    >>> memory["saved_activations"]  # ReLU output, dropout mask, dropout output: 64 x 256 x 4 each
    196608
    >>> memory.format("peak", "KiB"), memory.peak_moment
    ('1852.59 KiB', 'backward dense_1')
    """

    name = "autograd"
    title = "autograd (what PyTorch keeps, and the peak)"

    def __init__(self, implementation: Implementation = "for-loop") -> None:
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"implementation must be one of {', '.join(IMPLEMENTATIONS)}, got "
                f"{implementation!r}."
            )
        self.implementation = implementation

    def __repr__(self) -> str:
        return f"AutogradConvention(implementation={self.implementation!r})"

    # -- public ------------------------------------------------------------------------
    def training(
        self, model: Model, optimizer: Optimizer | None, precision: Precision
    ) -> MemoryBreakdown:
        """Components of a training step and the timeline of its live bytes."""
        if optimizer is None:
            raise UnknownOptimizerError(
                "the autograd convention needs an optimizer: pass optimizer='sgd', "
                "'sgd+momentum' or 'adam' (see memtheory.OPTIMIZERS)."
            )
        network = _network(model)
        plan = _plan(network, precision, training=True)
        if not any(r.records for r in plan.rows):
            raise UnsupportedError(
                f"{network.name!r} has no parameters: a training step has nothing to train."
            )
        tensors = _parameter_tensors(network)
        count = sp.Add(*tensors.values())
        parameters = count * precision.parameters.bytes
        gradients = count * precision.gradients.bytes
        state = optimizer.states_per_parameter * count * precision.optimizer_state.bytes
        counters = sp.Integer(len(tensors) * len(optimizer.scalar_states) * _STEP_COUNTER.bytes)
        saved = _saved_bytes(plan)
        components = {
            "parameters": parameters,
            "gradients": gradients,
            "optimizer_state": state,
            "optimizer_step_counters": counters,
            "saved_activations": saved,
            "input": plan.sizes["input"],
        }
        buffers = _buffer_bytes(network, precision)
        if buffers != 0:
            components["buffers"] = buffers
        if plan.weight_copies:
            components["weight_copies"] = sp.Add(*plan.weight_copies.values())
        if "targets" in plan.sizes:
            components["targets"] = plan.sizes["targets"]
        if not optimizer.scalar_states:
            del components["optimizer_step_counters"]
        timeline = self._training_timeline(plan, tensors, optimizer, components)
        notes = (
            f"{optimizer.title}, {self.implementation} implementation: "
            f"{_temporaries_text(optimizer, self.implementation)}",
            "zero_grad(set_to_none=True); the caller keeps the input, targets, logits and loss",
            "saved activations: each storage once; the input batch and targets counted apart",
            "peak: live tensor storages; kernel workspaces and allocator slack not included",
        )
        return MemoryBreakdown(
            components, "training", self.name, precision, optimizer, notes, timeline
        )

    def inference(self, model: Model, precision: Precision) -> MemoryBreakdown:
        """Weights, buffers, input, and the most activation bytes alive at once (eval, no_grad).

        In inference (``module.eval()`` under ``torch.no_grad()``) no layer saves
        anything: a layer's input is freed as soon as its output exists (the
        input batch stays: the caller holds it), dropout is the identity, and
        a loss layer is not run. The peak is the weights, buffers and input plus
        the largest input-and-output pair (max pooling also allocates its int64
        indices for a moment).

        Examples
        --------
        >>> from memtheory import Dense, Input, Network, inference_memory
        >>> net = Network([Input((784,), batch=64), Dense(256), Dense(10)])
        >>> memory = inference_memory(net, convention="autograd")
        >>> memory["activations"], memory.total == memory.peak  # both outputs alive at dense_2
        (68096, True)
        """
        network = _network(model)
        plan = _plan(network, precision, training=False)
        tensors = _parameter_tensors(network)
        parameters = sp.Add(*tensors.values()) * precision.parameters.bytes
        base = {"parameters": parameters, "input": plan.sizes["input"]}
        buffers = _buffer_bytes(network, precision)
        if buffers != 0:
            base["buffers"] = buffers
        timeline = _inference_timeline(plan, sp.Add(*base.values()))
        notes = (
            "eval mode under no_grad: nothing saved, each input freed once its output exists",
            "activations: the most activation bytes alive at once (so total = peak)",
        )
        memory = MemoryBreakdown(
            base, "inference", self.name, precision, notes=notes, timeline=timeline
        )
        activations = sp.expand(memory.peak - sp.Add(*base.values()))  # type: ignore[operator]
        return replace(memory, components={**base, "activations": activations})

    # -- the training timeline ---------------------------------------------------------
    def _training_timeline(
        self,
        plan: _Plan,
        tensors: dict[str, sp.Expr],
        optimizer: Optimizer,
        components: dict[str, sp.Expr],
    ) -> dict[str, sp.Expr]:
        precision = plan.precision
        timeline = _Timeline()
        for name in ("parameters", "buffers", "optimizer_state", "optimizer_step_counters"):
            if name in components:
                timeline.alloc(name, components[name])
        for key in sorted(plan.data):
            timeline.alloc(key, plan.sizes[key])
        for tensor, count in tensors.items():
            timeline.alloc(f"grad {tensor}", count * precision.gradients.bytes)
        timeline.mark("step start")
        for tensor in tensors:
            timeline.free(f"grad {tensor}")
        holders = _holders(plan)
        _forward(plan, timeline, holders)
        _backward(plan, timeline, holders, tensors)
        temporaries = _optimizer_temporaries(
            optimizer,
            self.implementation,
            [count * precision.optimizer_state.bytes for count in tensors.values()],
        )
        timeline.mark("optimizer step", temporaries)
        return timeline.moments


# -- planning ----------------------------------------------------------------------------
def _network(model: Model) -> Network:
    if isinstance(model, ModelCounts):
        raise UnsupportedError(
            "the autograd convention follows each layer's saved tensors, so it needs a "
            "memtheory Network, not ModelCounts (totals lose which tensors are shared). Build "
            "the Network from layers, or convert a PyTorch module with "
            "memtheory.torch.from_module."
        )
    if not isinstance(model, Network):
        raise UnsupportedError(
            f"expected a memtheory Network, got {type(model).__name__}. A PyTorch module "
            "converts with memtheory.torch.from_module."
        )
    if not getattr(network := model, "is_sequential", True):
        raise UnsupportedError(
            f"{network.name!r} has shortcuts or merges; the autograd convention follows "
            "sequential networks only (for now)."
        )
    for row in network.rows:
        if not isinstance(row.layer, _KNOWN_LAYERS):
            raise UnsupportedError(
                f"the autograd convention does not model {row.layer.label} (layer "
                f"{row.index} of {network.name!r}) yet; it knows Conv2d, Dense, Flatten, "
                "MaxPool2d, AvgPool2d, BatchNorm2d, Dropout, the element-wise activations, "
                "Softmax, LogSoftmax and CrossEntropyLoss."
            )
        if isinstance(row.layer, CrossEntropyLoss) and row is not network.rows[-1]:
            raise UnsupportedError(
                f"{row.layer.label} is layer {row.index} of {network.name!r}; a loss must be "
                "the last layer."
            )
    return network


def _parameter_tensors(network: Network) -> dict[str, sp.Expr]:
    """Elements of each parameter tensor, in ``module.parameters()`` order (weight, then bias)."""
    tensors: dict[str, sp.Expr] = {}
    for row in network.rows:
        if row.weights != 0:
            tensors[f"{row.name}.weight"] = row.weights
        if row.biases != 0:
            tensors[f"{row.name}.bias"] = row.biases
    return tensors


def _buffer_bytes(network: Network, precision: Precision) -> sp.Expr:
    return sp.Add(
        *(spec.nbytes(precision.parameters) for row in network.rows for spec in row.buffers)
    )


def _check_precision(precision: Precision) -> bool:
    """Return whether ``precision`` is autocast (else uniform); refuse what torch cannot run."""
    if precision.master_weights is not None:
        raise UnsupportedError(
            "torch.optim keeps no master copy of the weights: for the autograd convention use "
            "one dtype (precision='bf16', i.e. model.to(torch.bfloat16)) or "
            "memtheory.conventions.autograd.autocast_precision('bf16') (torch.autocast)."
        )
    if precision.gradients != precision.parameters or (
        precision.optimizer_state != precision.parameters
    ):
        raise UnsupportedError(
            "torch.optim keeps gradients and optimizer state in the parameters' dtype; got "
            f"{precision.describe()}."
        )
    if precision.activation_gradients != precision.activations:
        raise UnsupportedError(
            "autograd computes each activation's gradient in that activation's dtype; got "
            f"{precision.describe()}."
        )
    if precision.activations == precision.parameters:
        if precision.input != precision.parameters:
            raise UnsupportedError(
                f"the input batch must have the model's dtype; got {precision.describe()}."
            )
        return False
    if precision.input != precision.parameters or (
        precision.activations.bytes >= precision.parameters.bytes
    ):
        raise UnsupportedError(
            "activations narrower than the parameters mean torch.autocast: fp32 parameters and "
            f"input, low-precision activations (autocast_precision()); got {precision.describe()}."
        )
    return True


def _aliases(row: LayerRow, training: bool) -> bool:
    """Whether the layer's output is its input's storage (a view, in place, or a no-op)."""
    layer = row.layer
    if isinstance(layer, Dropout) and (layer.p == 0 or not training):
        return True
    return not layer.stores_output()


def _plan(network: Network, precision: Precision, *, training: bool) -> _Plan:
    autocast = _check_precision(precision)
    sizes: dict[str, sp.Expr] = {"input": elements(network.input_shape) * precision.input.bytes}
    dtypes: dict[str, DType] = {"input": precision.input}
    rows: list[_Row] = []
    loss: _Row | None = None
    requires_grad = False
    key = "input"
    for row in network.rows[1:]:
        if isinstance(row.layer, CrossEntropyLoss):
            if training:
                loss = _plan_loss(row, key, dtypes[key], requires_grad, autocast, sizes, dtypes)
                rows.append(loss)
            break
        entry = _plan_layer(
            row,
            key,
            requires_grad,
            autocast and isinstance(row.layer, _LOW_PRECISION_OPS),
            precision,
            training,
            sizes,
            dtypes,
        )
        rows.append(entry)
        requires_grad = requires_grad or row.parameters != 0
        key = entry.out_key
    held = {"input"}
    data = {"input"}
    if loss is not None:
        held |= {"targets", loss.in_key, loss.out_key}
        data.add("targets")
    elif training:
        sizes["loss"] = sp.Integer(dtypes[key].bytes)
        held |= {key, "loss"}
    else:
        held.add(key)
    return _Plan(precision, sizes, rows, loss, held, data)


def _plan_layer(
    row: LayerRow,
    in_key: str,
    requires_grad: bool,
    cast: bool,
    precision: Precision,
    training: bool,
    sizes: dict[str, sp.Expr],
    dtypes: dict[str, DType],
) -> _Row:
    layer = row.layer
    name = row.name
    records = training and (requires_grad or row.parameters != 0)
    low = precision.activations
    read_key, allocs, copies = in_key, {}, {}
    if cast:
        if dtypes[in_key] != low:
            read_key = f"{name}:input cast"
            allocs[read_key] = elements(row.input_shape) * low.bytes
            sizes[read_key], dtypes[read_key] = allocs[read_key], low
        for part, count in (("weight", row.weights), ("bias", row.biases)):
            if count != 0:
                copies[f"{name}:{part} copy"] = count * low.bytes
    out_dtype = low if cast else dtypes[in_key]
    if _aliases(row, training):
        out_key = read_key
    else:
        out_key = f"{name}:output"
        sizes[out_key], dtypes[out_key] = elements(row.output_shape) * out_dtype.bytes, out_dtype
    saved: set[str] = set()
    for position, spec in enumerate(row.saved):
        if spec.role == "input":
            saved.add(read_key)
        elif spec.role == "output":
            saved.add(out_key)
        elif spec.role == "target" or (spec.role == "statistics" and not training):
            continue  # the caller's targets; eval-mode batch norm computes no statistics
        elif not (isinstance(layer, Dropout) and out_key == read_key):
            own = f"{name}:{spec.role} {position}"
            allocs[own] = spec.nbytes(out_dtype)
            sizes[own] = allocs[own]
            saved.add(own)
    # A convolution keeps its weight; a linear layer only when its input needs a gradient.
    weight_copy = f"{name}:weight copy"
    if weight_copy in copies and (isinstance(layer, Conv2d) or requires_grad):
        saved.add(weight_copy)
    sizes.update(copies)
    return _Row(
        row=row,
        in_key=in_key,
        read_key=read_key,
        out_key=out_key,
        records=records,
        input_requires_grad=requires_grad,
        allocs=allocs,
        saved=saved if records else set(),
        in_dtype=dtypes[in_key],
        read_dtype=dtypes[read_key],
        out_dtype=out_dtype,
        copies=copies,
    )


def _plan_loss(
    row: LayerRow,
    in_key: str,
    in_dtype: DType,
    requires_grad: bool,
    autocast: bool,
    sizes: dict[str, sp.Expr],
    dtypes: dict[str, DType],
) -> _Row:
    """Cross-entropy: log-softmax (kept), then NLL (keeps the targets and a scalar total weight).

    Under CPU autocast cross-entropy runs in fp32: the logits are cast first, and
    the cast lives until the loss is computed.
    """
    name = row.name
    loss_dtype = dtype("fp32") if autocast else in_dtype
    logits = elements(row.input_shape)
    read_key = in_key
    allocs: dict[str, sp.Expr] = {}
    if loss_dtype != in_dtype:
        read_key = f"{name}:logits cast"
        allocs[read_key] = logits * loss_dtype.bytes
    allocs[f"{name}:log-probabilities"] = logits * loss_dtype.bytes
    allocs[f"{name}:total weight"] = sp.Integer(loss_dtype.bytes)
    out_key = f"{name}:output"
    sizes.update(allocs)
    sizes[out_key] = sp.Integer(loss_dtype.bytes)
    sizes["targets"] = row.input_shape[0] * dtype("int64").bytes
    for key in (*allocs, out_key):
        dtypes[key] = loss_dtype
    return _Row(
        row=row,
        in_key=in_key,
        read_key=read_key,
        out_key=out_key,
        records=requires_grad,
        input_requires_grad=requires_grad,
        allocs=allocs,
        saved={f"{name}:log-probabilities", f"{name}:total weight", "targets"},
        in_dtype=in_dtype,
        read_dtype=loss_dtype,
        out_dtype=loss_dtype,
    )


def _holders(plan: _Plan) -> dict[str, set[str]]:
    """Map each storage to the backward nodes (layer names) that keep it."""
    holders: dict[str, set[str]] = {}
    for entry in plan.rows:
        for key in entry.saved:
            holders.setdefault(key, set()).add(entry.row.name)
    return holders


def _saved_bytes(plan: _Plan) -> sp.Expr:
    keys = {key for entry in plan.rows for key in entry.saved}
    keys -= plan.data
    keys -= set(plan.weight_copies)
    return sp.Add(*(plan.sizes[key] for key in sorted(keys)))


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
    incoming = "seed gradient"
    for entry in reversed(plan.rows):
        if not entry.records:
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
        incoming = grad_read  # type: ignore[assignment]
        if grad_read is not None and entry.read_key != entry.in_key:
            incoming = f"grad {name}:input (cast back)"
            timeline.alloc(incoming, elements(entry.row.input_shape) * entry.in_dtype.bytes)
            timeline.mark(f"backward {name} input cast")
            timeline.free(grad_read)
        for tensor in casts:
            timeline.alloc(f"grad {tensor}", tensors[tensor] * precision.gradients.bytes)
            timeline.mark(f"backward {tensor} cast")
            timeline.free(f"grad {tensor} (low)")
        if incoming is None:
            break
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
    optimizer: Optimizer, implementation: str, tensor_bytes: Sequence[sp.Expr]
) -> sp.Expr:
    """Bytes of the temporaries alive at the optimizer step's own peak (weight decay 0)."""
    if optimizer.name in _SGD_FAMILY:
        if optimizer.name == "nesterov" and implementation == "for-loop":
            return sp.Max(*tensor_bytes)  # grad.add(buf, alpha=momentum), one tensor at a time
        return sp.Integer(0)
    if optimizer.name in _ADAM_FAMILY:
        if implementation == "fused":
            return sp.Integer(0)
        if implementation == "foreach":
            return sp.Add(*tensor_bytes)  # _foreach_sqrt(exp_avg_sqs): all at once
        # denom = (exp_avg_sq.sqrt() / c).add_(eps): sqrt and quotient of this tensor,
        # while the previous tensor's denom is still bound to the name
        previous = (sp.Integer(0), *tensor_bytes[:-1])
        return sp.Max(*(2 * b + p for b, p in zip(tensor_bytes, previous, strict=True)))
    raise UnsupportedError(
        f"the autograd convention models the step temporaries of SGD (plain, momentum, "
        f"Nesterov) and Adam/AdamW, not {optimizer.title}."
    )


def _temporaries_text(optimizer: Optimizer, implementation: str) -> str:
    if optimizer.name in _ADAM_FAMILY and implementation == "for-loop":
        return "sqrt and quotient of one parameter tensor, plus the previous tensor's denom"
    if optimizer.name in _ADAM_FAMILY and implementation == "foreach":
        return "the square roots of all second moments at once"
    if optimizer.name == "nesterov" and implementation == "for-loop":
        return "one gradient-sized temporary at a time"
    return "no temporaries"


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
