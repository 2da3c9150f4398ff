"""mixed-bf16's forward and backward are the bf16 model's: measured on CPU, to the byte.

DeepSpeed's bf16 mode runs the model in bf16 and keeps an fp32 master copy
and fp32 Adam state beside it (``memtheory.conventions.autograd.master_weights``,
read from DeepSpeed 0.19.6). The master copy and its optimizer are DeepSpeed's
and are not run here; what runs on CPU is the step they sit beside: a bf16
model under ``torch.optim.AdamW``, measured by ``memtheory.torch.measure``.
Its forward and backward moments, less the bf16 optimizer state and step
counters it keeps, must equal the mixed-bf16 prediction's, less the master
copy and the fp32 state: at every size drawn, an MLP, a CNN and a Hugging
Face Llama.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import Logits  # noqa: E402
from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.torch import from_module, measure  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

STEP = "optimizer step"


def _before_step(measured) -> int:
    """The measured peak of the step start, zero_grad, forward, loss and backward."""
    return max(live for phase, _, live in measured.timeline if phase != STEP)


def _predicted_before_step(memory: mt.MemoryBreakdown) -> int:
    return int(max(v for k, v in memory.timeline.items() if not k.startswith(STEP)))


def _check(measured, network: mt.Network) -> None:
    """mixed-bf16's moments before the step, less master and fp32 state, are measure's."""
    mixed = mt.training_memory(network, optimizer="adamw", precision="mixed-bf16",
                               convention=AutogradConvention(measured.implementation))
    assert mixed["parameters"] == measured.parameters
    assert mixed["gradients"] == measured.gradients
    deepspeed = mixed["master_weights"] + mixed["optimizer_state"]
    torch_state = measured.optimizer_state + measured.optimizer_step_counters
    assert _predicted_before_step(mixed) - deepspeed == _before_step(measured) - torch_state


def _step(module: nn.Module, x, loss, target):
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, fused=True)
    return measure(module, x, loss, optimizer, target=target, warmup_steps=1, record=True)


@settings(max_examples=4, deadline=None)
@given(batch=st.integers(1, 9), width=st.integers(3, 40), depth=st.integers(1, 3))
def test_mlp_in_bf16_is_mixed_bf16_before_the_step(batch, width, depth):
    """A bf16 MLP with fused AdamW: the mixed-bf16 prediction's forward and backward."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(7, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    module = nn.Sequential(*layers, nn.Linear(width, 4)).to(torch.bfloat16)
    x = torch.randn(batch, 7).to(torch.bfloat16)
    target = torch.randint(0, 4, (batch,))
    loss = nn.CrossEntropyLoss()
    _check(_step(module, x, loss, target), from_module(module, (batch, 7), loss=loss))


def test_cnn_in_bf16_is_mixed_bf16_before_the_step():
    """A bf16 CNN (convolution, pooling, flatten) with fused AdamW."""
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv2d(3, 5, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(5 * 3 * 3, 6),
    ).to(torch.bfloat16)
    x = torch.randn(3, 3, 6, 6).to(torch.bfloat16)
    target = torch.randint(0, 6, (3,))
    loss = nn.CrossEntropyLoss()
    _check(_step(module, x, loss, target), from_module(module, (3, 3, 6, 6), loss=loss))


@pytest.mark.parametrize(("batch", "sequence"), [(1, 11), (2, 7)])
def test_llama_in_bf16_is_mixed_bf16_before_the_step(batch, sequence):
    """A tiny Hugging Face Llama in bf16, eager attention: the same, to the byte."""
    config = {"model_type": "llama", "vocab_size": 37, "hidden_size": 24,
              "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64,
              "tie_word_embeddings": False}
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model("llama", attn_implementation="eager", **values)
    torch.manual_seed(0)
    module = Logits(transformers.AutoModelForCausalLM.from_config(hf)).to(torch.bfloat16).train()
    ids = torch.randint(0, config["vocab_size"], (batch, sequence))
    measured = _step(module, ids, causal_lm_loss, ids.clone())
    _check(measured, from_config(config, batch=batch, sequence=sequence, loss=True))
