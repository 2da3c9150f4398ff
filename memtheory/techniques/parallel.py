r"""Memory per device when training runs on several GPUs: data, ZeRO/FSDP, tensor, pipeline.

:func:`parallel_memory` takes the memory of one training step of the whole
model for one micro-batch (any :class:`~memtheory.memory_breakdown.MemoryBreakdown`,
from any convention, fine-tuning included) and returns what one device holds:

* **Data parallel** over :math:`N_d` devices: each keeps a full replica and its
  own micro-batch. PyTorch's ``DistributedDataParallel`` also allocates
  gradient buckets for the all-reduce, as large as all the gradients together
  (``bucket_cap_mb``, default 25 MiB: PyTorch multiplies it by 1024 x 1024;
  it only sets how they are split); with
  ``gradient_as_bucket_view=True`` the gradients live in the buckets and that
  copy disappears ("the saved memory size will be equal to the total gradients
  size", torch.nn.parallel.DistributedDataParallel documentation).
* **ZeRO stage 1, 2, 3** (DeepSpeed; FSDP's ``SHARD_GRAD_OP`` is stage 2 and
  ``FULL_SHARD`` stage 3) divide the optimizer state, then the gradients, then
  the parameters by :math:`N_d` (:func:`~memtheory.techniques.zero.zero_partition`).
  Stages 1 and 2 reduce gradients through a bucket of ``reduce_bucket_size``
  elements (DeepSpeed's default :math:`5 \cdot 10^8`); stage 3 gathers each
  layer's full parameters while it runs: the largest layer's, once. A step
  with a master copy (DeepSpeed's bf16 mode, ``precision="mixed-bf16"``)
  followed moment by moment keeps, under stage 3, the rank's partition of
  every gradient through the whole step and a reduce bucket of
  ``reduce_bucket_size`` elements (DeepSpeed 0.19.6 ``stage3.py:731-744``).
* **CPU offload** (ZeRO-Offload, :func:`~memtheory.techniques.offload.cpu_offload`)
  moves gradients, master weights and optimizer state to host RAM
  (``offload="optimizer"``), and with ZeRO-3 the parameters too
  (``"optimizer+parameters"``); :attr:`ParallelMemory.host` is what each
  device's process keeps in host RAM, :meth:`ParallelMemory.host_per_node` the
  node's total.
* **Tensor parallel** over :math:`t` devices (Megatron-LM), with or without
  **sequence parallelism**. GPT-style networks: every model state is divided
  by :math:`t`, and the whole network's activations are scaled by one layer's
  ratio as Korthikanti et al. 2022 derive it
  (:func:`~memtheory.transformer_activations.activation_bytes`; embeddings and
  logits included, an approximation). Llama-style decoders
  (:mod:`~memtheory.techniques.tensor_parallel`): tensor by tensor, the
  weights, gradients and optimizer state by which matrices are split (norms
  replicated, key/value heads replicated when :math:`t` exceeds them), and
  the activations by which kept storages are split.
* **Pipeline parallel** over :math:`p` stages: each stage holds :math:`1/p` of
  the layers' model states (even split assumed) and, under the 1F1B schedule
  (Narayanan et al. 2021), stage :math:`i` (from 0) keeps the activations of
  up to :math:`p - i` micro-batches in flight: stage 0 holds the most, as much
  as the whole model for one micro-batch (Korthikanti et al. 2022, Section 4.2.3).

Under data parallelism and ZeRO, where every device runs a whole replica's
forward and backward, a step followed moment by moment (the exact
convention's timeline) is split moment by moment (:func:`device_timeline`):
each device's peak is the largest moment of one replica's step with every
component at the device's share, the gradients and kept activations as alive
at that moment, the activation gradients and temporaries one replica's. With
one device it is the unsplit step's peak, to the byte. Under tensor or
pipeline parallelism a step followed moment by moment gives an **estimate**
of the device's peak: the sum of its components, with ``activation_gradients``
one replica's working memory (the activation gradients and temporaries at
its largest moment, beyond every component) at the device's share of the
kept activations, counted on every stage; the all-reduces are taken as in
place. It is not proven a bound. :func:`~memtheory.techniques.megatron_device_peak`
gives the same estimate layer by layer from Korthikanti et al. 2022 and
Narayanan et al. 2021. Without a timeline (the breakdown convention, whose
``activation_gradients`` are its own), the per-device figure is the sum of
the components.

Examples
--------
>>> from memtheory import ModelCounts, training_memory
>>> counts = ModelCounts(parameters=7_500_000_000, activations=0, input_elements=0)
>>> memory = training_memory(counts, optimizer="adam", precision="mixed-fp16")
>>> zero1 = parallel_memory(memory, data=64, zero=1)
>>> zero1.format("GB", name="gradient_buckets"), zero1.format("GB", digits=1)
('1.00 GB', '32.4 GB')
>>> # the ZeRO paper's Figure 1 counts model states alone: 31.4 GB
>>> parallel_memory(memory, data=64, zero=1, reduce_bucket_size=0).format("GB", digits=1)
'31.4 GB'
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import sympy as sp

from memtheory.conventions.autograd.live_bytes import (
    Parts,
    Shift,
    moved,
    part_value,
)
from memtheory.errors import InvalidArgumentError
from memtheory.footprint import Footprint
from memtheory.max_pruning import maximum
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.techniques.offload import OFFLOADED, cpu_offload
from memtheory.techniques.tensor_share import (
    ACTIVATION_COMPONENTS,
    MODEL_STATES,
    TensorShare,
    tensor_parallel_activation_ratio,
)
from memtheory.techniques.zero import zero_partition

__all__ = [
    "DDP_BUCKET_CAP_MB",
    "REDUCE_BUCKET_SIZE",
    "Offload",
    "ParallelMemory",
    "device_timeline",
    "parallel_memory",
    "tensor_parallel_activation_ratio",
]

DDP_BUCKET_CAP_MB = 25
"""``DistributedDataParallel(bucket_cap_mb=25)``: PyTorch's default bucket size, in MiB.

PyTorch's ``distributed.py`` multiplies it by 1024 x 1024: 26,214,400 bytes.
"""

REDUCE_BUCKET_SIZE = 500_000_000
"""DeepSpeed's ``zero_optimization.reduce_bucket_size`` default, in elements."""

Offload = Literal["none", "optimizer", "optimizer+parameters"]



@dataclass(frozen=True)
class ParallelMemory(Footprint):
    """What one device holds (the busiest pipeline stage), every stage, and host RAM.

    Attributes
    ----------
    stages : tuple of MemoryBreakdown
        Per pipeline stage, per device; one entry without pipeline parallelism.
    host : MemoryBreakdown or None
        Host RAM each device's process keeps for CPU offload; None without offload.
    devices : int
        Devices in all (data x tensor x pipeline).
    gpus_per_node : int
    notes : tuple of str

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts(parameters=10**9, activations=0, input_elements=0)
    >>> memory = training_memory(counts, optimizer="adam", precision="mixed-bf16")
    >>> split = parallel_memory(memory, data=2, pipeline=4, zero=1)
    >>> split.devices, len(split.stages), split.host
    (8, 4, None)
    >>> split.format("GB")  # the busiest stage, per device
    '3.00 GB'
    """

    stages: tuple[MemoryBreakdown, ...]
    host: MemoryBreakdown | None
    devices: int
    gpus_per_node: int
    notes: tuple[str, ...] = field(default=())

    @property
    def device(self) -> MemoryBreakdown:
        """The first stage: under 1F1B it holds the most activations."""
        return self.stages[0]

    @property
    def components(self) -> Mapping[str, sp.Expr]:
        """Bytes per component on the busiest device."""
        return self.device.components

    @property
    def timeline(self) -> Mapping[str, sp.Expr]:  # type: ignore[override]
        """The busiest device's timeline (:func:`device_timeline`); empty without one."""
        return self.device.timeline

    def host_per_node(self) -> sp.Expr:
        """Host RAM of one node: each of its devices' offloaded state (pinned)."""
        return 0 if self.host is None else self.host.total * self.gpus_per_node

    def evaluate(self, **values: object) -> ParallelMemory:
        """Substitute values by symbol name into every stage and the host part."""
        stages = tuple(stage.evaluate(**_known(stage, values)) for stage in self.stages)
        host = None if self.host is None else self.host.evaluate(**_known(self.host, values))
        return replace(self, stages=stages, host=host)


def _known(memory: MemoryBreakdown, values: Mapping[str, object]) -> dict[str, object]:
    names = {s.name for s in memory.free_symbols} | {
        s.name for c in memory.constraints.values() for s in sp.sympify(c).free_symbols
    }
    return {k: v for k, v in values.items() if k in names}


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive whole number, got {value!r}.")
    return value


def parallel_memory(
    memory: MemoryBreakdown,
    *,
    data: int = 1,
    zero: int = 0,
    tensor: int = 1,
    pipeline: int = 1,
    micro_batches: int | None = None,
    sequence_parallel: bool = False,
    offload: Offload = "none",
    network: Network | None = None,
    bucket_view: bool = False,
    reduce_bucket_size: int = REDUCE_BUCKET_SIZE,
    gpus_per_node: int | None = None,
    autocast_copies: bool = True,
    shards: Mapping[str, sp.Expr] | None = None,
) -> ParallelMemory:
    """Return the memory of one device when ``memory`` (one replica) is split across devices.

    Parameters
    ----------
    memory : MemoryBreakdown
        One training step of the whole model for one micro-batch.
    data : int, default 1
        Data-parallel devices :math:`N_d`.
    zero : {0, 1, 2, 3}, default 0
        ZeRO stage (0: plain DDP).
    tensor : int, default 1
        Tensor-parallel devices :math:`t` (needs ``network``, a transformer).
    pipeline : int, default 1
        Pipeline stages :math:`p`.
    micro_batches : int, optional
        Micro-batches per step; the in-flight count is at most this (default :math:`p`).
    sequence_parallel : bool, default False
        Megatron's sequence parallelism over the tensor-parallel devices.
    offload : {"none", "optimizer", "optimizer+parameters"}, default "none"
    network : Network, optional
        The model: for tensor parallelism's activation split and ZeRO-3's gathered layer.
    bucket_view : bool, default False
        DDP's ``gradient_as_bucket_view``: no separate bucket copy.
    reduce_bucket_size : int, default :data:`REDUCE_BUCKET_SIZE`
        ZeRO-1/2's gradient reduction bucket, in elements.
    gpus_per_node : int, optional
        For :meth:`ParallelMemory.host_per_node`; defaults to the devices, at most 8.
    autocast_copies : bool, default True
        Under ZeRO-3, whether ``torch.autocast`` keeps 16-bit copies of the
        gathered weights (``weight_copies``), as it does for FSDP with autocast
        over fp32 weights. ``False`` when the weights are gathered already in
        16 bits and freed after their layer (DeepSpeed bf16, accelerate's FSDP
        ``MixedPrecision(param_dtype=bfloat16)``): no copies are kept, the
        gathered layer is counted once. Ignored below stage 3.
    shards : mapping of str to bytes, optional
        Per-device model states that replace ZeRO's even split of those
        components (FSDP2's padded shards and whole step counters,
        :func:`~memtheory.techniques.fsdp2.fsdp2_shards`); without pipeline
        or tensor parallelism only.

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=10**9, activations=10**8, input_elements=10)
    >>> memory = training_memory(counts, optimizer="adam", precision="mixed-bf16")
    >>> ddp = parallel_memory(memory, data=8).evaluate(B=1)
    >>> ddp.format("GB", name="gradient_buckets"), ddp.format("GB")
    ('2.00 GB', '18.40 GB')
    >>> z3 = parallel_memory(memory, data=8, zero=3, offload="optimizer+parameters")
    >>> z3.evaluate(B=1).format("GB"), z3.host.format("GB")
    ('0.40 GB', '2.00 GB')

    Autocast over fp32 weights keeps a 16-bit copy of every weight it casts;
    gathered already in 16 bits, ZeRO-3 keeps none:

    >>> from memtheory import Dense, Input, Network
    >>> net = Network([Input((1024,)), Dense(1024, name="fc"), Dense(10, name="out")])
    >>> autocast = training_memory(
    ...     net, optimizer="adam", precision="autocast-bf16", convention="autograd")
    >>> autocast.components["weight_copies"]  # the output layer's 10 x 1024 bf16 weight
    20480
    >>> sharded = parallel_memory(autocast, data=8, zero=3, autocast_copies=False)
    >>> "weight_copies" in sharded.stages[0].components
    False
    """
    in_flight = _check_options(data, zero, tensor, pipeline, micro_batches, offload)
    if zero == 3 and not autocast_copies and "weight_copies" in memory.components:
        memory = _per_replica(_without_weight_copies, memory)
    notes = list(memory.notes)
    # Each device of data parallelism and ZeRO runs a whole replica's forward and backward,
    # so its activation gradients and temporaries are one replica's: its timeline is the
    # replica's with each component at the device's share. Tensor and pipeline parallelism
    # split those too, in ways the one-device timeline does not follow.
    followed = (bool(memory.timeline) and bool(memory.timeline_parts)
                and tensor == 1 and pipeline == 1)
    deepspeed = followed and zero == 3 and data > 1 and "master_weights" in memory.components
    if deepspeed:
        memory = _per_replica(_gradient_partition_held, memory)
    if followed:
        notes.append(
            "per device, the peak is the largest moment of one replica's timeline with each "
            "component at the device's share (the gradients and kept activations as they are "
            "alive at that moment); each device runs a whole replica's forward and backward, "
            "so its activation gradients and temporaries are one replica's"
        )
    working = (_working_memory(memory) if not followed and memory.timeline_parts
               and "activation_gradients" not in memory.components else None)
    if working is not None:
        notes.append(
            "per device, an estimate of its peak: the sum of the components, "
            "activation_gradients being one replica's working memory (activation gradients "
            "and temporaries at its largest moment) scaled by the device's share of the kept "
            "activations; it assumes that working memory splits as the kept activations do, "
            "counts it on every pipeline stage and counts the tensor-parallel all-reduces as "
            "in place (memtheory.techniques.megatron_device_peak gives the papers' per-layer "
            "form)"
        )
    elif memory.timeline and not followed:
        notes.append(
            "per device, the sum of the components, which is not a bound of its peak: under "
            "tensor and pipeline parallelism the one-device timeline is not split, and the "
            "activation gradients of the backward pass are in no component"
        )
    split = TensorShare.of(memory, network, tensor, sequence_parallel)
    notes += split.notes
    stages: list[MemoryBreakdown] = []
    host: MemoryBreakdown | None = None
    for stage in range(pipeline):
        held = min(pipeline - stage, in_flight)
        components = _stage_components(memory, split, stage, pipeline, held)
        if working is not None:  # the autograd convention has no such component of its own
            components["activation_gradients"] = working * _kept_share(memory, split)
        replica = replace(memory, components=components, timeline={})
        device = _sharded(
            replica, memory, split, data=data, zero=zero, pipeline=pipeline, tensor=tensor,
            network=network, bucket_view=bucket_view, reduce_bucket_size=reduce_bucket_size,
            shards=shards,
        )
        if deepspeed:  # stage3.py:731-735: torch.empty(reduce_bucket_size, dtype), kept
            device = replace(device, components={
                **device.components,
                "gradient_buckets": reduce_bucket_size * memory.precision.gradients.bytes,
            })
        if offload != "none":
            device, cpu = _offloaded(device, offload)
            if stage == 0:
                host = cpu
        if followed:
            device = replace(device, timeline=device_timeline(memory, device),
                             timeline_parts={})
        stages.append(device)
    notes += _schedule_notes(data, zero, pipeline, in_flight, bucket_view)
    total = data * tensor * pipeline
    return ParallelMemory(
        tuple(stages), host, total, gpus_per_node or min(total, 8), tuple(notes)
    )


def _working_memory(memory: MemoryBreakdown) -> sp.Expr:
    """One replica's most bytes alive beyond its components: activation gradients, temporaries.

    At each moment of the timeline, the live bytes less the components held
    throughout and the coming-and-going ones alive then (``timeline_parts``);
    the largest of these, never below zero.

    Examples
    --------
    >>> from memtheory.precision import precision
    >>> step = MemoryBreakdown({"parameters": 8, "gradients": 8}, "training", "autograd",
    ...     precision("fp32"), timeline={"forward": 8, "backward": 18},
    ...     timeline_parts={"forward": {}, "backward": {"gradients": 4}})
    >>> _working_memory(step)  # 18 - 8 - 4 in the backward
    6
    """
    held = sp.Add(*(value for name, value in memory.components.items()
                    if name not in _COMING_AND_GOING))
    parts = memory.timeline_parts
    beyond = [sp.expand(value - held - sp.Add(*parts[moment].values()))
              for moment, value in memory.timeline.items() if moment in parts]
    return sp.Integer(0) if not beyond else maximum([sp.Integer(0), *beyond])


def _kept_share(memory: MemoryBreakdown, split: TensorShare) -> sp.Expr:
    """Return the device's share of one micro-batch's kept activations under tensor parallelism."""
    for name in ("saved_activations", "activations"):
        whole = memory.components.get(name)
        if whole:
            if name in split.activations:
                return split.activations[name]
            return sp.cancel(split.base[name] / whole)
    return sp.Integer(1)


def _check_options(
    data: int, zero: int, tensor: int, pipeline: int, micro_batches: int | None, offload: str
) -> int:
    """Refuse impossible options; return how many micro-batches are in flight."""
    for value, name in ((data, "data"), (tensor, "tensor"), (pipeline, "pipeline")):
        _positive(value, name)
    if offload not in ("none", "optimizer", "optimizer+parameters"):
        raise InvalidArgumentError(
            f"offload must be 'none', 'optimizer' or 'optimizer+parameters', got {offload!r}."
        )
    if offload == "optimizer+parameters" and zero != 3:
        raise InvalidArgumentError(
            "offloading the parameters needs ZeRO stage 3 (zero=3): stages 0-2 keep every "
            "parameter on each device."
        )
    chosen = pipeline if micro_batches is None else _positive(micro_batches, "micro_batches")
    return min(pipeline, chosen)


class _LastReplica:
    """Each count-independent change of a replica, kept for the last replica it was made to.

    :func:`~memtheory.estimate.devices.fewest_gpus` splits one replica at one data-parallel
    size after another; dropping ZeRO-3's weight copies and holding DeepSpeed's gradient
    partition rebuild every moment of its timeline (about 0.1 s each on Llama-3-8B) the
    same way at every size, so each is made once per replica. The replica is held weakly:
    its entry goes with it.

    Examples
    --------
    >>> from memtheory.precision import precision
    >>> calls = []
    >>> def change(memory):
    ...     calls.append(memory)
    ...     return replace(memory, notes=("changed",))
    >>> step = MemoryBreakdown({"parameters": 8}, "training", "autograd", precision("fp32"))
    >>> last = _LastReplica()
    >>> last(change, step) is last(change, step), len(calls)
    (True, 1)
    """

    def __init__(self) -> None:
        self._kept: dict[str, tuple[weakref.ref[MemoryBreakdown], MemoryBreakdown]] = {}

    def __call__(
        self, change: Callable[[MemoryBreakdown], MemoryBreakdown], memory: MemoryBreakdown
    ) -> MemoryBreakdown:
        """Return ``change(memory)``, made once while ``memory`` is the last replica changed."""
        name = change.__qualname__
        kept = self._kept.get(name)
        if kept is not None and kept[0]() is memory:
            return kept[1]
        changed = change(memory)

        def forget(gone: weakref.ref[MemoryBreakdown], name: str = name) -> None:
            if self._kept.get(name, (None,))[0] is gone:
                del self._kept[name]

        self._kept[name] = (weakref.ref(memory, forget), changed)
        return changed


_per_replica = _LastReplica()


def _without_weight_copies(memory: MemoryBreakdown) -> MemoryBreakdown:
    """Drop autocast's weight copies: weights gathered in 16 bits under ZeRO-3 keep none."""
    components = {k: v for k, v in memory.components.items() if k != "weight_copies"}
    removed = memory.components["weight_copies"]
    parts = memory.timeline_parts
    one, zero = sp.S.One, sp.S.Zero

    def copies(moment: str) -> Shift:
        alive = part_value(parts, moment, "weight_copies", zero) if moment in parts else removed
        return [(-one, alive)]

    # value - copies, as sympy subtracts it (no flatten); kept as a running sum where it is one
    timeline = moved(memory.timeline, copies)
    kept: Mapping[str, Mapping[str, sp.Expr]] = (
        parts.changed(drop="weight_copies") if isinstance(parts, Parts) else
        {moment: {k: v for k, v in alive.items() if k != "weight_copies"}
         for moment, alive in parts.items()})
    note = (
        "ZeRO-3 gathers each layer's weights already in 16 bits and frees them after the "
        "layer: autocast keeps no copies of them (the gathered layer is counted once, as "
        "parameters gathered for one layer)"
    )
    return replace(memory, components=components, timeline=timeline, timeline_parts=kept,
                   notes=(*memory.notes, note))


def _gradient_partition_held(memory: MemoryBreakdown) -> MemoryBreakdown:
    """Hold every gradient through the step: DeepSpeed ZeRO-3's flat gradient partition.

    DeepSpeed 0.19.6 ``stage3.py:742-744`` allocates
    ``grad_partitions_flat_buffer``, the rank's partition of every gradient in
    the accumulation dtype (bf16 by default, ``engine.py:1492-1493``), once,
    and keeps it; ``zero_grad`` does not free it. Each moment of the replica's
    timeline gets the gradients it had freed back, so that the split keeps
    the device's share of all of them at every moment. (The full 16-bit
    gradients of the layer in flight, before their reduce-scatter, are
    counted at the device's share too.)
    """
    held = memory.components.get("gradients", sp.S.Zero)
    parts = memory.timeline_parts
    one = sp.S.One

    def partition(moment: str) -> Shift:
        if moment not in parts:
            return []
        return [(one, held), (-one, part_value(parts, moment, "gradients", sp.S.Zero))]

    # value + held - freed, as sympy adds it (no flatten); a running sum where it is one
    timeline = moved(memory.timeline, partition)
    kept: Mapping[str, Mapping[str, sp.Expr]] = (
        parts.changed(held=("gradients", held)) if isinstance(parts, Parts) else
        {moment: {**alive, "gradients": held} for moment, alive in parts.items()})
    note = (
        "DeepSpeed ZeRO-3 keeps the rank's partition of every gradient through the step "
        "(grad_partitions_flat_buffer) and a reduce bucket of reduce_bucket_size elements "
        "(gradient_buckets), DeepSpeed 0.19.6 stage3.py:731-744"
    )
    return replace(memory, timeline=timeline, timeline_parts=kept, notes=(*memory.notes, note))


_COMING_AND_GOING = ("gradients", "saved_activations", "weight_copies", "master_gradients")
"""The components a step's timeline follows moment by moment (``timeline_parts``)."""


def device_timeline(
    memory: MemoryBreakdown, device: MemoryBreakdown
) -> Mapping[str, sp.Expr]:
    """Return one device's timeline: each moment of ``memory``'s with the device's share.

    A component the step holds throughout (weights, optimizer state, data)
    moves every moment by the device's difference; one that comes and goes
    (gradients, kept activations, weight copies) by its live bytes at that
    moment times the device's share of it; one only the device has (buckets,
    the gathered layer) is added to every moment. What is in no component
    (activation gradients, temporaries) stays as one replica's step has it.
    A moment whose live components are unknown keeps them whole, and so does
    a share that depends on the sizes (tensor parallelism's kept activations,
    split storage by storage): more than the device holds, which is why
    :func:`parallel_memory` follows the timeline only for data parallelism
    and ZeRO, where every device runs a whole replica's step.

    Examples
    --------
    >>> from memtheory.precision import precision
    >>> whole = MemoryBreakdown({"parameters": 8, "gradients": 8}, "training", "autograd",
    ...     precision("fp32"), timeline={"forward": 8, "backward": 18, "optimizer step": 16},
    ...     timeline_parts={"forward": {}, "backward": {"gradients": 4},
    ...                     "optimizer step": {"gradients": 8}})
    >>> half = replace(whole, components={"parameters": 4, "gradients": 4}, timeline={})
    >>> device_timeline(whole, half)
    {'forward': 4, 'backward': 12, 'optimizer step': 8}
    """
    parts = memory.timeline_parts
    shift = sp.S.Zero
    shares: dict[str, sp.Expr] = {}
    for name in {*memory.components, *device.components}:
        whole = memory.components.get(name, sp.S.Zero)
        mine = device.components.get(name, sp.S.Zero)
        if name in _COMING_AND_GOING and whole != 0:
            share = sp.cancel(mine / whole)
            if share.is_number:  # else (a per-storage split, in B and S) keep it whole
                shares[name] = share - 1
        else:
            shift += mine - whole
    one, zero = sp.S.One, sp.S.Zero

    def shares_alive(moment: str) -> Shift:
        if moment not in parts:
            return [(one, shift)]
        return [(one, shift), *((share, part_value(parts, moment, name, zero))
                                for name, share in shares.items())]

    # sp.expand of each sum, each distinct term expanded once; a running sum where it is one
    return moved(memory.timeline, shares_alive, expand=True)


def _stage_components(
    memory: MemoryBreakdown, split: TensorShare, stage: int, pipeline: int, held: int
) -> dict[str, sp.Expr]:
    """Return one pipeline stage's share of every component, before ZeRO."""
    components: dict[str, sp.Expr] = {}
    for name, value in split.base.items():
        if name in MODEL_STATES and name != "dequantized_copy":
            components[name] = value * split.states[name] / pipeline
        elif name in ACTIVATION_COMPONENTS:
            share = split.activations.get(name, sp.S.One)
            components[name] = value * share * sp.Rational(held, pipeline)
        elif name == "input":
            components[name] = value if stage == 0 else sp.S.Zero
        elif name == "targets":
            components[name] = value if stage == pipeline - 1 else sp.S.Zero
        else:
            components[name] = value
    return components


def _sharded(
    replica: MemoryBreakdown, memory: MemoryBreakdown, split: TensorShare, *, data: int,
    zero: int, pipeline: int, tensor: int, network: Network | None, bucket_view: bool,
    reduce_bucket_size: int, shards: Mapping[str, sp.Expr] | None = None,
) -> MemoryBreakdown:
    """Return one device's stage after ZeRO's partition, with its buckets and gathered layer."""
    partitioned = zero_partition(replica, data, zero) if data > 1 or zero else replica
    parts = dict(partitioned.components)
    if zero == 3:  # stage 3 shards every parameter, a fine-tuned model's frozen base too
        for name in ("frozen_parameters", "quantization_constants"):
            if name in parts:
                parts[name] = parts[name] / data
    if data > 1 and zero == 0 and not bucket_view and "gradients" in parts:
        parts["gradient_buckets"] = parts["gradients"]
    if zero in (1, 2) and data > 1 and "gradients" in split.base and "parameters" in split.base:
        trainable = (
            split.base["parameters"] * split.states["parameters"] / pipeline
            / memory.precision.parameters.bytes
        )
        parts["gradient_buckets"] = (
            sp.Min(reduce_bucket_size, trainable) * memory.precision.gradients.bytes
        )
    if zero == 3 and network is not None:
        largest = max((row.parameters for row in network.rows if row.parameters.is_number),
                      default=sp.S.Zero)
        parts["gathered_parameters"] = largest * memory.precision.parameters.bytes / tensor
    if shards:
        if tensor > 1 or pipeline > 1:
            raise InvalidArgumentError(
                "shards (per-device model states) are for data parallelism and ZeRO alone: "
                "leave tensor=1 and pipeline=1, or leave shards out.")
        parts.update(shards)
    return replace(partitioned, components=parts)


def _offloaded(
    device: MemoryBreakdown, offload: str
) -> tuple[MemoryBreakdown, MemoryBreakdown]:
    """Split one device's memory into what stays on the GPU and what moves to host RAM."""
    moved = OFFLOADED + (
        ("parameters", "frozen_parameters", "quantization_constants")
        if offload == "optimizer+parameters" else ()
    )
    split = cpu_offload(device, tuple(n for n in moved if n in device.components))
    return split.gpu, split.cpu


def _schedule_notes(
    data: int, zero: int, pipeline: int, in_flight: int, bucket_view: bool
) -> list[str]:
    """Return the notes that say how the pipeline schedule and DDP's buckets were counted."""
    notes = []
    if pipeline > 1:
        notes.append(
            f"pipeline of {pipeline} stages (1F1B), {in_flight} micro-batch(es) in flight: stage i "
            f"keeps min({pipeline} - i, {in_flight}) micro-batches of activations"
        )
    if data > 1 and zero == 0:
        notes.append(
            "DDP: gradient buckets "
            + ("are the gradients (gradient_as_bucket_view=True)" if bucket_view else
               f"copy every gradient (bucket_cap_mb={DDP_BUCKET_CAP_MB} only splits them)")
        )
    return notes
