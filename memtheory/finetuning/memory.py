r"""Memory of a fine-tuning step: frozen base, LoRA/QLoRA adapters, 8-bit optimizer state.

:func:`finetune_memory` turns a :class:`~memtheory.network.Network` into what
it is while fine-tuned (every weight frozen and adapters added for LoRA;
some layers frozen for partial fine-tuning), runs a memory convention on it,
and then states the parts a convention of plain PyTorch does not know:

* ``frozen_parameters``: the frozen weights, in their dtype, or as 4-bit NF4
  codes for QLoRA (``quantization="nf4"``), with their
  ``quantization_constants`` (double-quantized by default) and the transient
  ``dequantized_copy`` of the largest quantized layer in the compute dtype;
  bitsandbytes quantizes linear layers only: embeddings, norms and biases
  stay in the compute dtype.
* ``optimizer_state`` of an 8-bit optimizer (``"adamw-8bit"``, ``"paged-adamw-8bit"``):
  :func:`~memtheory.finetuning.optimizer8bit.adam8bit_state_bytes`.

Gradients, optimizer state and master weights are those of the trainable
parameters only. The activations are what the chosen convention derives for
the rewritten network: ``"autograd"`` follows PyTorch's saved tensors exactly
for networks of Dense layers (a frozen Linear keeps nothing; measured), and
refuses layers it has not checked frozen; ``"breakdown"`` counts every output
and its gradient (an estimate, not a bound: see :mod:`memtheory.estimate.step`).
QLoRA and 8-bit state use CUDA kernels that cannot run on the CPU where
memtheory measures: they are modelled in the breakdown convention only, from
the formats' definitions.

Examples
--------
>>> from memtheory import Dense, Input, Network
>>> from memtheory.finetuning import LoRA
>>> net = Network([Input((1024,), batch=8), Dense(1024, name="fc1"), Dense(10, name="fc2")])
>>> memory = finetune_memory(net, lora=LoRA(8, targets="fc1"), optimizer="adam")
>>> memory["frozen_parameters"], memory["parameters"], memory["optimizer_state"]
(2119700, 32768, 65536)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import sympy as sp

from memtheory.conventions import ConventionLike
from memtheory.conventions import convention as _convention
from memtheory.conventions.autograd.live_bytes import Shift, moved, part_value
from memtheory.errors import UnsupportedError
from memtheory.finetuning.layers import Frozen, LoRAAttention, frozen_tensors
from memtheory.finetuning.lora import LoRA, apply_lora, freeze
from memtheory.finetuning.nf4 import nf4_constant_bytes
from memtheory.finetuning.optimizer8bit import adam8bit_state_bytes
from memtheory.layers import Dense, MultiHeadAttention
from memtheory.layers.base import elements
from memtheory.memory import training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.precision import Precision, PrecisionLike
from memtheory.precision import precision as _precision
from memtheory.registry import normalize_name

__all__ = ["EIGHT_BIT_OPTIMIZERS", "QUANTIZATIONS", "finetune_memory", "trainable_shapes"]

EIGHT_BIT_OPTIMIZERS: dict[str, tuple[str, bool]] = {
    "adam8bit": ("adam", False),
    "adamw8bit": ("adamw", False),
    "pagedadam8bit": ("adam", True),
    "pagedadamw8bit": ("adamw", True),
}
"""bitsandbytes' 8-bit Adam variants (folded names, as Hugging Face's ``optim=`` spells them):
the torch optimizer they stand for, and whether they are paged."""

QUANTIZATIONS = ("nf4", "fp4")
"""4-bit formats of bitsandbytes' ``Linear4bit`` (same storage: 4-bit codes, block constants)."""


def _eight_bit(spec: OptimizerLike) -> tuple[str, bool] | None:
    if not isinstance(spec, str):
        return None
    key = normalize_name(spec, prefixes=("bnb.optim.", "bitsandbytes.optim."))
    return EIGHT_BIT_OPTIMIZERS.get(key)


def trainable_shapes(network: Network) -> list[tuple[sp.Expr, ...]]:
    """Shapes of every trainable parameter tensor of ``network``.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> trainable_shapes(Network([Input((4,)), Dense(3)]))
    [(3, 4), (3,)]
    """
    return [
        tuple(shape)
        for row in network.rows[1:]
        if row.parameters != 0
        for _, shape in frozen_tensors(row.layer, row.input_shape)
    ]


def _quantized(layer: object) -> bool:
    """Whether bitsandbytes would store this frozen layer's matrices in 4 bits."""
    inner = layer.layer if isinstance(layer, Frozen | LoRAAttention) else None
    return isinstance(inner, Dense | MultiHeadAttention)


def _matrices(
    layer: object, input_shape: tuple[sp.Expr, ...], label: str, shape: tuple[sp.Expr, ...]
) -> list[sp.Expr]:
    """Element counts of the matrices bitsandbytes would quantize for one frozen tensor.

    A packed query/key/value projection is three ``Linear4bit`` layers in the
    models bitsandbytes quantizes (``q_proj``, ``k_proj``, ``v_proj``): each
    is quantized, rounded and dequantized on its own.
    """
    inner = getattr(layer, "layer", None)
    if isinstance(inner, MultiHeadAttention) and label == "frozen in_proj_weight":
        width = inner.width(input_shape)
        features = input_shape[-1]
        kv = (inner.kv_heads or inner.heads) * width
        return [inner.heads * width * features, kv * features, kv * features]
    return [elements(tuple(shape))]


def _frozen_parts(
    network: Network, base_bytes: int, quantization: str | None, double_quant: bool,
    compute_bytes: int,
) -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """Return (frozen bytes as plain PyTorch holds them, frozen bytes, constants, largest copy)."""
    plain = stored = constants = sp.S.Zero
    largest: list[sp.Expr] = []
    for row in network.rows[1:]:
        quantize = quantization is not None and _quantized(row.layer)
        for spec in row.buffers:
            if not (spec.label or "").startswith("frozen "):
                continue
            n = spec.elements
            plain += n * base_bytes
            if quantize and len(spec.shape) == 2:
                for count in _matrices(row.layer, row.input_shape, spec.label or "", spec.shape):
                    stored += sp.ceiling(count / 2)
                    constants += nf4_constant_bytes(count, double_quant=double_quant)
                    largest.append(count * compute_bytes)
            else:
                stored += n * (compute_bytes if quantization else base_bytes)
    copy = sp.Max(*largest) if largest else sp.S.Zero
    return plain, stored, constants, copy


def finetune_memory(
    network: Network,
    *,
    lora: LoRA | None = None,
    frozen: str | Sequence[str] = (),
    quantization: str | None = None,
    double_quant: bool = True,
    optimizer: OptimizerLike = "adamw",
    precision: PrecisionLike = "bf16",
    base_dtype: str | None = None,
    convention: ConventionLike = "breakdown",
    adapter_dtype: str | None = None,
) -> MemoryBreakdown:
    """Memory of one fine-tuning step, by component, in bytes.

    Parameters
    ----------
    network : Network
        The model, as built for full training (``memtheory.models.gpt2()``, ...).
    lora : LoRA, optional
        Adapters to train; every weight of ``network`` is frozen.
    frozen : str or sequence of str, optional
        Without ``lora``: layer-name patterns to freeze (``"h.0.*"``), as
        :func:`~memtheory.finetuning.freeze`.
    quantization : {"nf4", "fp4"}, optional
        QLoRA: frozen linear layers stored in 4 bits (needs ``lora``).
    double_quant : bool, default True
        Quantize the 4-bit blocks' constants too (QLoRA Section 3).
    optimizer : str, default "adamw"
        Any torch optimizer name, or an 8-bit one: ``"adamw-8bit"``,
        ``"paged-adamw-8bit"`` (also ``"adam-8bit"``, ``"paged-adam-8bit"``).
    precision : str or Precision, default "bf16"
        Of the trainable parameters, their gradients and state, and the
        activations (``"mixed-bf16"`` adds an fp32 master copy of the adapters).
    base_dtype : str, optional
        dtype of the frozen weights when not quantized; defaults to the
        precision's parameter dtype.
    convention : {"breakdown", "autograd"}, default "breakdown"
    adapter_dtype : str, optional
        dtype of the LoRA adapters, their gradients and optimizer state when
        it differs from the precision's (peft's ``get_peft_model`` upcasts
        adapters to fp32 by default): counted exactly; each moment of the
        timeline rises by the difference of what is alive. Under the autograd
        convention, with wider adapters on a model run in one dtype (peft's
        fp32 adapters on a bf16 base), the step also follows peft's cast of
        each adapted layer's input and autocast's copies of the adapter
        weights (:func:`~memtheory.finetuning.apply_lora`'s ``wider``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> from memtheory.finetuning import LoRA
    >>> qlora = finetune_memory(gpt2("small", batch=1, sequence=128), lora=LoRA(16),
    ...                         quantization="nf4", optimizer="paged-adamw-8bit")
    >>> qlora.format("MB", name="frozen_parameters"), qlora.format("MB", name="parameters")
    ('121.48 MB', '1.18 MB')
    """
    chosen = _convention(convention)
    eight = _eight_bit(optimizer)
    torch_optimizer: OptimizerLike = eight[0] if eight else optimizer
    _check_options(lora, frozen, quantization, chosen.name, bool(eight))
    p = _precision(precision)
    wider = _wider(adapter_dtype, p, chosen.name) if lora and not lora.dropout else None
    tuned = _tuned(network, lora, frozen, wider)
    base = _precision(base_dtype).parameters.bytes if base_dtype else p.parameters.bytes
    memory = training_memory(tuned, optimizer=torch_optimizer, precision=p, convention=chosen)
    components = dict(memory.components)
    plain, stored, constants, copy = _frozen_parts(
        tuned, base, quantization, double_quant, p.activations.bytes
    )
    held = components.pop("buffers", sp.S.Zero)
    if base != p.parameters.bytes and chosen.name != "breakdown":
        raise UnsupportedError(
            "the autograd convention runs the model in one dtype: leave base_dtype unset."
        )
    own_buffers = sp.expand(held - plain * p.parameters.bytes / base)
    if own_buffers != 0:
        components["buffers"] = own_buffers
    if stored != 0:
        components["frozen_parameters"] = stored
    if quantization:
        components["quantization_constants"] = constants
        components["dequantized_copy"] = copy
    if eight:
        components["optimizer_state"] = adam8bit_state_bytes(trainable_shapes(tuned))
        components.pop("optimizer_step_counters", None)
    notes = [*memory.notes, *_notes(network, tuned, lora, quantization, double_quant, eight)]
    timeline = memory.timeline
    if timeline and stored != plain * p.parameters.bytes / base:
        raise UnsupportedError("the autograd timeline holds the frozen weights in one dtype.")
    tuned_memory = replace(
        memory,
        components=components,
        convention=f"{memory.convention}, fine-tuning",
        notes=tuple(notes),
    )
    if lora is None or adapter_dtype is None:
        return tuned_memory
    return _adapters_in(tuned_memory, adapter_dtype, p, state_follows=not eight,
                        planned=wider is not None)


def _check_options(
    lora: LoRA | None, frozen: str | Sequence[str], quantization: str | None,
    convention: str, eight: bool,
) -> None:
    """Refuse a quantized base without LoRA, an unknown quantization, CUDA-only kernels."""
    if quantization is not None:
        if lora is None:
            raise UnsupportedError(
                "quantization='nf4' is QLoRA: pass lora=LoRA(rank) too (a 4-bit base cannot be "
                "trained itself)."
            )
        if quantization not in QUANTIZATIONS:
            raise UnsupportedError(
                f"unknown quantization {quantization!r}; known: {', '.join(QUANTIZATIONS)}."
            )
    if convention != "breakdown" and (quantization or eight):
        raise UnsupportedError(
            "4-bit weights and 8-bit optimizer state run bitsandbytes' CUDA kernels, which "
            "memtheory cannot measure on CPU: use convention='breakdown' for them."
        )
    if lora is not None and frozen:
        raise UnsupportedError("LoRA freezes every weight already; pass lora or frozen, not both.")


def _tuned(
    network: Network, lora: LoRA | None, frozen: str | Sequence[str], wider: str | None = None
) -> Network:
    """Return the network with LoRA adapters, or the named layers frozen, or as it is."""
    if lora is not None:
        return apply_lora(network, lora, wider=wider)
    if frozen:
        return freeze(network, frozen)
    return network


def _wider(adapter_dtype: str | None, precision: Precision, convention: str) -> str | None:
    """Return the adapters' dtype where peft's casts of it are planned, else ``None``.

    That is under the autograd convention, with adapters wider than a model
    that runs in one dtype (a 16-bit base; the Trainer's autocast changes
    nothing for its 16-bit weights): see :func:`~memtheory.finetuning.apply_lora`
    (without LoRA dropout, which the casts are not modelled with).
    """
    if adapter_dtype is None or convention == "breakdown":
        return None
    wider = _precision(adapter_dtype).parameters.bytes > precision.parameters.bytes
    one_dtype = precision.activations == precision.parameters
    return adapter_dtype if wider and one_dtype else None


def _notes(
    network: Network, tuned: Network, lora: LoRA | None, quantization: str | None,
    double_quant: bool, eight: tuple[str, bool] | None,
) -> list[str]:
    """Return what the fine-tuning step assumes: 8-bit state, the adapters, the 4-bit base."""
    notes = []
    if eight:
        notes.append(
            "8-bit Adam (bitsandbytes, block-wise): 2 bytes per parameter plus an fp32 constant "
            "per 256; tensors under 4096 elements keep fp32 state"
            + ("; paged: the driver may move it to host RAM under pressure, counted on the GPU"
               if eight[1] else "")
        )
    if lora is not None:
        targets = ", ".join(lora.patterns)
        notes.append(
            f"LoRA rank {lora.rank}, alpha {lora.alpha} on {targets}: "
            f"{tuned.parameter_count} trainable parameters of "
            f"{network.parameter_count} (base frozen: no gradients, no optimizer state)"
        )
    if quantization:
        notes.append(
            f"{quantization.upper()} base: 4-bit codes, one constant per 64 weights"
            + (" (8-bit, with an fp32 constant per 256 of them)" if double_quant else " (fp32)")
            + "; embeddings, norms and biases in the compute dtype"
        )
    return notes


def _adapters_in(
    memory: MemoryBreakdown, adapter_dtype: str, precision: Precision, state_follows: bool,
    planned: bool = False,
) -> MemoryBreakdown:
    """Return ``memory`` with LoRA adapters kept in ``adapter_dtype`` (peft keeps them in fp32).

    The step is derived with the adapters in the precision's dtype (under
    the autograd convention with peft's casts planned in it: see
    :func:`~memtheory.finetuning.apply_lora`'s ``wider``); the adapters'
    parameters, gradients and optimizer state (those that follow the
    parameters' dtype) are rescaled to ``adapter_dtype``. Every moment of the
    timeline rises by the parameters' and the state's difference, and by the
    difference of the gradients alive at that moment (from the timeline's
    parts; all of them where a moment has no parts). ``state_follows`` says
    whether the optimizer state is kept in the parameters' dtype (not for
    8-bit optimizers); ``planned`` whether peft's casts are in the step.
    """
    wanted = _precision(adapter_dtype).parameters.bytes
    have = precision.parameters.bytes
    if wanted == have:
        return memory
    scale = sp.Rational(wanted, have)
    components = dict(memory.components)
    extra = sp.S.Zero
    gradients = components.get("gradients", sp.S.Zero)
    for name in ("parameters", "gradients"):
        if name in components:
            if name == "parameters":
                extra += components[name] * (scale - 1)
            components[name] = components[name] * scale
    if state_follows and "optimizer_state" in components and (
        precision.optimizer_state == precision.parameters
    ):
        extra += components["optimizer_state"] * (scale - 1)
        components["optimizer_state"] = components["optimizer_state"] * scale
    if "loop_scalars" in components:  # the Trainer's gradient norm, in the gradients' dtype
        extra += wanted - have
        components["loop_scalars"] = components["loop_scalars"] + wanted - have
    parts = memory.timeline_parts
    one, wider = sp.S.One, scale - 1

    def rise(moment: str) -> Shift:  # the gradients alive then, read from their log
        return [(one, extra), (wider, part_value(parts, moment, "gradients", gradients))]

    # each moment plus its rise, as sp.Add adds them (no flatten); kept as a running sum
    timeline = moved(memory.timeline, rise)
    note = (
        f"LoRA adapters, their gradients and optimizer state in {adapter_dtype} (peft's "
        "default): counted exactly, each moment raised by the difference of what is alive"
        + ("; peft's casts of each adapted layer's input and autocast's copies of the "
           "adapter weights planned (0 B off the real peft + Trainer step on CPU, "
           "tests/pytorch/test_peft_recipe.py)" if planned else
           f"; peft's casts of each adapted layer's input to {adapter_dtype} not followed")
    )
    return replace(memory, components=components, timeline=timeline,
                   notes=(*memory.notes, note))
