"""Each one-CPU recipe's step as its own library runs it, tracked, beside the recipe's prediction.

Not a benchmark (``make bench`` skips files that start with ``_``):
``benchmarks/recipes.py`` and its test use it.

==================  =================================================================
recipe              the step that is tracked
==================  =================================================================
pytorch-fp32        :func:`memtheory.torch.recipe_steps.check_recipe`: a plain PyTorch
pytorch-amp         loop (``measure(model, batch, setup=recipe)``, which is ``track()``
                    around the Setup's step); its prediction is ``check_recipe``'s
hf-trainer          transformers' ``Trainer.train()``, two optimizer steps
                    (``TrainingArguments(bf16=True)``, its default ``adamw_torch_fused``),
                    inside :func:`memtheory.torch.track`, as
                    ``tests/pytorch/test_trainer_recipe.py`` runs it
lightning-bf16      Lightning's ``Trainer(precision="bf16-mixed").fit()``, two optimizer
                    steps, ``configure_optimizers`` returning ``torch.optim.AdamW``
                    with PyTorch's default implementation (for-loop on CPU), inside
                    ``track()``, as ``tests/pytorch/test_lightning_recipe.py`` runs it
peft-lora           peft's ``get_peft_model(model, LoraConfig(r=4, lora_alpha=8,
                    target_modules=["q_proj", "v_proj"]))`` (peft's default Llama
                    targets; its fp32 adapters on the bf16 base) trained by
                    transformers' ``Trainer.train()`` with ``bf16=True``, two optimizer
                    steps, inside ``track()``, as ``tests/pytorch/test_peft_recipe.py``
                    runs it; predicted by :func:`memtheory.estimate.estimate` (the CLI's
                    front door) with ``setup="peft-lora"``
==================  =================================================================

The model is :func:`memtheory.torch.recipe_steps.recipe_model`'s for every
recipe: transformers' causal LM built from a configuration (no download), in
the checkpoint's dtype, with the recipe's attention (SDPA) and
``use_cache=False``, then cast to the dtype the recipe trains in. The
Trainer and Lightning rows are predicted under the recipe's own Setup (its
loop, ``"hf-trainer"`` or ``"lightning"``, included) with the optimizer
implementation that ran.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memtheory import training_memory
from memtheory.models import from_config
from memtheory.recipes import Setup
from memtheory.torch import track
from memtheory.torch.recipe_steps import check_recipe, recipe_model
from memtheory.torch.setup_step import setup_step


@dataclass(frozen=True)
class LibraryStep:
    """One recipe's tracked step and its prediction, with the model's parameter counts."""

    recipe: str
    runner: str
    precision: str
    implementation: str
    weight_dtype: torch.dtype
    predicted: int
    moment: str
    tracked: int
    parameters: int
    largest_layer: int


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """Return (parameters, DeepSpeed's largest layer): shared weights counted once in the first.

    The largest layer is DeepSpeed's ``largest_layer_params``: the most
    parameters one module holds itself (``m.parameters(recurse=False)``).
    """
    total = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return int(total), int(largest)


def run_recipe(
    recipe: str, config: Mapping[str, Any], *, batch: int, sequence: int,
    checkpoint_dtype: str = "bf16",
) -> LibraryStep:
    """Track ``recipe``'s real step on transformers' model for ``config``; predict it."""
    runners: dict[str, Callable[..., LibraryStep]] = {
        "hf-trainer": _trainer, "lightning-bf16": _lightning, "peft-lora": _peft}
    run = runners.get(recipe, _plain)
    return run(recipe, config, batch=batch, sequence=sequence, checkpoint_dtype=checkpoint_dtype)


def _model(recipe: str, config: Mapping[str, Any], checkpoint_dtype: str) -> tuple[nn.Module, str]:
    """The recipe's model, cast to the dtype it trains in; and the precision that gives."""
    setup = Setup.recipe(recipe)
    model = recipe_model(setup, config, checkpoint_dtype=checkpoint_dtype)
    step = setup_step(setup, model)
    if step.dtype is not None:
        model.to(step.dtype)
    return model, step.precision


def _weight_dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _plain(
    recipe: str, config: Mapping[str, Any], *, batch: int, sequence: int, checkpoint_dtype: str,
) -> LibraryStep:
    check = check_recipe(recipe, config, batch=batch, sequence=sequence,
                         checkpoint_dtype=checkpoint_dtype)
    model, _ = _model(recipe, config, checkpoint_dtype)  # the same model, for its counts
    return LibraryStep(
        recipe, "plain PyTorch loop, measure", check.precision,
        check.measured.implementation, _weight_dtype(model), check.predicted_peak,
        check.predicted_moment, check.measured.peak, *parameter_counts(model))


def _predict(
    recipe: str, config: Mapping[str, Any], *, batch: int, sequence: int, precision: str,
    implementation: str,
) -> tuple[int, str]:
    """training_memory under the recipe's own Setup (its loop), on the CPU's attention kernel."""
    setup = Setup.recipe(recipe, precision=precision, optimizer_implementation=implementation)
    network, _ = setup.built_for_kernel(
        lambda flash: from_config(dict(config), batch=batch, sequence=sequence, loss=True,
                                  flash=flash, device="cpu"), device="cpu")
    predicted = training_memory(network, setup=setup)
    return int(predicted.peak), predicted.peak_moment or ""


def _rows(config: Mapping[str, Any], steps: int, batch: int, sequence: int) -> list[dict]:
    """``steps * batch`` separate rows of token ids (a dataset's), labels equal to the ids."""
    ids = torch.randint(0, int(config["vocab_size"]), (steps * batch, sequence))
    return [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]


def _trainer(
    recipe: str, config: Mapping[str, Any], *, batch: int, sequence: int, checkpoint_dtype: str,
) -> LibraryStep:
    import transformers

    model, precision = _model(recipe, config, checkpoint_dtype)
    rows = _rows(config, 2, batch, sequence)
    with tempfile.TemporaryDirectory() as folder:
        args = transformers.TrainingArguments(
            output_dir=folder, max_steps=2, per_device_train_batch_size=batch, report_to=[],
            use_cpu=True, disable_tqdm=True, bf16=precision == "autocast-bf16",
            save_strategy="no", logging_strategy="no",
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
        with track(model) as tracker:
            trainer.train()
    implementation = _implementation(trainer.optimizer)
    predicted, moment = _predict(recipe, config, batch=batch, sequence=sequence,
                                 precision=precision, implementation=implementation)
    return LibraryStep(
        recipe, "transformers Trainer.train()", precision, implementation,
        _weight_dtype(model), predicted, moment, tracker.peak, *parameter_counts(model))


PEFT_LORA = {"rank": 4, "targets": ("q_proj", "v_proj")}
"""The adapters the peft-lora rows train: rank 4 (alpha 8) on peft's default Llama targets."""


def peft_trainer_step(
    config: Mapping[str, Any], *, batch: int, sequence: int, rank: int = 4,
    targets: str | tuple[str, ...] = ("q_proj", "v_proj"), checkpointing: bool = False,
    checkpoint_dtype: str = "bf16",
) -> tuple[nn.Module, Any, Any]:
    """Track two steps of the real Trainer on peft's LoRA model; return (model, trainer, tracker).

    The base is :func:`~memtheory.torch.recipe_steps.recipe_model`'s (SDPA,
    ``use_cache=False``, in ``checkpoint_dtype``); ``peft.get_peft_model``
    adds the adapters (``lora_alpha = 2 * rank``, peft's
    ``autocast_adapter_dtype=True`` keeps them in fp32); the Trainer runs with
    the recipe's ``bf16=True`` and its default ``adamw_torch_fused``, and
    ``gradient_checkpointing`` as asked (``use_reentrant=False``, its default).
    """
    import peft
    import transformers

    model = recipe_model("peft-lora", config, checkpoint_dtype=checkpoint_dtype)
    wanted = targets if isinstance(targets, str) else list(targets)
    model = peft.get_peft_model(
        model, peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=wanted))
    rows = _rows(config, 2, batch, sequence)
    with tempfile.TemporaryDirectory() as folder:
        args = transformers.TrainingArguments(
            output_dir=folder, max_steps=2, per_device_train_batch_size=batch, report_to=[],
            use_cpu=True, disable_tqdm=True, bf16=True, save_strategy="no",
            logging_strategy="no", gradient_checkpointing=checkpointing,
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
        with track(model, record=True) as tracker:
            trainer.train()
    return model, trainer, tracker


def peft_prediction(
    config: Mapping[str, Any], *, batch: int, sequence: int, rank: int = 4,
    targets: str | tuple[str, ...] = ("q_proj", "v_proj"), checkpointing: bool = False,
    checkpoint_dtype: str = "bf16",
) -> Any:
    """The CLI's answer for the same step: ``estimate(..., setup="peft-lora")``."""
    from memtheory.estimate import estimate

    dtypes = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
    return estimate({**config, "torch_dtype": dtypes[checkpoint_dtype]}, batch=batch,
                    sequence=sequence, lora=rank, lora_alpha=2 * rank, lora_targets=targets,
                    setup="peft-lora", checkpointing=checkpointing or None)


def _peft(
    recipe: str, config: Mapping[str, Any], *, batch: int, sequence: int, checkpoint_dtype: str,
) -> LibraryStep:
    rank, targets = PEFT_LORA["rank"], PEFT_LORA["targets"]
    model, trainer, tracker = peft_trainer_step(
        config, batch=batch, sequence=sequence, rank=rank, targets=targets,
        checkpoint_dtype=checkpoint_dtype)
    answer = peft_prediction(config, batch=batch, sequence=sequence, rank=rank,
                             targets=targets, checkpoint_dtype=checkpoint_dtype)
    base = next(p for n, p in model.named_parameters() if "lora_" not in n)
    return LibraryStep(
        recipe, "peft get_peft_model + transformers Trainer.train()",
        answer.settings["precision"], _implementation(trainer.optimizer), base.dtype,
        int(answer.peak), answer.memory.peak_moment or "", tracker.peak,
        *parameter_counts(model))


def _lightning(
    recipe: str, config: Mapping[str, Any], *, batch: int, sequence: int, checkpoint_dtype: str,
) -> LibraryStep:
    import lightning.pytorch as lightning

    model, precision = _model(recipe, config, checkpoint_dtype)

    class CausalLM(lightning.LightningModule):
        """A Hugging Face causal LM: the loss is the model's own, AdamW as PyTorch defaults it."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.model(**batch).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    module = CausalLM()
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    loader = torch.utils.data.DataLoader(_rows(config, 2, batch, sequence), batch_size=batch)
    with track(module) as tracker:
        trainer.fit(module, loader)
    implementation = _implementation(trainer.optimizers[0])
    predicted, moment = _predict(recipe, config, batch=batch, sequence=sequence,
                                 precision=precision, implementation=implementation)
    return LibraryStep(
        recipe, "Lightning Trainer.fit()", precision, implementation, _weight_dtype(model),
        predicted, moment, tracker.peak, *parameter_counts(model))


def _implementation(optimizer: Any) -> str:
    """The implementation a CPU optimizer ran: fused, foreach, or PyTorch's CPU default."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the Trainer's
    defaults = inner.defaults
    if defaults.get("fused"):
        return "fused"
    return "foreach" if defaults.get("foreach") else "for-loop"
