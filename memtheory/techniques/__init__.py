"""Memory techniques: each in its own module, each derived from the memory model.

==================  ====================================================================
module              technique
==================  ====================================================================
mixed_precision     16-bit weights and gradients, fp32 master copy and optimizer state
checkpointing       keep every k-th layer's output, recompute the rest (Chen et al. 2016)
accumulation        gradient accumulation: micro-batch memory, effective-batch update
zero                ZeRO stages 1-3: model states partitioned across data-parallel devices
fsdp2               FSDP2 per rank: padded shards, unpadded optimizer state, the step's timeline
offload             ZeRO-Offload: optimizer state, master copy and gradients on the CPU
activation_offload  saved activations in host memory between the passes (save_on_cpu)
context_parallel    the sequence split across devices, attention as a ring (ring attention)
parallel            per device: DDP buckets, ZeRO/FSDP, offload, tensor, sequence, pipeline
tensor_parallel     a Llama-style decoder's tensors under tensor and sequence parallelism
megatron_peak       one device's peak under Megatron tensor and 1F1B pipeline splits
kv_cache            inference: weights plus the key/value cache (grouped, windowed, paged)
working_memory      inference: the prefill's and a decoding step's working memory
quantization        inference: int8 and int4 weights with their scales
==================  ====================================================================

Examples
--------
>>> from memtheory.techniques import bytes_per_parameter, zero_model_states
>>> bytes_per_parameter(optimizer="adam", precision="mixed-fp16")
16
>>> zero_model_states(7_500_000_000, devices=64, stage=3).format("GB", digits=1)
'1.9 GB'
"""

import sys
from importlib import import_module
from importlib.util import find_spec
from types import ModuleType
from typing import TYPE_CHECKING, Any

from memtheory.errors import UnknownAttributeError

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from memtheory.techniques.accumulation import Accumulation, gradient_accumulation
    from memtheory.techniques.activation_offload import (
        OffloadedActivations,
        offload_activations,
        saved_data,
        unit_working_sets,
    )
    from memtheory.techniques.checkpointing import (
        CheckpointPlan,
        Unit,
        best_network_interval,
        best_uniform_interval,
        checkpoint_units,
        checkpointed_activations,
        checkpointed_counts,
        minimal_memory,
        relaxed_optimal_interval,
        tradeoff,
        uniform_memory,
        uniform_recompute,
    )
    from memtheory.techniques.context_parallel import (
        attention_width,
        context_parallel,
        ring_buffers,
    )
    from memtheory.techniques.fsdp2 import (
        fsdp2_device,
        fsdp2_model_states,
        fsdp2_shards,
        fsdp2_timeline,
        gathered_bytes,
        padded_rows,
        shard_rows,
    )
    from memtheory.techniques.kv_cache import (
        CacheLayer,
        GenerationMemory,
        cache_layers,
        generation_memory,
        kv_cache_bytes,
        kv_cache_formula,
        positions_limit,
        weight_bytes,
    )
    from memtheory.techniques.megatron_peak import MegatronPeak, megatron_device_peak
    from memtheory.techniques.mixed_precision import (
        LOSS_SCALER_BYTES,
        autocast,
        autocast_weight_copy_bytes,
        bytes_per_parameter,
        parameter_bytes,
    )
    from memtheory.techniques.offload import OFFLOADED, OffloadSplit, cpu_offload
    from memtheory.techniques.parallel import (
        DDP_BUCKET_CAP_MB,
        REDUCE_BUCKET_SIZE,
        ParallelMemory,
        parallel_memory,
        tensor_parallel_activation_ratio,
    )
    from memtheory.techniques.quantization import QUANTIZATIONS, WeightQuantization, quantization
    from memtheory.techniques.tensor_parallel import DecoderSplit, decoder_split
    from memtheory.techniques.working_memory import WorkingMemory, working_memory
    from memtheory.techniques.zero import ZERO_STAGES, zero_model_states, zero_partition

__all__ = [
    "DDP_BUCKET_CAP_MB",
    "LOSS_SCALER_BYTES",
    "OFFLOADED",
    "QUANTIZATIONS",
    "REDUCE_BUCKET_SIZE",
    "ZERO_STAGES",
    "Accumulation",
    "CacheLayer",
    "CheckpointPlan",
    "DecoderSplit",
    "GenerationMemory",
    "MegatronPeak",
    "OffloadSplit",
    "OffloadedActivations",
    "ParallelMemory",
    "Unit",
    "WeightQuantization",
    "WorkingMemory",
    "attention_width",
    "autocast",
    "autocast_weight_copy_bytes",
    "best_network_interval",
    "best_uniform_interval",
    "bytes_per_parameter",
    "cache_layers",
    "checkpoint_units",
    "checkpointed_activations",
    "checkpointed_counts",
    "context_parallel",
    "cpu_offload",
    "decoder_split",
    "fsdp2_device",
    "fsdp2_model_states",
    "fsdp2_shards",
    "fsdp2_timeline",
    "gathered_bytes",
    "generation_memory",
    "gradient_accumulation",
    "kv_cache_bytes",
    "kv_cache_formula",
    "megatron_device_peak",
    "minimal_memory",
    "offload_activations",
    "padded_rows",
    "parallel_memory",
    "parameter_bytes",
    "positions_limit",
    "quantization",
    "relaxed_optimal_interval",
    "ring_buffers",
    "saved_data",
    "shard_rows",
    "tensor_parallel_activation_ratio",
    "tradeoff",
    "uniform_memory",
    "uniform_recompute",
    "unit_working_sets",
    "weight_bytes",
    "working_memory",
    "zero_model_states",
    "zero_partition",
]


_LAZY = {
    "Accumulation": "memtheory.techniques.accumulation",
    "attention_width": "memtheory.techniques.context_parallel",
    "autocast": "memtheory.techniques.mixed_precision",
    "autocast_weight_copy_bytes": "memtheory.techniques.mixed_precision",
    "best_network_interval": "memtheory.techniques.checkpointing",
    "best_uniform_interval": "memtheory.techniques.checkpointing",
    "bytes_per_parameter": "memtheory.techniques.mixed_precision",
    "cache_layers": "memtheory.techniques.kv_cache",
    "CacheLayer": "memtheory.techniques.kv_cache",
    "checkpoint_units": "memtheory.techniques.checkpointing",
    "checkpointed_activations": "memtheory.techniques.checkpointing",
    "checkpointed_counts": "memtheory.techniques.checkpointing",
    "CheckpointPlan": "memtheory.techniques.checkpointing",
    "context_parallel": "memtheory.techniques.context_parallel",
    "cpu_offload": "memtheory.techniques.offload",
    "DDP_BUCKET_CAP_MB": "memtheory.techniques.parallel",
    "decoder_split": "memtheory.techniques.tensor_parallel",
    "DecoderSplit": "memtheory.techniques.tensor_parallel",
    "fsdp2_device": "memtheory.techniques.fsdp2",
    "fsdp2_model_states": "memtheory.techniques.fsdp2",
    "fsdp2_shards": "memtheory.techniques.fsdp2",
    "fsdp2_timeline": "memtheory.techniques.fsdp2",
    "gathered_bytes": "memtheory.techniques.fsdp2",
    "generation_memory": "memtheory.techniques.kv_cache",
    "GenerationMemory": "memtheory.techniques.kv_cache",
    "gradient_accumulation": "memtheory.techniques.accumulation",
    "kv_cache_bytes": "memtheory.techniques.kv_cache",
    "kv_cache_formula": "memtheory.techniques.kv_cache",
    "LOSS_SCALER_BYTES": "memtheory.techniques.mixed_precision",
    "megatron_device_peak": "memtheory.techniques.megatron_peak",
    "MegatronPeak": "memtheory.techniques.megatron_peak",
    "minimal_memory": "memtheory.techniques.checkpointing",
    "offload_activations": "memtheory.techniques.activation_offload",
    "OFFLOADED": "memtheory.techniques.offload",
    "OffloadedActivations": "memtheory.techniques.activation_offload",
    "OffloadSplit": "memtheory.techniques.offload",
    "padded_rows": "memtheory.techniques.fsdp2",
    "parallel_memory": "memtheory.techniques.parallel",
    "ParallelMemory": "memtheory.techniques.parallel",
    "parameter_bytes": "memtheory.techniques.mixed_precision",
    "positions_limit": "memtheory.techniques.kv_cache",
    "quantization": "memtheory.techniques.quantization",
    "QUANTIZATIONS": "memtheory.techniques.quantization",
    "REDUCE_BUCKET_SIZE": "memtheory.techniques.parallel",
    "relaxed_optimal_interval": "memtheory.techniques.checkpointing",
    "ring_buffers": "memtheory.techniques.context_parallel",
    "saved_data": "memtheory.techniques.activation_offload",
    "shard_rows": "memtheory.techniques.fsdp2",
    "tensor_parallel_activation_ratio": "memtheory.techniques.parallel",
    "tradeoff": "memtheory.techniques.checkpointing",
    "uniform_memory": "memtheory.techniques.checkpointing",
    "uniform_recompute": "memtheory.techniques.checkpointing",
    "Unit": "memtheory.techniques.checkpointing",
    "unit_working_sets": "memtheory.techniques.activation_offload",
    "weight_bytes": "memtheory.techniques.kv_cache",
    "WeightQuantization": "memtheory.techniques.quantization",
    "working_memory": "memtheory.techniques.working_memory",
    "WorkingMemory": "memtheory.techniques.working_memory",
    "zero_model_states": "memtheory.techniques.zero",
    "zero_partition": "memtheory.techniques.zero",
    "ZERO_STAGES": "memtheory.techniques.zero",
}
"""Each public name's module, imported on first use: ``memtheory estimate`` imports the
techniques its question needs (a GPT-2 question none of the inference ones), not all 15."""

_SHADOWED = frozenset({"cache_layers", "context_parallel", "quantization", "working_memory"})
"""Public functions named as a module of the package (each defined there): the package keeps
the function."""


def __getattr__(name: str) -> Any:
    """Import a public name's module (or a submodule) on first use, then keep the name here."""
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    elif not name.startswith("_") and find_spec(f"{__name__}.{name}") is not None:
        value = import_module(f"{__name__}.{name}")  # read as an attribute, never imported
    else:
        raise UnknownAttributeError(f"module 'memtheory.techniques' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Techniques(ModuleType):
    """The package's module type: a function named as its module keeps the name.

    Importing ``memtheory.techniques.working_memory`` sets the package's attribute of that
    name to the module. Imported eagerly, the function was bound after it; imported
    lazily, the module may come second, so it is not let to replace the function.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Techniques
