"""Run a recipe's training step on a Hugging Face decoder and set it beside the prediction.

:func:`check_recipe` builds transformers' causal language model from a small
configuration (no download), prepares it as the recipe does (its dtype, its
attention kernel, ``torch.autocast`` or not, the ``torch.optim`` AdamW
implementation, a loop that holds the logits or only the loss), measures one
steady-state step with :func:`~memtheory.torch.measure` and predicts the same
step with :func:`memtheory.training_memory` under the recipe's
:class:`~memtheory.recipes.Setup`. On the CPU the two are compared to the
byte; on a GPU (``device="cuda"``) the measurement also reads the caching
allocator, which is what ``benchmarks/cuda_zoo.py --recipes`` records.

What it cannot run is said, not faked: recipes whose kernels are CUDA-only
(bitsandbytes' 4-bit weights) or that need several devices (ZeRO, FSDP) are
refused by :func:`check_recipe` with the reason.

Examples
--------
>>> check = check_recipe("pytorch-fp32", TINY_LLAMA, batch=2, sequence=6)
>>> check.predicted_peak == check.measured.peak
True
>>> check.setup.label
'pytorch-fp32'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memtheory.errors import UnsupportedError
from memtheory.memory import training_memory
from memtheory.models import from_config
from memtheory.recipes import Setup, setup_from
from memtheory.torch.hf_losses import causal_lm_loss
from memtheory.torch.measurement import Measurement, measure

__all__ = [
    "CPU_RECIPES",
    "MID_LLAMA",
    "TINY_LLAMA",
    "RecipeCheck",
    "check_recipe",
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


class _Logits(nn.Module):
    """The model returns its logits: the loop applies the loss and holds the output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


class _LossOnly(nn.Module):
    """The model computes the loss from its labels and returns it alone, as ``Trainer`` does."""

    def __init__(self, model: nn.Module, labels: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("labels", labels, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=input_ids, use_cache=False).logits
        labels = self.labels
        assert isinstance(labels, torch.Tensor)
        return causal_lm_loss(logits, labels)


def _identity(loss: torch.Tensor) -> torch.Tensor:
    return loss


def _refusal(setup: Setup) -> str | None:
    if setup.quantization:
        return "its 4-bit weights run bitsandbytes' CUDA kernels"
    if setup.zero or setup.offload != "none":
        return "ZeRO and FSDP shard the step across several devices"
    if setup.adapter_dtype:
        return "its LoRA adapters are not built by this runner (see the peft tests)"
    if setup.precision.startswith("mixed"):
        return "an fp32 master copy is kept by DeepSpeed's optimizer, not by torch.optim"
    if setup.optimizer != "adamw":
        return f"this runner builds torch.optim.AdamW, not {setup.optimizer}"
    return None


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
        ``"cuda"`` measures on a GPU with the allocator's counters; the
        prediction follows the CPU kernels either way.
    warmup_steps : int, default 1

    Raises
    ------
    UnsupportedError
        For a recipe this runner cannot run on one device (4-bit, sharded,
        master weights), saying why.

    Examples
    --------
    >>> check_recipe("qlora")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnsupportedError: recipe qlora cannot run here: its 4-bit weights ...
    """
    import transformers

    setup = setup_from(recipe)
    assert setup is not None
    reason = _refusal(setup)
    if reason:
        raise UnsupportedError(f"recipe {setup.label} cannot run here: {reason}.")
    precision = setup.precision_for(checkpoint_dtype)
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(
        config["model_type"], attn_implementation=setup.attention, **values
    )
    torch.manual_seed(0)
    dtype = _DTYPES["fp32" if precision.startswith("autocast") else precision]
    model = transformers.AutoModelForCausalLM.from_config(hf).to(device=device, dtype=dtype)
    model.train()
    ids = torch.randint(0, int(config["vocab_size"]), (batch, sequence), device=device)
    module: nn.Module
    loss: Callable[..., torch.Tensor]
    target: torch.Tensor | None
    if setup.keeps_logits:
        module, loss, target = _Logits(model), causal_lm_loss, ids.clone()
    else:
        module, loss, target = _LossOnly(model, ids.clone()), _identity, None
    implementation = setup.implementation
    optimizer = torch.optim.AdamW(
        module.parameters(), lr=1e-3, foreach=implementation == "foreach",
        fused=implementation == "fused" or None,
    )
    measured = measure(
        module, ids, loss, optimizer, target=target, warmup_steps=warmup_steps,
        autocast=torch.bfloat16 if precision.startswith("autocast") else None,
    )
    network = from_config(dict(config), batch=batch, sequence=sequence, loss=True,
                          flash=setup.flash)
    # The runner's loop is a plain one: the Trainer's own scalars (loop="hf-trainer") are
    # checked against the real Trainer in tests/pytorch/test_trainer_recipe.py.
    predicted = training_memory(network, setup=setup.changed(
        precision=precision, optimizer_implementation=measured.implementation, loop="plain"))
    return RecipeCheck(setup, precision, int(predicted.peak), predicted.peak_moment or "",
                       measured)


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
