"""Steps of the fine-tuning and distributed-training chapters, and their misconceptions.

Chapters 17 (fine-tuning) and 18 (distributed training) compute with
:mod:`memtheory.finetuning` and :func:`memtheory.techniques.parallel_memory`.
An exercise's solver calls these steps with its ``how``
(:class:`~memtheory.exercises.reasoning.Reasoning`); the correct reasoning has
no step of its own and gets the library's function, and each misconception
defined here overrides one step, so the same solver recomputes the answer with
that one step wrong. Importing this module registers the misconceptions in
:data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`.

Examples
--------
>>> from memtheory.exercises import MISCONCEPTIONS
>>> from memtheory.exercises.reasoning import CORRECT
>>> nf4_storage(CORRECT, 64 * 256)
8452
>>> nf4_storage(MISCONCEPTIONS["nf4_forgot_constants"].ways[0], 64 * 256)
8192
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from memtheory.counts import ModelCounts
from memtheory.exercises.derivation import note_memory, quantity_text
from memtheory.exercises.misconceptions import Misconception, register
from memtheory.exercises.reasoning import Reasoning, own_step
from memtheory.exercises.step_log import note, note_lines, shown
from memtheory.finetuning import (
    LoRA,
    adam8bit_state_bytes,
    apply_lora,
    constant_bits_per_parameter,
    finetune_memory,
    linear_maps,
    match_targets,
    nf4_bytes,
)
from memtheory.finetuning.nf4 import NF4_BLOCK, NF4_SECOND_BLOCK
from memtheory.finetuning.optimizer8bit import EIGHT_BIT_BLOCK, MIN_8BIT_SIZE
from memtheory.memory import training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.techniques import ParallelMemory, parallel_memory
from memtheory.transformer_activations import activation_bytes

__all__ = [
    "ACTIVATION_PARTS",
    "SCALING_MISCONCEPTIONS",
    "adam8bit_state",
    "constant_bits",
    "finetune_step",
    "host_ram",
    "in_flight",
    "lora_trainable",
    "model_states",
    "nf4_storage",
    "per_device",
]

PAPER_BLOCK = 2048
"""The block size of Dettmers et al. (2022); bitsandbytes' optimizers use 256 instead."""

ACTIVATION_PARTS = ("activations", "activation_gradients", "saved_activations", "input", "targets")
"""Components that belong to the batch, not to the model: what "model states" leave out."""


# -- the steps ---------------------------------------------------------------------------------
def lora_trainable(how: Reasoning, network: Network, lora: LoRA) -> sp.Expr:
    """Trainable parameters of ``network`` under ``lora``: :func:`memtheory.finetuning.apply_lora`.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> net = Network([Input((16,)), Dense(32, name="fc")])
    >>> lora_trainable(CORRECT, net, LoRA(4, targets="fc"))
    192
    """
    own = own_step(how, "lora_parameter_count")
    count = own(network, lora) if own else apply_lora(network, lora).parameter_count
    _note_lora(network, lora)
    note("Trainable parameters: the sum over the adapted maps", count)
    return count


def _note_lora(network: Network, lora: LoRA) -> None:
    """Record each adapted map's r x (n_in + n_out), grouped by its shape."""
    maps = linear_maps(network)
    groups: dict[tuple[str, str], int] = {}
    for name in match_targets(network, lora.patterns):
        n_in, n_out = maps[name]
        key = (quantity_text(n_in), quantity_text(n_out))
        groups[key] = groups.get(key, 0) + 1
    lines = [
        f"LoRA of rank r = {lora.rank}: each adapted n_in -> n_out map trains "
        "A (r x n_in) and B (n_out x r), r x (n_in + n_out) parameters:"
    ]
    for (n_in, n_out), count in groups.items():
        lines.append(
            f"  {count} map(s) {n_in} -> {n_out}: {count} x {lora.rank} x ({n_in} + {n_out})"
        )
    note_lines(lines)


def finetune_step(how: Reasoning, network: Network, **options: Any) -> MemoryBreakdown:
    """One fine-tuning step: :func:`memtheory.finetuning.finetune_memory` (arguments as there).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> net = Network([Input((16,), batch=1), Dense(32, name="fc")])
    >>> finetune_step(CORRECT, net, lora=LoRA(4, targets="fc"), optimizer="adam",
    ...               precision="fp32")["gradients"]
    768
    """
    own = own_step(how, "finetune_memory")
    memory = (own or finetune_memory)(network, **options)
    settings = ", ".join(f"{key} = {value}" for key, value in options.items())
    note_memory(f"A fine-tuning step of {network.name} with {settings}", memory)
    return memory


def model_states(memory: MemoryBreakdown) -> sp.Expr:
    """Bytes of ``memory`` that do not scale with the batch: everything but the activations.

    Examples
    --------
    >>> from memtheory.counts import ModelCounts
    >>> counts = ModelCounts(parameters=10, activations=3, input_elements=1)
    >>> model_states(training_memory(counts, optimizer="adam"))
    160
    """
    return shown(
        "Model states (everything but the activations), in bytes",
        sp.Add(*(v for k, v in memory.components.items() if k not in ACTIVATION_PARTS)),
    )


def constant_bits(how: Reasoning, **blocks: Any) -> sp.Rational:
    """Bits of NF4 constants per weight: :func:`~memtheory.finetuning.constant_bits_per_parameter`.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> constant_bits(CORRECT)
    65/512
    """
    own = own_step(how, "constant_bits_per_parameter")
    bits = (own or constant_bits_per_parameter)(**blocks)
    block = blocks.get("block", NF4_BLOCK)
    second = blocks.get("second_block", NF4_SECOND_BLOCK)
    note(
        f"Constants per weight: one 8-bit absmax per block of {block} weights (8/{block} bits), "
        f"and one fp32 constant per {second} of those (32/({block} x {second}) bits)",
        bits,
    )
    return bits


def nf4_storage(how: Reasoning, elements: int, **options: Any) -> sp.Expr:
    """Bytes of one tensor in NF4 with its constants: :func:`~memtheory.finetuning.nf4_bytes`.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> nf4_storage(CORRECT, 4096 * 4096)
    8654848
    """
    own = own_step(how, "nf4_bytes")
    value = (own or nf4_bytes)(elements, **options)
    note(
        f"NF4: {quantity_text(elements)} weights x 4 bits = "
        f"{quantity_text(sp.ceiling(sp.sympify(elements) / 2))} bytes, plus the blocks' "
        f"constants (8-bit absmax per {NF4_BLOCK} weights, fp32 per "
        f"{NF4_SECOND_BLOCK} blocks); in bytes",
        value,
    )
    return value


def adam8bit_state(how: Reasoning, shapes: list[tuple[int, ...]]) -> sp.Expr:
    """8-bit Adam's state bytes: :func:`~memtheory.finetuning.adam8bit_state_bytes`.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> adam8bit_state(CORRECT, [(4096, 4096)])
    34078720
    """
    own = own_step(how, "adam8bit_state_bytes")
    value = (own or adam8bit_state_bytes)(shapes)
    lines = ["8-bit Adam keeps two states per parameter, tensor by tensor:"]
    for shape in shapes:
        n = int(sp.Mul(*shape))
        if n < MIN_8BIT_SIZE:
            lines.append(
                f"  {shape}: {n:,} < {MIN_8BIT_SIZE:,} elements stay fp32: 2 x 4 x {n:,}"
                f" = {8 * n:,} bytes"
            )
        else:
            blocks = -(-n // EIGHT_BIT_BLOCK)
            lines.append(
                f"  {shape}: 2 x 1 byte x {n:,} + 2 fp32 constants x {blocks:,} blocks of "
                f"{EIGHT_BIT_BLOCK} = {2 * n + 8 * blocks:,} bytes"
            )
    lines.append(f"  total: {quantity_text(value)} bytes")
    note_lines(lines)
    return value


def per_device(how: Reasoning, memory: MemoryBreakdown, **options: Any) -> ParallelMemory:
    """Return what one device holds: :func:`~memtheory.techniques.parallel_memory` (as there).

    Examples
    --------
    >>> from memtheory.counts import ModelCounts
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> counts = ModelCounts(parameters=10**6, activations=0, input_elements=0)
    >>> memory = training_memory(counts, optimizer="adam", precision="mixed-bf16")
    >>> per_device(CORRECT, memory, data=4, zero=3).total
    4000000
    """
    own = own_step(how, "parallel_options")
    chosen = own(options) if own else options
    split = parallel_memory(memory, **chosen)
    settings = ", ".join(f"{key} = {value}" for key, value in chosen.items())
    note_memory(f"What one device holds with {settings}", split.device)
    return split


def in_flight(how: Reasoning, pipeline: int, stage: int, micro_batches: int) -> sp.Expr:
    """Micro-batches of activations stage ``stage`` keeps under 1F1B, read off ``parallel_memory``.

    The whole model's activations for one micro-batch are taken as ``pipeline``
    units; stage ``stage`` holds its ``1/pipeline`` of them for each micro-batch
    in flight.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> [in_flight(CORRECT, 4, i, 8) for i in range(4)]
    [4, 3, 2, 1]
    """
    own = own_step(how, "held_micro_batches")
    if own:
        return sp.sympify(own(pipeline, stage, micro_batches))
    counts = ModelCounts(parameters=1, activations=pipeline, input_elements=0)
    memory = training_memory(counts, optimizer="sgd", precision="fp32")
    split = parallel_memory(memory, pipeline=pipeline, micro_batches=micro_batches)
    kept = split.stages[stage]["activations"]
    held = sp.nsimplify(kept / (memory["activations"] / pipeline))
    note(
        f"Under 1F1B, stage {stage} of {pipeline} (counting from 0) starts {pipeline} - {stage} "
        f"micro-batches before its first backward, at most the {micro_batches} there are: "
        f"min({pipeline} - {stage}, {micro_batches})",
        held,
    )
    return held


def host_ram(how: Reasoning, split: ParallelMemory) -> sp.Expr:
    """Host RAM of one node for CPU offload: :meth:`ParallelMemory.host_per_node`.

    Examples
    --------
    >>> from memtheory.counts import ModelCounts
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> counts = ModelCounts(parameters=10**6, activations=0, input_elements=0)
    >>> memory = training_memory(counts, optimizer="adam", precision="mixed-bf16")
    >>> host_ram(CORRECT, parallel_memory(memory, data=8, zero=3, offload="optimizer"))
    14000000
    """
    own = own_step(how, "host_per_node")
    value = own(split) if own else split.host_per_node()
    if split.host is not None:
        note_memory("Offloaded to host RAM by one device (its shard)", split.host)
        note(
            f"Host RAM of one node: {split.gpus_per_node} devices x "
            f"{quantity_text(split.host.total)} bytes",
            value,
        )
    return value


# -- the mistakes ------------------------------------------------------------------------------
class _LoRAOneMatrix(Reasoning):
    detail = "only A (rank x n_in) counted per adapted map, not B (n_out x rank)"

    def lora_parameter_count(self, network: Network, lora: LoRA) -> sp.Expr:
        maps = linear_maps(network)
        return sp.Add(
            *(lora.rank * maps[name][0] for name in match_targets(network, lora.patterns))
        )


class _FrozenKeepsState(Reasoning):
    detail = "gradients and optimizer state counted for every weight, the frozen ones too"

    def finetune_memory(self, network: Network, **options: Any) -> MemoryBreakdown:
        options = {k: v for k, v in options.items() if k in ("optimizer", "precision",
                                                              "convention")}
        return training_memory(network, **options)


class _NF4ForgotConstants(Reasoning):
    detail = "4 bits per weight, no quantization constants"

    def nf4_bytes(self, elements: int, **options: Any) -> sp.Expr:
        return sp.ceiling(sp.sympify(elements) / 2)

    def constant_bits_per_parameter(self, **blocks: Any) -> sp.Rational:
        return sp.S.Zero


class _NF4ConstantsFp32(Reasoning):
    detail = "the constants kept in fp32, without double quantization"

    def nf4_bytes(self, elements: int, **options: Any) -> sp.Expr:
        return nf4_bytes(elements, **{**options, "double_quant": False})

    def constant_bits_per_parameter(self, **blocks: Any) -> sp.Rational:
        return constant_bits_per_parameter(**{**blocks, "double_quant": False})


class _Adam8bitForgotConstants(Reasoning):
    detail = "two bytes per parameter, without the fp32 constant of each block of 256"

    def adam8bit_state_bytes(self, shapes: list[tuple[int, ...]]) -> sp.Expr:
        return adam8bit_state_bytes(shapes) - sp.Add(
            *(8 * sp.ceiling(sp.Mul(*s) / 256) for s in shapes if sp.Mul(*s) >= MIN_8BIT_SIZE)
        )


class _Adam8bitPaperBlock(Reasoning):
    detail = "one fp32 constant per block of 2,048 values (the paper's block), not 256"

    def adam8bit_state_bytes(self, shapes: list[tuple[int, ...]]) -> sp.Expr:
        large = [sp.Mul(*s) for s in shapes if sp.Mul(*s) >= MIN_8BIT_SIZE]
        return adam8bit_state_bytes(shapes) + sp.Add(
            *(8 * (sp.ceiling(n / PAPER_BLOCK) - sp.ceiling(n / EIGHT_BIT_BLOCK)) for n in large)
        )


class _Adam8bitSmallTensors(Reasoning):
    detail = "small tensors (under 4,096 values) given 8-bit state too"

    def adam8bit_state_bytes(self, shapes: list[tuple[int, ...]]) -> sp.Expr:
        return adam8bit_state_bytes(shapes, min_8bit_size=0)


class _DDPNoBuckets(Reasoning):
    detail = "no gradient buckets (as if gradient_as_bucket_view=True)"

    def parallel_options(self, options: dict[str, Any]) -> dict[str, Any]:
        return {**options, "bucket_view": True}


class _PipelineAllMicroBatches(Reasoning):
    detail = "every micro-batch of the step kept at once (GPipe's schedule, not 1F1B)"

    def held_micro_batches(self, pipeline: int, stage: int, micro_batches: int) -> int:
        return micro_batches


class _PipelineSameEveryStage(Reasoning):
    detail = "one micro-batch per stage, whatever its place in the pipeline"

    def held_micro_batches(self, pipeline: int, stage: int, micro_batches: int) -> int:
        return 1


class _HostOneDevice(Reasoning):
    detail = "one GPU's offloaded state, not the node's (every GPU's process keeps its own)"

    def host_per_node(self, split: ParallelMemory) -> sp.Expr:
        return split.host.total if split.host is not None else sp.S.Zero


class _TensorParallelSplitsAll(Reasoning):
    detail = "every saved tensor divided by t, the replicated ones too"

    def activation_bytes(self, **shape: Any) -> sp.Expr:
        return activation_bytes(**{**shape, "sequence_parallel": True})


class _TensorParallelSplitsNone(Reasoning):
    detail = "tensor parallelism taken to leave the activations whole"

    def activation_bytes(self, **shape: Any) -> sp.Expr:
        return activation_bytes(**{**shape, "tensor_parallel": 1, "sequence_parallel": False})


SCALING_MISCONCEPTIONS = (
    Misconception(
        "lora_one_matrix",
        "counted one of LoRA's two matrices",
        "Each adapted map gets A (rank x n_in) and B (n_out x rank): rank x (n_in + n_out) "
        "trainable parameters.",
        (_LoRAOneMatrix(),),
    ),
    Misconception(
        "frozen_keeps_state",
        "gave the frozen weights gradients and optimizer state",
        "A frozen weight has requires_grad=False: no gradient, no optimizer state, kept once in "
        "its dtype; only the adapters train.",
        (_FrozenKeepsState(),),
    ),
    Misconception(
        "nf4_forgot_constants",
        "stored NF4 weights without their quantization constants",
        "Every block of 64 weights keeps a constant (its absolute maximum): 8 bits each with "
        "double quantization, plus an fp32 constant per 256 of them.",
        (_NF4ForgotConstants(),),
    ),
    Misconception(
        "nf4_constants_fp32",
        "kept the NF4 constants in fp32",
        "Double quantization stores each block's constant in 8 bits, with one fp32 constant per "
        "256 blocks: 8/64 + 32/(64 x 256) bits per weight instead of 32/64.",
        (_NF4ConstantsFp32(),),
    ),
    Misconception(
        "adam8bit_forgot_constants",
        "forgot 8-bit Adam's block constants",
        "Each moment keeps one byte per value and an fp32 absolute maximum per block of 256 "
        "values: 2n + 8 ceil(n/256) bytes for a tensor of n values.",
        (_Adam8bitForgotConstants(),),
    ),
    Misconception(
        "adam8bit_paper_block",
        "took 8-bit Adam's blocks as 2,048 values",
        "Dettmers et al.'s paper quantises in blocks of 2,048 values, but bitsandbytes' 8-bit "
        "optimizers (the ones chapter 17 counts) use blocks of 256: each moment keeps one "
        "fp32 absolute maximum per 256 values, 2n + 8 ceil(n/256) bytes for n values.",
        (_Adam8bitPaperBlock(),),
    ),
    Misconception(
        "adam8bit_small_tensors",
        "gave small tensors 8-bit state",
        "bitsandbytes keeps fp32 state (8 bytes per value) for tensors under 4,096 values, such "
        "as biases.",
        (_Adam8bitSmallTensors(),),
    ),
    Misconception(
        "ddp_forgot_buckets",
        "forgot DDP's gradient buckets",
        "DistributedDataParallel copies every gradient into its all-reduce buckets unless "
        "gradient_as_bucket_view=True: one more gradient's worth per device.",
        (_DDPNoBuckets(),),
    ),
    Misconception(
        "pipeline_wrong_in_flight",
        "kept the wrong number of micro-batches in flight",
        "Under 1F1B, stage i (from 0) of p keeps the activations of min(p - i, m) micro-batches: "
        "the first stage the most, the last one only one.",
        (_PipelineAllMicroBatches(), _PipelineSameEveryStage()),
    ),
    Misconception(
        "host_ram_one_device",
        "sized the node's host RAM for one GPU",
        "Each GPU's process offloads its own partition: a node's host RAM holds all of them.",
        (_HostOneDevice(),),
    ),
    Misconception(
        "tensor_parallel_wrong_split",
        "split the wrong activations across the tensor-parallel devices",
        "Megatron's tensor parallelism splits the attention's tensors and the feed-forward's "
        "inner ones by t; the layer norms, dropouts and block inputs stay whole unless sequence "
        "parallelism splits them too.",
        (_TensorParallelSplitsAll(), _TensorParallelSplitsNone()),
    ),
)
"""The misconceptions of chapters 17 and 18, registered on import."""

register(SCALING_MISCONCEPTIONS)
