r"""CPU offload: keeping part of the model states in host memory instead of on the GPU.

ZeRO-Offload (Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model
Training", USENIX ATC 2021, Section 3) keeps the 16-bit parameters on the GPU
for the forward and backward passes and moves the 16-bit gradients, the fp32
master weights and the optimizer state to the CPU, which runs the optimizer
step: for Adam in mixed precision, :math:`2\Psi` bytes stay on the GPU and
:math:`2\Psi + 12\Psi = 14\Psi` go to the CPU. Combined with ZeRO stage 2,
each device offloads its own partition.
Derived in the book's chapter "Checkpointing, sharding and offload".

Examples
--------
>>> from memtheory import ModelCounts, training_memory
>>> from memtheory.symbols import P
>>> states = ModelCounts(parameters=P, activations=0, input_elements=0)
>>> split = cpu_offload(training_memory(states, optimizer="adam", precision="mixed-fp16"))
>>> split.gpu.total, split.cpu.total
(2*P, 14*P)
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.errors import UnknownNameError
from memtheory.memory_breakdown import MemoryBreakdown

__all__ = ["OFFLOADED", "OffloadSplit", "cpu_offload"]

OFFLOADED = (
    "gradients", "optimizer_state", "optimizer_step_counters", "master_weights", "master_gradients"
)
"""What ZeRO-Offload moves to the CPU: everything the optimizer step reads or writes."""


@dataclass(frozen=True)
class OffloadSplit:
    """Memory on the GPU and in host (CPU) memory after offloading.

    Attributes
    ----------
    gpu, cpu : MemoryBreakdown

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> split = cpu_offload(training_memory(Network([Input((784,)), Dense(10)]), optimizer="adam"))
    >>> split.cpu.components["optimizer_state"], "optimizer_state" in split.gpu.components
    (62800, False)
    """

    gpu: MemoryBreakdown
    cpu: MemoryBreakdown


def cpu_offload(memory: MemoryBreakdown, components: tuple[str, ...] = OFFLOADED) -> OffloadSplit:
    """Split ``memory`` into what stays on the GPU and what ``components`` move to the CPU.

    Parameters
    ----------
    memory : MemoryBreakdown
        Per-device memory (after :func:`~memtheory.techniques.zero.zero_partition`
        for ZeRO-Offload over several devices).
    components : tuple of str, default :data:`OFFLOADED`

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=10**9, activations=10**6, input_elements=1)
    >>> split = cpu_offload(training_memory(counts, optimizer="adam", precision="mixed-fp16"))
    >>> sorted(split.cpu.components)
    ['gradients', 'master_weights', 'optimizer_state']
    """
    unknown = set(components) - set(OFFLOADED) - set(memory.components)
    if unknown:
        raise UnknownNameError(
            f"cannot offload {sorted(unknown)}: not components of this breakdown "
            f"({', '.join(memory.components)})."
        )

    def part(names: dict[str, object], where: str) -> MemoryBreakdown:
        return MemoryBreakdown(
            names,
            memory.mode,
            f"{memory.convention}, offload ({where})",
            memory.precision,
            memory.optimizer,
            memory.notes,
        )

    gpu = {k: v for k, v in memory.components.items() if k not in components}
    cpu = {k: v for k, v in memory.components.items() if k in components}
    return OffloadSplit(part(gpu, "GPU"), part(cpu, "CPU"))
