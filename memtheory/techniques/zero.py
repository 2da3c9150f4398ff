r"""ZeRO data parallelism: partitioning model states across :math:`N_d` devices.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models" (SC 2020), Section 5 and Figure 1. Plain data parallelism
replicates every model state on every device. ZeRO partitions them:

=====  ======================================  =======================================
stage  partitioned                             model states per device (Adam, mixed)
=====  ======================================  =======================================
0      nothing                                 :math:`(2 + 2 + K)\Psi`
1      optimizer states (incl. master copy)    :math:`2\Psi + 2\Psi + K\Psi/N_d`
2      + gradients                             :math:`2\Psi + (2 + K)\Psi/N_d`
3      + parameters                            :math:`(2 + 2 + K)\Psi/N_d`
=====  ======================================  =======================================

with :math:`K = 12` for Adam in mixed precision. :func:`zero_partition`
applies a stage to any :class:`~memtheory.memory_breakdown.MemoryBreakdown` by
dividing the partitioned components by the number of devices; activations
(each device's own micro-batch), the input and buffers stay as they are.
Derived in the book's chapter "Checkpointing, sharding and offload".

Examples
--------
>>> states = zero_model_states(7_500_000_000, devices=64, stage=1)
>>> states.format("GB", digits=1)
'31.4 GB'
"""

from __future__ import annotations

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.counts import ModelCounts
from memtheory.errors import InvalidSizeError
from memtheory.memory import training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike

__all__ = ["MODEL_STATES", "ZERO_STAGES", "zero_model_states", "zero_partition"]

ZERO_STAGES: dict[int, tuple[str, ...]] = {
    0: (),
    1: ("optimizer_state", "optimizer_step_counters", "master_weights", "master_gradients"),
    2: (
        "optimizer_state",
        "optimizer_step_counters",
        "master_weights",
        "master_gradients",
        "gradients",
    ),
    3: (
        "optimizer_state",
        "optimizer_step_counters",
        "master_weights",
        "master_gradients",
        "gradients",
        "parameters",
    ),
}
"""Components each stage partitions (stage 1 is the paper's P_os, 2 P_os+g, 3 P_os+g+p).

``master_gradients``, the fp32 gradient of the master copy that DeepSpeed's
optimizer step casts, is as large as the rank's master partition at every stage
(``stage_1_and_2.py:2361``, ``stage3.py:2401``).
"""

MODEL_STATES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "optimizer_step_counters",
    "master_weights",
    "master_gradients",
)
"""The components that scale with the parameter count."""


def _stage(stage: int) -> int:
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise InvalidSizeError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}.")
    return stage


def zero_partition(memory: MemoryBreakdown, devices: SizeLike, stage: int) -> MemoryBreakdown:
    """Return ``memory`` per device when ZeRO ``stage`` partitions it over ``devices``.

    Parameters
    ----------
    memory : MemoryBreakdown
        The memory of one data-parallel replica (activations for its own micro-batch).
    devices : size
        Data-parallel devices :math:`N_d` (may be a symbol).
    stage : {0, 1, 2, 3}

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=10**9, activations=10**6, input_elements=1)
    >>> memory = training_memory(counts, optimizer="adam", precision="mixed-fp16")
    >>> zero_partition(memory, 8, stage=2).evaluate(B=1).format("GB")
    '3.75 GB'
    """
    stage = _stage(stage)
    devices = as_size(devices, "devices", "zero_partition")
    split = ZERO_STAGES[stage]
    components = {
        name: value / devices if name in split else value
        for name, value in memory.components.items()
    }
    notes = (
        *memory.notes,
        f"ZeRO stage {stage} over {devices} devices: "
        + (", ".join(n for n in split if n in memory.components) or "nothing")
        + " partitioned",
    )
    return MemoryBreakdown(
        components,
        memory.mode,
        f"{memory.convention}, ZeRO-{stage}",
        memory.precision,
        memory.optimizer,
        notes,
        constraints=memory.constraints,
    )


def zero_model_states(
    parameters: SizeLike,
    devices: SizeLike,
    stage: int,
    *,
    optimizer: OptimizerLike = "adam",
    precision: PrecisionLike = "mixed-fp16",
) -> MemoryBreakdown:
    r"""Model-state bytes per device (parameters, gradients, optimizer state, master copy).

    Parameters
    ----------
    parameters : size
        :math:`\Psi`.
    devices : size
        :math:`N_d`.
    stage : {0, 1, 2, 3}
    optimizer : default "adam"
    precision : default "mixed-fp16"

    Examples
    --------
    >>> from memtheory.symbols import P, size_symbol
    >>> n = size_symbol("N")
    >>> zero_model_states(P, n, stage=2).total
    2*P + 14*P/N
    """
    counts = ModelCounts(parameters=parameters, activations=0, input_elements=0)
    memory = training_memory(counts, optimizer=optimizer, precision=precision)
    states = {name: v for name, v in memory.components.items() if name in MODEL_STATES}
    only_states = MemoryBreakdown(
        states, "training", memory.convention, memory.precision, memory.optimizer, memory.notes
    )
    result = zero_partition(only_states, devices, stage)
    return MemoryBreakdown(
        {k: sp.expand(v) for k, v in result.components.items()},
        result.mode,
        result.convention,
        result.precision,
        result.optimizer,
        result.notes,
    )
