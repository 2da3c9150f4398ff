"""LoRA on Llama-family decoders under the autograd convention, against measure() byte for byte.

The twin is Hugging Face's ``LlamaForCausalLM`` (eager attention, built from a
tiny configuration with transformers 5.23), every weight frozen, and each
targeted ``nn.Linear`` replaced as Hugging Face peft's ``lora.Linear`` runs it
(peft is not installed; it is written out here): the original Linear becomes
the frozen ``base_layer``, beside trainable ``lora_A`` (``rank x in``) and
``lora_B`` (``out x rank``) Linears without bias, and the output is
``base_layer(x) + lora_B(lora_A(x)) * alpha / rank``. The optimizer holds the
adapters only. memtheory predicts the same step from ``from_config`` through
:func:`memtheory.finetuning.finetune_memory` (and :func:`memtheory.estimate.estimate`).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from torch import nn  # noqa: E402

from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.estimate import estimate  # noqa: E402
from memtheory.finetuning import LoRA, finetune_memory  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.models.decoder_stack import loss_on_logits  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch import measure  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NAMES = (
    "gradients", "optimizer_state", "optimizer_step_counters", "saved_activations", "input",
    "targets",
)
TINY = {"vocab_size": 50, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 128, "tie_word_embeddings": False}
ATTENTION = ("q_proj", "v_proj")
EVERY_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PHI3_LINEAR = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


class PeftLinear(nn.Module):
    """peft's lora.Linear, written out: frozen base_layer plus lora_B(lora_A(x)) * scaling."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False)
        nn.init.normal_(self.lora_B.weight)  # peft starts B at zero; any value keeps the bytes
        self.scaling = alpha / rank
        self.lora_A.to(base.weight.dtype)
        self.lora_B.to(base.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The base output plus the scaled low-rank update, as peft adds them."""
        result = self.base_layer(x)
        return result + self.lora_B(self.lora_A(x)) * self.scaling


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def _adapt(model: nn.Module, targets: tuple[str, ...], rank: int, alpha: float) -> None:
    """Freeze every weight, then put a PeftLinear in place of each targeted Linear."""
    model.requires_grad_(False)
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in targets:
                setattr(module, child_name, PeftLinear(child, rank, alpha))


def _measure_and_predict(config, targets, rank, alpha, dtype_name, batch, sequence):
    family = config["model_type"]
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(family, attn_implementation="eager", **values)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(hf).to(dtype)
    _adapt(model, targets, rank, alpha)
    module = _Logits(model).train()
    trainable = [p for p in module.parameters() if p.requires_grad]
    ids = torch.randint(0, config["vocab_size"], (batch, sequence))
    measured = measure(
        module, ids, causal_lm_loss, torch.optim.AdamW(trainable, lr=1e-3),
        target=ids.clone(), warmup_steps=1,
    )
    network = loss_on_logits(from_config(config, batch=batch, sequence=sequence, loss=True))
    predicted = finetune_memory(
        network, lora=LoRA(rank, alpha, targets=targets), optimizer="adamw",
        precision=dtype_name, convention=AutogradConvention(measured.implementation),
    )
    return predicted, measured


CASES = [
    # (extra config, targets, rank, dtype, batch, sequence)
    ({"model_type": "llama", "num_key_value_heads": 2}, ATTENTION, 4, "fp32", 2, 6),
    ({"model_type": "llama", "num_key_value_heads": 2}, EVERY_LINEAR, 4, "fp32", 2, 6),
    ({"model_type": "llama", "num_key_value_heads": 1}, EVERY_LINEAR, 8, "bf16", 2, 8),
    ({"model_type": "llama", "num_key_value_heads": 4}, ("o_proj", "down_proj"), 2, "bf16", 3, 5),
    ({"model_type": "qwen2", "num_key_value_heads": 2}, EVERY_LINEAR, 4, "bf16", 2, 6),
    ({"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": 4}, ATTENTION, 4,
     "fp32", 2, 6),
    ({"model_type": "phi3", "num_key_value_heads": 2, "pad_token_id": 0}, PHI3_LINEAR, 4,
     "bf16", 2, 6),
]


@pytest.mark.parametrize(("extra", "targets", "rank", "dtype", "batch", "sequence"), CASES)
def test_lora_decoder_step_is_exact(extra, targets, rank, dtype, batch, sequence):
    """Adapters' gradients and state, saved activations, the input and the peak: 0 bytes off."""
    predicted, measured = _measure_and_predict(
        {**TINY, **extra}, targets, rank, 2 * rank, dtype, batch, sequence
    )
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    frozen = predicted.components.get("frozen_parameters", 0)
    got["weights"] = int(predicted["parameters"] + frozen)
    want["weights"] = measured.parameters
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    assert got == want


def test_estimate_uses_the_exact_convention_for_lora_on_llama():
    """estimate() answers LoRA on a Llama config in the autograd convention, as measured."""
    config = {**TINY, "model_type": "llama", "num_key_value_heads": 2}
    predicted, measured = _measure_and_predict(config, ATTENTION, 4, 8, "bf16", 2, 6)
    measured_loop = Setup(precision="bf16", attention="eager", device="cpu", keeps_logits=True)
    answer = estimate(config, batch=2, sequence=6, lora=4, setup=measured_loop)
    assert answer.convention_name == "autograd"
    assert answer.settings["precision"] == "bf16"
    assert int(answer.peak) == measured.peak


def test_lora_adapters_keep_the_module_registration_order():
    """On Phi-3 the adapters are stepped in module order (o_proj's before qkv_proj's), as here."""
    from memtheory.conventions.autograd.storage_plan import registered_tensors
    from memtheory.finetuning.lora import apply_lora

    config = {**TINY, "model_type": "phi3", "num_key_value_heads": 2, "pad_token_id": 0}
    values = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model("phi3", **values))
    _adapt(model, PHI3_LINEAR, 4, 8.0)
    theirs = [name for name, p in model.named_parameters() if p.requires_grad]
    network = apply_lora(from_config(config), LoRA(4, 8, targets=PHI3_LINEAR))
    assert list(registered_tensors(network)) == theirs
