r"""FSDP2's model states on one rank, tensor by tensor: padded shards, unpadded optimizer state.

PyTorch 2.13's ``fully_shard`` (``torch/distributed/fsdp/_fully_shard/``)
shards every parameter on dim 0 with ``torch.chunk`` over the :math:`W` ranks
(``_fsdp_common.py:134-140``, ``_chunk_with_empty``): with
:math:`c = \lceil d_0 / W \rceil` rows per chunk, rank :math:`r` owns
:math:`\max(0, \min(c, d_0 - r c))` rows. Each rank's storage is padded to
:math:`c` rows (``_fsdp_param.py:304-316``: ``padded_sharded_param_size`` is
chunk 0's, ``new_zeros``), and the parameter (a DTensor) is a view of its own
rows (``_fsdp_param.py:318``, ``narrow``). So:

* the sharded **parameters** take :math:`c \cdot d_1 \cdots d_k` elements per
  tensor on every rank (padding included);
* the **optimizer state**, made by ``torch.zeros_like`` of the parameter
  (``torch/optim/adam.py:178-184``), takes only the rank's own rows: the last
  ranks hold less where :math:`d_0` does not divide by :math:`W`;
* AdamW's **step counters** are one 0-dim fp32 tensor per parameter tensor
  (``torch/optim/adam.py:175``), on every rank: not sharded.

Measured on CPU with gloo (``tests/pytorch/test_fsdp_cpu.py``): every rank's
tracked parameters, optimizer state and step counters are these, to the byte.

:func:`fsdp2_shards` gives rank 0's (the rank with the most: every rank holds
the same padded parameters, rank 0 the most own rows) for
:func:`~memtheory.techniques.parallel.parallel_memory`'s ``shards``, which
the ``fsdp2-bf16`` recipe's estimate uses in place of ZeRO-3's even split.

Examples
--------
>>> shard_rows(97, world=2, rank=0), shard_rows(97, world=2, rank=1)
(49, 48)
>>> states = fsdp2_model_states([(97, 40), (40,)], world=2, rank=1)
>>> states["parameters"], states["optimizer_state"], states["optimizer_step_counters"]
(7920, 15520, 8)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from math import prod

import sympy as sp

from memtheory.errors import InvalidSizeError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.network.parameters import parameter_shapes

__all__ = [
    "FSDP2_NOTE",
    "FSDP2_RECIPE",
    "fsdp2_device",
    "fsdp2_model_states",
    "fsdp2_shards",
    "fsdp2_timeline",
    "gathered_bytes",
    "padded_rows",
    "shard_rows",
]

FSDP2_RECIPE = "fsdp2-bf16"
"""The recipe whose estimate shards the model states as FSDP2 does (:func:`fsdp2_shards`)."""


def _check(world: int, rank: int) -> None:
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise InvalidSizeError(f"world must be a positive number of ranks, got {world!r}.")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
        raise InvalidSizeError(
            f"rank must be 0 to {world - 1} for {world} ranks, got {rank!r}.")


def padded_rows(rows: int, world: int) -> int:
    """Return the rows of every rank's padded shard: ``ceil(rows / world)``.

    Examples
    --------
    >>> padded_rows(97, 4)
    25
    """
    _check(world, 0)
    return -(-rows // world)


def shard_rows(rows: int, world: int, rank: int) -> int:
    """Return the rows rank ``rank`` owns of a dim 0 of ``rows`` (``torch.chunk``'s split).

    Examples
    --------
    >>> [shard_rows(5, 4, r) for r in range(4)]  # chunks of 2, 2, 1 and an empty one
    [2, 2, 1, 0]
    """
    _check(world, rank)
    chunk = padded_rows(rows, world)
    return max(0, min(chunk, rows - rank * chunk))


def gathered_bytes(shapes: Sequence[Sequence[int]], world: int, itemsize: int = 2) -> int:
    """Return the bytes of one FSDP2 unit's parameters gathered: every rank's padded shard.

    The all-gather output is ``world`` padded shards of every parameter
    (``_fsdp_collectives.py`` ``foreach_all_gather``), in ``param_dtype``
    (bf16: 2 bytes); each parameter's own all-gather output
    (``foreach_all_gather_copy_out``, ``split_with_sizes_copy``) is its
    ``world`` padded shards too, of which the unsharded parameter is a view.

    Examples
    --------
    >>> gathered_bytes([(97, 40), (40,)], world=2)  # 2 x 49 rows x 40, 2 x 20, in bf16
    7920
    """
    total = 0
    for shape in shapes:
        rows, rest = (shape[0], prod(shape[1:])) if len(shape) else (1, 1)
        total += world * padded_rows(rows, world) * rest * itemsize
    return total


def fsdp2_model_states(
    shapes: Sequence[Sequence[int]],
    world: int,
    rank: int = 0,
    *,
    parameter_bytes: int = 4,
    state_tensors: int = 2,
    state_bytes: int = 4,
    step_bytes: int = 4,
) -> dict[str, int]:
    """Return one rank's bytes of sharded parameters, optimizer state and step counters.

    Parameters
    ----------
    shapes : sequence of shapes
        Every trainable parameter tensor's shape (a 0-dim one as ``()``: FSDP2
        shards it as one row).
    world : int
        Ranks the parameters are sharded over.
    rank : int, default 0
    parameter_bytes : int, default 4
        The sharded parameters' dtype (fp32 under ``MixedPrecisionPolicy``).
    state_tensors : int, default 2
        Per-parameter state tensors (AdamW: ``exp_avg``, ``exp_avg_sq``).
    state_bytes, step_bytes : int, default 4

    Examples
    --------
    >>> fsdp2_model_states([(8, 4)], world=4, rank=3)
    {'parameters': 32, 'optimizer_state': 64, 'optimizer_step_counters': 4}
    """
    _check(world, rank)
    padded = own = 0
    for shape in shapes:
        rows, rest = (shape[0], prod(shape[1:])) if len(shape) else (1, 1)
        padded += padded_rows(rows, world) * rest
        own += shard_rows(rows, world, rank) * rest
    return {
        "parameters": padded * parameter_bytes,
        "optimizer_state": own * state_tensors * state_bytes,
        "optimizer_step_counters": len(shapes) * step_bytes,
    }


def fsdp2_shards(
    memory: MemoryBreakdown, network: Network, world: int
) -> dict[str, sp.Expr] | None:
    """Return rank 0's model states under FSDP2, for ``parallel_memory(..., shards=)``.

    ``memory`` is one replica's step of ``network`` (every parameter
    trainable); the bytes per element of the parameters, gradients and
    optimizer state are read from it. The parameters and the fp32 gradient
    shards (``reduce_dtype=float32``, reduce-scattered into shards padded as
    the parameters are) are padded; the optimizer state is on rank 0's own
    rows; AdamW's step counters are whole on every rank. ``None`` where a
    shape is not a number (then ZeRO-3's even split stands).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> net = Network([Input((4,)), Dense(5, name="fc")])  # a (5, 4) weight and a (5,) bias
    >>> step = training_memory(net, optimizer="adamw", precision="fp32", convention="autograd")
    >>> shards = fsdp2_shards(step, net, world=2)  # 3 of 5 rows: 15 elements, each rank
    >>> shards["parameters"], shards["gradients"], shards["optimizer_state"]
    (60, 60, 120)
    >>> shards["optimizer_step_counters"] == step.components["optimizer_step_counters"]
    True
    """
    shapes = [shape for _, shape in parameter_shapes(network)]
    if not all(sp.sympify(size).is_Integer for shape in shapes for size in shape):
        return None
    whole = sp.Integer(network.parameter_count)
    if whole == 0 or not shapes:
        return None
    components = memory.components
    states = fsdp2_model_states(
        [tuple(int(size) for size in shape) for shape in shapes], world, 0,
        parameter_bytes=1, state_tensors=1, state_bytes=1, step_bytes=1)
    padded, own = sp.Integer(states["parameters"]), sp.Integer(states["optimizer_state"])
    shards: dict[str, sp.Expr] = {}
    for name, rows in (("parameters", padded), ("gradients", padded), ("optimizer_state", own)):
        if name in components:
            shards[name] = sp.cancel(components[name] / whole) * rows
    if "optimizer_step_counters" in components:
        shards["optimizer_step_counters"] = sp.sympify(components["optimizer_step_counters"])
    return shards


_LAYER = re.compile(r"(?:^|[ .])(?:layers|layer|h|blocks)\.(\d+)\.")
"""A decoder or encoder block's index in a parameter or moment name: one FSDP2 unit each.

Llama-style ``model.layers.K.``, GPT-2's ``transformer.h.K.``, BERT's
``encoder.layer.K.``, ViT's ``blocks.K.``: the modules accelerate and
transformers wrap (``_no_split_modules``)."""


def _units(network: Network) -> tuple[list[tuple[int, ...]], dict[int, list[tuple[int, ...]]]]:
    """Split the parameter shapes into the root's and each decoder layer's (``layers.K.``)."""
    root: list[tuple[int, ...]] = []
    layers: dict[int, list[tuple[int, ...]]] = {}
    for name, shape in parameter_shapes(network):
        sizes = tuple(int(size) for size in shape)
        found = _LAYER.search(name)
        if found is None:
            root.append(sizes)
        else:
            layers.setdefault(int(found.group(1)), []).append(sizes)
    return root, layers


def _numel(shapes: Sequence[Sequence[int]]) -> int:
    return sum(prod(shape) for shape in shapes)


def fsdp2_timeline(
    replica: MemoryBreakdown,
    network: Network,
    world: int,
    shards: Mapping[str, sp.Expr],
    *,
    buffers: sp.Expr | int | None = None,
) -> dict[str, sp.Expr]:
    """Return rank 0's timeline of an FSDP2 step, moment by moment of a bf16 replica's.

    ``replica`` is one step of ``network`` cast to bf16 (what
    ``MixedPrecisionPolicy(param_dtype=bfloat16)`` runs: its activations,
    activation gradients and temporaries, and its bf16 gradients as they
    are made); ``shards`` the rank's model states (:func:`fsdp2_shards`).
    Each block (``layers.K.``, ``h.K.``, ``layer.K.``, ``blocks.K.``) is one
    FSDP2 unit and the rest the root, as accelerate and transformers wrap
    them. At each moment the rank
    holds, beyond the replica's activations:

    * its shards and the fp32 ``buffers`` (not cast by the policy);
    * from the root's forward to the end of backward, the root's gathered
      bf16 parameters (``world`` padded shards each: not resharded after
      forward, ``_fsdp_state.py:207``);
    * in layer K's forward or backward, its bf16 all-gather output and its
      parameters' own all-gather outputs (:func:`gathered_bytes` each);
    * in backward, the bf16 gradients as the replica makes them, except
      those of the layers done: for them their fp32 padded shards
      (``reduce_dtype=float32``), and the last one's fp32 reduce-scatter
      input (``world`` padded shards, kept to the next post-backward,
      ``_fsdp_param_group.py:717-718``);
    * in the optimizer step, every gradient's fp32 shard and the foreach
      step's temporaries on the rank's own elements (the replica's scaled
      from its bf16 elements to the rank's fp32 ones).

    Measured: rank by rank, its peak is the tracked ``fully_shard`` step's
    on CPU (``tests/pytorch/test_fsdp_cpu.py``).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> net = Network([Input((4,)), Dense(6, name="layers.0.fc"), Dense(2, name="head")])
    >>> bf16 = training_memory(net, optimizer="adamw", precision="bf16", convention="autograd")
    >>> full = training_memory(net, optimizer="adamw", precision="fp32", convention="autograd")
    >>> timeline = fsdp2_timeline(bf16, net, 2, fsdp2_shards(full, net, 2))
    >>> len(timeline) == len(bf16.timeline)
    True
    """
    root, layers = _units(network)
    parts = replica.timeline_parts
    static = sp.Add(*(value for name, value in replica.components.items()
                      if name not in ("gradients", "saved_activations")))
    fp32_buffers = replica.components.get("buffers", 0) if buffers is None else buffers
    held = (sp.Add(*shards.values()) - shards.get("gradients", 0) + fp32_buffers
            + replica.components.get("input", 0) + replica.components.get("targets", 0))
    root_gathered = gathered_bytes(root, world)
    grad_bytes = sp.cancel(replica.components.get("gradients", 0) / network.parameter_count)
    last = max(layers, default=-1)
    done_bf16 = {k: grad_bytes * _numel(shapes) for k, shapes in layers.items()}
    done_fp32 = {k: fsdp2_model_states(shapes, world, 0)["parameters"]
                 for k, shapes in layers.items()}
    all_shards = shards.get("gradients", 0)
    timeline: dict[str, sp.Expr] = {}
    region: int | None = None  # the FSDP2 unit whose hooks ran last
    started = False  # its first moment after the unshard passed: the flat output freed
    seen = False  # a layer's backward yet: the root's moments after it have every layer done
    for moment, value in replica.timeline.items():
        alive = parts.get(moment, {})
        grads = alive.get("gradients", 0)
        rest = value - static - grads
        phase = moment.split(" ", 1)[0]
        found = _LAYER.search(moment)
        named = int(found.group(1)) if found else None
        named = named if named in layers else None
        if phase == "optimizer":
            own = shards.get("optimizer_state", 0) / 2
            rest = rest - grad_bytes * network.parameter_count + own
            timeline[moment] = sp.expand(held + all_shards + rest)
            continue
        # an accumulation into layer K's output runs in layer K+1's backward, before K's hooks
        entering = named is not None and named != region and not (
            phase == "backward" and region is not None and moment.endswith("accumulate"))
        if phase in ("forward", "backward") and (entering or named is None):
            region, started = named, False
        layer = region if phase in ("forward", "backward") else None
        extra = sp.S.Zero
        if phase in ("forward", "backward"):
            extra += root_gathered
            if layer is not None:
                flat = 0 if started else gathered_bytes(layers[layer], world)
                extra += gathered_bytes(layers[layer], world) + flat
                started = phase == "backward"
        if phase == "backward":
            seen = seen or layer is not None
            below = layer if layer is not None else (-1 if seen else last + 1)
            done = [k for k in layers if k > below]
            grads = grads - sp.Add(*(done_bf16[k] for k in done)) + sum(
                done_fp32[k] for k in done)
            if done:
                grads += gathered_bytes(layers[min(done)], world, 4)
        elif phase != "forward":  # the step's start: the gradients' shards
            grads = all_shards if grads else 0
        timeline[moment] = sp.expand(held + grads + rest + extra)
    return timeline


FSDP2_NOTE = (
    "FSDP2 per rank (memtheory.techniques.fsdp2): rank 0's padded shards, AdamW state on its "
    "own rows and whole step counters; the timeline is a bf16 model's step "
    "(MixedPrecisionPolicy casts the parameters) with the root's gathered bf16 weights from "
    "forward to the end of backward, each layer's bf16 all-gather output and its parameters' "
    "own while it runs, the bf16 gradients of the layer in backward, fp32 gradient shards of "
    "the layers done and the last one's fp32 reduce-scatter input"
)


def fsdp2_device(
    device: MemoryBreakdown,
    replica: MemoryBreakdown,
    network: Network,
    world: int,
    shards: Mapping[str, sp.Expr],
) -> MemoryBreakdown:
    """Return ``device`` (ZeRO-3's split of the recipe's step) with FSDP2's per-rank timeline.

    ``replica`` is the bf16 model's step (:func:`fsdp2_timeline`); the
    components say what is held: the bf16 replica's kept activations, the
    root's and the largest layer's gathered bf16 parameters (twice: the
    all-gather output and the parameters' own) and, as ``gradient_buckets``,
    the largest layer's fp32 reduce-scatter input.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> net = Network([Input((4,)), Dense(6, name="layers.0.fc"), Dense(2, name="head")])
    >>> bf16 = training_memory(net, optimizer="adamw", precision="bf16", convention="autograd")
    >>> full = training_memory(net, optimizer="adamw", precision="fp32", convention="autograd")
    >>> rank = fsdp2_device(full, bf16, net, 2, fsdp2_shards(full, net, 2))
    >>> int(rank.components["gathered_parameters"])  # bf16: head 2 x 6 + 2, layer twice 6 x 4 + 6
    148
    """
    root, layers = _units(network)
    largest = max(layers.values(), key=_numel, default=[])
    components = dict(device.components)
    components["buffers"] = components.get("buffers", replica.components.get("buffers", 0))
    components["saved_activations"] = replica.components.get("saved_activations", 0)
    components["gathered_parameters"] = sp.Integer(
        gathered_bytes(root, world) + 2 * gathered_bytes(largest, world))
    if largest:
        components["gradient_buckets"] = sp.Integer(gathered_bytes(largest, world, 4))
    timeline = fsdp2_timeline(replica, network, world, shards, buffers=components["buffers"])
    return replace(device, components=components, timeline=timeline, timeline_parts={},
                   notes=(*device.notes, FSDP2_NOTE))
