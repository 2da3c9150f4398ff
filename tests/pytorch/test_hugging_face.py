"""memtheory's gpt2 and bert builders against Hugging Face's own models, byte for byte.

``GPT2LMHeadModel`` and ``BertForMaskedLM`` from ``transformers`` (5.x), built
from small configs (no download) with ``attn_implementation="eager"`` and the
configs' dropout probabilities (0.1), trained one step on CPU under
:func:`memtheory.torch.measure`; against them the builders'
networks at the same sizes, as :func:`~memtheory.validation.reference_models.as_hugging_face`
says Hugging Face runs them. Parameters, gradients, optimizer state and step
counters, autocast's weight copies, saved activations, buffers, input,
targets and the training-step peak must agree to the byte.

One setting is chosen to match the builder rather than left at Hugging Face's
default: GPT-2's ``activation_function="gelu_pytorch_tanh"`` (one operation,
memtheory's ``GELU``); the default ``gelu_new`` is a Python composite of six
operations, each saving its own tensors (``test_gpt2_default_gelu_is_the_difference``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="Hugging Face transformers not installed")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.models import bert, gpt2  # noqa: E402
from memtheory.models.gpt2 import GPT2Config  # noqa: E402
from memtheory.torch import measure  # noqa: E402
from memtheory.validation.reference_models import as_hugging_face  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

NAMES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "optimizer_step_counters",
    "weight_copies",
    "saved_activations",
    "buffers",
    "input",
    "targets",
)
BATCH, SEQUENCE, LAYERS, HIDDEN, HEADS, POSITIONS = 3, 11, 2, 32, 4, 40


class _Logits(nn.Module):
    """The Hugging Face model called on token ids, returning its logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.model(input_ids=input_ids).logits


def _gpt2(activation: str = "gelu_pytorch_tanh"):
    vocabulary = 97
    config = transformers.GPT2Config(
        n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=vocabulary,
        n_positions=POSITIONS, activation_function=activation, attn_implementation="eager",
        bos_token_id=0, eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config)

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model.loss_function(logits, labels, vocab_size=vocabulary)  # ForCausalLMLoss

    network = gpt2(
        GPT2Config(
            layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocabulary=vocabulary, positions=POSITIONS
        ),
        batch=BATCH, sequence=SEQUENCE, loss=True,
    )
    return model, loss, as_hugging_face(network, "gpt2"), vocabulary


def _bert():
    vocabulary = 101
    config = transformers.BertConfig(
        num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN, vocab_size=vocabulary, max_position_embeddings=POSITIONS,
        attn_implementation="eager",
    )
    model = transformers.BertForMaskedLM(config)

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # BertForMaskedLM.forward's own loss: CrossEntropyLoss over every position
        return nn.CrossEntropyLoss()(logits.view(-1, vocabulary), labels.view(-1))

    network = bert(
        layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocabulary=vocabulary, positions=POSITIONS,
        batch=BATCH, sequence=SEQUENCE, pooler=False, mlm_head=True, loss=True,
    )
    return model, loss, as_hugging_face(network, "bert"), vocabulary


def _optimizer(name: str, parameters) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=1e-3)
    return torch.optim.AdamW(parameters, lr=1e-3)


def _compare(build, precision: str, optimizer: str):
    torch.manual_seed(0)
    model, loss, network, vocabulary = build()
    module = _Logits(model).to(torch.bfloat16 if precision == "bf16" else torch.float32).train()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocabulary, (BATCH, SEQUENCE), generator=generator)
    labels = torch.randint(0, vocabulary, (BATCH, SEQUENCE), generator=generator)
    measured = measure(
        module, ids, loss, _optimizer(optimizer, module.parameters()), target=labels,
        warmup_steps=1, autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    predicted = mt.training_memory(
        network, optimizer=optimizer,
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    return got, want


@pytest.mark.parametrize(
    ("precision", "optimizer"), [("fp32", "adamw"), ("bf16", "sgd"), ("autocast", "adam")]
)
def test_gpt2_matches_gpt2lmheadmodel(precision, optimizer):
    """gpt2() equals GPT2LMHeadModel (eager, dropout 0.1, causal mask added to the scores)."""
    got, want = _compare(_gpt2, precision, optimizer)
    assert got == want


@pytest.mark.parametrize(
    ("precision", "optimizer"), [("fp32", "adamw"), ("bf16", "sgd"), ("autocast", "adamw")]
)
def test_bert_matches_bertformaskedlm(precision, optimizer):
    """bert(mlm_head=True) equals BertForMaskedLM: separate Q/K/V, id buffers, tied decoder."""
    got, want = _compare(_bert, precision, optimizer)
    assert got == want


def test_gpt2_default_gelu_is_the_difference():
    """With Hugging Face's default gelu_new, only the saved tensors (and so the peak) differ.

    gelu_new is ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``.
    Products with Python numbers save nothing; ``pow`` saves ``x`` (which the
    one-operation GELU saves too); ``tanh`` saves its output ``t``; the last
    product saves both factors, ``0.5 * x`` and ``1 + t``: three more
    ``(batch, sequence, 4 * hidden)`` fp32 tensors per block. Everything
    else still agrees.
    """
    got, want = _compare(lambda: _gpt2("gelu_new"), "fp32", "sgd")
    differ = {name for name in got if got[name] != want[name]}
    assert differ == {"saved_activations", "peak"}
    extra = LAYERS * 3 * BATCH * SEQUENCE * 4 * HIDDEN * 4
    assert want["saved_activations"] - got["saved_activations"] == extra
