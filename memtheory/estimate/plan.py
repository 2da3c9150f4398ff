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
(True, 16, 1024)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import sympy as sp

from memtheory.conventions import convention as _convention
from memtheory.errors import DoesNotFitError, InvalidArgumentError, UnsupportedError
from memtheory.estimate.resolve import ResolvedModel, resolve_model
from memtheory.finetuning import LoRA, apply_lora, finetune_memory
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.gpus import DEFAULT_RESERVE, Budget, ReserveLike, usable_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.precision import precision as _precision
from memtheory.symbols import B, S
from memtheory.tables import Table
from memtheory.techniques.checkpointing import best_network_interval, checkpointed_activations
from memtheory.techniques.parallel import Offload, ParallelMemory, parallel_memory
from memtheory.units import format_bytes
from memtheory.whatif import max_value

__all__ = ["Estimate", "estimate"]


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
        symbols = ", ".join(sorted(x.name for x in self.symbolic.free_symbols))
        lines += [
            "",
            f"peak per device in bytes ({symbols or 'no symbols'}; B = batch, S = sequence):",
            f"  {self.formula}",
            f"convention: {self.convention}",
        ]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

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
            "convention": self.convention,
            "notes": list(self.notes),
        }


def _limit(value: int | None) -> str:
    return "none fits" if value == 0 else str(value)


def _positive(value: int | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgumentError(f"{name} must be a positive whole number, got {value!r}.")


def _checkpointed(
    memory: MemoryBreakdown, network: Network, values: Mapping[str, int]
) -> tuple[MemoryBreakdown, str]:
    """Replace the activations with those of the best checkpoint interval (breakdown convention)."""
    others = {k: v for k, v in values.items() if k != "B"}
    interval = best_network_interval(network, **others)
    kept = checkpointed_activations(network, interval)
    components = dict(memory.components)
    components["activations"] = kept * memory.precision.activations.bytes
    components["activation_gradients"] = kept * memory.precision.activation_gradients.bytes
    note = (
        f"activation checkpointing every {interval} unit(s): the kept unit outputs plus the "
        "largest segment recomputed in the backward pass"
    )
    return MemoryBreakdown(
        components, memory.mode, memory.convention, memory.precision, memory.optimizer,
        (*memory.notes, note), constraints=memory.constraints,
    ), note


def estimate(
    model: str | Mapping[str, Any],
    *,
    batch: int = 1,
    sequence: int | None = None,
    image: int = 224,
    flash: bool = False,
    optimizer: str = "adamw",
    precision: str | None = None,
    lora: int | None = None,
    lora_alpha: float | None = None,
    lora_targets: str | tuple[str, ...] | None = None,
    qlora: bool = False,
    gpus: int = 1,
    zero: int = 0,
    tensor: int = 1,
    pipeline: int = 1,
    offload: Offload = "none",
    checkpointing: bool = False,
    gpu: str | None = None,
    limit: ReserveLike | None = None,
    reserve: ReserveLike = DEFAULT_RESERVE,
    convention: str = "breakdown",
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
    image : int, default 224
    flash : bool, default False
        Memory-efficient attention (no sequence-squared tensors), as
        PyTorch's SDPA flash and memory-efficient kernels on a GPU.
    optimizer : str, default "adamw"
        Any torch optimizer, or ``"adamw-8bit"``, ``"paged-adamw-8bit"``.
    precision : str, optional
        Default ``"mixed-bf16"`` for full training (bf16 weights, fp32 master
        and Adam state), ``"bf16"`` with LoRA/QLoRA or the autograd convention
        (which runs a model in one dtype, as ``model.to(torch.bfloat16)``).
    lora : int, optional
        LoRA rank; QLoRA defaults to 64.
    lora_alpha : float, optional
        Defaults to twice the rank.
    lora_targets : str or tuple of str, optional
        Defaults to ``("q_proj", "v_proj")`` for LoRA (the LoRA paper) and
        ``"all-linear"`` for QLoRA (the QLoRA paper).
    qlora : bool, default False
        NF4 base with double quantization.
    gpus : int, default 1
        Devices in all: data x tensor x pipeline.
    zero : {0, 1, 2, 3}, default 0
    tensor, pipeline : int, default 1
    offload : {"none", "optimizer", "optimizer+parameters"}
    checkpointing : bool, default False
        Activation checkpointing at the best interval (breakdown convention).
    gpu : str, optional
        A card from :data:`memtheory.gpus.GPUS`.
    limit : bytes or str, optional
        The device memory instead of a card (``"24 GB"``).
    reserve : bytes or str, default 1.5 GiB
    convention : {"breakdown", "autograd"}, default "breakdown"

    Examples
    --------
    >>> answer = estimate("resnet50", batch=32, gpu="RTX 3090")
    >>> answer.memory.format("GiB"), answer.max_batch
    ('3.07 GiB', 262)
    """
    for value, name in ((batch, "batch"), (sequence, "sequence"), (image, "image"),
                        (gpus, "gpus"), (tensor, "tensor"), (pipeline, "pipeline"), (lora, "lora")):
        _positive(value, name)
    if gpus % (tensor * pipeline):
        raise InvalidArgumentError(
            f"--gpus {gpus} is not a multiple of tensor x pipeline = {tensor * pipeline}: "
            "data parallelism takes what is left, so it must divide evenly."
        )
    data = gpus // (tensor * pipeline)
    chosen = _convention(convention)
    if checkpointing and chosen.name != "breakdown":
        raise UnsupportedError(
            "--checkpointing is modelled in the breakdown convention; drop --convention."
        )
    resolved = resolve_model(model, batch=B, sequence=S, image=image, flash=flash)
    network = resolved.network
    if sequence is None:
        sequence = min(512, resolved.positions or 512)
    if resolved.positions is not None and sequence > resolved.positions:
        raise InvalidArgumentError(
            f"{resolved.name} takes at most {resolved.positions} positions; --seq {sequence} is "
            "longer. Use a shorter sequence."
        )
    values = {"B": batch, "S": sequence} if resolved.kind == "sequence" else {"B": batch}
    values = {k: v for k, v in values.items() if k in {s.name for s in _free(network)}}
    adapters = None
    if lora is not None or qlora:
        rank = lora or 64
        targets = lora_targets or ("all-linear" if qlora else ("q_proj", "v_proj"))
        adapters = LoRA(rank, lora_alpha, targets=targets)
    uniform = adapters is not None or chosen.name != "breakdown"
    chosen_precision = precision or ("bf16" if uniform else "mixed-bf16")
    _precision(chosen_precision)
    memory = finetune_memory(
        network,
        lora=adapters,
        quantization="nf4" if qlora else None,
        optimizer=optimizer,
        precision=chosen_precision,
        convention=chosen,
    )
    tuned = apply_lora(network, adapters) if adapters else network
    described = f"precision {chosen_precision}: {_precision(chosen_precision).describe()}"
    memory = replace(memory, notes=(described, *memory.notes))
    notes = list(memory.notes)
    if checkpointing:
        memory, _ = _checkpointed(memory, tuned, values)
        notes = list(memory.notes)
    footprint: Footprint = memory
    host = None
    parallel = ""
    if gpus > 1 or zero or offload != "none":
        split: ParallelMemory = parallel_memory(
            memory, data=data, zero=zero, tensor=tensor, pipeline=pipeline, offload=offload,
            network=tuned,
        )
        footprint = split
        notes += [n for n in split.notes if n not in notes]
        host = split.host_per_node() if split.host is not None else None
        parallel = f"{gpus} GPUs (data {data}, tensor {tensor}, pipeline {pipeline}), ZeRO-{zero}"
        if offload != "none":
            parallel += f", offload {offload}"
    evaluated = footprint.evaluate(**values)
    if host is not None:
        host = sp.sympify(host).xreplace({sp.Symbol(k, integer=True, positive=True): v
                                          for k, v in values.items()})
        host = sp.sympify(host).subs({s: values[s.name] for s in sp.sympify(host).free_symbols
                                      if s.name in values})
    budget = usable_memory(gpu, limit=limit, reserve=reserve) if gpu or limit else None
    max_batch = max_sequence = None
    if budget is not None:
        peak = footprint.peak
        max_batch = _largest(peak, "B", budget, {k: v for k, v in values.items() if k != "B"})
        if resolved.kind == "sequence" and "S" in values:
            max_sequence = _largest(peak, "S", budget, {"B": batch}, stop=resolved.positions)
    method = ""
    if adapters is not None:
        method = f"{'QLoRA' if qlora else 'LoRA'} r={adapters.rank} on "
        method += ", ".join(adapters.patterns)
    settings = {
        "batch": batch,
        "sequence": sequence if resolved.kind == "sequence" else None,
        "image": image if resolved.kind == "image" else None,
        "flash": flash,
        "optimizer": optimizer,
        "precision": chosen_precision,
        "method": method,
        "checkpointing": checkpointing,
        "gpus": gpus,
        "data": data,
        "zero": zero,
        "tensor": tensor,
        "pipeline": pipeline,
        "offload": offload,
        "parallel": parallel,
        "parameters": int(network.parameter_count) if network.parameter_count.is_number else None,
        "trainable": int(tuned.parameter_count) if tuned.parameter_count.is_number else None,
        "reserve_bytes": int(budget.reserve) if budget else None,
    }
    return Estimate(
        resolved, settings, footprint, evaluated, budget, max_batch, max_sequence,
        chosen.title, tuple(notes), host,
    )


def _free(network: Network) -> set[sp.Symbol]:
    return set(network.input_shape[0].free_symbols) | set().union(
        *(sp.sympify(d).free_symbols for d in network.input_shape)
    )


def _largest(
    peak: sp.Expr, symbol: str, budget: Budget, values: Mapping[str, int], stop: int | None = None
) -> int:
    try:
        return max_value(peak, symbol, budget.usable, stop=stop, by="total", **values)
    except DoesNotFitError:
        return 0
