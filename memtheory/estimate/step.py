"""One replica's training step, in the exact convention wherever it has been checked.

:func:`step_memory` is what :func:`~memtheory.estimate.estimate` asks for one
model replica (before any multi-GPU split). It prefers the **autograd**
convention (chapter 11, "Theory vs measurement": PyTorch's saved tensors,
gradients and optimizer temporaries followed to the step's peak, 0 bytes off
``memtheory.torch.measure`` on CPU for every layer marked checked). It falls
back to the **breakdown** convention (chapter 4, "Backpropagation and the x2":
every kept output and its gradient, eager attention's scores included: an
estimate, not a bound, see :data:`BOUND`) only where the exact one cannot
follow the step, and says why:

* QLoRA's 4-bit base and 8-bit optimizer state run bitsandbytes' CUDA kernels,
  which cannot be measured on CPU;
* activation checkpointing recomputes layers in the backward pass, which
  the autograd convention does not follow; the breakdown convention's
  checkpointing model is used instead: every decoder layer a checkpoint, as
  Hugging Face's ``gradient_checkpointing_enable()`` does it (each layer's
  input kept, one layer recomputed at a time; ``checkpointing="every-layer"``,
  the default for ``True``), or chapter 13's best interval
  (``checkpointing="best-interval"``, "Checkpointing, sharding and offload");
* a layer the autograd convention has not been checked on (it refuses it).

``mixed-*`` precision (an fp32 master copy, as DeepSpeed's bf16 mode keeps)
runs under the autograd convention too: the 16-bit model's forward and
backward, exact, with the master weights, the fp32 optimizer state and the
optimizer step's fp32 gradient modelled from DeepSpeed's source
(:mod:`memtheory.conventions.autograd.master_weights`), which
:data:`MASTER` says.

Defaults: ``torch.autocast`` bf16 for full training (fp32 weights, gradients
and Adam state; bf16 activations and autocast's weight copies; chapter 7), and
one dtype, bf16, for LoRA (the base loaded in bf16, as LoRA recipes do; an
fp32 base under autocast, each frozen weight cast per call, when asked for).

Examples
--------
>>> from memtheory.models import gpt2
>>> step = step_memory(gpt2("small", batch=1, sequence=128))
>>> step.convention, step.precision
('autograd', 'autocast-bf16')
>>> step_memory(gpt2("small", batch=1, sequence=128), checkpointing=True).convention
'breakdown'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from memtheory.conventions.autograd import AutogradConvention
from memtheory.conventions.autograd.master_weights import DEEPSPEED
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.finetuning import Frozen, LoRA, LoRAAttention, apply_lora, finetune_memory
from memtheory.finetuning.memory import EIGHT_BIT_OPTIMIZERS
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.precision import precision as _precision
from memtheory.registry import normalize_name
from memtheory.techniques.checkpointing import (
    best_network_interval,
    checkpointed_activations,
    every_layer,
    repeated_layers,
)

__all__ = [
    "BREAKDOWN_RATIO",
    "CHECKPOINTING",
    "CONVENTIONS",
    "MASTER",
    "Step",
    "default_precision",
    "step_memory",
]

CONVENTIONS = ("auto", "autograd", "breakdown")
"""What ``convention=`` takes: ``"auto"`` (exact where checked, else breakdown), or one of them."""

CHECKPOINTING = ("every-layer", "best-interval")
"""What ``checkpointing=`` names besides ``True`` (``"every-layer"``) and ``False``.

``"every-layer"``: Hugging Face's ``model.gradient_checkpointing_enable()``,
every decoder layer a checkpoint; ``"best-interval"``: chapter 13's model,
a checkpoint every ``k`` units at the ``k`` with the least memory (no
framework picks it for you).
"""

EXACT = (
    "autograd: exact, every layer checked byte for byte against PyTorch on CPU "
    "(chapter 11, Theory vs measurement)"
)
MASTER = (
    "autograd: the forward and backward exact, every layer checked byte for byte against "
    "PyTorch on CPU (chapter 11, Theory vs measurement); the fp32 master weights, fp32 "
    f"optimizer state and the optimizer step's fp32 gradient modelled from DeepSpeed's "
    f"source ({DEEPSPEED}), not measured"
)
BREAKDOWN_RATIO = (0.37, 4.3)
"""Breakdown total over the exact peak, least and most observed where both conventions answer.

2,500 random small networks (MLPs, CNNs, GPT-2 and Llama-style decoders of
1-2 layers up to 1,024 positions; fp32, bf16, autocast-bf16; SGD, Adam,
AdamW; eager and flash), ``tests/test_breakdown_vs_autograd.py``'s
strategies: low with eager attention at long sequences (its backward holds
several ``(B, a, S, S)`` gradients, fp32 under bf16, where the x2 rule
counts one), high for small CNNs in fp32.
"""

BOUND = (
    "breakdown: every kept output and its gradient, an estimate, not a bound (chapter 4, the "
    f"x2 rule; {BREAKDOWN_RATIO[0]}x to {BREAKDOWN_RATIO[1]}x the exact peak on random small "
    "networks where both conventions answer)"
)


@dataclass(frozen=True)
class Step:
    """One replica's step memory and how it was derived.

    Attributes
    ----------
    memory : MemoryBreakdown
        In the symbols the network was built with.
    convention : {"autograd", "breakdown"}
    why : str
        The convention in words, and the reason for a fallback.
    precision : str
        The precision name used.
    network : Network
        The network as trained (LoRA adapters applied).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> step = step_memory(gpt2("small", batch=1, sequence=128))
    >>> step.convention, step.precision
    ('autograd', 'autocast-bf16')
    >>> step.why.split(":")[0], step.memory.peak
    ('autograd', 2312683348)
    """

    memory: MemoryBreakdown
    convention: str
    why: str
    precision: str
    network: Network


def default_precision(adapters: bool) -> str:
    """Return the precision used when none is asked for.

    Examples
    --------
    >>> default_precision(False), default_precision(True)
    ('autocast-bf16', 'bf16')
    """
    return "bf16" if adapters else "autocast-bf16"


def _blockers(
    qlora: bool, optimizer: str, precision: str, checkpointing: bool
) -> list[str]:
    """Why the autograd convention cannot follow these options (empty when it can)."""
    found = []
    if qlora:
        found.append("QLoRA's 4-bit base runs bitsandbytes' CUDA kernels, not measurable on CPU")
    key = normalize_name(optimizer, prefixes=("bnb.optim.", "bitsandbytes.optim."))
    if key in EIGHT_BIT_OPTIMIZERS:
        found.append(f"{optimizer}'s 8-bit state runs bitsandbytes' CUDA kernels")
    if checkpointing:
        found.append(
            "the autograd convention does not follow activation checkpointing's recomputation"
        )
    return found


def _unmeasured_adapters(tuned: Network) -> str | None:
    """Why the autograd convention cannot follow this LoRA-tuned network, in words, or None.

    Adapters inside one fused attention layer (the builders' GPT-2) and
    frozen layers whose step was not measured frozen are refused by it with
    a message about its internals; this says the same to a user.
    """
    fused = [row.name for row in tuned.rows if isinstance(row.layer, LoRAAttention)]
    if fused:
        return (
            f"LoRA adapters inside a fused attention layer ('{fused[0]}'; GPT-2's c_attn) are "
            "not measured under the autograd convention"
        )
    frozen = [
        f"{row.layer.layer.kind} '{row.name}'" for row in tuned.rows
        if isinstance(row.layer, Frozen) and not row.layer.autograd_checked
    ]
    if frozen:
        return (
            f"LoRA freezes layers whose frozen step is not measured under the autograd "
            f"convention ({', '.join(frozen[:2])}{', ...' if len(frozen) > 2 else ''})"
        )
    return None


def step_memory(
    network: Network,
    *,
    lora: LoRA | None = None,
    qlora: bool = False,
    optimizer: str = "adamw",
    precision: str | None = None,
    convention: str = "auto",
    checkpointing: bool | str = False,
    values: Mapping[str, int] | None = None,
    exact: AutogradConvention | None = None,
    adapter_dtype: str | None = None,
) -> Step:
    """Return one replica's training-step memory, exactly where the network is checked.

    Parameters
    ----------
    network : Network
        As built for full training.
    lora : LoRA, optional
        Adapters (every weight frozen).
    qlora : bool, default False
        NF4 base (needs ``lora``).
    optimizer : str, default "adamw"
    precision : str, optional
        Defaults to :func:`default_precision`.
    convention : {"auto", "autograd", "breakdown"}, default "auto"
        ``"auto"``: autograd where it is checked, else breakdown with the
        reason in :attr:`Step.why`; ``"autograd"`` raises instead.
    checkpointing : bool or {"every-layer", "best-interval"}, default False
        Activation checkpointing (breakdown convention): ``True`` or
        ``"every-layer"`` as Hugging Face's ``gradient_checkpointing_enable()``
        does it, every decoder layer a checkpoint (``True`` on a network
        without decoder layers: the best interval); ``"best-interval"``
        chapter 13's model at its best interval.
    values : mapping, optional
        Sizes other than the batch (``{"S": 4096}``) to pick the interval at.
    exact : AutogradConvention, optional
        The exact convention to use, with its optimizer implementation and
        whether the loop keeps the logits (a :class:`~memtheory.recipes.Setup`
        gives it: ``setup.convention()``); default the for-loop step that
        keeps the logits.
    adapter_dtype : str, optional
        dtype of the LoRA adapters when it differs from the precision's
        (peft's fp32), as :func:`~memtheory.finetuning.finetune_memory` takes it.

    Raises
    ------
    UnsupportedError
        For ``convention="autograd"`` with options or layers it cannot follow.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> step = step_memory(gpt2("small", batch=1, sequence=64), optimizer="adamw-8bit")
    >>> step.convention, step.why.split(": ")[0]
    ('breakdown', 'breakdown')
    """
    if checkpointing not in (False, True, *CHECKPOINTING):
        raise InvalidArgumentError(
            f"checkpointing must be True, False or one of {', '.join(CHECKPOINTING)}, got "
            f"{checkpointing!r}."
        )
    if convention not in CONVENTIONS:
        raise InvalidArgumentError(
            f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}."
        )
    chosen = precision or default_precision(lora is not None)
    _precision(chosen)
    blockers = _blockers(qlora, optimizer, chosen, bool(checkpointing))
    tuned = apply_lora(network, lora) if lora else network
    if lora is not None and (unmeasured := _unmeasured_adapters(tuned)):
        blockers.append(unmeasured)
    if convention == "autograd" and blockers:
        raise UnsupportedError(
            f"the autograd convention cannot follow this step: {blockers[0]}. Use "
            "--convention auto (or breakdown)."
        )
    common = dict(lora=lora, quantization="nf4" if qlora else None, optimizer=optimizer,
                  precision=chosen, adapter_dtype=adapter_dtype if lora else None)
    if convention != "breakdown" and not blockers:
        try:
            memory = finetune_memory(
                network, convention=exact or "autograd", **common  # type: ignore[arg-type]
            )
            why = MASTER if _precision(chosen).master_weights is not None else EXACT
            return Step(_described(memory, chosen), "autograd", why, chosen, tuned)
        except UnsupportedError as error:
            if convention == "autograd":
                raise
            blockers.append(str(error).rstrip("."))
    memory = _described(
        finetune_memory(network, convention="breakdown", **common),  # type: ignore[arg-type]
        chosen,
    )
    why = BOUND if convention == "breakdown" else f"{BOUND}; not exact because {blockers[0]}"
    if checkpointing is True and not _has_repeated_layers(tuned):
        checkpointing = "best-interval"  # no decoder layers to checkpoint one by one
    if checkpointing == "best-interval":
        memory = _checkpointed(memory, tuned, values or {})
    elif checkpointing:
        memory = _every_layer(memory, tuned)
    return Step(memory, "breakdown", why, chosen, tuned)


def _described(memory: MemoryBreakdown, name: str) -> MemoryBreakdown:
    described = f"precision {name}: {_precision(name).describe()}"
    return replace(memory, notes=(described, *memory.notes))


def _checkpointed(
    memory: MemoryBreakdown, network: Network, values: Mapping[str, int]
) -> MemoryBreakdown:
    """Replace the activations with those of the best checkpoint interval (breakdown convention).

    Chapter 13's model: the network is cut into its checkpoint units (a
    transformer's blocks); every ``interval``-th unit's output is kept, and
    the backward pass recomputes one segment at a time, so the largest
    segment's activations are alive on top of the kept outputs.
    """
    others = {k: v for k, v in values.items() if k != "B"}
    interval = best_network_interval(network, **others)
    kept = checkpointed_activations(network, interval)
    components = dict(memory.components)
    components["activations"] = kept * memory.precision.activations.bytes
    components["activation_gradients"] = kept * memory.precision.activation_gradients.bytes
    note = (
        f"activation checkpointing every {interval} unit(s) (chapter 13): the kept unit outputs "
        "plus the largest segment recomputed in the backward pass, each with its gradient "
        "(breakdown convention; recomputation's extra forward time not counted)"
    )
    return MemoryBreakdown(
        components, memory.mode, memory.convention, memory.precision, memory.optimizer,
        (*memory.notes, note), constraints=memory.constraints,
    )


def _has_repeated_layers(network: Network) -> bool:
    try:
        repeated_layers(network)
    except UnsupportedError:
        return False
    return True


def _every_layer(memory: MemoryBreakdown, network: Network) -> MemoryBreakdown:
    """Replace the activations with those kept when every decoder layer is a checkpoint.

    :func:`~memtheory.techniques.checkpointing.every_layer`: Hugging Face's
    ``gradient_checkpointing_enable()``. Measured against it on transformers'
    Llama (CPU, ``tests/pytorch/test_checkpointing_measured.py``): the
    breakdown convention's x2 rule is above the measured peak there.
    """
    kept = every_layer(network)
    components = dict(memory.components)
    components["activations"] = kept.kept * memory.precision.activations.bytes + kept.masks
    components["activation_gradients"] = kept.kept * memory.precision.activation_gradients.bytes
    note = (
        "activation checkpointing of every decoder layer (chapter 13), as Hugging Face's "
        "gradient_checkpointing_enable() does it: each layer's input kept, one layer "
        "recomputed at a time in the backward pass, the embeddings, final norm, output "
        "projection and loss kept whole, each with its gradient (breakdown convention; "
        "recomputation's extra forward time not counted)"
    )
    return MemoryBreakdown(
        components, memory.mode, memory.convention, memory.precision, memory.optimizer,
        (*memory.notes, note), constraints=memory.constraints,
    )
