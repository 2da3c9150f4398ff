"""One value that holds every assumption of a training step: :class:`Setup`.

A memory figure is exact only for the step it imagines. The step a user runs
is decided by choices that no model file shows: the dtype the weights are
loaded in and whether ``torch.autocast`` runs over them, which ``torch.optim``
implementation steps the optimizer, which attention kernel runs, whether the
loop holds the logits through the backward pass, how the model is sharded,
what dtype the adapters keep, which modules are quantized, and how much of the
card is set aside. :class:`Setup` names each one, prints itself as the
``assumed:`` lines every front door reports, and is what
:func:`~memtheory.estimate.estimate` and ``memtheory estimate`` take.
:mod:`memtheory.recipes.catalog` holds the setups real stacks use by default.

Examples
--------
>>> setup = Setup(precision="bf16", optimizer_implementation="fused", keeps_logits=False)
>>> setup.implementation, setup.convention()
('fused', AutogradConvention(implementation='fused', keeps_logits=False))
>>> print(setup.describe()[1])
optimizer adamw, fused implementation
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, TypeVar, get_args

import sympy as sp

from memtheory.conventions.autograd import AutogradConvention
from memtheory.conventions.autograd.loops import LOOPS, Loop
from memtheory.conventions.autograd.sdpa_backend import (
    cpu_sdpa_backend,
    keeps_scores,
    layer_sdpa_backend,
)
from memtheory.errors import InvalidArgumentError, MemtheoryError, UnsupportedError
from memtheory.gpus import DEFAULT_RESERVE, ReserveLike
from memtheory.precision import precision as _precision
from memtheory.units import format_bytes, parse_bytes

__all__ = [
    "AS_LOADED",
    "Attention",
    "Device",
    "Implementation",
    "Setup",
    "setup_from",
    "use_catalog",
]

_Built = TypeVar("_Built")

_CATALOG: list[Callable[[str], Setup]] = []
"""How :meth:`Setup.recipe` looks a recipe up: :mod:`.catalog` (which builds its
recipes from :class:`Setup`, so this module cannot import it) installs it through
:func:`use_catalog`, and ``memtheory.recipes`` imports the catalog before anyone
can reach this module."""


def use_catalog(lookup: Callable[[str], Setup]) -> None:
    """Make :meth:`Setup.recipe` look recipes up with ``lookup`` (the catalog calls this).

    Examples
    --------
    ``memtheory.recipes.catalog`` has installed its lookup by the time this runs:

    >>> Setup.recipe("zero3").zero
    3
    """
    _CATALOG[:] = [lookup]


Attention = Literal["eager", "sdpa"]
Device = Literal["cuda", "cpu"]
Implementation = Literal["for-loop", "foreach", "fused"]

AS_LOADED = "as-loaded"
"""The precision of a model kept in the dtype its checkpoint was published in.

transformers 5 loads weights with ``dtype="auto"`` by default
(``PreTrainedModel.from_pretrained``): a bf16 checkpoint (Llama 3, Qwen,
Mistral) trains in bf16, with bf16 gradients and optimizer state; an fp32
checkpoint (GPT-2, BERT) stays fp32 and ``TrainingArguments(bf16=True)`` runs
``torch.autocast(bfloat16)`` over it. Sharded (ZeRO or FSDP through
accelerate), 16-bit weights are upcast to fp32 and gathered in bf16
(accelerate 1.15 ``Accelerator.prepare_model``: "we follow DeepSpeed's strategy
to hold the parameters in full precision").
"""

_DEVICE_IMPLEMENTATION: dict[str, Implementation] = {"cpu": "for-loop", "cuda": "foreach"}
"""What ``torch.optim`` picks when not told (``_default_to_fused_or_foreach``, torch 2.13)."""

_ZERO_STAGES = (0, 1, 2, 3)
_OFFLOADS = ("none", "optimizer", "optimizer+parameters")
_QUANTIZATIONS = (None, "nf4", "fp4")


@dataclass(frozen=True)
class Setup:
    """Every assumption of one training step, as one immutable value.

    Parameters
    ----------
    precision : str, default "autocast-bf16"
        A precision name (:data:`memtheory.precision.PRECISIONS`: ``"fp32"``,
        ``"bf16"`` for a model cast to bf16, ``"autocast-bf16"`` for
        ``torch.autocast`` over fp32 weights, ``"mixed-bf16"`` for bf16
        weights with an fp32 master copy, as DeepSpeed's bf16 mode keeps), or
        :data:`AS_LOADED` (the checkpoint's dtype, see :meth:`precision_for`).
    optimizer : str, default "adamw"
        Any name :func:`memtheory.optimizer` knows, or an 8-bit one
        (``"adamw-8bit"``, ``"paged-adamw-8bit"``).
    optimizer_implementation : {"for-loop", "foreach", "fused"}, optional
        The ``torch.optim`` implementation; by default PyTorch's own choice
        for ``device`` (for-loop on CPU, foreach on CUDA).
    attention : {"eager", "sdpa"}, default "sdpa"
        ``"eager"`` keeps the S x S scores and probabilities for the backward
        pass (``attn_implementation="eager"``); ``"sdpa"`` is
        ``torch.nn.functional.scaled_dot_product_attention`` with its flash or
        memory-efficient kernel, which keeps none (transformers 5's default).
    device : {"cuda", "cpu"}, default "cuda"
        Whose kernels are assumed where they differ (the optimizer's default
        implementation).
    keeps_logits : bool, default True
        Whether the loop holds the model's output through the backward pass
        (``out = model(x); loss_fn(out, y).backward()``); Hugging Face's
        ``Trainer`` keeps only the loss.
    loop : {"plain", "hf-trainer", "lightning"}, default "plain"
        The loop's own tensors besides the step's
        (:mod:`memtheory.conventions.autograd.loops`): ``"hf-trainer"`` is
        transformers' ``Trainer``, with its bookkeeping scalars (running
        loss, token count, gradient norm, the previous loss, accelerate's
        scaled loss) and its gradient clipping; ``"lightning"`` is
        Lightning's automatic optimization (``zero_grad`` after the forward,
        a clone of the loss kept to the step's end).
    zero_grad_set_to_none : bool, default True
        ``optimizer.zero_grad()``'s default since PyTorch 2.0: the gradients
        are freed before the forward. ``False`` (zeroed in place) is not
        modelled and is refused.
    checkpointing : bool, default False
        Activation checkpointing.
    zero : {0, 1, 2, 3}, default 0
        ZeRO stage (3 is FSDP's ``FULL_SHARD``).
    offload : {"none", "optimizer", "optimizer+parameters"}, default "none"
    sharded_autocast_copies : bool, default True
        Under ZeRO-3, whether ``torch.autocast``'s low-precision copies of the
        gathered weights are kept for the backward pass (FSDP over fp32
        weights with ``torch.autocast``). DeepSpeed's bf16 mode and FSDP's
        ``MixedPrecision(param_dtype=bfloat16)`` gather the weights already in
        bf16 and keep no such copies.
    adapter_dtype : str, optional
        dtype of LoRA adapters' weights, gradients and optimizer state when
        it differs from the precision's (peft keeps them in fp32).
    quantization : {"nf4", "fp4"}, optional
        4-bit frozen weights (QLoRA) on every ``nn.Linear``, as
        ``load_in_4bit`` does (transformers 5.24
        ``integrations/bitsandbytes.py`` ``replace_with_bnb_linear``). The
        experts of transformers 5's mixture-of-experts models are fused 3-D
        parameters, not ``nn.Linear``, so they stay in the loaded dtype.
    reserve : bytes or str, default 1.5 GiB
        Set aside on each card for the CUDA context, driver and allocator
        (:data:`memtheory.gpus.DEFAULT_RESERVE`).
    name : str, optional
        The recipe's name, when the setup is one (:meth:`recipe`).
    source : str, optional
        Where the recipe's defaults were read: library, version and file.

    Examples
    --------
    >>> Setup().implementation
    'foreach'
    >>> Setup(device="cpu").implementation
    'for-loop'
    >>> Setup(zero=4)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: zero must be one of 0, 1, 2, 3, got 4.
    """

    precision: str = "autocast-bf16"
    optimizer: str = "adamw"
    optimizer_implementation: Implementation | None = None
    attention: Attention = "sdpa"
    device: Device = "cuda"
    keeps_logits: bool = True
    loop: Loop = "plain"
    zero_grad_set_to_none: bool = True
    checkpointing: bool = False
    zero: int = 0
    offload: str = "none"
    sharded_autocast_copies: bool = True
    adapter_dtype: str | None = None
    quantization: str | None = None
    reserve: ReserveLike = DEFAULT_RESERVE
    name: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.precision, str):
            raise InvalidArgumentError(
                f"precision must be a name such as 'bf16' or 'autocast-bf16', got "
                f"{_short(self.precision)}."
            )
        if self.precision != AS_LOADED:
            _precision(self.precision)
        if not isinstance(self.optimizer, str) or not self.optimizer.strip():
            raise InvalidArgumentError(
                f"optimizer must be a name such as 'adamw', got {_short(self.optimizer)}."
            )
        _one_of("optimizer_implementation", self.optimizer_implementation,
                (None, *get_args(Implementation)))
        _one_of("attention", self.attention, get_args(Attention))
        _one_of("device", self.device, get_args(Device))
        _one_of("loop", self.loop, tuple(LOOPS))
        for flag in ("keeps_logits", "zero_grad_set_to_none", "checkpointing",
                     "sharded_autocast_copies"):
            _one_of(flag, getattr(self, flag), (True, False))
        _one_of("zero", self.zero, _ZERO_STAGES)
        _one_of("offload", self.offload, _OFFLOADS)
        _one_of("quantization", self.quantization, _QUANTIZATIONS)
        if self.adapter_dtype is not None:
            _precision(self.adapter_dtype)
        if not self.zero_grad_set_to_none:
            raise UnsupportedError(
                "zero_grad(set_to_none=False) keeps every gradient through the forward pass; "
                "memtheory models PyTorch's default since 2.0 (set_to_none=True): leave "
                "zero_grad_set_to_none=True."
            )
        try:
            reserve = parse_bytes(self.reserve) if isinstance(self.reserve, str) else self.reserve
            reserve = sp.sympify(reserve)
        except (TypeError, ValueError, sp.SympifyError) as error:
            raise InvalidArgumentError(
                f"reserve must be bytes or a size such as '1.5 GiB', got {_short(self.reserve)}."
            ) from error
        if not (reserve.is_number and reserve.is_real and reserve.is_finite) or reserve < 0:
            raise InvalidArgumentError(
                f"reserve must be zero or more bytes, got {_short(self.reserve)}."
            )

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def recipe(cls, name: str, **changes: Any) -> Setup:
        """Return the named recipe (:data:`memtheory.recipes.RECIPES`), with ``changes``.

        Examples
        --------
        >>> Setup.recipe("hf-trainer").implementation
        'fused'
        >>> Setup.recipe("hf-trainer", attention="eager").label
        'hf-trainer (attention=eager)'
        """
        base = _CATALOG[0](name)
        return base.changed(**changes) if changes else base

    def changed(self, **changes: Any) -> Setup:
        """Return a copy with ``changes``; a recipe's copy remembers what was changed.

        Examples
        --------
        >>> Setup.recipe("pytorch-amp").changed(optimizer="sgd").label
        'pytorch-amp (optimizer=sgd)'
        """
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidArgumentError(
                f"Setup has no field {unknown[0]!r}; its fields are {', '.join(sorted(known))}."
            )
        differ = {k: v for k, v in changes.items() if getattr(self, k) != v}
        if not differ:
            return self
        updated = replace(self, **differ)
        if self.name and "name" not in changes:
            told = ", ".join(f"{k}={_value(v)}" for k, v in differ.items())
            base = self.name.split(" (")[0]
            before = self.name[len(base) + 2:-1].split(", ") if " (" in self.name else []
            kept = [item for item in before if item.split("=")[0] not in differ]
            updated = replace(updated, name=f"{base} ({', '.join([*kept, told])})")
        return updated

    # -- what it implies -------------------------------------------------------------------
    @property
    def label(self) -> str:
        """The recipe's name with what was changed, or ``"custom"``."""
        return self.name or "custom"

    @property
    def implementation(self) -> Implementation:
        """The optimizer implementation: as told, else PyTorch's default on ``device``."""
        return self.optimizer_implementation or _DEVICE_IMPLEMENTATION[self.device]

    @property
    def flash(self) -> bool:
        """Whether attention is SDPA, asked for a kernel that keeps no S x S tensors.

        Whether the kernel that runs keeps none depends on the model and the
        dtype too: see :meth:`attention_kernel` and :meth:`flash_for`.
        """
        return self.attention == "sdpa"

    def attention_kernel(
        self, layer: object, checkpoint_dtype: str | None = None, device: Device | None = None
    ) -> str:
        """Return the kernel the step runs for attention ``layer``.

        ``"eager"`` for eager attention; on the CPU ``"flash"`` (SDPA's CPU
        flash kernel, what memtheory measures for SDPA), or ``"math"`` for a
        layer with attention dropout, which the CPU flash kernel refuses
        (:func:`~memtheory.conventions.autograd.sdpa_backend.cpu_sdpa_backend`:
        GPT-2's default ``attn_pdrop=0.1`` in training); on CUDA the backend
        :func:`~memtheory.conventions.autograd.sdpa_backend.layer_sdpa_backend`
        selects for the layer at the precision's activation dtype
        (``"flash"``, ``"cudnn"``, ``"efficient"`` or ``"math"``), or
        ``"flash"`` for a layer it cannot read. ``device`` overrides the
        setup's (the device the step runs on).

        Examples
        --------
        >>> from memtheory.layers.grouped_attention import GroupedQueryAttention
        >>> gqa = GroupedQueryAttention(4, kv_heads=2, head_dim=8)
        >>> fp32 = Setup.recipe("pytorch-fp32")
        >>> fp32.attention_kernel(gqa), fp32.attention_kernel(gqa, device="cpu")
        ('math', 'flash')
        >>> Setup.recipe("pytorch-amp").attention_kernel(gqa)
        'flash'
        """
        if self.attention == "eager":
            return "eager"
        if (device or self.device) == "cpu":
            return cpu_sdpa_backend(layer)
        activations = _precision(self.precision_for(checkpoint_dtype)).activations
        return layer_sdpa_backend(layer, activations) or "flash"

    def flash_for(
        self, model: object, checkpoint_dtype: str | None = None, device: Device | None = None
    ) -> bool:
        """Return whether ``model``'s attention keeps no S x S tensors under this setup.

        False for eager attention, and for SDPA when CUDA's selection
        (:meth:`attention_kernel`) falls to the math path for one of the
        network's attention layers: math keeps the S x S probabilities as
        eager attention does, so such a model is built with ``flash=False``.
        The GPU recordings show it: fp32 SDPA on a grouped-query Llama
        kept, on H200 and H100 GPUs with PyTorch 2.11, what eager attention kept.

        Examples
        --------
        >>> from memtheory.models import from_config
        >>> llama = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
        ...          "intermediate_size": 40, "num_hidden_layers": 2,
        ...          "num_attention_heads": 4, "num_key_value_heads": 2}
        >>> net = from_config(llama, batch=2, sequence=8, loss=True, flash=True)
        >>> Setup.recipe("pytorch-fp32").flash_for(net), Setup.recipe("hf-trainer").flash_for(net)
        (False, True)
        >>> Setup.recipe("pytorch-fp32").flash_for(net, device="cpu")
        True
        """
        if not self.flash:
            return False
        return not any(
            keeps_scores(kernel)
            for layer in _attention_layers(model)
            if (kernel := self.attention_kernel(layer, checkpoint_dtype, device)) != "eager"
        )

    def built_for_kernel(
        self,
        build: Callable[[bool], _Built],
        network: Callable[[_Built], object] = lambda built: built,
        checkpoint_dtype: Callable[[_Built], str | None] = lambda built: None,
        device: Device | None = None,
    ) -> tuple[_Built, bool]:
        """Build a model for the attention kernel this setup runs; say whether it is SDPA's.

        ``build(flash)`` builds the model with (``True``) or without SDPA's
        fused attention. A setup with SDPA builds it fused first, then again
        without when :meth:`flash_for` finds a layer whose kernel keeps the
        S x S probabilities (CUDA's math path, or the CPU's with attention
        dropout), unless on the CPU every attention layer models that path
        itself (``flash=True, device="cpu"``: GPT-2 from ``from_config(...,
        device="cpu")``, measured): every front door (``estimate``,
        the calculator, the recipe checks) builds its model this way, so they
        cannot disagree on the kernel. ``network`` and ``checkpoint_dtype``
        read the built object's network and its checkpoint's dtype.

        Examples
        --------
        >>> from memtheory.models import from_config
        >>> llama = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
        ...          "intermediate_size": 40, "num_hidden_layers": 2,
        ...          "num_attention_heads": 4, "num_key_value_heads": 2}
        >>> def build(flash):
        ...     return from_config(llama, batch=2, sequence=8, loss=True, flash=flash)
        >>> Setup.recipe("pytorch-fp32").built_for_kernel(build)[1]  # CUDA's math path
        False
        >>> Setup.recipe("pytorch-fp32").built_for_kernel(build, device="cpu")[1]
        True
        """
        built = build(self.flash)
        if self.flash and not self.flash_for(network(built), checkpoint_dtype(built), device):
            if not _runs_own_math(network(built), device or self.device):
                return build(False), False
        return built, self.flash

    @property
    def reserve_bytes(self) -> sp.Expr:
        """The reserve in bytes."""
        value = parse_bytes(self.reserve) if isinstance(self.reserve, str) else self.reserve
        return sp.sympify(value)

    def precision_for(self, checkpoint_dtype: str | None) -> str:
        """Return the precision name for a model whose checkpoint is in ``checkpoint_dtype``.

        :data:`AS_LOADED` keeps a 16-bit checkpoint in its dtype (``"bf16"``
        or ``"fp16"``) and runs ``torch.autocast(bfloat16)`` over an fp32 one
        (``"autocast-bf16"``), as ``Trainer`` with ``bf16=True`` does; sharded
        (``zero`` >= 1), the weights are held in fp32 whatever the checkpoint
        (``"autocast-bf16"``). Any other precision is returned as it is.

        Examples
        --------
        >>> hf = Setup(precision=AS_LOADED)
        >>> hf.precision_for("bf16"), hf.precision_for("fp32"), hf.precision_for(None)
        ('bf16', 'autocast-bf16', 'autocast-bf16')
        >>> hf.changed(zero=3).precision_for("bf16")
        'autocast-bf16'
        """
        if self.precision != AS_LOADED:
            return self.precision
        if self.zero:
            return "autocast-bf16"
        if checkpoint_dtype in ("bf16", "bfloat16", "fp16", "float16"):
            return "bf16" if checkpoint_dtype in ("bf16", "bfloat16") else "fp16"
        return "autocast-bf16"

    def convention(self) -> AutogradConvention:
        """Return the exact (autograd) convention for this step's loop and optimizer."""
        return AutogradConvention(self.implementation, keeps_logits=self.keeps_logits,
                                  loop=self.loop)

    @property
    def is_recipe(self) -> bool:
        """Whether this setup is a named recipe of the catalog, or a copy of one with changes.

        Examples
        --------
        >>> Setup.recipe("hf-trainer").changed(zero=3).is_recipe, Setup(name="mine").is_recipe
        (True, False)
        """
        if not self.name:
            return False
        try:
            _CATALOG[0](self.name.split(" (")[0])  # "hf-trainer (zero=3)": a changed recipe
        except MemtheoryError:
            return False
        return True

    def describe(self, checkpoint_dtype: str | None = None) -> list[str]:
        """Return the assumptions in words, one line each (what ``assumed:`` lines print).

        Examples
        --------
        >>> for line in Setup.recipe("hf-trainer").describe("bf16")[:3]:
        ...     print(line)
        recipe hf-trainer: transformers 5 Trainer defaults (...)
        precision bf16 (the checkpoint's dtype, loaded with dtype="auto"): ...
        optimizer adamw, fused implementation
        """
        lines = []
        if self.name:
            kind = "recipe" if self.is_recipe else "setup"
            lines.append(f"{kind} {self.name}: {self.source}" if self.source else
                         f"{kind} {self.name}")
        chosen = self.precision_for(checkpoint_dtype)
        how = self._precision_words(chosen)
        if self.precision == AS_LOADED and self.zero:
            lines.append(f"precision {chosen} (sharded, the weights are held in fp32 and "
                         f"gathered in bf16, as accelerate and DeepSpeed do): {how}")
        elif self.precision == AS_LOADED:
            lines.append(f'precision {chosen} (the checkpoint\'s dtype, loaded with dtype="auto"'
                         + ("; bf16=True runs torch.autocast over it" if chosen.startswith(
                             "autocast") else "") + f"): {how}")
        else:
            lines.append(f"precision {chosen}: {how}")
        told = "" if self.optimizer_implementation else f" (PyTorch's default on {self.device})"
        lines.append(f"optimizer {self.optimizer}, {self.implementation} implementation{told}")
        lines.append(
            "attention: SDPA (flash or memory-efficient kernel: no S x S scores kept; "
            "transformers' default attn_implementation)" if self.flash else
            "attention: eager (S x S scores and probabilities kept for the backward pass)"
        )
        if self.flash and self.device == "cuda" and _precision(chosen).activations.name == "fp32":
            lines[-1] += ("; in fp32 with grouped key/value heads CUDA runs SDPA's math path, "
                          "which keeps S x S as eager attention does")
        lines.append(
            "the loop holds the logits through the backward pass (out = model(x))"
            if self.keeps_logits else
            "the loop keeps only the loss; the logits are freed in the forward unless saved"
        )
        if self.loop != "plain":
            lines.append(f"loop: {LOOPS[self.loop]}")
        if self.checkpointing:
            lines.append("activation checkpointing")
        if self.zero:
            copies = ("" if self.zero < 3 else
                      "; autocast's bf16 copies of gathered weights kept" if
                      self.sharded_autocast_copies else
                      "; weights gathered in 16 bits, no autocast copies kept")
            lines.append(f"ZeRO stage {self.zero}{copies}")
        if self.offload != "none":
            lines.append(f"CPU offload: {self.offload}")
        if self.quantization:
            lines.append(f"{self.quantization.upper()} 4-bit frozen weights on every nn.Linear "
                         "(bitsandbytes replaces nn.Linear only: transformers 5's fused "
                         "mixture-of-experts weights stay 16-bit, where 4.x's per-expert nn.Linear "
                         "were quantized)")
        lines.append(f"reserve per card {format_bytes(self.reserve_bytes, 'GiB')} "
                     "(CUDA context, driver, allocator)")
        return lines

    def _precision_words(self, chosen: str) -> str:
        """Each component's dtype in words; with adapters, the frozen base's and the adapters'."""
        precision = _precision(chosen)
        if not self.adapter_dtype:
            return precision.describe()
        words = [f"frozen base weights {precision.parameters}"
                 + (" (the quantized layers: below)" if self.quantization else "")]
        words += [f"{f.name} {getattr(precision, f.name)}" for f in fields(precision)
                  if f.name not in ("parameters", "gradients", "optimizer_state")
                  and getattr(precision, f.name) is not None]
        words.append(f"LoRA adapters, their gradients and optimizer state {self.adapter_dtype}")
        return ", ".join(words)

    def __str__(self) -> str:
        return "\n".join(f"assumed: {line}" for line in self.describe())

    def to_dict(self) -> dict[str, Any]:
        """Return the fields, JSON-ready (the reserve in bytes), with the derived implementation.

        Examples
        --------
        >>> Setup.recipe("pytorch-amp").to_dict()["optimizer_implementation"]
        'foreach'
        """
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["optimizer_implementation"] = self.implementation
        data["reserve"] = int(self.reserve_bytes)
        return data


def _one_of(name: str, value: object, allowed: tuple[object, ...]) -> None:
    ok = any(value is a if isinstance(a, bool) or a is None else (
        not isinstance(value, bool) and value == a) for a in allowed)
    if not ok:
        shown = ", ".join(str(a) for a in allowed)
        raise InvalidArgumentError(f"{name} must be one of {shown}, got {_short(value)}.")


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def setup_from(spec: Setup | str | Mapping[str, Any] | None) -> Setup | None:
    """Return a :class:`Setup` from a Setup, a recipe name or a mapping of fields (None stays).

    Examples
    --------
    >>> setup_from("hf-trainer").label, setup_from({"attention": "eager"}).attention
    ('hf-trainer', 'eager')
    """
    if spec is None or isinstance(spec, Setup):
        return spec
    if isinstance(spec, str):
        return Setup.recipe(spec)
    if isinstance(spec, Mapping):
        known = {f.name for f in fields(Setup) if f.init}
        unknown = [k for k in spec if k not in known]
        if unknown:
            raise InvalidArgumentError(
                f"setup has no field {_short(unknown[0])}; its fields are "
                f"{', '.join(sorted(known))}."
            )
        return Setup(**spec)
    raise InvalidArgumentError(
        f"setup must be a Setup, a recipe name or a mapping of its fields, got {_short(spec)}."
    )


def _attention_layers(model: object) -> list[object]:
    """Return the layers of ``model`` (a network) that carry an attention kernel (``flash``)."""
    layers = []
    for row in getattr(model, "rows", ()):
        layer = getattr(row.layer, "layer", row.layer)  # a frozen or adapted layer
        if isinstance(getattr(layer, "flash", None), bool):
            layers.append(layer)
    return layers


def _runs_own_math(model: object, device: Device) -> bool:
    """Whether every attention layer of ``model`` models SDPA's CPU math path itself.

    A :class:`~memtheory.layers.MultiHeadAttention` built with ``flash=True``
    and ``device="cpu"`` (GPT-2 from :func:`~memtheory.models.from_config`
    with ``device="cpu"``) keeps, in training with dropout, what the math
    path keeps (fp32 at 16 bits), so it is not rebuilt as eager attention.
    """
    layers = _attention_layers(model)
    return device == "cpu" and bool(layers) and all(
        getattr(layer, "flash", False) and getattr(layer, "device", None) == "cpu"
        for layer in layers
    )
