"""Activation offload: the tensors saved for backward kept in host memory between the passes.

PyTorch's ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` is a pair of
saved-tensor hooks (``torch/autograd/graph.py``, PyTorch 2.13): the pack hook
copies every tensor a backward node saves into a new pinned host tensor
(``torch.empty(..., pin_memory=True)`` then ``copy_``), and the unpack hook
copies it back to its device (``tensor.to(device, non_blocking=True)``) when
the node's backward runs. A device tensor that only autograd kept is freed
in the forward pass; one that the forward still references (a layer's input,
the residual stream) stays until the forward lets it go. The same idea, with
more care for overlap, is torchtune's ``OffloadActivations``
(``torchtune/training/_activation_offloading.py``: it skips parameters,
buffers and tensors under 1,024 bytes, copies a storage saved twice only
once, and keeps up to 5 tensors alive for overlap), Transformer Engine's CPU
offloading and Megatron / NeMo's ``cpu_offloading`` (a number of transformer
layers whose activations go to the CPU in the forward and come back for the
backward; docs.nvidia.com/nemo, "CPU Offloading").

The model here is derived from the autograd convention's step (chapter 11),
not a new formula: at each moment of its timeline the saved activations
alive (:attr:`~memtheory.memory_breakdown.MemoryBreakdown.timeline_parts`)
are replaced by at most one **unit**'s working set, where a unit is one
repeated layer (``h.3.``, ``model.layers.3.``: the rows
:func:`~memtheory.techniques.checkpointing.repeated_layers` groups) or one row
outside them (the embeddings, the output projection, the loss), and its
working set is every saved storage that a row of the unit produces or keeps
(:func:`~memtheory.conventions.autograd.storage_plan.forward_storages`). So
the device holds a layer's working set instead of every layer's saved
tensors, an upper bound at the unit's granularity. The input batch and
targets a layer saves go to the host too (they are not parameters) while the
caller keeps them on the device, and come back as a copy in that layer's
backward. Autocast's weight copies are left on the device (the autocast cache
keeps them through the forward). The host holds the saved activations, the
saved input and targets, each storage once (torchtune's amount). So the
peak can rise where it sits in the first layer's backward, by the input's
copy. Not counted: PyTorch's plain ``save_on_cpu`` also packs the
parameters that nodes save (a ``Linear``'s weight in a bf16 or fp32 step:
host copies of those weights, and one layer's weights copied back to the
device in its backward) and packs a storage saved twice twice, so it needs
more host memory than this; torchtune keeps up to 5 tensors in a forward
stash for overlap (``max_fwd_stash_size=5``) and leaves tensors under
1,024 bytes on the device. Modelled, not measured: on CPU the host and the
device are the same memory.

Examples
--------
>>> from memtheory import Dense, Input, Network, ReLU, training_memory
>>> net = Network([Input((64,), batch=8), Dense(256), ReLU(), Dense(256), ReLU(), Dense(10)])
>>> step = training_memory(net, optimizer="adam", convention="autograd")
>>> moved = offload_activations(step, net)
>>> moved.host == step.components["saved_activations"] + step.components["input"]
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import sympy as sp

from memtheory.conventions.autograd.live_bytes import SumBuilder
from memtheory.conventions.autograd.storage_plan import forward_storages
from memtheory.errors import UnsupportedError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network

__all__ = ["OffloadedActivations", "offload_activations", "saved_data", "unit_working_sets"]

_REPEATED = re.compile(r"^((?:.*\.)?(?:layers|layer|h)\.\d+)\.")
"""A row of a repeated layer, and the layer's prefix: ``model.layers.3``, ``h.3``."""

NOTE = (
    "activation offload (torch.autograd.graph.save_on_cpu(pin_memory=True); torchtune's "
    "OffloadActivations, Megatron/NeMo's cpu_offloading): the saved activations go to host "
    "memory in the forward and come back for the backward, so the device holds at most one "
    "layer's working set of them at each moment (an upper bound at the layer's granularity; "
    "the saved input batch and targets come back as a copy in their layer's backward; "
    "autocast's weight copies stay on the device); host: each saved storage once, as "
    "torchtune's (save_on_cpu also copies the parameters nodes save and each save apart: "
    "more host, not counted; torchtune's 5-tensor forward stash not counted); modelled from "
    "the autograd convention's saved tensors, not measured (on CPU host and device are one "
    "memory)"
)


@dataclass(frozen=True)
class OffloadedActivations:
    """A step with its saved activations offloaded: the device's memory and the host's.

    Attributes
    ----------
    memory : MemoryBreakdown
        Per device: each moment's saved activations at most one unit's working set.
    host : sympy expression
        Host bytes for the offloaded tensors: the saved activations, and the
        input batch and targets that layers save, each storage once.
    working_set : sympy expression
        The largest unit's saved bytes: what the device can hold of them at once.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, ReLU, training_memory
    >>> net = Network([Input((8,), batch=2), Dense(4), ReLU(), Dense(3)])
    >>> moved = offload_activations(training_memory(net, optimizer="sgd", convention="autograd"),
    ...                             net)
    >>> moved.working_set, moved.host  # the ReLU output (2 x 4 fp32); it and the 2 x 8 input
    (32, 96)
    """

    memory: MemoryBreakdown
    host: sp.Expr
    working_set: sp.Expr


def _unit(name: str) -> str:
    match = _REPEATED.match(name)
    return match.group(1) if match else name


def unit_working_sets(network: Network, precision: object = "fp32") -> dict[str, sp.Expr]:
    """Return each unit's saved bytes: the storages a row of it produces or keeps for backward.

    A unit is a repeated layer (its rows share a prefix such as ``h.0``) or a row
    outside the repeated layers.

    Examples
    --------
    >>> from memtheory import Dense, Dropout, Input, Network, ReLU
    >>> net = Network([Input((8,), batch=2), Dense(4), ReLU(), Dropout(0.5, device="cpu"),
    ...                Dense(3)])
    >>> unit_working_sets(net)
    {'relu_1': 32, 'dropout_1': 64, 'dense_2': 32}
    """
    sets: dict[str, sp.Expr] = {}
    for storage in forward_storages(network, precision=precision):  # type: ignore[arg-type]
        if storage.category != "saved_activations":
            continue
        units = dict.fromkeys(_unit(layer) for layer in (storage.layer, *storage.kept_by))
        for unit in units:
            sets[unit] = sets.get(unit, sp.Integer(0)) + storage.nbytes
    return sets


def saved_data(network: Network, precision: object = "fp32") -> dict[str, sp.Expr]:
    """Return the input batch and targets each unit saves for backward, in bytes.

    The caller holds them anyway, so offloading them frees nothing on the
    device; but the hooks copy them to the host too (they are not
    parameters), and the unpack hook makes a device copy in the unit's backward.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, ReLU
    >>> saved_data(Network([Input((8,), batch=2), Dense(4), ReLU(), Dense(3)]))
    {'dense_1': 64}
    """
    data: dict[str, sp.Expr] = {}
    for storage in forward_storages(network, precision=precision):  # type: ignore[arg-type]
        if storage.category not in ("input", "targets"):
            continue
        for unit in dict.fromkeys(_unit(layer) for layer in storage.kept_by):
            data[unit] = data.get(unit, sp.Integer(0)) + storage.nbytes
    return data


def _data_once(network: Network, precision: object) -> sp.Expr:
    """Bytes of the input batch and targets that some layer saves, each storage once."""
    return sp.Add(*(storage.nbytes
                    for storage in forward_storages(network, precision=precision)  # type: ignore[arg-type]
                    if storage.category in ("input", "targets") and storage.kept_by))


def offload_activations(
    memory: MemoryBreakdown, network: Network, precision: object | None = None
) -> OffloadedActivations:
    """Return ``memory`` (the autograd convention's step) with its saved activations offloaded.

    Parameters
    ----------
    memory : MemoryBreakdown
        A training step that follows its timeline moment by moment (the
        autograd convention), for ``network``.
    network : Network
        The network as trained (LoRA applied).
    precision : Precision or str, optional
        Default the step's.

    Raises
    ------
    UnsupportedError
        For a step without a timeline of its saved activations (the breakdown convention).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, ReLU, training_memory
    >>> net = Network([Input((64,), batch=512), Dense(128), ReLU(), Dense(128), ReLU(),
    ...                Dense(128), ReLU(), Dense(10)])
    >>> step = training_memory(net, optimizer="sgd", convention="autograd")
    >>> offload_activations(step, net).memory.peak < step.peak
    True
    """
    if not memory.timeline_parts or "saved_activations" not in memory.components:
        raise UnsupportedError(
            "activation offload is derived from the autograd convention's saved tensors, moment "
            f"by moment; this step uses the {memory.convention} convention, which does not "
            "follow them. Drop the option that needs it (checkpointing, QLoRA, an 8-bit "
            "optimizer, mixed-* precision, --convention breakdown) or drop the offload."
        )
    chosen = precision or memory.precision
    sets = unit_working_sets(network, chosen)
    data = saved_data(network, chosen)
    working = sp.Max(*sets.values()) if sets else sp.Integer(0)
    timeline = {}
    parts = {}
    builder, one = SumBuilder(), sp.S.One  # value - saved + kept + copied, without a flatten
    for moment, value in memory.timeline.items():
        alive = memory.timeline_parts.get(moment, {})
        saved = sp.sympify(alive.get("saved_activations", 0))
        kept = sp.Min(saved, working)
        phase, _, rest = moment.partition(" ")
        copied = data.get(_unit(rest.split(" ")[0]), 0) if phase == "backward" else 0
        timeline[moment] = builder.add_scaled(
            [(one, value), (-one, saved), (one, kept), (one, sp.sympify(copied))])
        parts[moment] = {**alive, "saved_activations": kept} if "saved_activations" in alive \
            else dict(alive)
    saved_total = sp.sympify(memory.components["saved_activations"])
    host = saved_total + _data_once(network, chosen)
    components = {**memory.components,
                  "saved_activations": sp.Min(saved_total, working)}
    moved = replace(memory, components=components, timeline=timeline, timeline_parts=parts,
                    notes=(*memory.notes, NOTE))
    return OffloadedActivations(moved, host, working)
