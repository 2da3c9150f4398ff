"""What a :class:`~memtheory.recipes.Setup` asks of one traced or measured step, checked.

:func:`memtheory.torch.trace` and :func:`memtheory.torch.measure` take a
Setup (or a recipe's name) as ``setup=``. :func:`setup_step` turns it into
the keywords they already take, and refuses what one CPU process cannot
carry out:

=========================  =================================================================
Setup field                in the step traced or measured
=========================  =================================================================
``precision``              ``fp32``, ``bf16``, ``fp16``: the weights' dtype (``trace`` casts
                           its fake weights with ``dtype=``; ``measure`` runs the model as it
                           is and refuses other dtypes); ``autocast-bf16``/``-fp16``: fp32
                           weights under ``autocast=``; ``as-loaded``: the model's own dtype,
                           with ``torch.autocast(bfloat16)`` over fp32 weights
                           (:meth:`~memtheory.recipes.Setup.precision_for`); ``mixed-*``
                           (an optimizer-kept fp32 master copy) is refused
``optimizer`` and          the ``torch.optim`` class (:func:`~memtheory.torch.torch_optimizer`)
``optimizer_implementation``  with ``foreach=`` or ``fused=`` as the implementation says
``keeps_logits``           ``keeps_outputs=``
``attention``              checked, never changed: a Hugging Face model's
                           ``config._attn_implementation`` must be the same; a plain module's
                           attention is its own code, and is said to be assumed
``checkpointing``          checked: a Hugging Face model must have gradient checkpointing on
                           exactly when the Setup has it; a plain module's is assumed
``adapter_dtype``          checked against the model's LoRA adapters (``lora_`` parameters)
``device``                 recorded: the step runs CPU kernels (``measure`` on a CUDA
                           device runs CUDA's); the optimizer implementation is the Setup's
``zero``, ``offload``,     refused: sharding, offloading and bitsandbytes' 4-bit kernels
``quantization``           need several devices or CUDA; use the Setup's other front doors
=========================  =================================================================

An explicit keyword that says something else than the Setup (``setup="pytorch-fp32",
autocast="bf16"``) is refused, naming both.

Examples
--------
>>> import torch
>>> model = torch.nn.Linear(4, 2)
>>> step = setup_step("pytorch-amp", model)
>>> step.dtype, step.autocast, step.implementation, step.keeps_outputs
(None, torch.bfloat16, 'foreach', True)
>>> for line in step.assumed[-2:]:
...     print(line)
attention sdpa: not checked (a plain module runs the attention its forward calls)
device cuda: the step runs CPU kernels here, with the Setup's foreach optimizer implementation
>>> setup_step("pytorch-fp32", model, autocast=torch.bfloat16)
Traceback (most recent call last):
...
memtheory.errors.InvalidArgumentError: autocast=torch.bfloat16 contradicts setup pytorch-fp32, ...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.recipes import AS_LOADED, Setup, setup_from
from memtheory.recipes.setup import Implementation

__all__ = [
    "DEFAULT_OPTIMIZER",
    "SetupStep",
    "optimizer_implementation",
    "refuse_unrunnable",
    "setup_step",
]

OptimizerFactory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


class _DefaultOptimizer:
    """The ``optimizer=`` default of ``trace`` and ``measure``: the Setup's, else ``"adamw"``."""

    def __repr__(self) -> str:
        return "'adamw' (or the setup's)"


DEFAULT_OPTIMIZER: Any = _DefaultOptimizer()
"""``optimizer=`` not given: the Setup's optimizer, or ``"adamw"`` without a Setup."""

_CASTS = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
}
_AUTOCASTS = {"autocast-bf16": torch.bfloat16, "autocast-fp16": torch.float16}
_NAMES = {dtype: name for name, dtype in _CASTS.items()}
_ADAPTER = "lora_"
"""peft names every LoRA parameter ``...lora_A...``, ``...lora_B...`` (``lora_embedding_*``)."""


@dataclass(frozen=True)
class SetupStep:
    """A Setup in the keywords ``trace`` and ``measure`` take, with what stays assumed.

    Attributes
    ----------
    setup : Setup
    precision : str
        The Setup's precision for this model (``as-loaded`` resolved).
    weights : torch.dtype
        The dtype the floating weights train in.
    dtype : torch.dtype or None
        The cast ``trace`` applies to its fake weights (None: the model is in
        ``weights`` already).
    autocast : torch.dtype or None
        ``torch.autocast``'s dtype over the forward and the loss, or None.
    optimizer : torch.optim.Optimizer or callable
        The optimizer given (checked against the Setup), or a factory
        building the Setup's over the parameters.
    implementation : {"for-loop", "foreach", "fused"}
    keeps_outputs : bool
        The Setup's ``keeps_logits``.
    assumed : tuple of str
        The Setup's ``assumed:`` lines for this model, then what the step
        cannot check (a plain module's attention, the CUDA kernels).
    """

    setup: Setup
    precision: str
    weights: torch.dtype
    dtype: torch.dtype | None
    autocast: torch.dtype | None
    optimizer: torch.optim.Optimizer | OptimizerFactory
    implementation: Implementation
    keeps_outputs: bool
    assumed: tuple[str, ...]


def setup_step(
    setup: Setup | str | Mapping[str, Any],
    model: nn.Module,
    *,
    dtype: torch.dtype | None = None,
    autocast: torch.dtype | None = None,
    optimizer: Any = DEFAULT_OPTIMIZER,
    keeps_outputs: bool | None = None,
    casts: bool = True,
    device: str = "cpu",
) -> SetupStep:
    """Map ``setup`` onto one step of ``model``; refuse what cannot run or contradicts it.

    Parameters
    ----------
    setup : Setup, str or mapping
        A :class:`~memtheory.recipes.Setup`, a recipe's name (``"hf-trainer"``)
        or a mapping of its fields.
    model : torch.nn.Module
        Read, never changed: its weights' dtype, a Hugging Face model's
        attention and checkpointing, LoRA adapters.
    dtype, autocast, optimizer, keeps_outputs : optional
        The caller's explicit keywords: each must say what the Setup says.
    casts : bool, default True
        Whether the caller can cast the weights (``trace`` can, on fake
        tensors); ``measure`` cannot, so a model in another dtype is refused.
    device : str, default "cpu"
        Where the step runs (``"cuda:0"`` for ``measure`` on a GPU).

    Raises
    ------
    UnsupportedError
        For a Setup field one CPU process cannot carry out (``zero``,
        ``offload``, ``quantization``, ``mixed-*`` precision, an optimizer
        not in ``torch.optim``), naming it and the fix.
    InvalidArgumentError
        For a model or a keyword that contradicts the Setup, naming both and the fix.

    Examples
    --------
    >>> import torch
    >>> step = setup_step("hf-trainer", torch.nn.Linear(4, 2).to(torch.bfloat16))
    >>> step.precision, step.dtype, step.autocast, step.implementation, step.keeps_outputs
    ('bf16', None, None, 'fused', False)
    >>> setup_step("zero3", torch.nn.Linear(4, 2))
    Traceback (most recent call last):
    ...
    memtheory.errors.UnsupportedError: setup deepspeed-zero3 has zero=3 (ZeRO stage 3 ...
    """
    chosen = setup_from(setup)
    if chosen is None:
        raise InvalidArgumentError("setup= is None: pass a Setup or a recipe's name.")
    refuse_unrunnable(chosen)
    loaded = _weights_dtype(model)
    precision = chosen.precision_for(None if loaded is None else _NAMES.get(loaded))
    weights, wanted_autocast = _precision_dtypes(chosen, precision)
    cast = None if loaded in (None, weights) else weights
    _agree(chosen, "dtype", dtype, weights,
           f"precision {precision} trains the weights in {weights}", "precision=...")
    _agree(chosen, "autocast", autocast, wanted_autocast,
           f"precision {precision} runs " + (f"autocast {wanted_autocast}" if wanted_autocast
                                            else "no autocast"), "precision=...")
    _agree(chosen, "keeps_outputs", keeps_outputs, chosen.keeps_logits,
           f"keeps_logits is {chosen.keeps_logits}", f"keeps_logits={keeps_outputs}")
    if cast is not None and not casts:
        raise InvalidArgumentError(
            f"setup {chosen.label} trains in {precision} (weights {weights}), but the model's "
            f"weights are {loaded}: cast the model first (model.to({weights})), or pass "
            f"setup=<setup>.changed(precision={_NAMES.get(loaded or weights, 'fp32')!r})."
        )
    _check_adapters(chosen, model, weights, cast)
    assumed = [
        *chosen.describe(None if loaded is None else _NAMES.get(loaded)),
        *_check_attention(chosen, model),
        *_check_checkpointing(chosen, model),
    ]
    if not device.startswith(chosen.device):
        assumed.append(
            f"device {chosen.device}: the step runs {device.split(':')[0].upper()} kernels "
            f"here, with the Setup's {chosen.implementation} optimizer implementation"
        )
    return SetupStep(
        setup=chosen,
        precision=precision,
        weights=weights,
        dtype=cast,
        autocast=wanted_autocast,
        optimizer=_optimizer(chosen, optimizer),
        implementation=chosen.implementation,
        keeps_outputs=chosen.keeps_logits,
        assumed=tuple(assumed),
    )


def refuse_unrunnable(setup: Setup) -> None:
    """Refuse the fields one CPU process cannot run: sharding, offload, 4-bit, master weights.

    :func:`setup_step` calls it first; it needs no model, so a runner can
    refuse a Setup before building one. An optimizer not in ``torch.optim``
    is refused too.

    Raises
    ------
    UnsupportedError
        Naming the field, why, and the fix.

    Examples
    --------
    >>> refuse_unrunnable(Setup.recipe("pytorch-amp"))  # nothing to refuse
    >>> refuse_unrunnable(Setup.recipe("qlora"))
    Traceback (most recent call last):
    ...
    memtheory.errors.UnsupportedError: setup qlora has quantization='nf4': bitsandbytes' 4-bit ...
    """
    fix = ("; trace or measure the step one CPU process runs with setup=<setup>.changed("
           "{field}={value}), and ask memtheory.estimate or memtheory.training_memory "
           "(which take setup=) for this one")
    if setup.zero:
        raise UnsupportedError(
            f"setup {setup.label} has zero={setup.zero} (ZeRO stage {setup.zero} shards the "
            "step across several devices), which one process cannot run"
            + fix.format(field="zero", value=0) + "."
        )
    if setup.offload != "none":
        raise UnsupportedError(
            f"setup {setup.label} has offload={setup.offload!r} (DeepSpeed moves state to the "
            "host between devices), which one CPU process does not run"
            + fix.format(field="offload", value="'none'") + "."
        )
    if setup.quantization:
        raise UnsupportedError(
            f"setup {setup.label} has quantization={setup.quantization!r}: bitsandbytes' 4-bit "
            "weights run CUDA kernels only" + fix.format(field="quantization", value=None) + "."
        )
    if setup.precision.startswith("mixed"):
        raise UnsupportedError(
            f"setup {setup.label} has precision={setup.precision!r}: its fp32 master weights "
            "are kept by DeepSpeed's or apex's optimizer, not by torch.optim"
            + fix.format(field="precision", value="'bf16'") + "."
        )
    _torch_class(setup)


def _torch_class(setup: Setup) -> str:
    """Return the ``torch.optim`` class name of the Setup's optimizer, or refuse it."""
    from memtheory.optimizers import optimizer

    try:
        found = optimizer(setup.optimizer).torch_name
    except KeyError:
        found = None
    if found is None:
        raise UnsupportedError(
            f"setup {setup.label} has optimizer={setup.optimizer!r}, which is not in torch.optim "
            "(bitsandbytes and other libraries run their own kernels): pass setup=<setup>."
            "changed(optimizer='adamw'), or ask memtheory.training_memory for this optimizer."
        )
    return found


def _weights_dtype(model: nn.Module) -> torch.dtype | None:
    """Return the dtype most floating weights (LoRA adapters aside) are in, or None."""
    counts: Counter[torch.dtype] = Counter()
    for name, parameter in model.named_parameters():
        if parameter.is_floating_point() and _ADAPTER not in name:
            counts[parameter.dtype] += parameter.numel()
    return counts.most_common(1)[0][0] if counts else None


def _precision_dtypes(setup: Setup, precision: str) -> tuple[torch.dtype, torch.dtype | None]:
    """Return (the weights' dtype, autocast's dtype or None) of a precision name."""
    if precision in _AUTOCASTS:
        return torch.float32, _AUTOCASTS[precision]
    if precision in _CASTS:
        return _CASTS[precision], None
    shown = setup.precision if setup.precision != AS_LOADED else f"{AS_LOADED} ({precision})"
    raise UnsupportedError(
        f"setup {setup.label} has precision={shown!r}, which a training step on the CPU does "
        "not run: pass setup=<setup>.changed(precision='fp32'), 'bf16', 'fp16', "
        "'autocast-bf16' or 'autocast-fp16'."
    )


def _agree(
    setup: Setup, keyword: str, given: object, wanted: object, says: str, field: str
) -> None:
    """Refuse an explicit keyword that says something other than the Setup."""
    if given is None or given == wanted:
        return
    raise InvalidArgumentError(
        f"{keyword}={given} contradicts setup {setup.label}, whose {says}: drop {keyword}= "
        f"(the setup decides it), or pass setup=<setup>.changed({field}) that says so."
    )


def _check_adapters(
    setup: Setup, model: nn.Module, weights: torch.dtype, cast: torch.dtype | None
) -> None:
    """Refuse LoRA adapters in another dtype than the Setup keeps them in, or none."""
    adapters = {p.dtype for n, p in model.named_parameters() if _ADAPTER in n}
    wanted = _CASTS.get(setup.adapter_dtype or "", weights)
    if setup.adapter_dtype and not adapters:
        raise InvalidArgumentError(
            f"setup {setup.label} keeps LoRA adapters in {setup.adapter_dtype} "
            "(adapter_dtype), but the model has no LoRA adapters: wrap it with "
            "peft.get_peft_model(model, LoraConfig(...)) first, or pass "
            "setup=<setup>.changed(adapter_dtype=None)."
        )
    if not adapters:
        return
    if ({cast} if cast is not None else adapters) != {wanted}:  # trace's cast casts them too
        held = ", ".join(sorted(str(d) for d in adapters))
        raise InvalidArgumentError(
            f"the model's LoRA adapters are {held}, but setup {setup.label} keeps them in "
            f"{wanted} (adapter_dtype={setup.adapter_dtype!r}, weights {weights}): pass "
            "setup=<setup>.changed(adapter_dtype=...) naming the adapters' dtype, or cast "
            "them first."
        )


def _hugging_face(model: nn.Module) -> nn.Module | None:
    """Return the first (sub)module with a Hugging Face config, or None."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            return module
    return None


def _check_attention(setup: Setup, model: nn.Module) -> list[str]:
    """Refuse a Hugging Face model with other attention; say a plain module's is assumed."""
    found = _hugging_face(model)
    if found is None:
        return [f"attention {setup.attention}: not checked (a plain module runs the attention "
                "its forward calls)"]
    actual = getattr(found.config, "_attn_implementation", None)
    if actual != setup.attention:
        other = (f", or pass setup=<setup>.changed(attention={actual!r})"
                 if actual in ("eager", "sdpa") else "")
        raise InvalidArgumentError(
            f"the model runs attn_implementation={actual!r}, but setup {setup.label} assumes "
            f"attention={setup.attention!r}: load the model with attn_implementation="
            f"{setup.attention!r} (or call model.set_attn_implementation({setup.attention!r}))"
            f"{other}. The model is not changed for you."
        )
    return []


def _check_checkpointing(setup: Setup, model: nn.Module) -> list[str]:
    """Refuse a Hugging Face model whose gradient checkpointing is not the Setup's."""
    found = _hugging_face(model)
    # transformers 5 renames gradient_checkpointing_* to activation_checkpointing_*
    kind = next((k for k in ("activation", "gradient")
                 if hasattr(type(found), f"is_{k}_checkpointing")), None)
    if found is None or kind is None:
        return ["activation checkpointing: as the module's forward does it "
                "(torch.utils.checkpoint is followed as it runs)"] if setup.checkpointing else []
    on = bool(getattr(found, f"is_{kind}_checkpointing"))
    if on != setup.checkpointing:
        call = "enable" if setup.checkpointing else "disable"
        raise InvalidArgumentError(
            f"setup {setup.label} has checkpointing={setup.checkpointing}, but the model has "
            f"{kind} checkpointing {'on' if on else 'off'}: call "
            f"model.{kind}_checkpointing_{call}() first, or pass "
            f"setup=<setup>.changed(checkpointing={on})."
        )
    return []


def optimizer_implementation(optimizer: torch.optim.Optimizer) -> Implementation:
    """Return which implementation ``optimizer.step()`` runs: for-loop, foreach or fused.

    Examples
    --------
    >>> import torch
    >>> p = [torch.nn.Parameter(torch.ones(2))]
    >>> optimizer_implementation(torch.optim.Adam(p))  # PyTorch's default on CPU
    'for-loop'
    >>> optimizer_implementation(torch.optim.Adam(p, foreach=True))
    'foreach'
    """
    from torch.optim.optimizer import _default_to_fused_or_foreach

    defaults = optimizer.defaults
    if defaults.get("fused"):
        return "fused"
    foreach = defaults.get("foreach")
    if foreach is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return "foreach" if foreach else "for-loop"


def _optimizer(setup: Setup, given: Any) -> torch.optim.Optimizer | OptimizerFactory:
    """Return the optimizer given, if it is the Setup's; else a factory for the Setup's."""
    from memtheory.optimizers import optimizer
    from memtheory.torch.optimizers import torch_optimizer

    implementation = setup.implementation
    wanted = f"{setup.optimizer} ({implementation})"
    spec: Any = setup.optimizer
    if isinstance(given, torch.optim.Optimizer):
        held = f"{type(given).__name__} ({optimizer_implementation(given)})"
        if (type(given).__name__, optimizer_implementation(given)) != (
                _torch_class(setup), implementation):
            raise _contradiction(setup, held, wanted)
        return given
    if given is not DEFAULT_OPTIMIZER:
        if callable(given) and not isinstance(given, str):
            raise _contradiction(setup, "a factory (not checked)", wanted)
        if optimizer(given).name != optimizer(setup.optimizer).name:
            raise _contradiction(setup, repr(given), wanted)
        spec = given  # the same optimizer, with the options it was given

    def build(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch_optimizer(spec, parameters, implementation=implementation)

    return build


def _contradiction(setup: Setup, given: str, wanted: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"optimizer={given} contradicts setup {setup.label}, whose optimizer is {wanted}: drop "
        "optimizer= (the setup builds it), or pass setup=<setup>.changed(optimizer=..., "
        "optimizer_implementation=...) that says the same."
    )
