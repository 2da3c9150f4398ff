"""The storage plan of a step: which tensors each layer allocates, aliases and saves.

A layer's output is a new storage, or its input's storage again (a view such
as Flatten, an in-place layer, an identity dropout). Each layer states what
it saves, aliases and casts (:meth:`~memtheory.layers.Layer.autograd`);
the plan names every storage once, records its size and dtype, and which
backward nodes keep it, so that a tensor saved by two layers counts once.
Under :func:`autocast_precision` it adds the low-precision casts of inputs,
weights and biases that ``torch.autocast`` makes.

:func:`forward_storages` lists the plan storage by storage;
:class:`~memtheory.conventions.autograd.AutogradConvention` sums it and
:mod:`memtheory.conventions.autograd.timeline` runs it through a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy as sp

from memtheory.conventions.autograd.kernels import autograd_of
from memtheory.conventions.base import Model
from memtheory.counts import ModelCounts
from memtheory.dtypes import DType, dtype
from memtheory.errors import UnsupportedError
from memtheory.layers.base import Autograd, TensorSpec, elements
from memtheory.network import LayerRow, Network
from memtheory.precision import Precision, PrecisionLike
from memtheory.precision import precision as precision_of

__all__ = [
    "ForwardStorage",
    "PlannedRow",
    "StepPlan",
    "autocast_precision",
    "buffer_bytes",
    "checked_network",
    "forward_storages",
    "holders_of",
    "parameter_tensors",
    "registered_tensors",
    "row_parameters",
    "saved_bytes",
    "step_plan",
]
"""The first three are public; the rest is the package's own interface, which
:mod:`~memtheory.conventions.autograd.timeline` and
:mod:`~memtheory.conventions.autograd.convention` read."""


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
    plan = step_plan(checked_network(network), precision_of(precision), training=True)
    holders = holders_of(plan)
    order = {entry.row.name: i for i, entry in enumerate(plan.rows)}
    keys = list(dict.fromkeys(["input", *sorted(plan.data), *_forward_keys(plan)]))
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
        layers = {layer for layer, _ in holders.get(key, ())}
        kept = tuple(sorted(layers, key=order.__getitem__))
        storages.append(ForwardStorage(layer, role, plan.sizes[key], kept, key in plan.held))
    return tuple(storages)


def _forward_keys(plan: StepPlan) -> list[str]:
    keys: list[str] = []
    for entry in plan.rows:
        keys += [*entry.allocs, *entry.copies, entry.out_key]
    return keys


@dataclass
class PlannedRow:
    """What the simulation needs to know about one layer of the step.

    ``in_keys`` are the storages the layer receives (its inputs' outputs);
    ``read_keys`` the ones it computes from: the same, or under autocast casts
    of them. ``allocs`` are the storages it allocates in the forward besides
    its output (casts, pooling indices, dropout masks, batch statistics, a
    loss's intermediates); ``copies`` autocast's parameter casts.
    ``stage_saved`` lists, per backward node of the layer (in creation order),
    the storages that node keeps; ``own_copies`` those of ``allocs`` that are
    a weight's low-precision cast made by the layer itself (role ``"weight copy"``).
    """

    row: LayerRow
    spec: Autograd
    in_keys: tuple[str, ...]
    read_keys: tuple[str, ...]
    out_key: str
    records: bool
    needs_grad: tuple[bool, ...]
    allocs: dict[str, sp.Expr]
    stage_saved: list[set[str]]
    in_dtypes: tuple[DType, ...]
    read_dtype: DType
    out_dtype: DType
    is_loss: bool = False
    copies: dict[str, sp.Expr] = field(default_factory=dict)
    tied: tuple[str, sp.Expr] | None = None
    copy_keys: dict[str, str] = field(default_factory=dict)
    own_copies: dict[str, sp.Expr] = field(default_factory=dict)

    @property
    def saved(self) -> set[str]:
        """Every storage a backward node of this layer keeps."""
        return set().union(*self.stage_saved) if self.stage_saved else set()

    @property
    def input_requires_grad(self) -> bool:
        """Whether any input needs a gradient."""
        return any(self.needs_grad)


@dataclass
class StepPlan:
    """The storages of a step: their sizes, which nodes keep them, and what the caller holds."""

    precision: Precision
    sizes: dict[str, sp.Expr]
    rows: list[PlannedRow]
    loss: PlannedRow | None
    held: set[str]
    data: set[str]
    calls: tuple[tuple[str, str], ...] = ()

    @property
    def weight_copies(self) -> dict[str, sp.Expr]:
        """Autocast's low-precision weight copies that a backward node keeps.

        Its cached casts of the parameters, and the casts a layer makes of a
        weight itself (role ``"weight copy"``: a frozen weight's).
        """
        return {
            key: nbytes
            for entry in self.rows
            for key, nbytes in (*entry.copies.items(), *entry.own_copies.items())
            if key in entry.saved
        }


# -- planning ----------------------------------------------------------------------------
def checked_network(model: Model) -> Network:
    """Return ``model`` if the convention can follow it: a Network of checked layers, loss last."""
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
    for row in model.rows[1:]:
        if not row.layer.autograd_checked:
            reason = row.layer.autograd_refusal or (
                "its autograd behaviour (saved tensors, aliasing, autocast) has not been "
                "checked against PyTorch. Layers it models say so with autograd_checked = True."
            )
            raise UnsupportedError(
                f"the autograd convention does not model {row.layer.label} (layer "
                f"{row.index} of {model.name!r}) yet: {reason}"
            )
    for row in model.rows[1:-1]:
        if _is_loss(row):
            raise UnsupportedError(
                f"{row.layer.label} is layer {row.index} of {model.name!r}; a loss must be "
                "the last layer."
            )
    return model


def _is_loss(row: LayerRow) -> bool:
    """Return whether the row is a loss: it ends the network with a scalar."""
    return row.index > 0 and len(row.output_shape) == 0


def _tied(network: Network, row: LayerRow, spec: Autograd) -> tuple[str, sp.Expr] | None:
    """Return the parameter a layer reads from another (a tied projection), and its elements.

    The layer names it in :attr:`~memtheory.layers.base.Autograd.reads_parameter`
    (GPT-2's ``lm_head`` and BERT's decoder read the token embedding's matrix):
    the owner is the layer of that kind whose parameter has that many rows.
    """
    wanted = spec.reads_parameter
    if wanted is None:
        return None
    for other in network.rows:
        if other.layer.kind != wanted.kind or other is row:
            continue
        for part, shape in other.layer.parameter_shapes(other.input_shape):
            if part == wanted.parameter and shape and shape[0] == wanted.rows:
                return f"{other.name}.{part}", elements(shape)
    raise UnsupportedError(
        f"{row.layer.label} reads the {wanted.parameter} of a {wanted.kind} with "
        f"{wanted.rows} rows (it is tied), but {network.name!r} has none; add that layer or "
        "untie it (tied=False)."
    )


def row_parameters(row: LayerRow) -> list[tuple[str, sp.Expr]]:
    """Return the row's parameter tensors, ``(name, elements)``, in registration order.

    As the layer's :meth:`~memtheory.layers.Layer.parameter_shapes` names them
    (``"attn.in_proj_weight"``), or ``weight`` and ``bias`` for a layer that
    does not state its shapes.
    """
    try:
        shapes = row.layer.parameter_shapes(row.input_shape)
    except UnsupportedError:
        counts = (("weight", row.weights), ("bias", row.biases))
        return [(f"{row.name}.{part}", count) for part, count in counts if count != 0]
    return [(f"{row.name}.{part}", elements(shape)) for part, shape in shapes]


def parameter_tensors(network: Network) -> dict[str, sp.Expr]:
    """Elements of each parameter tensor, in the order the layers run."""
    return {name: count for row in network.rows for name, count in row_parameters(row)}


def registered_tensors(network: Network) -> dict[str, sp.Expr]:
    """Elements of each parameter tensor, in ``module.parameters()`` order.

    The order the network's :attr:`~memtheory.network.Network.parameter_order`
    gives (Phi-3: ``o_proj`` before ``qkv_proj``, the norms after the MLP),
    else the order the layers run. torch.optim's for-loop step visits the
    parameters in this order.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> net = Network([Input((4,)), Dense(3, name="a"), Dense(2, name="b")],
    ...               parameter_order=["b", "a"])
    >>> registered_tensors(net)
    {'b.weight': 6, 'b.bias': 2, 'a.weight': 12, 'a.bias': 3}
    """
    return {name: count for row in network.registered_rows for name, count in row_parameters(row)}


def buffer_bytes(network: Network, precision: Precision) -> sp.Expr:
    """Bytes of the network's registered buffers, in the parameters' dtype."""
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


def _spec(
    row: LayerRow, training: bool, input_dtype: DType, autocast: DType | None
) -> Autograd:
    shapes = row.input_shapes or (row.input_shape,)
    return autograd_of(
        row.layer, tuple(shapes), training=training, input_dtype=input_dtype, autocast=autocast
    )


def step_plan(
    network: Network, precision: Precision, *, training: bool, keeps_logits: bool = True
) -> StepPlan:
    """Plan every storage of a training step (or of inference): sizes, keepers, what is held."""
    autocast = _check_precision(precision)
    first = network.rows[0].name
    ids = any(
        first in row.inputs and _spec(row, training, precision.input, None).reads_ids
        for row in network.rows[1:]
    )
    fed = dtype("int64") if ids else precision.input  # token ids, or the input batch
    sizes: dict[str, sp.Expr] = {"input": elements(network.input_shape) * fed.bytes}
    dtypes: dict[str, DType] = {"input": fed}
    storage_of: dict[str, str] = {network.rows[0].name: "input"}
    requires_grad: dict[str, bool] = {network.rows[0].name: False}
    rows: list[PlannedRow] = []
    loss: PlannedRow | None = None
    for row in network.rows[1:]:
        is_loss = _is_loss(row)
        if is_loss and not training:
            break
        needs = tuple(requires_grad[name] for name in row.inputs)
        entry = _plan_layer(
            row,
            tuple(storage_of[name] for name in row.inputs),
            needs,
            autocast,
            precision,
            training,
            sizes,
            dtypes,
            network,
        )
        entry.is_loss = is_loss
        rows.append(entry)
        storage_of[row.name] = entry.out_key
        # an identity (no node) hands its input on, and whether that needs a gradient
        requires_grad[row.name] = entry.records or (not entry.spec.records and any(needs))
        if is_loss:
            loss = entry
    last = rows[-1].out_key if rows else "input"
    held = {"input"}
    data = {"input"}
    if loss is not None:
        # A loop that keeps the model's output (``out = model(x)``; ``loss(out, y)``) holds
        # the logits through backward; one that keeps only the loss (the Trainer) does not.
        held |= {"targets", loss.out_key}
        if keeps_logits:
            held |= set(loss.in_keys)
        data.add("targets")
    elif training:
        sizes["loss"] = sp.Integer(dtypes[last].bytes)
        held |= {last, "loss"}
    else:
        held.add(last)
    return StepPlan(precision, sizes, rows, loss, held, data, network.calls)


def _plan_layer(
    row: LayerRow,
    in_keys: tuple[str, ...],
    needs_grad: tuple[bool, ...],
    autocast: bool,
    precision: Precision,
    training: bool,
    sizes: dict[str, sp.Expr],
    dtypes: dict[str, DType],
    network: Network,
) -> PlannedRow:
    in_dtypes = tuple(dtypes[key] for key in in_keys)
    spec = _mode_spec(row, _spec(row, training, in_dtypes[0],
                                 precision.activations if autocast else None), training)
    tied = _tied(network, row, spec)
    name = row.name
    records = training and spec.records and (any(needs_grad) or row.parameters != 0)
    if records and spec.without_input_gradient and not any(needs_grad):
        raise UnsupportedError(
            f"the autograd convention does not model {row.layer.label} (layer {row.index}) "
            f"here: {spec.without_input_gradient}"
        )
    compute = _compute_dtype(spec, in_dtypes, precision, autocast)
    allocs: dict[str, sp.Expr] = {}
    read_keys = _read_keys(row, spec, in_keys, compute, sizes, dtypes, allocs)
    copy_keys: dict[str, str] = {}
    copies: dict[str, sp.Expr] = {}
    if autocast and spec.autocast == "low":
        copy_keys = _copy_keys(row, spec, tied)
        for parameter, count in _cast_tensors(row, tied):
            copies[copy_keys[parameter]] = count * compute.bytes
    out_key = _output_key(row, spec, read_keys, compute, sizes, dtypes)
    saved_keys: list[str | None] = []
    for position, tensor in enumerate(spec.saved):
        saved_keys.append(
            _saved_key(row, spec, position, tensor, read_keys, out_key, compute, precision,
                       allocs, saved_keys)
        )
    for position, tensor in enumerate(spec.transients):
        allocs[f"{name}:{tensor.label or 'transient'} {position}"] = tensor.nbytes(compute)
    for key, nbytes in allocs.items():
        sizes[key] = nbytes
        dtypes.setdefault(key, compute)
    if spec.target is not None:
        sizes["targets"] = spec.target.nbytes(precision.input)
    stage_saved = [
        {k for k in (saved_keys[i] for i in kept) if k is not None}
        for kept in spec.kept(tuple(needs_grad) if needs_grad else False)
    ]
    if spec.weight_copy == "always" or (
        spec.weight_copy == "if the input needs a gradient" and any(needs_grad)
    ):
        _keep_weight_copies(spec, name, copy_keys, stage_saved)
    sizes.update(copies)
    return PlannedRow(
        row=row,
        spec=spec,
        in_keys=in_keys,
        read_keys=tuple(read_keys),
        out_key=out_key,
        records=records,
        needs_grad=needs_grad if records else tuple(False for _ in needs_grad),
        allocs=allocs,
        stage_saved=stage_saved if records else [set() for _ in stage_saved],
        in_dtypes=in_dtypes,
        read_dtype=compute,
        out_dtype=compute,
        copies=copies,
        tied=tied,
        copy_keys=copy_keys,
        own_copies={key: allocs[key] for key, tensor in zip(saved_keys, spec.saved, strict=True)
                    if tensor.role == "weight copy" and key in allocs},
    )


def _mode_spec(row: LayerRow, spec: Autograd, training: bool) -> Autograd:
    """Return the spec for the mode: in eval under no_grad, what it allocates instead."""
    if training:
        return spec
    if spec.inference_refusal:
        raise UnsupportedError(
            f"the autograd convention does not model the inference peak of {row.layer.label} "
            f"(layer {row.index}) here: {spec.inference_refusal}"
        )
    if spec.no_grad is not None:
        return replace(spec, saved=(), stages=(), transients=spec.no_grad)
    return spec


def _compute_dtype(
    spec: Autograd, in_dtypes: tuple[DType, ...], precision: Precision, autocast: bool
) -> DType:
    """Return the dtype the layer computes in: its input's, autocast's choice, or its own."""
    compute = in_dtypes[0]
    if autocast:
        compute = {"low": precision.activations, "fp32": dtype("fp32")}.get(
            spec.autocast, in_dtypes[0]
        )
    if spec.autocast == "parameters":
        compute = precision.parameters
    if autocast and spec.autocast == "promote":
        compute = max((*in_dtypes, precision.parameters), key=lambda kind: kind.bytes)
    if spec.compute_dtype is not None:
        compute = spec.compute_dtype
    if spec.promotes:  # type promotion inside the kernel: the widest input, no casts
        compute = max(in_dtypes, key=lambda kind: kind.bytes)
    return compute


def _read_keys(
    row: LayerRow,
    spec: Autograd,
    in_keys: tuple[str, ...],
    compute: DType,
    sizes: dict[str, sp.Expr],
    dtypes: dict[str, DType],
    allocs: dict[str, sp.Expr],
) -> list[str]:
    """Return the storages the layer computes from: its inputs, or autocast's casts of them."""
    shapes = row.input_shapes or (row.input_shape,)
    read_keys = []
    for index, (key, shape) in enumerate(zip(in_keys, shapes, strict=True)):
        if dtypes[key] == compute or spec.reads_ids or not spec.casts_inputs or spec.promotes:
            read_keys.append(key)
            continue
        cast = f"{row.name}:input cast" + (f" {index}" if index else "")
        if (spec.autocast == "fp32" or spec.compute_dtype is not None) and row.output_shape == ():
            cast = f"{row.name}:logits cast"
        allocs[cast] = elements(shape) * compute.bytes
        sizes[cast], dtypes[cast] = allocs[cast], compute
        read_keys.append(cast)
    return read_keys


def _output_key(
    row: LayerRow,
    spec: Autograd,
    read_keys: list[str],
    compute: DType,
    sizes: dict[str, sp.Expr],
    dtypes: dict[str, DType],
) -> str:
    """Return the layer's output storage: its first input's (a view), or a new one."""
    if spec.aliases_input:
        return read_keys[0]
    out_key = f"{row.name}:output"
    count = spec.output_elements
    sizes[out_key] = (count if count is not None else elements(row.output_shape)) * compute.bytes
    dtypes[out_key] = compute
    return out_key


def _cast_tensors(row: LayerRow, tied: tuple[str, sp.Expr] | None) -> list[tuple[str, sp.Expr]]:
    """Return the parameter tensors autocast casts for the row, the tied matrix first."""
    tensors = [(tensor, count) for tensor, count in row_parameters(row) if count != 0]
    return [tied, *tensors] if tied is not None else tensors


def _copy_keys(row: LayerRow, spec: Autograd, tied: tuple[str, sp.Expr] | None) -> dict[str, str]:
    """Name the storage of autocast's cast of each parameter tensor of the row.

    One weight and one bias: ``"dense_1:weight copy"`` and ``"dense_1:bias
    copy"``; a layer with more (attention's two projections) names each after
    its tensor (``"attn:in_proj_weight copy"``), since its backward nodes
    release them at different moments.
    """
    tensors = [tensor for tensor, _ in _cast_tensors(row, tied)]
    parts = [_part(tensor) for tensor in tensors]
    single = len(parts) == len(set(parts))
    return {
        tensor: f"{row.name}:{part if single else tensor.removeprefix(row.name + '.')} copy"
        for tensor, part in zip(tensors, parts, strict=True)
    }


def _part(tensor: str) -> str:
    """``"bias"`` for a bias tensor, else ``"weight"``."""
    return "bias" if tensor.endswith("bias") else "weight"


def _keep_weight_copies(
    spec: Autograd, name: str, copy_keys: dict[str, str], stage_saved: list[set[str]]
) -> None:
    """Add autocast's weight copies (not the biases') to the stages that keep them.

    A stage that makes a parameter's gradient keeps that parameter's copy; the
    copies of parameters no stage claims are kept by the layer's last stage.
    """
    stages = spec.stage_list()
    claimed: dict[str, int] = {}
    for number, stage in enumerate(stages):
        for part in stage.parameters or ():
            claimed[f"{name}.{part}"] = number
    for tensor, key in copy_keys.items():
        if _part(tensor) == "weight":
            stage_saved[claimed.get(tensor, len(stages) - 1)].add(key)


def _saved_key(
    row: LayerRow,
    spec: Autograd,
    position: int,
    tensor: TensorSpec,
    read_keys: list[str],
    out_key: str,
    compute: DType,
    precision: Precision,
    allocs: dict[str, sp.Expr],
    earlier: list[str | None],
) -> str | None:
    """Return the storage a saved tensor is: an input, the output, targets, a view, its own."""
    if tensor.view_of is not None:
        return earlier[tensor.view_of]
    if tensor.role == "input":
        return read_keys[tensor.operand]
    if tensor.role == "output":
        return out_key
    if tensor.role == "target":
        return "targets"
    if tensor.role == "buffer":
        return None  # the layer's buffers are counted as buffers
    own = f"{row.name}:{tensor.label or tensor.role} {position}"
    default = precision.parameters if position in spec.parameter_dtype else compute
    allocs[own] = tensor.nbytes(default)
    return own


def holders_of(plan: StepPlan) -> dict[str, set[tuple[str, int]]]:
    """Map each storage to the backward nodes (layer name, stage) that keep it."""
    holders: dict[str, set[tuple[str, int]]] = {}
    for entry in plan.rows:
        for stage, keys in enumerate(entry.stage_saved):
            for key in keys:
                holders.setdefault(key, set()).add((entry.row.name, stage))
    return holders


def saved_bytes(plan: StepPlan) -> sp.Expr:
    """Bytes of the storages backward nodes keep, each once (data and weight copies apart)."""
    keys = {key for entry in plan.rows for key in entry.saved}
    keys -= plan.data
    keys -= set(plan.weight_copies)
    return sp.Add(*(plan.sizes[key] for key in sorted(keys)))
