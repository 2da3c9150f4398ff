"""Steps of the later chapters' calculations, and the misconceptions that do one of them wrong.

Chapters 10-14 compute with memtheory's techniques (the key/value cache,
gradient checkpointing, ZeRO, CPU offload). An
exercise's solver calls these steps with its ``how``
(:class:`~memtheory.exercises.reasoning.Reasoning`): the correct reasoning
has no step of its own and gets the library's function; a misconception
defined here overrides one step, so the same solver recomputes the answer
with that one step wrong. Importing this module registers those
misconceptions in :data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`
(by name, once), so exercise sets can list them.

Examples
--------
>>> from memtheory.exercises.reasoning import CORRECT
>>> kv_cache(CORRECT, layers=2, heads=4, head_dim=8, sequence=16, batch=1)
4096
>>> way = MISCONCEPTIONS["kv_forgot_values"].ways[0]
>>> kv_cache(way, layers=2, heads=4, head_dim=8, sequence=16, batch=1)
2048
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.counts import ModelCounts
from memtheory.dtypes import DType, dtype
from memtheory.exercises.derivation import note_tensors, quantity_text
from memtheory.exercises.misconceptions import (  # noqa: F401 (MISCONCEPTIONS: the doctests)
    MISCONCEPTIONS,
    Misconception,
    register,
)
from memtheory.exercises.reasoning import Reasoning, own_step
from memtheory.exercises.step_log import note, took
from memtheory.layers import MultiHeadAttention
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.techniques import (
    cpu_offload,
    kv_cache_formula,
    uniform_memory,
    uniform_recompute,
    zero_partition,
)
from memtheory.techniques.offload import OFFLOADED, OffloadSplit
from memtheory.techniques.zero import MODEL_STATES
from memtheory.transformer_activations import activation_bytes

__all__ = [
    "attention_saved_bytes",
    "checkpoint_peak",
    "checkpoint_recompute",
    "index_dtype",
    "kv_cache",
    "layer_activations",
    "offloaded",
    "step_implementation",
    "zero_states",
]


def _shape_text(shape: dict[str, Any], prefix: str = "") -> str:
    if not shape:
        return ""
    return prefix + ", ".join(f"{key} = {quantity_text(value)}" for key, value in shape.items())


# -- the steps ---------------------------------------------------------------------------------
def kv_cache(how: Reasoning, **shape: Any) -> sp.Expr:
    """Key/value cache bytes: :func:`memtheory.techniques.kv_cache_formula` (arguments as there).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> kv_cache(CORRECT, layers=1, heads=1, head_dim=1, sequence=1, batch=1)
    4
    """
    own = own_step(how, "kv_cache_formula")
    value = (own or kv_cache_formula)(**shape)
    kv = shape.get("kv_heads", "heads")
    note(
        f"Per layer and token: a key and a value of {kv} x head_dim numbers each, "
        "2 x kv_heads x head_dim x bytes per element; times layers, sequence and batch"
    )
    note(
        f"Key/value cache (keys and values of every layer), in bytes, with {_shape_text(shape)}",
        value,
    )
    return value


def layer_activations(how: Reasoning, **shape: Any) -> sp.Expr:
    """Bytes one transformer layer keeps for its backward pass.

    The correct step is :func:`memtheory.transformer_activations.activation_bytes`
    (arguments as there).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> layer_activations(CORRECT, hidden=768, heads=12, batch=1, sequence=1024)
    89653248
    """
    own = own_step(how, "activation_bytes")
    value = (own or activation_bytes)(**shape)
    note(f"Activations one transformer layer keeps, in bytes{_shape_text(shape, ', with ')}", value)
    return value


def attention_saved_bytes(
    how: Reasoning, *, heads: int, hidden: int, sequence: int, flash: bool
) -> sp.Expr:
    """Bytes one attention layer keeps for backward on one fp16 sequence, standard or flash.

    :meth:`memtheory.layers.MultiHeadAttention.saved_for_backward` with GPT-2's
    attention dropout (0.1): the standard kernel keeps three ``heads x S x S``
    tensors (the softmax output, its one-byte dropout mask, the dropped
    probabilities), 5 bytes per element, Korthikanti et al.'s ``5as/h``; a
    flash kernel keeps none of them but an fp32 log-sum-exp per row and head.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> shape = dict(heads=2, hidden=8, sequence=4)
    >>> standard = attention_saved_bytes(CORRECT, flash=False, **shape)
    >>> standard - attention_saved_bytes(CORRECT, flash=True, **shape)  # 2*4*(5*4 - 4)
    128
    """
    took("attention_saved")
    layer = MultiHeadAttention(heads, dropout=0.1, flash=flash)
    specs = layer.saved_for_backward((1, sequence, hidden))
    own = own_step(how, "attention_specs")
    if own:
        specs = own(specs)
    kind = "a flash kernel" if flash else "the standard kernel"
    note_tensors(
        f"One attention layer with {kind}, one sequence of {sequence}, keeps", specs, "fp16"
    )
    return sp.Add(*(spec.nbytes(dtype("fp16")) for spec in specs))


def checkpoint_peak(how: Reasoning, layers: SizeLike, interval: SizeLike) -> sp.Expr:
    """Peak activations, in layers' worth: :func:`memtheory.techniques.uniform_memory`.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> checkpoint_peak(CORRECT, 12, 4)
    6
    """
    own = own_step(how, "uniform_memory")
    value = (own or uniform_memory)(layers, interval)
    note(
        f"The checkpoints kept, ceil({layers}/{interval}) - 1, plus the layers of the one segment "
        f"recomputed at a time, min({interval}, {layers})"
    )
    note(
        f"Checkpointed peak with {layers} layers and a checkpoint every {interval}, in layers' "
        "worth of activations",
        value,
    )
    return value


def checkpoint_recompute(how: Reasoning, layers: SizeLike, interval: SizeLike) -> sp.Expr:
    """Layers rerun: :func:`memtheory.techniques.uniform_recompute`.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> checkpoint_recompute(CORRECT, 12, 4)
    8
    """
    own = own_step(how, "uniform_recompute")
    value = (own or uniform_recompute)(layers, interval)
    note(
        f"Every segment but the last is rerun: {interval} x (ceil({layers}/{interval}) - 1), "
        f"at most {layers}"
    )
    note(
        f"Layers rerun in the backward pass with {layers} layers, a checkpoint every {interval}",
        value,
    )
    return value


def zero_states(
    how: Reasoning,
    parameters: SizeLike,
    devices: SizeLike,
    stage: int,
    *,
    optimizer: OptimizerLike = "adam",
    precision: PrecisionLike = "mixed-fp16",
) -> MemoryBreakdown:
    """Model states per device under ZeRO ``stage``, accounted through ``how``.

    The same as :func:`memtheory.techniques.zero_model_states`, with the
    accounting (optimizer, precision) and the stage read by ``how``.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.techniques import zero_model_states
    >>> zero_states(CORRECT, 10**9, 8, 2).total == zero_model_states(10**9, 8, 2).total
    True
    """
    counts = ModelCounts(parameters=parameters, activations=0, input_elements=0)
    memory = how.training_memory(counts, optimizer=optimizer, precision=precision)
    states = MemoryBreakdown(
        {k: v for k, v in memory.components.items() if k in MODEL_STATES},
        "training",
        memory.convention,
        memory.precision,
        memory.optimizer,
        memory.notes,
    )
    own = own_step(how, "zero_stage")
    split = zero_partition(states, devices, own(stage) if own else stage)
    note(
        f"ZeRO stage {stage} over {devices} devices: bytes of model states per device", split.total
    )
    return split


def offloaded(how: Reasoning, memory: MemoryBreakdown) -> OffloadSplit:
    """Split ``memory`` between the GPU and the CPU: :func:`memtheory.techniques.cpu_offload`.

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> counts = ModelCounts(parameters=10, activations=0, input_elements=0)
    >>> offloaded(CORRECT, training_memory(counts, optimizer="adam")).gpu.total
    40
    """
    own = own_step(how, "offloaded_components")
    split = cpu_offload(memory, own() if own else OFFLOADED)
    moved = ", ".join(own() if own else OFFLOADED)
    note(f"Offloaded to the CPU: {moved}; left on the GPU (bytes)", split.gpu.total)
    return split


def index_dtype(how: Reasoning) -> DType:
    """Return the element type of max pooling's saved indices (int64, as PyTorch keeps them).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> index_dtype(CORRECT).bytes
    8
    """
    own = own_step(how, "index_dtype")
    chosen = dtype(own() if own else "int64")
    note(f"Max pooling saves its indices as {chosen.name}: {chosen.bytes} bytes each")
    return chosen


def step_implementation(how: Reasoning, implementation: str) -> str:
    """Return the optimizer implementation whose temporaries are counted (the one asked about).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> step_implementation(CORRECT, "foreach")
    'foreach'
    >>> step_implementation(MISCONCEPTIONS["swapped_step_implementation"].ways[0], "foreach")
    'for-loop'
    """
    own = own_step(how, "step_implementation")
    chosen = str(own(implementation) if own else implementation)
    how_many = "all parameter tensors at once" if chosen == "foreach" else "one tensor at a time"
    note(f"The {chosen} implementation computes the step's temporaries for {how_many}")
    return chosen


# -- the mistakes ------------------------------------------------------------------------------
class _KVForgotValues(Reasoning):
    detail = "only the keys cached (half of the key/value cache)"

    def kv_cache_formula(self, **shape: Any) -> sp.Expr:
        return kv_cache_formula(**shape) / 2


class _KVIgnoredSharedHeads(Reasoning):
    detail = "one key/value head per query head, although the heads share them"

    def kv_cache_formula(self, **shape: Any) -> sp.Expr:
        return kv_cache_formula(**{**shape, "kv_heads": None})


class _KVOneLayer(Reasoning):
    detail = "the cache of one attention layer, not of every layer"

    def kv_cache_formula(self, **shape: Any) -> sp.Expr:
        return kv_cache_formula(**{**shape, "layers": 1})


class _KVFp32(Reasoning):
    detail = "the cache counted in fp32 (4 bytes per value)"

    def kv_cache_formula(self, **shape: Any) -> sp.Expr:
        return kv_cache_formula(**{**shape, "dtype": "fp32"})


class _AttentionOneHead(Reasoning):
    detail = "the S x S attention tensors counted for one head, not for each"

    def activation_bytes(self, **shape: Any) -> sp.Expr:
        return activation_bytes(**{**shape, "heads": 1})


class _CheckpointInputsOnly(Reasoning):
    def __init__(self, *, minus_one: bool) -> None:
        self.minus_one = minus_one
        self.detail = "only the kept segment inputs counted" + (
            " (the first is the input itself)" if minus_one else ""
        )

    def uniform_memory(self, layers: SizeLike, interval: SizeLike) -> sp.Expr:
        n, k = sp.sympify(layers), sp.sympify(interval)
        return uniform_memory(n, k) - sp.Min(k, n) + (0 if self.minus_one else 1)


class _RecomputeEverySegment(Reasoning):
    detail = "every segment rerun (k layers each), the last one too"

    def uniform_recompute(self, layers: SizeLike, interval: SizeLike) -> sp.Expr:
        n, k = sp.sympify(layers), sp.sympify(interval)
        return k * sp.ceiling(n / k)


class _ZeroStage(Reasoning):
    def __init__(self, shift: int) -> None:
        self.shift = shift
        self.detail = f"the partitioning of the stage {'after' if shift > 0 else 'before'} it"

    def zero_stage(self, stage: int) -> int:
        return min(max(stage + self.shift, 0), 3)


class _OffloadedWeights(Reasoning):
    detail = "the 16-bit weights moved to the CPU as well"

    def offloaded_components(self) -> tuple[str, ...]:
        return (*OFFLOADED, "parameters")


class _OffloadedStatesOnly(Reasoning):
    detail = "only the optimizer state moved to the CPU"

    def offloaded_components(self) -> tuple[str, ...]:
        return ("optimizer_state", "optimizer_step_counters")


class _IndicesAsFloats(Reasoning):
    detail = "the indices counted at 4 bytes each, like fp32 activations"

    def index_dtype(self) -> str:
        return "int32"


class _SwappedImplementation(Reasoning):
    detail = "the other implementation's temporaries (for-loop and foreach swapped)"

    def step_implementation(self, implementation: str) -> str:
        return {"for-loop": "foreach", "foreach": "for-loop"}.get(implementation, implementation)


class _MaskLeftOut(Reasoning):
    detail = "the one-byte dropout mask on the probabilities left out"

    def attention_specs(self, specs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(spec for spec in specs if spec.dtype is None or spec.dtype.name != "bool")


class _NoLogsumexp(Reasoning):
    detail = "the flash kernel's fp32 log-sum-exp left out"

    def attention_specs(self, specs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(spec for spec in specs if spec.dtype is None or spec.dtype.name != "fp32")


LATER_MISCONCEPTIONS = (
    Misconception(
        "kv_forgot_values",
        "cached the keys but not the values",
        "Every attention layer caches a key and a value per position and key/value head: "
        "2 x layers x kv_heads x head_dim x S x B values.",
        (_KVForgotValues(),),
    ),
    Misconception(
        "kv_ignored_shared_heads",
        "gave every query head its own keys and values",
        "With grouped-query attention only the kv_heads key/value heads are cached; the query "
        "heads share them.",
        (_KVIgnoredSharedHeads(),),
    ),
    Misconception(
        "kv_one_layer",
        "cached one layer instead of all of them",
        "Each attention layer has its own keys and values: multiply by the number of layers.",
        (_KVOneLayer(),),
    ),
    Misconception(
        "kv_fp32",
        "counted the cache in fp32",
        "The cache is kept in the model's dtype: 2 bytes per value in fp16 or bf16.",
        (_KVFp32(),),
    ),
    Misconception(
        "attention_one_head",
        "counted the attention scores once instead of once per head",
        "Every head computes its own S x S scores, softmax and dropout mask: the S^2 terms "
        "grow with the number of heads a.",
        (_AttentionOneHead(),),
    ),
    Misconception(
        "checkpoint_inputs_only",
        "counted only the kept checkpoints",
        "During the backward pass one segment is recomputed and its k layers' activations are "
        "live with the kept inputs: ceil(n/k) - 1 + k layers' worth.",
        (_CheckpointInputsOnly(minus_one=False), _CheckpointInputsOnly(minus_one=True)),
    ),
    Misconception(
        "recompute_every_segment",
        "recomputed the last segment too",
        "The last segment's activations are still there when the backward pass starts: only "
        "the other segments are rerun.",
        (_RecomputeEverySegment(),),
    ),
    Misconception(
        "zero_wrong_stage",
        "partitioned what another ZeRO stage partitions",
        "Stage 1 splits the optimizer state (and master weights), stage 2 the gradients too, "
        "stage 3 the 16-bit weights as well.",
        (_ZeroStage(-1), _ZeroStage(+1)),
    ),
    Misconception(
        "offload_wrong_components",
        "moved the wrong tensors to the CPU",
        "ZeRO-Offload moves what the optimizer step reads and writes (gradients, optimizer "
        "state, fp32 master weights); the 16-bit weights stay for the forward and backward.",
        (_OffloadedWeights(), _OffloadedStatesOnly()),
    ),
    Misconception(
        "attention_mask_left_out",
        "left out the dropout mask on the attention probabilities",
        "Standard attention keeps three a x S x S tensors per layer and sequence: the softmax "
        "output, the dropout mask on it (one byte per element) and the dropped probabilities "
        "(the input of PV), 2 + 1 + 2 = 5 bytes per element in fp16: Korthikanti's 5as/h.",
        (_MaskLeftOut(),),
    ),
    Misconception(
        "flash_logsumexp_left_out",
        "forgot the log-sum-exp a flash kernel keeps",
        "A flash kernel keeps, instead of the S x S probabilities, one fp32 log-sum-exp per "
        "row and head (a x S per sequence) for its backward pass: the saving is the S^2 "
        "tensors less those 4 x a x S bytes.",
        (_NoLogsumexp(),),
    ),
    Misconception(
        "indices_as_floats",
        "counted the pooling indices at 4 bytes",
        "PyTorch keeps max pooling's indices as int64: 8 bytes per output element.",
        (_IndicesAsFloats(),),
    ),
    Misconception(
        "swapped_step_implementation",
        "took the other optimizer implementation's temporaries",
        "PyTorch's for-loop optimizers compute their temporaries one parameter tensor at a "
        "time (for Adam, about twice the largest tensor); the foreach implementation computes "
        "them for every parameter at once (for Adam, the size of all the parameters).",
        (_SwappedImplementation(),),
    ),
)
"""The misconceptions of chapters 10-14, registered on import."""


register(LATER_MISCONCEPTIONS)
