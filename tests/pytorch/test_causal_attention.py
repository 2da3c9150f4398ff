"""Causal eager attention (Hugging Face GPT-2's ``torch.where`` mask) against PyTorch on CPU.

``MultiHeadAttention(causal=True, implementation="eager")`` keeps the
``bool`` condition of ``torch.where``: built in every forward pass it is a
saved ``(S, S)`` storage; sliced from a registered ``(1, 1, n, n)`` buffer
(``mask_buffer=n``, GPT-2's ``bias``) the backward keeps that buffer, which
is counted as a buffer. Checked storage by storage with the layer harness,
and through a training step with :func:`memtheory.torch.measure`.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from layer_harness import saved_storages  # noqa: E402
from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
import memtheory.layers as ml  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.errors import InvalidSizeError  # noqa: E402
from memtheory.layers.saved_storages import saved_storages as memtheory_saved  # noqa: E402
from memtheory.symbols import B, S  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.bool: "bool"}


class CausalSelfAttention(nn.Module):
    """GPT-2's eager ``_attn`` (transformers 4.3x): scores masked with ``torch.where``.

    With ``positions`` the condition is a slice of a registered ``bool``
    buffer ``bias`` of ``(1, 1, positions, positions)``, as Hugging Face
    writes it; without, ``torch.tril`` of the sequence length in every
    forward pass.
    """

    def __init__(self, width: int, heads: int, dropout: float, positions: int | None) -> None:
        super().__init__()
        self.heads, self.width = heads, width
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(dropout)
        self.positions = positions
        if positions is not None:
            tril = torch.tril(torch.ones((positions, positions), dtype=torch.bool))
            self.register_buffer("bias", tril.view(1, 1, positions, positions), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, s, _ = x.shape
        d = self.width // self.heads
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if self.positions is not None:
            causal = self.bias[:, :, :s, :s]
        else:
            causal = torch.tril(torch.ones((s, s), dtype=torch.bool))
        floor = torch.full([], torch.finfo(scores.dtype).min, dtype=scores.dtype)
        scores = torch.where(causal, scores.to(scores.dtype), floor)
        probs = nn.functional.softmax(scores, dim=-1).type(v.dtype)
        probs = self.attn_dropout(probs)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.width)
        return self.c_proj(out)


SETTINGS = [
    ("fp32", None, "fp32", None),
    ("bf16", None, "bf16", None),
    ("autocast", torch.float32, "fp32", "bf16"),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=["fp32", "bf16", "autocast"])
@settings(max_examples=8, deadline=None, derandomize=True)
@given(
    batch=st.integers(2, 3),
    sequence=st.integers(2, 6),
    heads=st.integers(2, 3),
    head_width=st.integers(1, 4),
    dropout=st.sampled_from([0.0, 0.25]),
    buffered=st.booleans(),
)
def test_causal_mask_is_kept_as_measured(
    setting, batch, sequence, heads, head_width, dropout, buffered
):
    """Saved storages (dtypes included) and the mask buffer equal what PyTorch keeps."""
    precision, input_dtype, dtype, autocast = setting
    width, positions = heads * head_width, 7
    torch.manual_seed(0)
    module = CausalSelfAttention(width, heads, dropout, positions if buffered else None)
    layer = ml.MultiHeadAttention(
        heads,
        dropout=dropout,
        device="cpu",
        causal=True,
        mask_buffer=positions if buffered else None,
    )
    x = torch.randn(batch, sequence, width)
    record = saved_storages(module, x, precision=precision, input_dtype=input_dtype)
    measured = Counter(
        (s.nbytes, _NAMES[s.dtype])
        for s in record.saved
        if s.kind not in ("parameter", "parameter copy", "buffer")
    )
    sizes = {B: batch, S: sequence}
    specs = memtheory_saved(layer, (B, S, width), dtype=dtype, autocast=autocast)
    predicted = Counter(
        (int(sp.sympify(s.nbytes(s.dtype)).subs(sizes)), s.dtype.name) for s in specs
    )
    assert predicted == measured
    kept = sorted(s.nbytes for s in record.saved if s.kind == "buffer")
    buffers = layer.buffers((B, S, width))
    assert kept == sorted(int(b.nbytes(b.dtype)) for b in buffers)


class TinyCausalLM(nn.Module):
    """Token embedding, causal attention, an untied output projection."""

    def __init__(self, vocabulary: int, width: int, heads: int, positions: int | None) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocabulary, width)
        self.attn = CausalSelfAttention(width, heads, 0.1, positions)
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocabulary, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.lm_head(self.ln_f(self.attn(self.wte(ids))))


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


@pytest.mark.parametrize(
    ("precision", "optimizer", "buffered"),
    [("fp32", "adam", True), ("bf16", "sgd", False), ("autocast", "sgd+momentum", True)],
)
def test_a_causal_language_model_step_is_exact(precision, optimizer, buffered):
    """Components and the training-step peak of a causal LM step: 0 bytes off measure()."""
    batch, sequence, vocabulary, width, heads, positions = 3, 7, 53, 12, 3, 9
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    torch.manual_seed(0)
    module = TinyCausalLM(vocabulary, width, heads, positions if buffered else None).to(dtype)
    ids = torch.randint(0, vocabulary, (batch, sequence))
    labels = torch.randint(0, vocabulary, (batch, sequence))
    opt = (
        torch.optim.Adam(module.parameters())
        if optimizer == "adam"
        else torch.optim.SGD(
            module.parameters(), lr=0.1, momentum=0.9 if "momentum" in optimizer else 0
        )
    )
    measured = measure(
        module, ids, _loss, opt, target=labels, warmup_steps=1,
        autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    net = mt.Network(
        [
            mt.Input((sequence,), batch=batch),
            ml.Embedding(vocabulary, width),
            ml.MultiHeadAttention(
                heads, dropout=0.1, device="cpu", causal=True,
                mask_buffer=positions if buffered else None,
            ),
            ml.LayerNorm(),
            ml.Unembedding(vocabulary, tied=False),
            ml.LanguageModelLoss(shift=False, upcast=False),
        ]
    )
    predicted = mt.training_memory(
        net,
        optimizer=optimizer,
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    names = ("parameters", "gradients", "optimizer_state", "weight_copies", "saved_activations",
             "buffers", "input", "targets")
    got = {n: int(predicted.components.get(n, 0)) for n in names}
    want = {n: getattr(measured, n) for n in names}
    assert (got, int(predicted.peak)) == (want, measured.peak)


def test_causal_mask_options_are_checked():
    """A causal mask is measured for the eager path only; a buffer needs causal=True."""
    with pytest.raises(InvalidSizeError, match="eager"):
        ml.MultiHeadAttention(4, causal=True, implementation="torch")
    with pytest.raises(InvalidSizeError, match="causal=True"):
        ml.MultiHeadAttention(4, mask_buffer=16)
    assert ml.MultiHeadAttention(4, causal=True).describe() == "4 heads, causal"
