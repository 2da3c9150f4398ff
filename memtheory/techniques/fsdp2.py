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

from collections.abc import Sequence
from math import prod

import sympy as sp

from memtheory.errors import InvalidSizeError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.network.parameters import parameter_shapes

__all__ = [
    "FSDP2_RECIPE",
    "fsdp2_model_states",
    "fsdp2_shards",
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
