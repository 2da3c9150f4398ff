"""One training step of a Hugging Face decoder, measured and predicted: the shared harness.

transformers builds the family's ``...ForCausalLM`` from a tiny configuration
with ``attn_implementation="eager"``; ``memtheory.torch.measure`` runs its
training step on CPU with ``use_cache=False`` (the loss is Hugging Face's
causal-LM loss, applied by ``measure`` to the logits the module returns), and
memtheory predicts the same step from ``from_config(config, loss=True)``,
the loss applied to the returned logits (:func:`~memtheory.models.decoder_stack.loss_on_logits`:
the model's forward has returned, and freed its final norm's output, before the loss runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import transformers
from torch import nn

import memtheory as mt
from memtheory.conventions.autograd import AutogradConvention, autocast_precision
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.models import from_config
from memtheory.models.decoder_stack import loss_on_logits
from memtheory.torch import Measurement, measure
from memtheory.torch.hf_losses import causal_lm_loss

NAMES = (
    "parameters", "gradients", "optimizer_state", "optimizer_step_counters", "weight_copies",
    "saved_activations", "buffers", "input", "targets",
)
"""The components compared, by their names in both results."""


class Logits(nn.Module):
    """The Hugging Face model, returning its logits (the loss is applied by measure)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.model(input_ids=input_ids, use_cache=False).logits


def eval_model(config: dict[str, Any], precision: str) -> nn.Module:
    """Return a Hugging Face causal LM built from ``config`` (eager attention), in eval mode."""
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(config["model_type"], attn_implementation="eager",
                                           **values)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return transformers.AutoModelForCausalLM.from_config(hf).to(dtype).eval()


def torch_optimizer(
    name: str, parameters: Iterable[nn.Parameter], implementation: str | None = None
) -> torch.optim.Optimizer:
    """SGD, Adam or AdamW over ``parameters``: PyTorch's default implementation, or the named."""
    options = {
        None: {}, "for-loop": {"foreach": False}, "foreach": {"foreach": True},
        "fused": {"fused": True},
    }[implementation]
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01, **options)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=1e-3, **options)
    return torch.optim.AdamW(parameters, lr=1e-3, **options)


def decoder_step(
    config: dict[str, Any], precision: str, optimizer: str, batch: int, sequence: int,
    implementation: str | None = None, attention: str = "eager",
) -> tuple[MemoryBreakdown, Measurement]:
    """Return memtheory's prediction and the measurement of one step (fp32, bf16 or autocast).

    ``implementation``: torch.optim's ``"for-loop"``, ``"foreach"`` or
    ``"fused"`` step (default PyTorch's choice on CPU). ``attention``: the model's
    ``attn_implementation``; ``"sdpa"`` is predicted with ``flash=True``.
    """
    family = config["model_type"]
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(family, attn_implementation=attention, **values)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = Logits(transformers.AutoModelForCausalLM.from_config(hf)).to(dtype).train()
    ids = torch.randint(0, config["vocab_size"], (batch, sequence))
    measured = measure(
        module, ids, causal_lm_loss,
        torch_optimizer(optimizer, module.parameters(), implementation),
        target=ids.clone(), warmup_steps=1, record=True,
        autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    network = loss_on_logits(from_config(config, batch=batch, sequence=sequence, loss=True,
                                         flash=attention == "sdpa"))
    predicted = mt.training_memory(
        network, optimizer=optimizer,
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    return predicted, measured


def compared(
    predicted: MemoryBreakdown, measured: Measurement
) -> tuple[dict[str, int], dict[str, int]]:
    """Return (predicted, measured) bytes of each of :data:`NAMES` and of the peak."""
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: int(getattr(measured, n)) for n in NAMES}
    got["peak"], want["peak"] = int(predicted.peak), int(measured.peak)
    return got, want
