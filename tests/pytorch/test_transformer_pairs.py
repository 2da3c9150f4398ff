"""The transformer builders under the autograd convention against measure(): 0 bytes off.

GPT-2-, BERT-MLM- and ViT-style networks from :mod:`memtheory.models` (with
the CPU settings of :func:`reference_models.as_measured`) against the
independently written PyTorch modules of ``reference_models.py``, at sizes
nobody tuned for: parameters, gradients, optimizer state and step counters,
autocast's weight copies, saved activations, input and targets, and the
training-step peak, at fp32, bf16 and CPU autocast-bf16 with SGD, momentum,
Adam and AdamW (a small representative matrix per model).

Not covered here: the inference peak (``inference_memory``). ViT's SGD step
peaks inside the backward of ``nn.MultiheadAttention``'s CPU flash path,
which the attention layer describes node by node, at every precision.
"""

from __future__ import annotations

from typing import Any

import pytest
import sympy as sp

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.torch import measure  # noqa: E402
from memtheory.validation.reference_models import PAIRS  # noqa: E402
from tests.disk_cache import cached_on_disk  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

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


def _optimizer(name: str, parameters) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01)
    if name == "sgd+momentum":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=1e-3)
    return torch.optim.AdamW(parameters, lr=1e-3)  # weight_decay=0.01, as memtheory's adamw


def _compare(name: str, precision: str, optimizer: str) -> tuple[dict, dict]:
    """Return (predicted, measured) components and training peak of one pair."""
    pair = PAIRS[name]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = pair.build_module(dtype=dtype)
    x = pair.example_input()
    if x.is_floating_point():
        x = x.to(dtype)
    measured = measure(
        module,
        x,
        pair.loss,
        _optimizer(optimizer, module.parameters()),
        target=pair.example_target(),
        warmup_steps=1,
        autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    ours = autocast_precision() if precision == "autocast" else precision
    predicted = mt.training_memory(
        pair.build_network(),
        optimizer=optimizer,
        precision=ours,
        convention=AutogradConvention(measured.implementation),
    )
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    return got, want


MATRIX = [
    ("GPT-2-style", "fp32", "adamw"),
    ("GPT-2-style", "bf16", "sgd+momentum"),
    ("GPT-2-style", "autocast", "adam"),
    ("BERT-MLM-style", "fp32", "sgd+momentum"),
    ("BERT-MLM-style", "bf16", "adam"),
    ("BERT-MLM-style", "autocast", "sgd"),
    ("ViT-style", "fp32", "adam"),
    ("ViT-style", "bf16", "adamw"),
    ("ViT-style", "autocast", "adam"),
]


@pytest.mark.parametrize(("name", "precision", "optimizer"), MATRIX)
def test_transformer_pair_is_exact(name, precision, optimizer):
    """Every component and the training-step peak equal what PyTorch keeps, byte for byte."""
    got, want = _compare(name, precision, optimizer)
    assert got == want


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_vit_sgd_peak_inside_flash_attention_backward(precision):
    """ViT's SGD peak lands inside nn.MultiheadAttention's flash-path backward, and is exact.

    There ``unbind``'s backward rebuilds the packed gradient from each of Q, K
    and V and the three are added: the attention layer's backward stages
    (``MultiHeadAttention._flash_stages``) make each of those storages.
    """
    got, want = _compare("ViT-style", precision, "sgd")
    assert got == want


def test_vit_autocast_sgd_peak():
    """Under autocast the flash-path stages are exact too: each projection's weight copy.

    autocast makes one bf16 copy per projection weight and bias; the output
    projection's copy is released by its own backward node, the input
    projection's by the last node of the attention's backward, and each copy's
    cast node runs just after the node that uses it.
    """
    got, want = _compare("ViT-style", "autocast", "sgd")
    assert got == want


def _real(name: str):
    """The named builder at full width (small batch and sequence), its module, data and loss."""
    from memtheory.models import bert_base_mlm, gpt2, vit_b_16
    from memtheory.torch.hf_losses import causal_lm_loss, masked_lm_loss
    from memtheory.validation.reference_models import (
        BertMLMReference,
        GPT2Reference,
        ViTReference,
        as_measured,
    )

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    if name == "gpt2":
        network = as_measured(gpt2("small", batch=2, sequence=16, loss=True), None)
        ids = torch.randint(0, 50257, (2, 2, 16), generator=generator)
        return network, GPT2Reference(), ids[0].clone(), ids[1].clone(), causal_lm_loss
    if name == "bert":
        network = as_measured(bert_base_mlm(batch=2, sequence=16, loss=True), None)
        ids = torch.randint(0, 30522, (2, 2, 16), generator=generator)
        return network, BertMLMReference(), ids[0].clone(), ids[1].clone(), masked_lm_loss
    network = as_measured(
        vit_b_16(image_size=32, batch=2, classes=1000), mt.CrossEntropyLoss(name="loss")
    )
    images = torch.randn(2, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 1000, (2,), generator=generator)
    return network, ViTReference(image_size=32), images, labels, nn.CrossEntropyLoss()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_real_builder_with_adamw_is_exact(request, name):
    """gpt2("small"), bert_base_mlm(), vit_b_16() + AdamW: every component and the peak.

    Full-width models (124 M, 110 M, 86 M parameters) at batch 2, 16 tokens or
    32x32 images, against the reference modules: 0 bytes off (about 2 GB each).
    Minutes each on a shared 2-core machine, so the bytes are kept on disk until the
    code that produced them changes (tests/disk_cache.py).
    """

    def both() -> dict[str, Any]:
        network, module, x, y, loss = _real(name)
        module.train()
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)
        measured = measure(module, x, loss, optimizer, target=y, warmup_steps=1)
        predicted = mt.training_memory(
            network, optimizer="adamw", convention=AutogradConvention(measured.implementation)
        )
        return {
            "predicted": {n: int(predicted.components.get(n, 0)) for n in NAMES},
            "predicted peak": int(predicted.peak),
            "measured": {n: getattr(measured, n) for n in NAMES},
            "measured peak": measured.peak,
        }

    key = {"torch": torch.__version__, "sympy": sp.__version__}
    numbers = cached_on_disk(request, f"real-builder-adamw-{name}", both, key=key)
    got, want = numbers["predicted"], numbers["measured"]
    assert (got, numbers["predicted peak"]) == (want, numbers["measured peak"])


class _BufferedBertEmbeddings(nn.Module):
    """Hugging Face's BertEmbeddings: ids sliced from int64 buffers, positions added in place.

    Then a layer norm, CPU dropout and a decoder tied to the word embeddings, with a bias.
    """

    def __init__(self, vocabulary: int, width: int, positions: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocabulary, width)
        self.token_type_embeddings = nn.Embedding(2, width)
        self.position_embeddings = nn.Embedding(positions, width)
        self.register_buffer(
            "position_ids", torch.arange(positions).expand((1, -1)), persistent=False
        )
        self.register_buffer(
            "token_type_ids", torch.zeros((1, positions), dtype=torch.long), persistent=False
        )
        self.norm = nn.LayerNorm(width)
        self.dropout = nn.Dropout(0.1)
        self.bias = nn.Parameter(torch.zeros(vocabulary))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, s = ids.shape
        x = self.word_embeddings(ids)
        x = x + self.token_type_embeddings(self.token_type_ids[:, :s].expand(b, s))
        x += self.position_embeddings(self.position_ids[:, :s])
        x = self.dropout(self.norm(x))
        return nn.functional.linear(x, self.word_embeddings.weight, self.bias)


@pytest.mark.parametrize(("precision", "optimizer"), [("fp32", "adam"), ("autocast", "sgd")])
def test_bert_id_buffers_and_a_tied_decoder_are_exact(precision, optimizer):
    """int64 id buffers are counted as buffers; the tied decoder's gradient joins the table's."""
    import memtheory.layers as ml
    from memtheory.torch.hf_losses import masked_lm_loss

    batch, sequence, vocabulary, width, positions = 3, 7, 41, 10, 12
    torch.manual_seed(0)
    module = _BufferedBertEmbeddings(vocabulary, width, positions).train()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocabulary, (batch, sequence), generator=generator)
    labels = torch.randint(0, vocabulary, (batch, sequence), generator=generator)
    measured = measure(
        module, ids, masked_lm_loss, _optimizer(optimizer, module.parameters()), target=labels,
        warmup_steps=1, autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    net = mt.Network(
        [
            mt.Input((sequence,), batch=batch),
            ml.Embedding(vocabulary, width),
            ml.TokenTypeEmbedding(2, ids_buffer=positions),
            ml.PositionEmbedding(positions, inplace=True, ids_buffer=positions),
            ml.LayerNorm(),
            ml.Dropout(0.1, device="cpu"),
            ml.Unembedding(vocabulary, bias=True),
            ml.LanguageModelLoss(shift=False, upcast=False),
        ]
    )
    predicted = mt.training_memory(
        net,
        optimizer=optimizer,
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    assert got["buffers"] == 2 * positions * 8
    assert (got, int(predicted.peak)) == (want, measured.peak)
