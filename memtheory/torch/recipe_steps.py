"""Run a recipe's training step on a Hugging Face decoder and set it beside the prediction.

:func:`check_recipe` builds transformers' causal language model from a small
configuration (no download) in the checkpoint's dtype, with the recipe's
attention kernel (:func:`recipe_model`), casts it to the dtype the recipe
trains in, and measures one steady-state step with
``measure(model, batch, setup=recipe)``: the step (``torch.autocast`` or
not, the ``torch.optim`` optimizer and its implementation, a loop that holds
the logits or only the loss) is the one
:func:`~memtheory.torch.setup_step.setup_step` maps every Setup onto, not a
second mapping. It predicts the same step with
:func:`memtheory.training_memory` under the recipe's
:class:`~memtheory.recipes.Setup`. On the CPU the two are compared to the
byte; on a GPU (``device="cuda"``) the measurement also reads the caching
allocator, which is what ``benchmarks/cuda_zoo.py --recipes`` records.

What it cannot run is said, not faked: recipes whose kernels are CUDA-only
(bitsandbytes' 4-bit weights), that need several devices (ZeRO, FSDP) or
that another runner builds (peft's LoRA adapters under the Trainer:
``benchmarks/_library_steps.py``) are refused by :func:`check_recipe` with
the reason.

Examples
--------
>>> check = check_recipe("pytorch-fp32", TINY_LLAMA, batch=2, sequence=6)
>>> check.predicted_peak == check.measured.peak
True
>>> check.setup.label
'pytorch-fp32'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.memory import training_memory
from memtheory.models import from_config
from memtheory.recipes import Setup, setup_from
from memtheory.recipes.setup import Device, Implementation
from memtheory.torch.measurement import Measurement, measure
from memtheory.torch.setup_step import refuse_unrunnable, setup_step

__all__ = [
    "CPU_RECIPES",
    "MID_LLAMA",
    "TINY_LLAMA",
    "RecipeCheck",
    "check_recipe",
    "predict_recipe",
    "recipe_model",
    "record_recipe_steps",
]

TINY_LLAMA: Mapping[str, Any] = {
    "model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "tie_word_embeddings": False,
}
"""A Llama-style decoder small enough to run a step on CPU in a fraction of a second."""

MID_LLAMA: Mapping[str, Any] = {
    "model_type": "llama", "vocab_size": 4096, "hidden_size": 512, "intermediate_size": 1376,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
    "max_position_embeddings": 2048, "tie_word_embeddings": False,
}
"""A decoder of some 15 M parameters: big enough for a GPU's kernels to show their own choices."""

RECORDED_SIZES: Mapping[str, tuple[Mapping[str, Any], int, int]] = {
    "tiny": (TINY_LLAMA, 2, 64),
    "mid": (MID_LLAMA, 4, 512),
}
"""What ``benchmarks/cuda_zoo.py`` records each recipe at: (config, batch, sequence)."""

CPU_RECIPES = ("pytorch-fp32", "pytorch-amp", "hf-trainer", "lightning-bf16")
"""The recipes whose step runs on one CPU: no 4-bit kernels, no sharding."""

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class RecipeCheck:
    """One recipe's step: the setup, the precision it came to, the prediction and the measurement.

    Attributes
    ----------
    setup : Setup
    precision : str
        The precision the setup gives for a checkpoint in ``checkpoint_dtype``.
    predicted_peak : int
        Bytes, from :func:`memtheory.training_memory` under the setup.
    predicted_moment : str
        Where the predicted peak falls.
    measured : Measurement
    """

    setup: Setup
    precision: str
    predicted_peak: int
    predicted_moment: str
    measured: Measurement

    @property
    def difference(self) -> int:
        """Predicted less measured peak, in bytes."""
        return self.predicted_peak - self.measured.peak


def _refuse(setup: Setup) -> None:
    """Refuse, before a model is built, what this runner cannot run on one CPU process.

    What no single process can run is the Setup mapping's rule
    (:func:`~memtheory.torch.setup_step.refuse_unrunnable`). LoRA adapters are
    this runner's own limit, not the mapping's (which checks the adapters a
    model has): it builds the bare decoder in a plain loop; peft's model
    under the Trainer is ``benchmarks/_library_steps.py``'s ``peft-lora``
    runner, so a Setup with ``adapter_dtype`` is refused here.
    """
    try:
        refuse_unrunnable(setup)
        if setup.adapter_dtype:
            raise UnsupportedError(
                "its LoRA adapters are peft's, trained by transformers' Trainer, not by this "
                "plain loop: benchmarks/_library_steps.py run_recipe('peft-lora', ...) runs "
                "that step (tests/pytorch/test_peft_recipe.py)")
    except UnsupportedError as error:
        raise UnsupportedError(f"recipe {setup.label} cannot run here: {error}") from None


def check_recipe(
    recipe: Setup | str,
    config: Mapping[str, Any] = TINY_LLAMA,
    *,
    batch: int = 2,
    sequence: int = 8,
    checkpoint_dtype: str = "bf16",
    device: str = "cpu",
    warmup_steps: int = 1,
) -> RecipeCheck:
    """Measure one step of ``recipe`` on transformers' model for ``config``, and predict it.

    The model is built in ``checkpoint_dtype`` (as ``from_pretrained`` loads
    a checkpoint), cast to the dtype the recipe trains its weights in (the
    cast :func:`~memtheory.torch.setup_step.setup_step` names), and measured
    with ``measure(model, {"input_ids": ids, "labels": ids}, setup=recipe)``:
    the recipe's autocast, optimizer and loop are the Setup mapping's, the
    same as any ``measure(..., setup=)`` call.

    Parameters
    ----------
    recipe : Setup or str
        A :class:`~memtheory.recipes.Setup` or a recipe's name.
    config : mapping, default :data:`TINY_LLAMA`
        A Hugging Face configuration with ``model_type`` (a Llama-style decoder).
    batch, sequence : int
    checkpoint_dtype : {"bf16", "fp16", "fp32"}, default "bf16"
        The dtype the weights would be published in: the recipes that keep
        the checkpoint's dtype load the model in it.
    device : str, default "cpu"
        ``"cuda"`` measures on a GPU with the allocator's counters. The
        prediction follows that device's attention kernel
        (:meth:`Setup.flash_for <memtheory.recipes.Setup.flash_for>`: on
        CUDA, SDPA in fp32 with grouped key/value heads runs the math path,
        which keeps S x S as eager attention does); the other kernels are
        the CPU's.
    warmup_steps : int, default 1

    Raises
    ------
    UnsupportedError
        For a recipe this runner cannot run on one device (4-bit, sharded,
        master weights, LoRA adapters), saying why.

    Examples
    --------
    >>> check_recipe("qlora")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnsupportedError: recipe qlora cannot run here: ... bitsandbytes' 4-bit ...
    """
    setup = setup_from(recipe)
    assert setup is not None
    _refuse(setup)
    model = recipe_model(setup, config, checkpoint_dtype=checkpoint_dtype, device=device)
    step = setup_step(setup, model, device=device)  # the cast, then measure's own mapping
    if step.dtype is not None:
        model.to(step.dtype)
    ids = torch.randint(0, int(config["vocab_size"]), (batch, sequence), device=device)
    measured = measure(model, {"input_ids": ids, "labels": ids.clone()}, setup=setup,
                       warmup_steps=warmup_steps)
    peak, moment = predict_recipe(
        setup, config, batch=batch, sequence=sequence, precision=step.precision,
        implementation=measured.implementation, device=device)
    return RecipeCheck(setup, step.precision, peak, moment, measured)


def predict_recipe(
    recipe: Setup | str,
    config: Mapping[str, Any] = TINY_LLAMA,
    *,
    batch: int = 2,
    sequence: int = 8,
    precision: str,
    implementation: Implementation,
    device: str = "cpu",
) -> tuple[int, str]:
    """Return the peak (bytes) and its moment :func:`check_recipe` predicts for one step.

    The network is transformers' model for ``config`` as memtheory builds it
    (:func:`memtheory.models.from_config`), with the attention kernel that
    runs on ``device``: the recipe's, except where CUDA's SDPA falls to its
    math path (:meth:`Setup.flash_for <memtheory.recipes.Setup.flash_for>`:
    fp32 with grouped key/value heads), which keeps S x S as eager
    attention does. ``precision`` and ``implementation`` are the step's (the
    cast :func:`~memtheory.torch.setup_step.setup_step` names, the optimizer
    implementation that ran). The loop is a plain one: the Trainer's own
    scalars (``loop="hf-trainer"``) are checked against the real Trainer in
    ``tests/pytorch/test_trainer_recipe.py``.

    Examples
    --------
    >>> step = {"sequence": 64, "precision": "fp32", "implementation": "foreach"}
    >>> cpu = predict_recipe("pytorch-fp32", **step)
    >>> gpu = predict_recipe("pytorch-fp32", **step, device="cuda")
    >>> gpu[0] > cpu[0]  # the math path keeps S x S probabilities, the CPU flash kernel none
    True
    """
    setup = setup_from(recipe)
    assert setup is not None
    where: Device = "cpu" if device == "cpu" else "cuda"
    network, _ = setup.changed(precision=precision).built_for_kernel(
        lambda flash: from_config(dict(config), batch=batch, sequence=sequence, loss=True,
                                  flash=flash, device=where), device=where)
    predicted = training_memory(network, setup=setup.changed(
        precision=precision, optimizer_implementation=implementation, loop="plain"))
    return int(predicted.peak), predicted.peak_moment or ""


def recipe_model(
    recipe: Setup | str,
    config: Mapping[str, Any] = TINY_LLAMA,
    *,
    checkpoint_dtype: str = "bf16",
    device: str = "cpu",
) -> nn.Module:
    """Build transformers' causal language model for ``config`` as a checkpoint would load.

    In ``checkpoint_dtype``, with the recipe's attention kernel and
    ``use_cache=False`` (a training forward fills no ``DynamicCache``), in
    training mode, with the weights ``torch.manual_seed(0)`` gives. No
    download: the model is built from the configuration.

    Examples
    --------
    >>> model = recipe_model("hf-trainer", checkpoint_dtype="bf16")
    >>> model.config._attn_implementation, next(model.parameters()).dtype, model.training
    ('sdpa', torch.bfloat16, True)
    """
    import transformers

    setup = setup_from(recipe)
    assert setup is not None
    if checkpoint_dtype not in _DTYPES:
        raise InvalidArgumentError(
            f"checkpoint_dtype must be one of {', '.join(_DTYPES)}, got {checkpoint_dtype!r}."
        )
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(
        config["model_type"], attn_implementation=setup.attention,
        **{"use_cache": False, **values},
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf)
    return model.to(device=device, dtype=_DTYPES[checkpoint_dtype]).train()


def record_recipe_steps(
    device: str = "cuda",
    *,
    sizes: Mapping[str, tuple[Mapping[str, Any], int, int]] = RECORDED_SIZES,
    recipes: tuple[str, ...] = CPU_RECIPES,
    attentions: tuple[str, ...] = ("eager", "sdpa"),
    implementations: tuple[str, ...] = ("for-loop", "fused"),
) -> list[dict[str, Any]]:
    """Run each recipe at each size and attention kernel on ``device``; return plain records.

    Besides each recipe's own optimizer implementation, ``pytorch-amp`` is also
    run with each of ``implementations`` at every size. A record holds the
    setup's label, the size, the precision, the predicted and measured peaks,
    the live storages in 512-byte blocks and, on a GPU, the caching
    allocator's per-phase counters.

    Examples
    --------
    >>> records = record_recipe_steps("cpu", sizes={"tiny": (TINY_LLAMA, 2, 5)},
    ...                               recipes=("pytorch-fp32",), attentions=("sdpa",),
    ...                               implementations=())
    >>> [(r["recipe"], r["predicted_peak"] == r["measured_peak"]) for r in records]
    [('pytorch-fp32', True)]
    """
    from dataclasses import asdict

    records = []
    for size, (config, batch, sequence) in sizes.items():
        for name in recipes:
            setups = [Setup.recipe(name)]
            if name == "pytorch-amp":
                setups += [Setup.recipe(name, optimizer_implementation=i) for i in implementations]
            for base in setups:
                for attention in attentions:
                    setup = base.changed(attention=attention)
                    check = check_recipe(setup, config, batch=batch, sequence=sequence,
                                         device=device)
                    measured = check.measured
                    records.append({
                        "recipe": setup.label,
                        "size": size,
                        "batch": batch,
                        "sequence": sequence,
                        "precision": check.precision,
                        "implementation": measured.implementation,
                        "predicted_peak": check.predicted_peak,
                        "predicted_moment": check.predicted_moment,
                        "measured_peak": measured.peak,
                        "block_peak": measured.block_peak,
                        "allocator": None if measured.allocator is None else {
                            **asdict(measured.allocator),
                            "peak_allocated": measured.allocator.peak_allocated,
                            "peak_reserved": measured.allocator.peak_reserved,
                            "peak_phase": measured.allocator.peak_phase,
                        },
                    })
    return records
