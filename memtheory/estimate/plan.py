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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import sympy as sp

from memtheory._shown import shown
from memtheory.conventions import convention as _convention
from memtheory.errors import DoesNotFitError, InvalidArgumentError
from memtheory.estimate.accumulation import accumulated, accumulation_steps
from memtheory.estimate.compiled import CompiledFootprint, largest_fitting
from memtheory.estimate.derivation_cache import remembered
from memtheory.estimate.devices import Counts, DeviceSearch, fewest_gpus
from memtheory.estimate.resolve import ResolvedModel, model_type, resolve_model
from memtheory.estimate.step import Step, step_memory
from memtheory.finetuning import LoRA
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.gpus import Budget, ReserveLike, usable_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.precision import precision as _precision
from memtheory.recipes import Setup, default_recipe, setup_from
from memtheory.symbols import B, S
from memtheory.tables import Table
from memtheory.techniques.parallel import Offload, ParallelMemory, parallel_memory
from memtheory.units import format_bytes
from memtheory.whatif import max_value

__all__ = ["Estimate", "chosen_setup", "estimate"]


@dataclass(frozen=True)
class Estimate:
    """The answer of :func:`estimate`: what was assumed, the memory per device, and what fits.

    Attributes
    ----------
    model : ResolvedModel
    settings : dict
        Batch, sequence, optimizer, precision, LoRA, devices, ... as used.
    symbolic : Footprint
        Per device, in ``B`` and ``S``.
    memory : Footprint
        Per device, at the sizes asked for.
    budget : Budget or None
        The card (or limit) less the reserve.
    max_batch, max_sequence : int or None
        Largest batch (at the sequence asked for) and sequence (at the batch
        asked for) that fit the budget; 0 when even 1 does not; None without a budget.
    convention : str
        Title of the accounting convention.
    notes : tuple of str
        What was assumed, in words.
    host : sympy expression or None
        Host RAM per node for CPU offload, in bytes.
    """

    model: ResolvedModel
    settings: dict[str, Any]
    symbolic: Footprint
    memory: Footprint
    budget: Budget | None
    max_batch: int | None
    max_sequence: int | None
    convention: str
    notes: tuple[str, ...] = field(default=())
    host: sp.Expr | None = None
    convention_name: str = "breakdown"
    why: str = ""
    assumptions: tuple[str, ...] = field(default=())
    search: DeviceSearch | None = None

    @property
    def peak(self) -> sp.Expr:
        """Bytes per device at its peak (the total, where the convention follows no timeline)."""
        return self.memory.peak

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the usable memory; None without a budget."""
        return None if self.budget is None else bool(self.peak <= self.budget.usable)

    @property
    def formula(self) -> sp.Expr:
        """The peak per device in bytes, in the symbols still free (``B``, ``S``)."""
        return self.symbolic.peak

    @property
    def formula_at_peak(self) -> sp.Expr:
        """The formula of the moment that peaks at the sizes asked for (each ``Max`` resolved)."""
        values = {x: self.settings[_SIZES[x.name]] for x in self.formula.free_symbols
                  if x.name in _SIZES}
        return _branch(self.formula, values)

    @property
    def unit(self) -> str:
        """GiB from 1 GiB of peak up, MiB below."""
        return "GiB" if self.peak >= 2**30 else "MiB"

    def table(self, unit: str | None = None) -> Table:
        """Return the per-component table of one device (text, Markdown or HTML)."""
        return self.memory.table(unit or self.unit)

    def report(self, unit: str | None = None) -> str:
        """Return everything as text: settings, table, total and peak, budget, limits, formula."""
        unit = unit or self.unit
        s = self.settings
        sizes = f"batch {s['batch']}" + (
            f", sequence {s['sequence']}"
            if self.model.kind == "sequence"
            else f", image {s['image']}"
        )
        lines = [
            f"{self.model.name}: {s['parameters']:,} parameters, {s['trainable']:,} trainable",
            f"training step per device: {sizes}, {s['optimizer']}, {s['precision']}"
            + (f", {s['method']}" if s["method"] else "")
            + (f", {s['parallel']}" if s["parallel"] else ""),
            "",
            str(self.table(unit)),
            "",
            f"total {format_bytes(self.memory.total, unit)} "
            f"({format_bytes(self.memory.total, 'GB')}), "
            f"peak {format_bytes(self.peak, unit)} ({format_bytes(self.peak, 'GB')})",
        ]
        if self.host is not None:
            lines.append(
                f"host RAM per node for offload: {format_bytes(self.host, 'GiB')} "
                f"({format_bytes(self.host, 'GB')})"
            )
        if self.budget is not None:
            verdict = "fits" if self.fits else "does NOT fit"
            share = 100 * float(self.peak / self.budget.usable)
            lines.append(f"{self.budget.describe()}: {verdict} ({share:.0f}% of usable)")
            where = f"sequence {s['sequence']}" if self.model.kind == "sequence" else (
                f"image {s['image']}"
            )
            lines.append(f"largest batch at {where}: {_limit(self.max_batch)}")
            if self.model.kind == "sequence":
                cap = f" (model limit {self.model.positions})" if self.model.positions else ""
                lines.append(
                    f"largest sequence at batch {s['batch']}: {_limit(self.max_sequence)}{cap}"
                )
        if self.search is not None:
            lines.append(self.search_line())
        symbols = ", ".join(sorted(x.name for x in self.symbolic.free_symbols))
        branch = self.formula_at_peak
        lines += [
            "",
            f"peak per device in bytes ({symbols or 'no symbols'}; B = batch, S = sequence):",
            f"  {branch}",
        ]
        if branch != self.formula:
            lines.append(
                "  (the moment of the step that peaks at these sizes; the peak is the largest of "
                "several moments, all in --json's formula)"
            )
        lines += [
            f"convention: {self.why or self.convention}",
        ]
        lines += [f"assumed: {line}" for line in self.assumptions]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def search_line(self) -> str:
        """Return the answer of ``gpus="auto"`` in words: the fewest GPUs, each count tried."""
        found = self.search
        if found is None:
            return ""
        s = self.settings
        where = f"batch {s['batch']} per GPU" + (
            f", sequence {s['sequence']}" if self.model.kind == "sequence" else ""
        )
        shown = [(n, peak) for n, peak in found.tried
                 if found.gpus is None or n <= 2 * found.gpus]
        tried = "; ".join(f"{n}: {format_bytes(peak, 'GiB')}" for n, peak in shown)
        answer = (
            str(found.gpus) if found.gpus is not None
            else f"none up to {found.tried[-1][0] if found.tried else 1}"
        )
        return (
            f"fewest GPUs ({found.counts}, ZeRO-{s['zero']}, {where}): {answer} "
            f"(peak per GPU at each count tried: {tried})"
        )

    def _repr_html_(self) -> str:
        """Show the table in a notebook, with the verdict and the limits under it."""
        from html import escape

        lines = [f"total {format_bytes(self.memory.total, 'GiB')}, "
                 f"peak {format_bytes(self.peak, 'GiB')}"]
        if self.budget is not None:
            lines.append(f"{self.budget.describe()}: {'fits' if self.fits else 'does NOT fit'}")
            lines.append(f"largest batch {_limit(self.max_batch)}"
                         + (f", largest sequence {_limit(self.max_sequence)}"
                            if self.max_sequence is not None else ""))
        notes = "".join(f"<br>{escape(line)}" for line in lines)
        return f"{self.table().html()}<p>{escape(self.model.name)}{notes}</p>"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary: bytes as integers, sizes, limits, formula, convention."""
        memory = self.memory
        return {
            "model": self.model.name,
            "source": self.model.source,
            "settings": self.settings,
            "components": {name: int(value) for name, value in memory.components.items()},
            "component_titles": {n: COMPONENT_TITLES.get(n, n) for n in memory.components},
            "total_bytes": int(memory.total),
            "peak_bytes": int(self.peak),
            "host_ram_per_node_bytes": None if self.host is None else int(self.host),
            "budget": None
            if self.budget is None
            else {
                "device": self.budget.device,
                "memory_bytes": int(self.budget.memory),
                "reserve_bytes": int(self.budget.reserve),
                "usable_bytes": int(self.budget.usable),
            },
            "fits": self.fits,
            "max_batch": self.max_batch,
            "max_sequence": self.max_sequence,
            "formula": str(self.formula),
            "formula_at_peak": str(self.formula_at_peak),
            "convention": self.convention_name,
            "convention_title": self.convention,
            "convention_why": self.why,
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
            "unit": self.unit,
            "component_shares": {
                name: float(value / memory.total) if memory.total else 0.0
                for name, value in memory.components.items()
            },
            "usable_share": None if self.budget is None else float(self.peak / self.budget.usable),
            "gpu_search": None
            if self.search is None
            else {
                "gpus": self.search.gpus,
                "counts": self.search.counts,
                "tried": [
                    {"gpus": n, "peak_bytes": int(peak)} for n, peak in self.search.tried
                ],
            },
        }


_SIZES = {"B": "batch", "S": "sequence", "H": "image"}


def _branch(expression: sp.Expr, values: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Replace each ``Max`` by its argument that is largest at ``values``."""
    if isinstance(expression, sp.Max):
        best = max(expression.args, key=lambda arg: sp.sympify(arg).xreplace(values))
        return _branch(best, values)
    if expression.args:
        return expression.func(*(_branch(arg, values) for arg in expression.args))
    return expression


def _limit(value: int | None) -> str:
    return "none fits" if value == 0 else str(value)


def _positive(value: int | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgumentError(f"{name} must be a positive whole number, got {value!r}.")


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
        Image side of a vision model; default 224. A language model takes none.
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
        Defaults to ``("q_proj", "v_proj")`` for LoRA (the LoRA paper) and
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
    auto, count, group = _device_counts(
        gpus, sequence_parallel=sequence_parallel, sizes=(batch, sequence, image, lora),
        tensor=tensor, pipeline=pipeline, card=bool(gpu or limit),
    )
    _check_options(auto=auto, data=count // group, zero=zero, offload=offload, lora=lora,
                   qlora=qlora, lora_alpha=lora_alpha, lora_targets=lora_targets,
                   global_batch=global_batch)
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
    _check_sizes(resolved, sequence, image)
    _check_split(resolved.network, resolved.name, tensor, pipeline)
    image = image or 224
    tuned = step.network
    sequence, values = _sizes(resolved, batch, sequence)
    accumulate = accumulation_steps(batch=batch, data=count // group,
                                    grad_accum=grad_accum, global_batch=global_batch)
    compiled = _accumulated(derived.compiled, accumulate)
    memory = cast(MemoryBreakdown, compiled.footprint)
    adapters = derived.adapters
    zero = chosen.zero
    offload = cast(Offload, chosen.offload)
    assumptions = list(derived.assumptions)
    notes = [n for n in memory.notes if not n.startswith("precision ")]  # said in assumptions
    budget = (
        usable_memory(gpu, limit=limit, reserve=chosen.reserve_bytes) if gpu or limit else None
    )
    def split_at(data: int) -> CompiledFootprint:
        return remembered(
            (*derived.key, "parallel", data, zero, tensor, pipeline, offload, sequence_parallel,
             accumulate),
            lambda: _compiled(parallel_memory(
                memory, data=data, zero=zero, tensor=tensor, pipeline=pipeline, offload=offload,
                network=tuned, sequence_parallel=sequence_parallel,
                autocast_copies=chosen.sharded_autocast_copies,
            )),
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
    host = None
    parallel = ""
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
            max_sequence = _largest(compiled, "S", budget, {"B": batch}, stop=resolved.positions)
    method = ""
    if adapters is not None:
        method = f"{'QLoRA' if qlora else 'LoRA'} r={adapters.rank} on "
        method += ", ".join(adapters.patterns)
    parameters, trainable = derived.parameters, derived.trainable
    settings = {
        "batch": batch,
        "sequence": sequence if resolved.kind == "sequence" else None,
        "image": image if resolved.kind == "image" else None,
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
        "gpus": count,
        "gpus_asked": group if gpus is None else gpus,
        "data": data,
        "zero": zero,
        "tensor": tensor,
        "pipeline": pipeline,
        "sequence_parallel": sequence_parallel,
        "offload": offload,
        "parallel": parallel,
        "grad_accum": accumulate,
        "global_batch": batch * accumulate * data,
        "parameters": parameters,
        "trainable": trainable,
        "reserve_bytes": int(budget.reserve) if budget else None,
    }
    title = _convention(step.convention).title
    why = _why(step, chosen, resolved, parallel=bool(parallel),
               tensor=tensor > 1 or sequence_parallel, accumulate=accumulate)
    return Estimate(
        resolved, settings, footprint, evaluated, budget, max_batch, max_sequence,
        title, tuple(notes), host, step.convention, why, tuple(assumptions), search,
    )


def _device_counts(
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
        _positive(value, name)  # type: ignore[arg-type]
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


def _check_adapters(
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


def _check_split(network: Network, name: str, tensor: int, pipeline: int) -> None:
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


def _check_sharding(zero: int | None, offload: str | None, data: int) -> None:
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


def _step_precision(
    chosen: Setup, dtype: str | None, precision: str | None, lora: int | None, qlora: bool
) -> str:
    """Return the step's precision: the setup's, a LoRA base kept in one dtype; floats only."""
    step_precision = chosen.precision_for(dtype)
    if precision is None and (lora is not None or qlora) and step_precision.startswith("autocast"):
        # Frozen layers under torch.autocast are not modelled: a LoRA base stays in one dtype.
        step_precision = "bf16"
    kinds = _precision(step_precision)
    if kinds.parameters.kind != "float" or kinds.activations.kind != "float":
        raise InvalidArgumentError(
            f"precision {shown(step_precision)} trains in {kinds.parameters.name}: gradients "
            "need floating-point weights. Use bf16, fp16, fp32 or autocast-bf16; for 8-bit or "
            "4-bit weights use --qlora (a frozen quantized base with adapters)."
        )
    return step_precision


def _check_sizes(resolved: ResolvedModel, sequence: int | None, image: int | None) -> None:
    """Refuse a sequence for a vision model, an image for a language model (lengths: _sizes)."""
    if resolved.kind == "image" and sequence is not None:
        raise InvalidArgumentError(
            f"--seq applies to language models; {resolved.name} is a vision model: give its "
            "image side with --image instead."
        )
    if resolved.kind == "sequence" and image is not None:
        raise InvalidArgumentError(
            f"--image applies to vision models; {resolved.name} is a language model: give its "
            "tokens per sequence with --seq instead."
        )
    if sequence is not None and resolved.positions is not None and sequence > resolved.positions:
        raise InvalidArgumentError(
            f"{resolved.name} takes at most {resolved.positions} positions; --seq "
            f"{sequence} is longer. Use a shorter sequence."
        )


def _check_options(
    *, auto: bool, data: int, zero: int | None, offload: str | None, lora: int | None,
    qlora: bool, lora_alpha: Any, lora_targets: Any, global_batch: int | None,
) -> None:
    """Refuse options that would change nothing in the setup asked, before deriving anything."""
    if auto and global_batch is not None:
        raise InvalidArgumentError(
            "--global-batch with --gpus auto: the data-parallel size is what is searched, so "
            "the accumulation steps are not known; give --grad-accum instead."
        )
    if not auto:
        _check_sharding(zero, offload, data)
    _check_adapters(lora, qlora, lora_alpha, lora_targets)


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


def _why(
    step: Step, chosen: Setup, resolved: ResolvedModel, *, parallel: bool, tensor: bool,
    accumulate: int = 1,
) -> str:
    """Return the convention's reason, with the attention kernel and the split across GPUs."""
    why = step.why
    if accumulate > 1 and step.convention == "autograd":
        why += (f"; {accumulate} micro-batches per optimizer step: the gradients are added to "
                "every moment before the step (an upper bound in the backward pass)")
    if chosen.flash and step.convention == "autograd" and resolved.kind == "sequence":
        why += "; the SDPA flash/memory-efficient attention kernel assumed (see below)"
    if parallel:
        how = "ZeRO / FSDP, chapter 13" + ("; tensor parallel, chapter 18" if tensor else "")
        why += (
            f"; the split across GPUs is modelled ({how}), not measured (no GPU was used): per "
            "device the sum of the components, which is not a bound of its peak: the transient "
            "tensors of one device's timeline (activation gradients in the backward pass) are "
            "neither split nor added"
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
            "is kept in one dtype: frozen layers under torch.autocast are not modelled)"
        )
    if resolved.kind != "sequence":
        said = [line for line in said if not line.startswith("attention:")]
    elif not setup.flash and (family := model_type(model)) in NO_SDPA:
        said.append(f"attention eager: {NO_SDPA[str(family)]}")
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
        resolved = resolve_model(model, batch=B, sequence=S, image=image or 224,
                                 flash=chosen.flash)
        step_precision = _step_precision(chosen, resolved.dtype, precision, lora, qlora)
        _, values = _sizes(resolved, 1, sequence)
        adapters = None
        if lora is not None or qlora:
            targets = lora_targets or ("all-linear" if qlora else ("q_proj", "v_proj"))
            adapters = LoRA(lora or 64, lora_alpha, targets=targets)
        step = step_memory(
            resolved.network, lora=adapters, qlora=qlora, optimizer=chosen.optimizer,
            precision=step_precision, convention=convention, checkpointing=chosen.checkpointing,
            values=values, exact=chosen.convention(), adapter_dtype=chosen.adapter_dtype,
        )
        memory = step.memory
        assumptions = tuple(_assumptions(resolved, step, chosen, model))
        compiled = _compiled(memory)
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


def _compiled(footprint: Footprint) -> CompiledFootprint:
    """Return ``footprint`` compiled, its peak simplified (kept with it in the cache)."""
    footprint.peak  # noqa: B018 - a cached property
    return CompiledFootprint(footprint)


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
