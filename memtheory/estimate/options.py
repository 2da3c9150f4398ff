"""The options of :func:`~memtheory.estimate.estimate`, checked before anything is derived.

Each check refuses an option that would change nothing in the setup asked for
(``--lora-alpha`` without LoRA, ``--zero`` on one GPU, ``--seq`` for a vision
model), or one that cannot be split as asked (``--tp`` that does not divide the
heads, more pipeline stages than blocks), with the reason and the fix.

Examples
--------
>>> check_sharding(3, None, data=1)
Traceback (most recent call last):
...
memtheory.errors.InvalidArgumentError: --zero 3 shards over the data-parallel GPUs, ...
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import sympy as sp

from memtheory._numpy_types import numpy_types
from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError
from memtheory.estimate.resolve import ResolvedModel
from memtheory.network import Network
from memtheory.precision import precision as _precision
from memtheory.recipes import Setup

__all__ = [
    "check_activation_offload",
    "check_adapters",
    "check_context_parallel",
    "check_fp8",
    "check_options",
    "check_ring",
    "check_scalars",
    "check_sharding",
    "check_sizes",
    "check_split",
    "device_counts",
    "positive",
    "step_precision",
]


_CONTAINERS = frozenset({"model", "setup", "lora_targets"})
"""The options of ``estimate`` that take a mapping or a sequence; the rest take one value."""


def check_scalars(options: Mapping[str, object]) -> None:
    """Refuse an array, list or other container where ``estimate`` takes one value, and batch=None.

    Examples
    --------
    >>> import numpy as np
    >>> check_scalars({"batch": 2, "gpus": np.array([1, 2])})
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: gpus takes one value (a number, a name or None), \
got ndarray array([1, 2]): pass a single value.
    """
    for name, value in options.items():
        if value is None or isinstance(value, str):
            continue
        if name in _CONTAINERS:
            if isinstance(value, Mapping | Setup | tuple | list):
                continue
            raise InvalidArgumentError(
                f"{name} takes a name, a mapping or a Setup, got {type(value).__name__} "
                f"{shown(value)}."
            )
        if not isinstance(value, (numbers.Number, *numpy_types("generic"), sp.Basic)):
            raise InvalidArgumentError(
                f"{name} takes one value (a number, a name or None), got "
                f"{type(value).__name__} {shown(value)}: pass a single value."
            )
    if options.get("batch", 1) is None:
        raise InvalidArgumentError("batch must be a positive whole number, got None.")


def positive(value: int | None, name: str) -> None:
    """Refuse a size or count that is given and is not a positive whole number.

    Examples
    --------
    >>> positive(None, "sequence"), positive(4, "batch")
    (None, None)
    >>> positive(0, "batch")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: batch must be a positive whole number, got 0.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgumentError(f"{name} must be a positive whole number, got {value!r}.")


def device_counts(
    gpus: int | str | None,
    *,
    sequence_parallel: bool,
    sizes: tuple[int | None, ...],
    tensor: int,
    pipeline: int,
    card: bool,
) -> tuple[bool, int, int]:
    """Check the device options; return whether ``gpus="auto"``, the count, tensor x pipeline.

    ``sizes`` are the batch, sequence, image and LoRA rank, each None or positive.
    """
    if isinstance(gpus, str) and gpus != "auto":
        raise InvalidArgumentError(
            f"gpus must be a positive whole number or 'auto', got {gpus!r}."
        )
    if sequence_parallel not in (True, False):
        raise InvalidArgumentError(
            f"sequence_parallel must be True or False, got {sequence_parallel!r}."
        )
    auto = gpus == "auto"
    count = 1 if auto or gpus is None else gpus
    batch, sequence, image, lora = sizes
    for given, name in ((tensor, "tensor"), (pipeline, "pipeline")):
        if given is None:
            raise InvalidArgumentError(f"{name} must be a positive whole number, got None.")
    for value, name in ((batch, "batch"), (sequence, "sequence"), (image, "image"),
                        (count, "gpus"), (tensor, "tensor"), (pipeline, "pipeline"),
                        (lora, "lora")):
        positive(value, name)  # type: ignore[arg-type]
    assert isinstance(count, int)
    group = tensor * pipeline
    if auto or gpus is None:
        count = group
    if count % group:
        raise InvalidArgumentError(
            f"--gpus {gpus} is not a multiple of tensor x pipeline = {group}: "
            "data parallelism takes what is left, so it must divide evenly."
        )
    if auto and not card:
        raise InvalidArgumentError(
            "--gpus auto looks for the fewest GPUs that fit a card: name one with --gpu "
            '(e.g. --gpu H100-80GB) or --limit "80 GB".'
        )
    return auto, count, group


def check_adapters(
    lora: int | None, qlora: bool, lora_alpha: Any, lora_targets: Any
) -> None:
    """Refuse LoRA's options without LoRA: they would change nothing."""
    if lora is None and not qlora:
        for value, flag in ((lora_alpha, "--lora-alpha"), (lora_targets, "--lora-targets")):
            if value is not None:
                raise InvalidArgumentError(
                    f"{flag} applies to LoRA adapters, and none were asked for: add --lora RANK "
                    "(or --qlora), or drop it."
                )


def check_split(network: Network, name: str, tensor: int, pipeline: int) -> None:
    """Refuse a tensor-parallel size that splits heads, more stages than blocks."""
    heads = [int(h) for row in network.rows
             if (h := getattr(row.layer, "heads", None)) is not None and sp.sympify(h).is_Integer]
    if tensor > 1 and heads and heads[0] % tensor:
        raise InvalidArgumentError(
            f"--tp {tensor} does not divide {name}'s {heads[0]} attention heads: tensor "
            "parallelism gives each GPU whole heads. Choose a divisor of the heads."
        )
    blocks = len(heads) or len(network.rows) - 1
    if pipeline > max(blocks, 1):
        raise InvalidArgumentError(
            f"--pp {pipeline} is more pipeline stages than {name} has blocks ({blocks}): each "
            "stage needs at least one. Use at most that many."
        )


def check_sharding(zero: int | None, offload: str | None, data: int) -> None:
    """Refuse ZeRO and CPU offload with one data-parallel GPU: nothing they do is modelled there."""
    if data == 1 and zero:
        raise InvalidArgumentError(
            f"--zero {zero} shards over the data-parallel GPUs, and there is one: it changes "
            "nothing. Give --gpus N (more than tensor x pipeline), or --gpus auto with a card."
        )
    if data == 1 and offload not in (None, "none"):
        raise InvalidArgumentError(
            f"--offload {offload} is modelled as ZeRO's offload across data-parallel GPUs; "
            "with one GPU it is not (DeepSpeed's single-GPU ZeRO-Offload is not modelled). "
            "Give --gpus N."
        )


def step_precision(
    chosen: Setup, dtype: str | None, precision: str | None, lora: int | None, qlora: bool
) -> str:
    """Return the step's precision: the setup's, a LoRA base kept in one dtype; floats only."""
    step_precision = chosen.precision_for(dtype)
    if precision is None and (lora is not None or qlora) and step_precision.startswith("autocast"):
        # A LoRA base is loaded in one dtype, as peft recipes load it (torch_dtype=bfloat16);
        # an fp32 base under torch.autocast is what --precision autocast-bf16 asks for.
        step_precision = "bf16"
    kinds = _precision(step_precision)
    if kinds.parameters.kind != "float" or kinds.activations.kind != "float":
        raise InvalidArgumentError(
            f"precision {shown(step_precision)} trains in {kinds.parameters.name}: gradients "
            "need floating-point weights. Use bf16, fp16, fp32 or autocast-bf16; for 8-bit or "
            "4-bit weights use --qlora (a frozen quantized base with adapters)."
        )
    if kinds.parameters.name.startswith("fp8") or kinds.optimizer_state.name.startswith("fp8"):
        raise InvalidArgumentError(
            f"precision {shown(step_precision)} would keep the weights, gradients and optimizer "
            f"state in 8-bit floats, which no training stack does. {FP8_TRAINING}"
        )
    return step_precision


FP8_TRAINING = (
    "FP8 training is not modelled yet. What is known from the source: torchao's Float8Linear "
    "(torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args) saves the high-precision "
    "input and weight for backward (ctx.save_for_backward(input_hp, weight_hp_t)) and casts "
    "them, and the output gradient, to float8 inside each matmul with one fp32 scale per "
    "tensor (tensorwise dynamic, i.e. current, scaling); weights, gradients and optimizer state "
    "stay in bf16/fp32, as do norms and attention (convert_to_float8_training swaps only "
    "nn.Linear modules). So --precision bf16 (a "
    "bf16 model) answers for the model states and saved tensors of torchao's recipe; its float8 "
    "copies are transients per matmul whose size depends on torch.compile's fusion, which "
    "cannot be measured on CPU. Transformer Engine's delayed scaling also keeps an amax "
    "history per quantized tensor (DelayedScaling(amax_history_len=1024), fp32) and its own "
    "saved tensors, which are not modelled."
)
"""Why ``--precision fp8`` is refused, and what answers the nearest question."""

_FP8_WORDS = frozenset({"fp8", "float8", "fp8-training", "fp8_training", "float8-training",
                        "te-fp8", "torchao-fp8"})
"""Names a user may give for FP8 training (not an 8-bit element type for every tensor)."""


def check_fp8(precision: object) -> None:
    """Refuse FP8 training asked by name (``--precision fp8``) with what is known of it.

    Examples
    --------
    >>> check_fp8("bf16")
    >>> check_fp8("fp8")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --precision fp8: FP8 training is not modelled yet. ...
    """
    if isinstance(precision, str) and precision.strip().lower() in _FP8_WORDS:
        raise InvalidArgumentError(f"--precision {precision.strip()}: {FP8_TRAINING}")


def check_sizes(
    resolved: ResolvedModel,
    sequence: int | None,
    image: int | None,
    takes_image: bool = False,
    resizes_images: bool = False,
) -> None:
    """Refuse a sequence for a vision model, an image for a language model (lengths: _sizes).

    ``takes_image``: the language model reads an image of any size (Qwen2-VL), so
    ``image`` is its side. ``resizes_images``: a vision-language model that
    resizes every image to one size (LLaVA, Gemma 3), so ``image`` changes nothing.
    """
    if resolved.kind == "sequence" and image is not None and resizes_images:
        raise InvalidArgumentError(
            f"--image: {resolved.name} resizes every image to its vision tower's image_size, "
            "so its image tokens are fixed: leave --image unset."
        )
    if resolved.kind == "image" and sequence is not None:
        raise InvalidArgumentError(
            f"--seq applies to language models; {resolved.name} is a vision model: give its "
            "image side with --image instead."
        )
    if resolved.kind == "sequence" and image is not None and not takes_image:
        raise InvalidArgumentError(
            f"--image applies to vision models; {resolved.name} is a language model: give its "
            "tokens per sequence with --seq instead."
        )
    if sequence is not None and resolved.positions is not None and sequence > resolved.positions:
        raise InvalidArgumentError(
            f"{resolved.name} takes at most {resolved.positions} positions; --seq "
            f"{sequence} is longer. Use a shorter sequence."
        )


def check_options(
    *, auto: bool, data: int, zero: int | None, offload: str | None, lora: int | None,
    qlora: bool, lora_alpha: Any, lora_targets: Any, global_batch: int | None,
    activation_offload: bool = False, gpus: int = 1,
) -> None:
    """Refuse options that would change nothing in the setup asked, before deriving anything."""
    if auto and global_batch is not None:
        raise InvalidArgumentError(
            "--global-batch with --gpus auto: the data-parallel size is what is searched, so "
            "the accumulation steps are not known; give --grad-accum instead."
        )
    if not auto:
        check_sharding(zero, offload, data)
    check_adapters(lora, qlora, lora_alpha, lora_targets)
    check_activation_offload(activation_offload, auto=auto, gpus=gpus)


def check_activation_offload(offload: object, *, auto: bool, gpus: int) -> None:
    """Refuse activation offload where it is not modelled: more than one GPU, not a bool.

    Examples
    --------
    >>> check_activation_offload(True, auto=False, gpus=1)
    >>> check_activation_offload(True, auto=False, gpus=8)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --activation-offload is modelled on one GPU ...
    """
    if offload not in (True, False):
        raise InvalidArgumentError(
            f"activation_offload must be True or False, got {shown(offload)}."
        )
    if offload and (auto or gpus > 1):
        raise InvalidArgumentError(
            "--activation-offload is modelled on one GPU (a replica's saved tensors, moment by "
            "moment); with several GPUs (data, ZeRO/FSDP, tensor, pipeline or --gpus auto) it is "
            "not modelled yet. Drop --gpus/--tp/--pp, or drop --activation-offload."
        )


def check_context_parallel(
    size: object, *, gpus: int | str | None, tensor: int, pipeline: int, zero: int | None,
    offload: str | None, sequence_parallel: bool, activation_offload: bool,
) -> int | str | None:
    """Refuse a context-parallel size that is not a count, or a split it is not modelled with.

    Returns the ``gpus`` that hold replicas: ``gpus`` itself without context
    parallelism, None (one replica, split) with it.

    Examples
    --------
    >>> check_context_parallel(1, gpus=8, tensor=1, pipeline=1, zero=None, offload=None,
    ...                        sequence_parallel=False, activation_offload=False)
    8
    >>> check_context_parallel(4, gpus=None, tensor=1, pipeline=1, zero=None, offload=None,
    ...                        sequence_parallel=False, activation_offload=False)
    >>> check_context_parallel(4, gpus=8, tensor=1, pipeline=1, zero=None, offload=None,
    ...                        sequence_parallel=False, activation_offload=False)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --cp 4 is modelled alone: ...
    >>> check_context_parallel(None, gpus=8, tensor=1, pipeline=1, zero=None, offload=None,
    ...                        sequence_parallel=False, activation_offload=False)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: context_parallel must be a positive whole number, ...
    """
    if size is None:  # not "no split": that is 1, the default
        raise InvalidArgumentError(
            "context_parallel must be a positive whole number, got None. Leave it out (1: "
            "no context parallelism) or give the GPUs that split each sequence.")
    positive(size, "context_parallel")  # type: ignore[arg-type]
    if size == 1:
        return gpus
    others = [flag for flag, given in (
        (f"--gpus {gpus}", gpus not in (None, size)), (f"--tp {tensor}", tensor != 1),
        (f"--pp {pipeline}", pipeline != 1), (f"--zero {zero}", bool(zero)),
        (f"--offload {offload}", offload not in (None, "none")),
        ("--sequence-parallel", bool(sequence_parallel)),
        ("--activation-offload", bool(activation_offload)),
    ) if given]
    if others:
        raise InvalidArgumentError(
            f"--cp {size} is modelled alone: {size} GPUs that split each sequence, the model "
            f"states whole on each; with {', '.join(others)} it is not modelled yet. Drop "
            f"{'it' if len(others) == 1 else 'them'}, or --cp (--gpus is then {size})."
        )
    return None


def check_ring(size: int, kind: str, sequence: int, zero: int | None) -> None:
    """Refuse context parallelism for a vision model, a recipe that shards, an uneven sequence.

    PyTorch's head-tail load balancer cuts the sequence into ``2 * size`` equal
    chunks (torch 2.13 ``_context_parallel/_load_balancer.py``: ``seq_length %
    (world_size * 2)``).

    Examples
    --------
    >>> check_ring(4, "sequence", 4096, 0)
    >>> check_ring(4, "sequence", 1020, 0)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --cp 4 needs the sequence a multiple of 8 ...
    """
    if kind != "sequence":
        raise InvalidArgumentError(
            f"--cp {size} splits a sequence across GPUs, and this is a vision model: drop --cp."
        )
    if zero:
        raise InvalidArgumentError(
            f"--cp {size} is modelled with the model states whole on each GPU; the recipe "
            f"shards them (ZeRO-{zero}), which is not modelled with it yet. Use --zero 0 or "
            "another recipe, or drop --cp."
        )
    if sequence % (2 * size):
        raise InvalidArgumentError(
            f"--cp {size} needs the sequence a multiple of {2 * size} (PyTorch's "
            f"context_parallel balances causal attention by cutting it into {2 * size} equal "
            f"chunks, two per GPU); --seq {sequence} is not. Use --seq "
            f"{max(2 * size, sequence - sequence % (2 * size))}."
        )
