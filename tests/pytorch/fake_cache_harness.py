"""What the fake-tensor cache tests share: symbolic fake inputs and a small GPT-2 traced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

from memtheory.torch import trace


def fake_input(mode: Any, shape: Sequence[int], dynamic: Sequence[bool] | None,
               requires_grad: bool = False) -> Any:
    """A fake tensor of ``mode`` and ``shape``, the sizes marked in ``dynamic`` symbolic."""
    source = torch.empty(*shape, requires_grad=requires_grad)
    if dynamic is None:
        return mode.from_tensor(source)
    context = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dynamic])
    return mode.from_tensor(source, symbolic_context=context)


def summary(memory: Any) -> tuple[Any, ...]:
    """A trace's formulas and conditions, as strings to compare two traces by."""
    return (str(memory.peak), str(memory.inference_peak), memory.conditions,
            {k: str(v) for k, v in memory.components.items()})


def small_gpt2_traced() -> Any:
    """A two-layer GPT-2 traced in (B, S) at (3, 10) with AdamW: checks and a trace at B = 1."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64,
                                     n_positions=64)
    model = transformers.GPT2LMHeadModel(config).train()
    tokens = torch.randint(0, 64, (3, 10))
    return trace(model, tokens, {"B": 3, "S": 10},
                 loss=lambda out, y: model.loss_function(out.logits, y, vocab_size=64),
                 target=tokens, optimizer="adamw")
