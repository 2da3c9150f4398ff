"""Every-layer checkpointing against Hugging Face's ``gradient_checkpointing_enable()``, measured.

transformers 5's ``gradient_checkpointing_enable()`` (``activation_checkpointing_enable``,
``every_n_layers=1``, ``use_reentrant=False``) wraps every decoder layer's forward
in ``torch.utils.checkpoint``. ``memtheory.torch.measure`` runs the step of a tiny
``LlamaForCausalLM`` (hidden 32, vocabulary 96) on CPU with it on; memtheory's
model is ``step_memory(..., checkpointing=True)``
(:func:`memtheory.techniques.checkpointing.every_layer` in the breakdown
convention). What the forward keeps is checked to the byte in fp32 and bf16
(under autocast each layer measured 2 x B x S x head_dim x 4 bytes more, the
size of the rotary cosines and sines in fp32, not modelled); the step's peak
is not exact (the breakdown convention's x2 rule is not PyTorch's backward):
on the sizes below the model is 0.92x to 1.67x the measured peak (the low end
with eager attention under autocast, whose backward holds several fp32
``(B, a, S, S)`` gradients at once), and the test holds it to that range.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from torch import nn  # noqa: E402

from memtheory.estimate.step import step_memory  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.torch import measure  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

HIDDEN = 32
TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": HIDDEN, "intermediate_size": 40,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "tie_word_embeddings": False}
BYTES = {"fp32": 4, "bf16": 2, "autocast": 4}  # the residual stream's dtype


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def _measured(layers: int, attention: str, precision: str, batch: int, sequence: int,
              checkpointing: bool = True):
    values = {k: v for k, v in TINY.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(
        "llama", attn_implementation=attention, num_hidden_layers=layers, **values
    )
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(hf).to(dtype).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    module = _Logits(model)
    ids = torch.randint(0, TINY["vocab_size"], (batch, sequence))
    return measure(
        module, ids, causal_lm_loss, torch.optim.AdamW(module.parameters(), lr=1e-3),
        target=ids.clone(), warmup_steps=1,
        autocast=torch.bfloat16 if precision == "autocast" else None,
    )


def _modelled(layers: int, attention: str, precision: str, batch: int, sequence: int) -> int:
    network = from_config({**TINY, "num_hidden_layers": layers}, batch=batch,
                          sequence=sequence, loss=True, flash=attention == "sdpa")
    step = step_memory(network, optimizer="adamw", checkpointing=True,
                       precision="autocast-bf16" if precision == "autocast" else precision)
    return int(step.memory.total)


@pytest.mark.parametrize(
    ("attention", "precision", "batch", "sequence"),
    [("eager", "fp32", 2, 24), ("sdpa", "bf16", 3, 10), ("sdpa", "fp32", 3, 13)],
)
def test_each_checkpointed_layer_keeps_only_its_input(attention, precision, batch, sequence):
    """One more checkpointed layer keeps one more B x S x h hidden state through the forward."""
    saved = [_measured(n, attention, precision, batch, sequence).saved_activations
             for n in (2, 3)]
    assert saved[1] - saved[0] == batch * sequence * HIDDEN * BYTES[precision]


def test_checkpointing_lowers_the_measured_peak():
    """The measured step with every layer checkpointed peaks lower than without."""
    case = (3, "eager", "fp32", 2, 64)
    assert _measured(*case).peak < _measured(*case, checkpointing=False).peak


@pytest.mark.parametrize(
    ("layers", "attention", "precision", "batch", "sequence"),
    [(2, "eager", "bf16", 2, 48), (3, "sdpa", "bf16", 3, 40), (2, "eager", "autocast", 2, 100),
     (4, "sdpa", "autocast", 2, 30), (4, "eager", "fp32", 1, 300), (2, "eager", "fp32", 2, 7)],
)
def test_every_layer_model_is_within_its_stated_range(layers, attention, precision, batch,
                                                       sequence):
    """step_memory(checkpointing=True) is 0.92x to 1.67x the measured peak (module docstring)."""
    measured = _measured(layers, attention, precision, batch, sequence).peak
    modelled = _modelled(layers, attention, precision, batch, sequence)
    assert 0.92 * measured <= modelled <= 1.67 * measured
