"""One answer to "will it fit?": memory per device, the budget, the largest batch and sequence.

:func:`estimate` builds the model (:func:`~memtheory.estimate.resolve.resolve_model`),
derives one training step's memory symbolically in the batch ``B`` and the
sequence length ``S`` (fine-tuning, checkpointing and multi-GPU splits
included), evaluates it at the sizes asked for, compares it with a card's
usable memory (:func:`~memtheory.gpus.usable_memory`: the card less the
reserve) and solves for the largest batch and sequence that fit.

Examples
--------
>>> answer = estimate("gpt2", batch=4, sequence=512, lora=8, gpu="T4")
>>> answer.fits, answer.max_batch, answer.max_sequence
(True, 24, 1024)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import sympy as sp

from memtheory._collector import with_fewer_collections
from memtheory.conventions import convention as _convention
from memtheory.errors import DoesNotFitError, InvalidArgumentError
from memtheory.estimate.accumulation import accumulated, accumulation_steps
from memtheory.estimate.answer import Estimate
from memtheory.estimate.compiled import CompiledFootprint, largest_fitting, position_limit
from memtheory.estimate.derivation_cache import remembered
from memtheory.estimate.devices import Counts, fewest_gpus
from memtheory.estimate.options import (
    check_context_parallel,
    check_fp8,
    check_options,
    check_ring,
    check_scalars,
    check_sizes,
    check_split,
    device_counts,
    step_precision,
)
from memtheory.estimate.resolve import ResolvedModel, model_type, resolve_model, takes_image
from memtheory.estimate.step import Step, step_memory
from memtheory.estimate.trl_step import check_not_trl, trl_estimate
from memtheory.finetuning import LoRA, default_targets
from memtheory.footprint import Footprint
from memtheory.gpus import Budget, ReserveLike, usable_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.models.vision_language import DEFAULT_IMAGE, VISION_LANGUAGE
from memtheory.network import Network
from memtheory.precision import precision as _precision
from memtheory.recipes import Setup, default_recipe, setup_from, trl_recipe_name
from memtheory.symbols import B, S
from memtheory.techniques.activation_offload import offload_activations
from memtheory.techniques.context_parallel import context_parallel as split_sequence
from memtheory.techniques.fsdp2 import FSDP2_NOTE, FSDP2_RECIPE, fsdp2_device, fsdp2_shards
from memtheory.techniques.parallel import Offload, ParallelMemory, parallel_memory
from memtheory.whatif import max_value

__all__ = ["chosen_setup", "estimate"]


@with_fewer_collections
def estimate(
    model: str | Mapping[str, Any],
    *,
    batch: int = 1,
    sequence: int | None = None,
    image: int | None = None,
    setup: Setup | str | Mapping[str, Any] | None = None,
    flash: bool | None = None,
    optimizer: str | None = None,
    precision: str | None = None,
    lora: int | None = None,
    lora_alpha: float | None = None,
    lora_targets: str | tuple[str, ...] | None = None,
    qlora: bool = False,
    gpus: int | str | None = None,
    counts: Counts = "powers of two",
    zero: int | None = None,
    tensor: int = 1,
    pipeline: int = 1,
    sequence_parallel: bool = False,
    offload: Offload | None = None,
    checkpointing: bool | None = None,
    gpu: str | None = None,
    limit: ReserveLike | None = None,
    reserve: ReserveLike | None = None,
    convention: str = "auto",
    grad_accum: int | None = None,
    global_batch: int | None = None,
    activation_offload: bool = False,
    context_parallel: int = 1,
    prompt: int | None = None,
    completion: int | None = None,
    precompute_ref_log_probs: bool | None = None,
) -> Estimate:
    """Estimate one training step's memory per device, and what fits a card.

    Parameters
    ----------
    model : str or mapping
        See :func:`~memtheory.estimate.resolve.resolve_model`.
    batch : int, default 1
        Micro-batch per device.
    sequence : int, optional
        Tokens per sequence; defaults to 512, or the model's limit if smaller.
    image : int, optional
        Image side of a vision model; default 224. Of the vision-language
        models, Qwen2-VL and Qwen2.5-VL take it too (default 448: the image's
        tokens count in the sequence); other language models take none.
    setup : Setup, recipe name or mapping, optional
        Every assumption of the step (:class:`~memtheory.recipes.Setup`). By
        default (``None`` or ``"auto"``) the recipe a user most likely runs
        on a GPU (:func:`~memtheory.recipes.default_recipe`): transformers'
        ``Trainer`` for a language model (peft for LoRA, bitsandbytes NF4 for
        QLoRA), a plain PyTorch loop under ``torch.autocast`` for a vision
        model. The keywords below that default to ``None`` override its fields.
    flash : bool, optional
        Overrides the setup's attention: ``True`` for SDPA's flash or
        memory-efficient kernels (no sequence-squared tensors), ``False``
        for eager attention.
    optimizer : str, optional
        Any torch optimizer, or ``"adamw-8bit"``, ``"paged-adamw-8bit"``;
        default the setup's (``"adamw"`` in every recipe).
    precision : str, optional
        Overrides the setup's precision (``"autocast-bf16"``: ``torch.autocast``
        over fp32 weights; ``"bf16"``: the model cast to bf16; ...). The
        Hugging Face recipes keep the checkpoint's dtype.
    lora : int, optional
        LoRA rank; QLoRA defaults to 64.
    lora_alpha : float, optional
        Defaults to twice the rank.
    lora_targets : str or tuple of str, optional
        Defaults to peft 0.21's choice for the model's family for LoRA
        (:func:`~memtheory.finetuning.default_targets`: ``q_proj, v_proj``
        for Llama, ``query_key_value`` for Falcon; the LoRA paper's
        ``q_proj, v_proj`` for a builder or traced module) and
        ``"all-linear"`` for QLoRA (the QLoRA paper).
    qlora : bool, default False
        NF4 base with double quantization.
    gpus : int or "auto", optional
        Devices in all: data x tensor x pipeline (default tensor x
        pipeline: no data parallelism). ``"auto"``: the fewest
        that fit the card (:func:`~memtheory.estimate.devices.fewest_gpus`;
        needs ``gpu`` or ``limit``), growing the data-parallel size.
    counts : {"powers of two", "any"}, default "powers of two"
        The device counts ``gpus="auto"`` tries.
    zero : {0, 1, 2, 3}, optional
        Default the setup's (0 except in the sharded recipes).
    tensor, pipeline : int, default 1
        Tensor-parallel size (Megatron-style; for a Llama-style decoder split
        tensor by tensor, :mod:`memtheory.techniques.tensor_parallel`) and
        pipeline stages.
    sequence_parallel : bool, default False
        Megatron's sequence parallelism over the tensor-parallel devices.
    offload : {"none", "optimizer", "optimizer+parameters"}, optional
    checkpointing : bool, optional
        Activation checkpointing of every decoder layer, as Hugging Face's
        ``gradient_checkpointing_enable()`` does (chapter 13's model, in
        the breakdown convention: the autograd convention does not follow
        recomputation).
    gpu : str, optional
        A card from :data:`memtheory.gpus.GPUS`.
    limit : bytes or str, optional
        The device memory instead of a card (``"24 GB"``).
    reserve : bytes or str, optional
        Default the setup's (1.5 GiB).
    convention : {"auto", "autograd", "breakdown"}, default "auto"
        ``"auto"``: the exact autograd convention wherever the network and
        options are checked, else the breakdown convention, with the reason
        (:func:`~memtheory.estimate.step.step_memory`).
    grad_accum : int, optional
        Micro-batches per optimizer step (default 1): the gradients then stay
        alive through the later micro-batches
        (:mod:`memtheory.estimate.accumulation`).
    global_batch : int, optional
        Samples per optimizer step, ``batch * grad_accum * data-parallel GPUs``:
        gives ``grad_accum``.
    activation_offload : bool, default False
        The activations saved for backward kept in host memory between the
        passes, as torchtune's ``OffloadActivations`` does
        (:mod:`memtheory.techniques.activation_offload`): one GPU, autograd
        convention; the host memory it needs is the answer's ``host``.
    context_parallel : int, default 1
        GPUs that split each sequence, as PyTorch's ``context_parallel``
        (ring attention) does (:mod:`memtheory.techniques.context_parallel`):
        a Llama-style model with SDPA attention, the sequence a multiple of
        ``2 * context_parallel``, no other split; ``gpus`` is then this count.
    prompt, completion : int, optional
        With ``setup="trl-dpo"`` or ``"trl-sft"`` only: the sequence is their
        sum (:mod:`~memtheory.estimate.trl_step`).
    precompute_ref_log_probs : bool, optional
        With ``setup="trl-dpo"`` only: TRL's ``DPOConfig`` option (default False).

    The TRL recipes (``setup="trl-dpo"``, ``"trl-sft"``) are answered by
    :func:`~memtheory.estimate.trl_step.trl_estimate`: the step functions of
    :mod:`memtheory.finetuning`, to the byte, with the options they do not
    take refused.

    Raises
    ------
    InvalidArgumentError
        For an option with no effect in the setup asked (``lora_alpha``
        without ``lora``, ``sequence`` for a vision model, ``zero`` or
        ``offload`` on one GPU), a tensor-parallel size that does not divide
        the heads, more pipeline stages than blocks, a precision that is not
        floating point, a sequence longer than the model's positions.

    Examples
    --------
    >>> answer = estimate("resnet50", batch=32, gpu="RTX 3090")
    >>> answer.memory.format("GiB"), answer.max_batch
    ('1.75 GiB', 531)
    """
    options = dict(locals())  # the parameters, before any is read
    check_scalars(options)
    check_fp8(precision)
    trl = trl_recipe_name(setup)
    if trl is not None:  # answered by its step function: no Setup expresses it
        return trl_estimate(trl, options)
    check_not_trl(options)
    ring = context_parallel
    replicas = check_context_parallel(
        ring, gpus=gpus, tensor=tensor, pipeline=pipeline, zero=zero, offload=offload,
        sequence_parallel=sequence_parallel, activation_offload=activation_offload,
    )
    auto, count, group = device_counts(
        replicas, sequence_parallel=sequence_parallel, sizes=(batch, sequence, image, lora),
        tensor=tensor, pipeline=pipeline, card=bool(gpu or limit),
    )
    check_options(auto=auto, data=count // group, zero=zero, offload=offload, lora=lora,
                   qlora=qlora, lora_alpha=lora_alpha, lora_targets=lora_targets,
                   global_batch=global_batch, activation_offload=activation_offload, gpus=count)
    chosen = chosen_setup(
        setup, model, lora=lora, qlora=qlora, flash=flash, optimizer=optimizer,
        precision=precision, zero=zero, offload=offload, checkpointing=checkpointing,
        reserve=reserve,
    )
    derived = _derived(
        model, image=image, chosen=chosen, precision=precision, lora=lora,
        lora_alpha=lora_alpha, lora_targets=lora_targets, qlora=qlora, convention=convention,
        sequence=sequence,
    )
    resolved, step = derived.resolved, derived.step
    check_sizes(resolved, sequence, image, takes_image=takes_image(model),
                resizes_images=model_type(model) in VISION_LANGUAGE and not takes_image(model))
    check_split(resolved.network, resolved.name, tensor, pipeline)
    if takes_image(model) and image is None:
        image = DEFAULT_IMAGE
    image = image or 224
    tuned = step.network
    sequence, values = _sizes(resolved, batch, sequence)
    accumulate = accumulation_steps(batch=batch, data=count // group,
                                    grad_accum=grad_accum, global_batch=global_batch)
    extra = _techniques(derived, accumulate, activation_offload=activation_offload, ring=ring,
                        sequence=sequence, zero=chosen.zero)
    compiled = extra.compiled
    memory = cast(MemoryBreakdown, compiled.footprint)
    adapters = derived.adapters
    zero = chosen.zero
    offload = cast(Offload, chosen.offload)
    assumptions = [*derived.assumptions, *extra.assumed]
    notes = [n for n in memory.notes if not n.startswith("precision ")]  # said in assumptions
    budget = (
        usable_memory(gpu, limit=limit, reserve=chosen.reserve_bytes) if gpu or limit else None
    )
    fsdp2 = (adapters is None and tensor == pipeline == 1 and accumulate == 1 and ring == 1
             and not activation_offload and precision is None)

    def shards(data: int) -> dict[str, sp.Expr] | None:
        return _fsdp2_shards(chosen, memory, tuned, data, fsdp2)

    def bf16_step() -> MemoryBreakdown:
        return cast(MemoryBreakdown, _derived(
            model, image=image, chosen=replace(chosen, precision="bf16"), precision=None,
            lora=None, lora_alpha=None, lora_targets=None, qlora=False, convention=convention,
            sequence=sequence).compiled.footprint)

    def split_at(data: int) -> CompiledFootprint:
        return remembered(
            (*derived.key, "parallel", data, zero, tensor, pipeline, offload, sequence_parallel,
             accumulate),
            lambda: _compiled(_fsdp2_split(parallel_memory(
                memory, data=data, zero=zero, tensor=tensor, pipeline=pipeline, offload=offload,
                network=tuned, sequence_parallel=sequence_parallel,
                autocast_copies=chosen.sharded_autocast_copies,
                shards=shards(data),
            ), shards(data), bf16_step, tuned, data)),
            disk=derived.disk,
        )

    search = None
    if auto:
        assert budget is not None
        search = fewest_gpus(
            memory, usable=budget.usable, values=values, zero=zero, tensor=tensor,
            pipeline=pipeline, offload=offload, network=tuned, counts=counts,
            sequence_parallel=sequence_parallel, split_at=split_at,
        )
        count = search.gpus or count
    data = count // group
    footprint: Footprint = memory
    host = extra.host
    parallel = extra.parallel
    if count > 1 or zero or offload != "none" or auto or sequence_parallel:
        compiled = split_at(data)
        split = cast(ParallelMemory, compiled.footprint)
        footprint = split
        notes += [n for n in split.notes if n not in notes]
        host = split.host_per_node() if split.host is not None else None
        parallel = _parallel_words(count, data, tensor, pipeline, zero, sequence_parallel, offload)
    evaluated = compiled.evaluate(**values)
    if host is not None:
        host = sp.sympify(host).subs({s: values[s.name] for s in sp.sympify(host).free_symbols
                                      if s.name in values})
    max_batch = max_sequence = None
    if budget is not None:
        max_batch = _largest(compiled, "B", budget, {k: v for k, v in values.items() if k != "B"})
        if resolved.kind == "sequence" and "S" in values:
            max_sequence = _ring_multiple(
                _largest(compiled, "S", budget, {"B": batch}, stop=resolved.positions), ring
            )
    method = ""
    if adapters is not None:
        method = f"{'QLoRA' if qlora else 'LoRA'} r={adapters.rank} on "
        method += ", ".join(adapters.patterns)
    parameters, trainable = derived.parameters, derived.trainable
    settings = {
        "batch": batch,
        "sequence": sequence if resolved.kind == "sequence" else None,
        "image": image if resolved.kind == "image" or takes_image(model) else None,
        "recipe": chosen.label,
        "setup": chosen.to_dict(),
        "flash": chosen.flash,
        "attention": chosen.attention,
        "optimizer": chosen.optimizer,
        "optimizer_implementation": chosen.implementation,
        "keeps_logits": chosen.keeps_logits,
        "precision": step.precision,
        "method": method,
        "checkpointing": chosen.checkpointing,
        "gpus": count * ring,
        "gpus_asked": group * ring if gpus is None else gpus,
        "context_parallel": ring,
        "data": data,
        "zero": zero,
        "tensor": tensor,
        "pipeline": pipeline,
        "sequence_parallel": sequence_parallel,
        "offload": offload,
        "parallel": parallel,
        "grad_accum": accumulate,
        "global_batch": batch * accumulate * data,
        "activation_offload": bool(activation_offload),
        "parameters": parameters,
        "trainable": trainable,
        "reserve_bytes": int(budget.reserve) if budget else None,
    }
    title = _convention(step.convention).title
    why = _why(step, chosen, resolved, parallel=bool(parallel) and ring == 1,
               tensor=tensor > 1 or sequence_parallel, pipeline=pipeline > 1,
               accumulate=accumulate, fsdp2=FSDP2_NOTE in notes, lora=adapters is not None)
    why += extra.why
    return Estimate(
        resolved, settings, footprint, evaluated, budget, max_batch, max_sequence,
        title, tuple(notes), host, step.convention, why, tuple(assumptions), search,
        compiled=compiled,
    )


OFFLOAD_ASSUMED = (
    "activation offload: saved-tensor hooks around the forward (torchtune's "
    "OffloadActivations; the idea of torch.autograd.graph.save_on_cpu(pin_memory=True) and "
    "Megatron/NeMo's cpu_offloading): the saved activations in pinned host memory between the "
    "passes, at most one layer's of them on the device at a time; the host RAM it needs is "
    "each saved storage once (save_on_cpu needs more: it also copies the saved weights)"
)


RING_ASSUMED = (
    "context parallel {n}: torch.distributed.tensor.experimental.context_parallel over {n} "
    "GPUs (ring attention, all-gather of keys and values, head-tail load balancing; as "
    "Megatron's CP and torchtitan): each GPU holds S/{n} of every activation, the model states "
    "whole (not sharded), and one attention layer's keys and values of the whole sequence in "
    "flight"
)


@dataclass(frozen=True)
class _Techniques:
    """The step with activation offload and context parallelism applied, and what they add."""

    compiled: CompiledFootprint
    host: sp.Expr | None = None
    assumed: tuple[str, ...] = ()
    why: str = ""
    parallel: str = ""


def _techniques(
    derived: _Derived, accumulate: int, *, activation_offload: bool, ring: int, sequence: int,
    zero: int,
) -> _Techniques:
    """Return the step accumulated, offloaded (activation offload) and split (context parallel)."""
    base, host, assumed, why, parallel = derived.compiled, None, [], "", ""
    if activation_offload:
        base, host = _offloaded(derived)
        assumed.append(OFFLOAD_ASSUMED)
        why += ("; activation offload modelled from the saved tensors, not measured (on CPU "
                "the host and the device are one memory)")
    compiled = _accumulated(base, accumulate)
    if ring > 1:
        check_ring(ring, derived.resolved.kind, sequence, zero)
        split = split_sequence(cast(MemoryBreakdown, compiled.footprint), derived.step.network,
                               ring)
        compiled = _compiled(split)
        assumed.append(RING_ASSUMED.format(n=ring))
        why += "; the sequence split across GPUs is modelled (ring attention), not measured"
        parallel = f"{ring} GPUs (context parallel {ring}: ring attention, model states whole)"
    return _Techniques(compiled, host, tuple(assumed), why, parallel)


def _ring_multiple(sequence: int, ring: int) -> int:
    """Return ``sequence`` rounded down to what context parallelism of ``ring`` takes."""
    return sequence - sequence % (2 * ring) if ring > 1 else sequence


def _offloaded(derived: _Derived) -> tuple[CompiledFootprint, sp.Expr]:
    """Return the step with its saved activations offloaded, and the host bytes they need."""
    step = derived.step
    if step.convention != "autograd":
        raise InvalidArgumentError(
            "--activation-offload is derived from the autograd convention's saved tensors, "
            f"and this step uses the breakdown convention ({step.why.split('; ')[-1]}): drop "
            "--activation-offload, or the option that needs the breakdown convention."
        )
    moved = offload_activations(cast(MemoryBreakdown, derived.compiled.footprint), step.network,
                                _precision(step.precision))
    return _compiled(moved.memory), moved.host


def _accumulated(compiled: CompiledFootprint, accumulate: int) -> CompiledFootprint:
    """Return the step with gradients kept across ``accumulate`` micro-batches (itself for 1)."""
    if accumulate == 1:
        return compiled
    memory = cast(MemoryBreakdown, compiled.footprint)
    return _compiled(accumulated(memory, accumulate))


def _parallel_words(
    count: int, data: int, tensor: int, pipeline: int, zero: int, sequence_parallel: bool,
    offload: str,
) -> str:
    """Return the devices in words: ``8 GPUs (data 8, tensor 1, pipeline 1), ZeRO-3``."""
    parallel = f"{count} GPUs (data {data}, tensor {tensor}, pipeline {pipeline}), ZeRO-{zero}"
    if sequence_parallel:
        parallel += ", sequence parallel"
    if offload != "none":
        parallel += f", offload {offload}"
    return parallel


def _falcon_sdpa_math(network: object) -> bool:
    """Whether a Falcon attention layer of ``network`` runs SDPA's math path."""
    return any(getattr(getattr(row.layer, "layer", row.layer), "sdpa_math", False)
               for row in getattr(network, "rows", ()))


def _has_falcon(network: object) -> bool:
    """Whether ``network`` has a Falcon attention layer."""
    return any(hasattr(getattr(row.layer, "layer", row.layer), "sdpa_math")
               for row in getattr(network, "rows", ()))


def _why(
    step: Step, chosen: Setup, resolved: ResolvedModel, *, parallel: bool, tensor: bool,
    pipeline: bool = False, accumulate: int = 1, fsdp2: bool = False, lora: bool = False,
) -> str:
    """Return the convention's reason, with the attention kernel and the split across GPUs."""
    why = step.why
    if lora and step.convention == "autograd" and _has_falcon(resolved.network):
        why += ("; LoRA on Falcon: measured 148 to 320 bytes under the real peft + Trainer step "
                "in two of six cases on tiny models (tests/pytorch/test_peft_tied.py): not yet "
                "exact")
    if accumulate > 1 and step.convention == "autograd":
        why += (f"; {accumulate} micro-batches per optimizer step: the gradients are added to "
                "every moment before the step (an upper bound in the backward pass)")
    if chosen.flash and step.convention == "autograd" and resolved.kind == "sequence":
        if _falcon_sdpa_math(resolved.network):
            why += ("; Falcon's SDPA call (its boolean causal mask, no enable_gqa, one key/value "
                    "head) runs PyTorch's math path, which keeps the S x S probabilities in fp32 "
                    "(measured on CPU; taken to be CUDA's choice too)")
        elif chosen.flash_for(resolved.network, resolved.dtype):
            why += "; the SDPA flash/memory-efficient attention kernel assumed (see below)"
        else:
            why += "; SDPA's math path assumed, as CUDA selects it here (see below)"
    if parallel:
        how = "ZeRO / FSDP, chapter 13" + ("; tensor parallel, chapter 18" if tensor else "")
        if fsdp2:
            per_device = (
                "per device rank 0's timeline of FSDP2's step, unit by unit "
                "(memtheory.techniques.fsdp2; its peak measured to the byte on CPU gloo ranks)"
            )
        elif step.convention == "autograd" and not tensor and not pipeline:
            per_device = (
                "per device the peak of one replica's timeline with each component at the "
                "device's share (each device runs a whole replica's forward and backward)"
            )
        elif step.convention == "autograd":
            per_device = (
                "per device an estimate of its peak, not a bound: the sum of the components "
                "with one replica's activation gradients and temporaries at the device's share "
                "(tensor and pipeline splits of the timeline are not followed)"
            )
        else:
            per_device = "per device the sum of the components (no timeline to split)"
        why += (
            f"; the split across GPUs is modelled ({how}), not measured (no GPU was used): "
            + per_device
        )
    return why


def chosen_setup(
    setup: Setup | str | Mapping[str, Any] | None,
    model: str | Mapping[str, Any],
    *,
    lora: int | None,
    qlora: bool,
    **overrides: Any,
) -> Setup:
    """Return the setup asked for (or the question's default recipe), with the keywords given.

    ``setup`` None or ``"auto"`` is :func:`~memtheory.recipes.default_recipe`
    for the model and method; ``flash`` overrides the attention; the other
    keywords that are not None override the setup's fields of that name.

    Examples
    --------
    >>> chosen_setup("auto", "resnet50", lora=None, qlora=False, zero=3).label
    'pytorch-amp (zero=3)'
    """
    if setup is None or setup == "auto":
        name = default_recipe(kind=_kind(model), lora=lora is not None, qlora=qlora)
        base = Setup.recipe(name)
    else:
        found = setup_from(setup)
        assert found is not None
        base = found
    changes = {k: v for k, v in overrides.items() if v is not None}
    if "flash" in changes:
        changes["attention"] = "sdpa" if changes.pop("flash") else "eager"
    elif base.attention == "sdpa" and model_type(model) in NO_SDPA:
        changes["attention"] = "eager"  # transformers falls back to eager attention
    if qlora and base.quantization is None:
        changes.setdefault("quantization", "nf4")
    return base.changed(**changes)


NO_SDPA: dict[str, str] = {
    "gemma2": "transformers 5.24 models/gemma2/modeling_gemma2.py: _supports_sdpa = False "
    "(SDPA cannot soft-cap the scores), so the model runs eager attention",
}
"""Model types whose transformers implementation has no SDPA path, and where that is said."""


def _kind(model: str | Mapping[str, Any]) -> str:
    """Return "image" for the built-in vision models, else "sequence" (configs are LMs)."""
    from memtheory.estimate.resolve import BUILDER_REGISTRY, BUILDERS

    if isinstance(model, str):
        name = BUILDER_REGISTRY.get(model.strip())
        if name is not None:
            return name.kind
        if model.strip() in BUILDERS:
            return BUILDERS[model.strip()].kind
    return "sequence"


def _assumptions(
    resolved: ResolvedModel, step: Step, setup: Setup, model: str | Mapping[str, Any]
) -> list[str]:
    """Return what the answer assumes, in words: the setup's lines for this model."""
    said = setup.describe(resolved.dtype)
    if step.precision != setup.precision_for(resolved.dtype):
        said[1 if setup.name else 0] = (
            f"precision {step.precision}: {_precision(step.precision).describe()} (a LoRA base "
            "is loaded in one dtype, as peft recipes load it; --precision autocast-bf16 asks for "
            "an fp32 base under torch.autocast)"
        )
    if resolved.kind != "sequence":
        said = [line for line in said if not line.startswith("attention:")]
    elif not setup.flash and (family := model_type(model)) in NO_SDPA:
        said.append(f"attention eager: {NO_SDPA[str(family)]}")
    elif setup.flash and _falcon_sdpa_math(resolved.network):
        said = [("attention: SDPA as Falcon calls it (transformers' default attn_implementation): "
                 "the math path, S x S probabilities kept in fp32")
                if line.startswith("attention:") else line for line in said]
    return said


def _free(network: Network) -> set[sp.Symbol]:
    return set(network.input_shape[0].free_symbols) | set().union(
        *(sp.sympify(d).free_symbols for d in network.input_shape)
    )


def _largest(
    compiled: CompiledFootprint,
    symbol: str,
    budget: Budget,
    values: Mapping[str, int],
    stop: int | None = None,
) -> int:
    """Return the largest ``symbol`` whose peak fits the budget (at most ``stop``), or 0."""
    if compiled.fast and sp.sympify(budget.usable).is_Integer:
        found = largest_fitting(
            lambda v: compiled.peak(**values, **{symbol: v}), int(budget.usable), stop
        )
        if found is not None:
            return found
    try:
        return max_value(
            compiled.footprint.peak, symbol, budget.usable, stop=stop, by="total", **values
        )
    except DoesNotFitError:
        return 0


@dataclass(frozen=True)
class _Derived:
    """What :func:`estimate` derives once per model and setup (:func:`_derived`)."""

    key: tuple[Any, ...]
    disk: bool
    resolved: ResolvedModel
    step: Step
    compiled: CompiledFootprint
    adapters: LoRA | None
    assumptions: tuple[str, ...]
    parameters: int | None
    trainable: int | None


def _derived(
    model: str | Mapping[str, Any],
    *,
    image: int | None,
    chosen: Setup,
    precision: str | None,
    lora: int | None,
    lora_alpha: float | None,
    lora_targets: str | tuple[str, ...] | None,
    qlora: bool,
    convention: str,
    sequence: int | None,
) -> _Derived:
    """Derive the step's memory in ``B`` and ``S``, or take it from the cache (derived once)."""
    source = _model_key(model)
    # Only checkpointing's best interval depends on a size (the sequence): key it then alone.
    key = (
        "estimate step", source, image, repr(chosen), precision, lora, lora_alpha, lora_targets,
        qlora, convention, sequence if chosen.checkpointing else None,
    )

    def derive() -> _Derived:
        resolved, _ = chosen.built_for_kernel(
            lambda flash: resolve_model(model, batch=B, sequence=S, image=image,
                                        flash=flash),
            network=lambda built: built.network, checkpoint_dtype=lambda built: built.dtype)
        chosen_precision = step_precision(chosen, resolved.dtype, precision, lora, qlora)
        _, values = _sizes(resolved, 1, sequence)
        adapters, chosen_targets = None, None
        if lora is not None or qlora:
            targets, chosen_targets = _lora_targets(resolved, model, lora_targets, qlora)
            adapters = LoRA(lora or 64, lora_alpha, targets=targets)
        step = step_memory(
            resolved.network, lora=adapters, qlora=qlora, optimizer=chosen.optimizer,
            precision=chosen_precision, convention=convention, checkpointing=chosen.checkpointing,
            values=values, exact=chosen.convention(), adapter_dtype=chosen.adapter_dtype,
        )
        memory = step.memory
        assumptions = tuple(_assumptions(resolved, step, chosen, model))
        if chosen_targets:
            assumptions += (chosen_targets,)
        compiled = _compiled(memory, resolved.positions)
        disk = source is not None and compiled.fast
        counts = [n.parameter_count for n in (resolved.network, step.network)]
        parameters, trainable = (int(n) if n.is_number else None for n in counts)
        return _Derived(
            key, disk, resolved, step, compiled, adapters, assumptions, parameters, trainable
        )

    if source is None:
        return derive()
    # Kept on disk only where nothing is lost there (no size constraints to register again).
    return remembered(key, derive, keep=lambda derived: derived.disk)


def _lora_targets(
    resolved: ResolvedModel, model: str | Mapping[str, Any],
    asked: str | tuple[str, ...] | None, qlora: bool,
) -> tuple[str | tuple[str, ...], str | None]:
    """Return the adapters' targets and, where not asked for, how they were chosen, in words.

    QLoRA adapts every linear map (the QLoRA paper); LoRA takes peft 0.21's
    default for the model's family (:func:`~memtheory.finetuning.default_targets`).
    """
    if asked:
        return asked, None
    if qlora:
        return "all-linear", None
    targets, source = default_targets(resolved.network, model_type(model))
    return targets, f"LoRA targets {', '.join(targets)}: {source}"


def _fsdp2_shards(
    chosen: Setup, memory: MemoryBreakdown, network: Network, data: int, full: bool,
) -> dict[str, sp.Expr] | None:
    """FSDP2's per-rank model states for its recipe (all trained, ZeRO-3, no offload)."""
    if chosen.name != FSDP2_RECIPE or chosen.zero != 3 or chosen.offload != "none" or not full:
        return None
    return fsdp2_shards(memory, network, data)


def _fsdp2_split(
    split: ParallelMemory, shards: Mapping[str, sp.Expr] | None,
    bf16_step: Callable[[], MemoryBreakdown], network: Network, data: int,
) -> ParallelMemory:
    """FSDP2's per-rank timeline in place of ZeRO-3's split, where its shards were used."""
    if not shards or not split.device.timeline:
        return split
    replica = bf16_step()
    if not replica.timeline_parts:
        return split
    device = fsdp2_device(split.device, replica, network, data, shards)
    return replace(split, stages=(device,), notes=(*split.notes, FSDP2_NOTE))


def _compiled(footprint: Footprint, positions: int | None = None) -> CompiledFootprint:
    """Return ``footprint`` compiled, its peak simplified (kept with it in the cache).

    With ``positions``, the model's position limit does not keep it off the fast tables
    (and so out of the disk cache): :func:`_sizes` refuses a longer sequence and the search
    for the largest one stops there.
    """
    footprint.peak  # noqa: B018 - a cached property
    if positions is None:
        return CompiledFootprint(footprint)
    return CompiledFootprint(footprint, checked=position_limit(positions))


def _model_key(model: str | Mapping[str, Any]) -> str | None:
    """Return the model as part of a cache key (a config file's bytes too); None for a trace."""
    if not isinstance(model, str):
        return json.dumps(model, sort_keys=True, default=repr)
    path = Path(model.strip())
    if ":" in model or path.suffix == ".py":
        return None  # a traced factory: its code is not memtheory's
    try:
        if path.is_file():
            return f"{model} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    except OSError:
        return None
    return model


def _sizes(
    resolved: ResolvedModel, batch: int, sequence: int | None
) -> tuple[int, dict[str, int]]:
    """Return the sequence length (the default where None) and the sizes by symbol name."""
    if sequence is None:
        sequence = min(512, resolved.positions or 512)
    if resolved.positions is not None and sequence > resolved.positions:
        raise InvalidArgumentError(
            f"{resolved.name} takes at most {resolved.positions} positions; --seq {sequence} is "
            "longer. Use a shorter sequence."
        )
    values = {"B": batch, "S": sequence} if resolved.kind == "sequence" else {"B": batch}
    free = {s.name for s in _free(resolved.network)}
    return sequence, {k: v for k, v in values.items() if k in free}
