"""Each sequence layer's saved storages equal what PyTorch 2.13 keeps on CPU, byte for byte.

For every layer, precision (fp32, a bf16 model, fp32 under CPU autocast-bf16
fed an fp32 or a bf16 input) and mode (training, eval), memtheory's
``saved_storages`` (each layer's ``autograd()`` description resolved: each
storage once, with its dtype) must equal the storages
:func:`layer_harness.saved_storages` records when the equivalent PyTorch module
runs, at sizes drawn by hypothesis. Parameters and autocast's weight copies
are left out on both sides (they are not activations).
"""

from __future__ import annotations

from collections import Counter

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from layer_harness import (  # noqa: E402
    MHA,
    BertAddedEmbeddings,
    EagerSelfAttention,
    GPT2Positions,
    LlamaRMSNorm,
    Record,
    Select,
    saved_storages,
)
from torch import nn  # noqa: E402

import memtheory.layers as ml  # noqa: E402
from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.layers.saved_storages import saved_storages as memtheory_saved  # noqa: E402
from memtheory.symbols import B, S  # noqa: E402

_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.int64: "int64"}

# (precision, input dtype under autocast, memtheory's input dtype, memtheory's autocast)
SETTINGS = [
    ("fp32", None, "fp32", None),
    ("bf16", None, "bf16", None),
    ("autocast", torch.float32, "fp32", "bf16"),
    ("autocast", torch.bfloat16, "bf16", "bf16"),
]
IDS = ["fp32", "bf16", "autocast-fp32-in", "autocast-bf16-in"]

_settings = settings(max_examples=12, deadline=None, derandomize=True)


def _measured(record: Record) -> Counter[tuple[str, int, str]]:
    """Measured activation storages as (input or not, bytes, dtype)."""
    return Counter(
        ("input" if s.kind == "input" else "other", s.nbytes, _NAMES.get(s.dtype, str(s.dtype)))
        for s in record.saved
        if s.kind not in ("parameter", "parameter copy", "buffer")
    )


def _predicted(specs, sizes: dict[sp.Symbol, int]) -> Counter[tuple[str, int, str]]:
    counted: Counter[tuple[str, int, str]] = Counter()
    for spec in specs:
        nbytes = int(sp.sympify(spec.nbytes(spec.dtype)).subs(sizes))
        counted["input" if spec.role == "input" else "other", nbytes, spec.dtype.name] += 1
    return counted


def _check(layer, module, x, shape, setting, training):
    precision, input_dtype, dtype, autocast = setting
    record = saved_storages(
        module, x, precision=precision, training=training, input_dtype=input_dtype
    )
    sizes = {B: x.shape[0], S: x.shape[1]}
    specs = memtheory_saved(layer, shape, dtype=dtype, training=training, autocast=autocast)
    assert _predicted(specs, sizes) == _measured(record)
    predicted = sum(int(sp.sympify(s.nbytes(s.dtype)).subs(sizes)) for s in specs)
    assert predicted == record.activation_bytes()


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
@pytest.mark.parametrize("implementation", ["torch", "eager"])
@_settings
@given(
    batch=st.integers(2, 3),  # at batch 1 or one position, reshapes become views:
    sequence=st.integers(2, 6),  # the documented limit of the attention formulas
    heads=st.integers(1, 3),
    head_width=st.integers(1, 4),
    dropout=st.sampled_from([0.0, 0.25]),
    bias=st.booleans(),
)
def test_attention_saves_what_pytorch_keeps(
    implementation, setting, training, batch, sequence, heads, head_width, dropout, bias
):
    """nn.MultiheadAttention and Hugging Face-style eager attention, every kernel CPU runs."""
    width = heads * head_width
    torch.manual_seed(0)
    if implementation == "torch":
        module: nn.Module = MHA(width, heads, dropout=dropout, bias=bias)
    else:
        module = EagerSelfAttention(width, heads, dropout=dropout, bias=bias)
    layer = ml.MultiHeadAttention(
        heads, dropout=dropout, bias=bias, implementation=implementation, device="cpu"
    )
    x = torch.randn(batch, sequence, width)
    _check(layer, module, x, (B, S, width), setting, training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
@_settings
@given(
    batch=st.integers(1, 3),
    sequence=st.integers(1, 5),
    width=st.integers(1, 9),
    kind=st.sampled_from(
        ["layer", "layer-no-bias", "layer-no-affine", "llama", "rms", "rms-no-affine"]
    ),
)
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_norms_save_what_pytorch_keeps(setting, training, batch, sequence, width, kind):
    """LayerNorm, Llama's RMSNorm and torch.nn.RMSNorm: their statistics' dtypes included."""
    modules = {
        "layer": (nn.LayerNorm(width), ml.LayerNorm()),
        "layer-no-bias": (nn.LayerNorm(width, bias=False), ml.LayerNorm(bias=False)),
        "layer-no-affine": (
            nn.LayerNorm(width, elementwise_affine=False),
            ml.LayerNorm(elementwise_affine=False),
        ),
        "llama": (LlamaRMSNorm(width), ml.RMSNorm()),
        "rms": (nn.RMSNorm(width), ml.RMSNorm(implementation="torch")),
        "rms-no-affine": (
            nn.RMSNorm(width, elementwise_affine=False),
            ml.RMSNorm(elementwise_affine=False, implementation="torch"),
        ),
    }
    module, layer = modules[kind]
    x = torch.randn(batch, sequence, width)
    _check(layer, module, x, (B, S, width), setting, training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
@_settings
@given(
    batch=st.integers(1, 3),
    sequence=st.integers(1, 5),
    width=st.integers(1, 9),
    kind=st.sampled_from(["gelu", "gelu-tanh", "silu", "select", "select-last"]),
)
def test_elementwise_and_selection_save_what_pytorch_keeps(
    setting, training, batch, sequence, width, kind
):
    """GELU (exact and tanh), SiLU keep their input; selecting a token keeps nothing."""
    modules = {
        "gelu": (nn.GELU(), ml.GELU()),
        "gelu-tanh": (nn.GELU(approximate="tanh"), ml.GELU(approximate="tanh")),
        "silu": (nn.SiLU(), ml.SiLU()),
        "select": (Select(0), ml.SelectToken(0)),
        "select-last": (Select(sequence - 1), ml.SelectToken(sequence - 1)),
    }
    module, layer = modules[kind]
    x = torch.randn(batch, sequence, width)
    _check(layer, module, x, (B, S, width), setting, training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("setting", SETTINGS[:3], ids=IDS[:3])
@_settings
@given(
    batch=st.integers(1, 3),
    sequence=st.integers(1, 5),
    vocabulary=st.integers(1, 20),
    width=st.integers(1, 9),
)
def test_embedding_saves_its_int64_ids(setting, training, batch, sequence, vocabulary, width):
    """An embedding keeps the token ids (int64), whatever the precision."""
    module = nn.Embedding(vocabulary, width)
    layer = ml.Embedding(vocabulary, width)
    ids = torch.randint(0, vocabulary, (batch, sequence))
    _check(layer, module, ids, (B, S), setting, training)


def _bytes_by_dtype(specs, sizes: dict[sp.Symbol, int]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for spec in specs:
        counted[spec.dtype.name] += int(sp.sympify(spec.nbytes(spec.dtype)).subs(sizes))
    return counted


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
@_settings
@given(
    batch=st.integers(2, 3),  # at batch 1 or one step the input copy is a view
    sequence=st.integers(2, 5),
    features=st.integers(1, 6),
    hidden=st.integers(1, 6),
    bias=st.booleans(),
)
def test_gru_saves_what_pytorch_keeps(setting, training, batch, sequence, features, hidden, bias):
    """A CPU GRU keeps its input copy, h0, and per step its gates and cell tensors (by dtype)."""
    precision, input_dtype, dtype, autocast = setting
    torch.manual_seed(0)
    module = nn.GRU(features, hidden, bias=bias, batch_first=True)
    x = torch.randn(batch, sequence, features)
    record = saved_storages(
        module, x, precision=precision, training=training, input_dtype=input_dtype
    )
    specs = memtheory_saved(
        ml.GRU(hidden, bias=bias), (B, S, features), dtype=dtype, training=training,
        autocast=autocast,
    )
    measured: Counter[str] = Counter()
    for s in record.saved:
        if s.kind not in ("parameter", "parameter copy", "buffer"):
            measured[_NAMES[s.dtype]] += s.nbytes
    assert _bytes_by_dtype(specs, {B: batch, S: sequence}) == measured


def test_lstm_refuses_to_guess_its_onednn_workspace():
    """On CPU an LSTM keeps a uint8 oneDNN workspace memtheory does not model: a clear error."""
    record = saved_storages(nn.LSTM(4, 8, batch_first=True), torch.randn(2, 3, 4))
    assert any(s.dtype == torch.uint8 for s in record.saved)
    with pytest.raises(UnsupportedError, match="oneDNN"):
        memtheory_saved(ml.LSTM(8), (B, S, 4))


_NO_CAST = [SETTINGS[0], SETTINGS[1], SETTINGS[3]]


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("setting", _NO_CAST, ids=[IDS[0], IDS[1], IDS[3]])
@_settings
@given(
    batch=st.integers(1, 3),
    sequence=st.integers(1, 5),
    features=st.integers(1, 6),
    out=st.integers(1, 6),
    bias=st.booleans(),
)
def test_linear_projection_keeps_its_input(setting, training, batch, sequence, features, out, bias):
    """A linear projection over a sequence keeps its input, in the dtype it arrives in.

    (Under autocast with an fp32 input it keeps a bf16 cast instead: the storage plan's
    input cast, not part of Dense's saved_for_backward.)
    """
    module = nn.Linear(features, out, bias=bias)
    layer = ml.Dense(out, bias=bias)
    x = torch.randn(batch, sequence, features)
    _check(layer, module, x, (B, S, features), setting, training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@_settings
@given(
    batch=st.integers(2, 3),
    sequence=st.integers(2, 4),
    heads=st.integers(1, 3),
    head_width=st.integers(1, 3),
    bias=st.booleans(),
    kind=st.sampled_from(["torch", "eager", "gru", "linear"]),
)
def test_autocast_saves_a_bf16_copy_of_every_weight_not_the_biases(
    training, batch, sequence, heads, head_width, bias, kind
):
    """Under CPU autocast, projections keep bf16 copies of their weights: 2 bytes per weight."""
    width = heads * head_width
    layers = {
        "torch": (MHA(width, heads, bias=bias), ml.MultiHeadAttention(heads, bias=bias)),
        "eager": (
            EagerSelfAttention(width, heads, bias=bias),
            ml.MultiHeadAttention(heads, bias=bias),
        ),
        "gru": (nn.GRU(width, heads, bias=bias, batch_first=True), ml.GRU(heads, bias=bias)),
        "linear": (nn.Linear(width, heads, bias=bias), ml.Dense(heads, bias=bias)),
    }
    module, layer = layers[kind]
    x = torch.randn(batch, sequence, width)
    record = saved_storages(module, x, precision="autocast", training=training)
    copies = sum(s.nbytes for s in record.saved if s.kind == "parameter copy")
    assert all(s.dtype == torch.bfloat16 for s in record.saved if s.kind == "parameter copy")
    assert copies == 2 * layer.weight_count((batch, sequence, width))


@pytest.mark.parametrize("setting", SETTINGS[:3], ids=IDS[:3])
@_settings
@given(
    batch=st.integers(1, 3),
    sequence=st.integers(1, 5),
    positions=st.integers(5, 12),
    width=st.integers(1, 6),
)
def test_added_embeddings_keep_their_ids_or_their_id_buffers(
    setting, batch, sequence, positions, width
):
    """GPT-2 keeps S int64 position ids; BERT's ids are slices of buffers, which stay whole."""
    precision, input_dtype, _, _ = setting
    x = torch.randn(batch, sequence, width)
    sizes = {B: batch, S: sequence}
    gpt2 = saved_storages(GPT2Positions(positions, width), x, precision=precision)
    specs = ml.PositionEmbedding(positions).saved_for_backward((B, S, width))
    assert _predicted(specs, sizes) == _measured(gpt2)

    bert = saved_storages(BertAddedEmbeddings(positions, width), x, precision=precision)
    layers = [
        ml.TokenTypeEmbedding(2, ids_buffer=positions),
        ml.PositionEmbedding(positions, ids_buffer=positions),
    ]
    assert not _measured(bert)
    assert not [s for layer in layers for s in layer.saved_for_backward((B, S, width))]
    kept = sorted(s.nbytes for s in bert.saved if s.kind == "buffer")
    buffers = [b for layer in layers for b in layer.buffers((B, S, width))]
    assert kept == sorted(int(b.nbytes(b.dtype)) for b in buffers)
