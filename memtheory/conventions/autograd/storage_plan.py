"""The storage plan of a step: which tensors each layer allocates, aliases and saves.

A layer's output is a new storage, or its input's storage again (a view such
as Flatten, an in-place layer, an identity dropout). Each layer saves the
tensors its derivative formula reads (:meth:`~memtheory.layers.Layer.saved_for_backward`);
the plan names every storage once, records its size and dtype, and which
backward nodes keep it, so that a tensor saved by two layers counts once.
Under :func:`autocast_precision` it adds the low-precision casts of inputs,
weights and biases that ``torch.autocast`` makes.

:func:`forward_storages` lists the plan storage by storage;
:class:`~memtheory.conventions.autograd.AutogradConvention` sums it and
:mod:`memtheory.conventions.autograd.timeline` runs it through a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from memtheory.conventions.base import Model
from memtheory.counts import ModelCounts
from memtheory.dtypes import DType, dtype
from memtheory.errors import UnsupportedError
from memtheory.layers.activations import _Elementwise
from memtheory.layers.base import elements
from memtheory.layers.conv import Conv2d
from memtheory.layers.core import Dense, Flatten, Input
from memtheory.layers.normalization import BatchNorm2d
from memtheory.layers.pooling import AvgPool2d, MaxPool2d
from memtheory.layers.regularization import Dropout
from memtheory.layers.softmax import CrossEntropyLoss, Softmax
from memtheory.network import LayerRow, Network
from memtheory.precision import Precision, PrecisionLike
from memtheory.precision import precision as precision_of

__all__ = ["ForwardStorage", "autocast_precision", "forward_storages"]

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
    return Precision.autocast(low)


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
    network: Network, *, precision: PrecisionLike = "fp32"
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
