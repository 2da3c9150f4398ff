"""Fine-tuning measured on CPU: frozen Linears and LoRA adapters, byte for byte (PyTorch 2.13).

The PyTorch twins are hand-written: a LoRA layer is a frozen ``base_layer``
Linear beside trainable ``lora_A`` and ``lora_B`` Linears (no bias), scaled by
alpha / rank, as Hugging Face peft's ``lora.Linear`` computes it. The
optimizer holds the trainable parameters only.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

from memtheory import Dense, Input, Network, ReLU  # noqa: E402
from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.finetuning import LoRA, finetune_memory  # noqa: E402
from memtheory.layers import CrossEntropyLoss  # noqa: E402
from memtheory.models import gpt2  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class LoRALinear(nn.Module):
    """peft's lora.Linear, written out: base_layer(x) + lora_B(lora_A(x)) * alpha / rank."""

    def __init__(self, n_in: int, n_out: int, rank: int, alpha: float) -> None:
        super().__init__()
        self.base_layer = nn.Linear(n_in, n_out)
        self.lora_A = nn.Linear(n_in, rank, bias=False)
        self.lora_B = nn.Linear(rank, n_out, bias=False)
        self.scaling = alpha / rank
        self.base_layer.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Base output plus the scaled low-rank update."""
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling


def _measured(module: nn.Module, batch: int, features: int, classes: int):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, features, generator=generator)
    y = torch.randint(0, classes, (batch,), generator=generator)
    trainable = [p for p in module.parameters() if p.requires_grad]
    return measure(module, x, nn.CrossEntropyLoss(), torch.optim.Adam(trainable), target=y)


def _compare(memory, measured) -> None:
    frozen = memory.components.get("frozen_parameters", 0)
    assert memory["parameters"] + frozen == measured.parameters
    for name in ("gradients", "optimizer_state", "saved_activations", "input", "targets"):
        assert memory[name] == getattr(measured, name), name
    assert memory.peak == measured.peak


@pytest.mark.parametrize("hidden", [32, 48])
def test_lora_between_frozen_linears_is_exact(hidden):
    """LoRA on the middle of three Linears (the others frozen): every component and the peak."""
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Linear(16, hidden), nn.ReLU(), LoRALinear(hidden, hidden, 4, 8), nn.Linear(hidden, 8)
    )
    module[0].requires_grad_(False)
    module[3].requires_grad_(False)
    measured = _measured(module, 5, 16, 8)
    net = Network([
        Input((16,), batch=5), Dense(hidden, name="fc1"), ReLU(), Dense(hidden, name="fc2"),
        Dense(8, name="fc3"), CrossEntropyLoss(),
    ])
    memory = finetune_memory(
        net, lora=LoRA(4, 8, targets="fc2"), optimizer="adam", precision="fp32",
        convention="autograd",
    )
    _compare(memory, measured)


def test_frozen_linear_keeps_no_input_even_when_its_input_needs_a_gradient():
    """A frozen Linear after a trainable one saves only its weight: the loss's tensors remain."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))
    module[1].requires_grad_(False)
    measured = _measured(module, 5, 16, 8)
    net = Network([Input((16,), batch=5), Dense(32, name="a"), Dense(8, name="b"),
                   CrossEntropyLoss()])
    memory = finetune_memory(net, frozen="b", optimizer="adam", precision="fp32",
                             convention="autograd")
    # only the loss keeps anything: log-probabilities (5 x 8 fp32) and its total weight (4 bytes)
    assert measured.saved_activations == 5 * 8 * 4 + 4
    _compare(memory, measured)


def test_lora_on_two_layers_in_a_row():
    """Adapters on consecutive Linears: the second adapter's A keeps the first sum's output."""
    torch.manual_seed(0)
    module = nn.Sequential(LoRALinear(16, 24, 2, 4), LoRALinear(24, 8, 2, 4))
    measured = _measured(module, 3, 16, 8)
    net = Network([Input((16,), batch=3), Dense(24, name="l1"), Dense(8, name="l2"),
                   CrossEntropyLoss()])
    memory = finetune_memory(net, lora=LoRA(2, 4, targets=("l1", "l2")), optimizer="adam",
                             precision="fp32", convention="autograd")
    _compare(memory, measured)


def test_autograd_convention_refuses_frozen_attention():
    """GPT-2's frozen attention is not checked against PyTorch: refused, with the fix named."""
    with pytest.raises(UnsupportedError, match="breakdown|autograd"):
        finetune_memory(gpt2("small", batch=1, sequence=8), lora=LoRA(4), optimizer="adam",
                        precision="fp32", convention="autograd")


def test_frozen_layer_norm_keeps_what_a_trained_one_keeps():
    """A frozen LayerNorm between trainable Linears still saves its input and statistics."""
    from memtheory.layers import LayerNorm

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8))
    module[1].requires_grad_(False)
    measured = _measured(module, 5, 16, 8)
    net = Network([Input((16,), batch=5), Dense(32, name="a"), LayerNorm(name="ln"),
                   Dense(8, name="b"), CrossEntropyLoss()])
    memory = finetune_memory(net, frozen="ln", optimizer="adam", precision="fp32",
                             convention="autograd")
    _compare(memory, measured)


def test_frozen_embedding_on_token_ids_records_nothing():
    """A frozen embedding and norm at the start: no node until the trainable head."""
    from memtheory.layers import Embedding, Flatten, LayerNorm

    class Model(nn.Module):
        """Embedding, LayerNorm, a flattening Linear head."""

        def __init__(self) -> None:
            super().__init__()
            self.emb, self.ln, self.fc = nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(96, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            """Head over the normalised embeddings."""
            return self.fc(self.ln(self.emb(x)).flatten(1))

    torch.manual_seed(0)
    module = Model()
    module.emb.requires_grad_(False)
    module.ln.requires_grad_(False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 50, (5, 6), generator=generator)
    y = torch.randint(0, 8, (5,), generator=generator)
    trainable = [p for p in module.parameters() if p.requires_grad]
    measured = measure(module, x, nn.CrossEntropyLoss(), torch.optim.Adam(trainable), target=y)
    net = Network([Input((6,), batch=5), Embedding(50, 16, name="emb"), LayerNorm(name="ln"),
                   Flatten(), Dense(8, name="fc"), CrossEntropyLoss()])
    memory = finetune_memory(net, frozen=("emb", "ln"), optimizer="adam", precision="fp32",
                             convention="autograd")
    _compare(memory, measured)


@pytest.mark.parametrize("hidden", [32, 48])
def test_lora_between_frozen_linears_under_autocast(hidden):
    """Under bf16 autocast a frozen Linear keeps its weight's bf16 copy when its input needs a grad.

    fc1 (frozen, input with no gradient) keeps nothing; fc2's base layer and fc3
    (frozen, inputs that need gradients) each keep their weight's bf16 cast, a
    storage of their own: autocast caches only casts of weights that need a
    gradient. Every component and the peak, against ``measure``.
    """
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Linear(16, hidden), nn.ReLU(), LoRALinear(hidden, hidden, 4, 8), nn.Linear(hidden, 8)
    )
    module[0].requires_grad_(False)
    module[3].requires_grad_(False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 16, generator=generator)
    y = torch.randint(0, 8, (5,), generator=generator)
    trainable = [p for p in module.parameters() if p.requires_grad]
    measured = measure(module, x, nn.CrossEntropyLoss(), torch.optim.Adam(trainable), target=y,
                       autocast=torch.bfloat16)
    net = Network([
        Input((16,), batch=5), Dense(hidden, name="fc1"), ReLU(), Dense(hidden, name="fc2"),
        Dense(8, name="fc3"), CrossEntropyLoss(),
    ])
    memory = finetune_memory(
        net, lora=LoRA(4, 8, targets="fc2"), optimizer="adam", precision="autocast-bf16",
        convention="autograd",
    )
    _compare(memory, measured)
    # kept casts: lora_B's (hidden x 4, cached) and fc3's own (8 x hidden); lora_A's input needs
    # no gradient, so its cast is not kept, nor is fc2's base layer's
    bf16 = torch.finfo(torch.bfloat16).bits // 8
    assert measured.weight_copies == memory["weight_copies"] == bf16 * (hidden * 4 + 8 * hidden)
