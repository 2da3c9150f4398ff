"""Tensor and sequence parallelism for Llama-style decoders, tensor by tensor.

The split follows Megatron-LM (Shoeybi et al. 2019) as Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models" (2022),
Section 4.2, reason it for the GPT layer; which maps are column- and
row-parallel is transformers' ``LlamaConfig.base_model_tp_plan``. The closed
forms below are derived here from the layer (which tensors a SwiGLU decoder
layer keeps, and which of them sit between a column- and a row-parallel map),
and checked against the storages memtheory's layers say they keep. Model
shapes come from the published ``config.json`` files (Llama-3-8B: hidden 4096,
32 layers, 32 heads, 8 key/value heads of 128, FFN 14336, vocabulary 128256;
Mixtral-8x7B: the same attention, 8 experts of FFN 14336, vocabulary 32000).
"""

from __future__ import annotations

import json

import pytest
import sympy as sp

from memtheory.cli import main
from memtheory.conventions.autograd import forward_storages
from memtheory.errors import UnsupportedError
from memtheory.estimate import estimate
from memtheory.estimate.step import step_memory
from memtheory.finetuning import LoRA
from memtheory.models import DecoderConfig, decoder, from_config, gpt2
from memtheory.recipes import Setup
from memtheory.symbols import B, S
from memtheory.techniques import parallel_memory, tensor_parallel_activation_ratio
from memtheory.techniques.tensor_parallel import (
    activation_ratio,
    decoder_split,
    split_activations,
    split_parameters,
    split_storages,
)

PLAIN_LOOP = Setup(precision="autocast-bf16", attention="eager", device="cpu")
"""torch.autocast over fp32 weights, eager attention, the CPU's for-loop AdamW, logits kept."""

SMALL = DecoderConfig(vocabulary=96, hidden=64, layers=2, heads=8, kv_heads=2, ffn_hidden=160)


def _small(**kwargs):
    return decoder(SMALL, batch=B, sequence=S, loss=True, **kwargs)


def _layer_bytes(net, t, *, precision, sequence_parallel=False):
    """Per-device bytes layer 0 keeps, from the storages and the split's shares."""
    split = decoder_split(net, t, sequence_parallel=sequence_parallel)
    return sp.expand(sum(
        s.nbytes * split.storage_share(s.layer, s.role)
        for s in forward_storages(net, precision=precision)
        if s.category == "saved_activations" and s.layer.startswith("model.layers.0.")
    ))


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_eager_layer_matches_the_korthikanti_style_closed_form(t):
    """bf16, eager: 16sbh + 8sb replicated (two RMS norms), 8sb(ad) + 6as^2b + 8sbf split by t.

    Derived: each RMS norm keeps its fp32 upcast (4sbh), its fp32 statistics
    (4sb), the normalised product and its output (2sbh each); the attention
    keeps queries, keys and values after repeat_kv (a heads each, 2sb(ad)),
    the fp32 softmax and its bf16 cast (6bas^2) and its output (2sb(ad)); the
    SwiGLU MLP keeps the gate, its activation, the up projection and their
    product (2sbf each). With t = 8 > 2 key/value heads they are replicated,
    which changes no saved tensor: repeat_kv makes a/t heads on each device.
    """
    s, b, h, a, d, f = S, B, SMALL.hidden, SMALL.heads, SMALL.head_width, SMALL.ffn_hidden
    replicated = 16 * s * b * h + 8 * s * b
    split = 8 * s * b * a * d + 6 * a * s**2 * b + 8 * s * b * f
    expected = sp.expand(replicated + sp.Rational(1, t) * split)
    assert _layer_bytes(_small(), t, precision="bf16") == expected
    with_sp = _layer_bytes(_small(), t, precision="bf16", sequence_parallel=True)
    assert with_sp == sp.expand((replicated + split) / t)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_flash_layer_matches_its_closed_form(t):
    """bf16, flash: norms as eager; q, output, logsumexp and MLP by t; k, v by the kv share."""
    s, b, h, a, d, f = S, B, SMALL.hidden, SMALL.heads, SMALL.head_width, SMALL.ffn_hidden
    kv = SMALL.key_value_heads
    kv_per_device = max(kv // t, 1)  # replicated when t exceeds the key/value heads
    replicated = 16 * s * b * h + 8 * s * b
    split = 4 * s * b * a * d + 4 * b * a * s + 8 * s * b * f
    keys_values = 2 * (2 * s * b * kv_per_device * d)
    expected = sp.expand(replicated + sp.Rational(1, t) * split + keys_values)
    assert _layer_bytes(_small(flash=True), t, precision="bf16") == expected


@pytest.mark.parametrize("precision", ["bf16", "autocast-bf16", "fp32"])
@pytest.mark.parametrize("flash", [False, True])
def test_one_device_is_the_whole_model(precision, flash):
    """One device (t = 1): every share is 1; the storages add up to the convention's components."""
    net = _small(flash=flash)
    split = decoder_split(net, 1, sequence_parallel=True)
    sums = split_storages(net, split, precision=precision)
    memory = step_memory(net, precision=precision).memory
    for name, (whole, device) in sums.items():
        assert whole == device == sp.expand(memory[name])
    assert all(w == d for w, d in split_parameters(net, split).values())
    assert activation_ratio(net, 1) == 1
    tp1 = parallel_memory(memory, tensor=1, sequence_parallel=True, network=net)
    assert {k: sp.expand(v) for k, v in tp1.components.items()} == {
        k: sp.expand(v) for k, v in memory.components.items()
    }


@pytest.mark.parametrize("t", [2, 4])
def test_sequence_parallel_splits_everything_but_ids_labels_and_rotary_tables(t):
    """With sequence parallelism every kept storage is split by t but those all devices need."""
    net = _small()
    whole, device = split_storages(
        net, decoder_split(net, t, sequence_parallel=True), precision="autocast-bf16"
    )["saved_activations"]
    kept = [s for s in forward_storages(net, precision="autocast-bf16")
            if s.category == "saved_activations"]
    everywhere = sum(s.nbytes for s in kept if s.layer == "model.rotary_emb"
                     or s.role in ("shifted labels", "total weight"))
    assert device == sp.expand((whole - everywhere) / t + everywhere)


def _llama_3_8b_per_device(t, kv_per_device):
    """Parameters per device from Llama-3-8B's config: matrices and vocabulary by t, norms whole."""
    h, layers, f, vocab, d = 4096, 32, 14336, 128256, 128
    matrices = layers * (2 * h * h + 3 * h * f)   # q, o; gate, up, down
    kv = layers * 2 * h * kv_per_device * d         # k, v: what each device keeps
    norms = (2 * layers + 1) * h
    return sp.Rational(matrices + 2 * vocab * h, t) + kv + norms


@pytest.mark.parametrize(("t", "kv_per_device"), [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_llama_3_8b_parameters_per_device(t, kv_per_device):
    """Norms replicated; at t = 16 each device keeps one of the 8 key/value heads (twice copied)."""
    net = from_config("llama-3-8b")
    split = decoder_split(net, t)
    assert split.kv_heads_per_device == kv_per_device
    assert split.kv_replicas == max(t // 8, 1)
    whole, device = split_parameters(net, split)["trainable"]
    assert whole == 8_030_261_248  # Meta's model card
    assert device == _llama_3_8b_per_device(t, kv_per_device)


def test_refusals_name_the_problem_and_the_fix():
    """The size t must divide the query heads and the MLP, and divide or be a multiple of kv."""
    llama = from_config("llama-3-8b")
    with pytest.raises(UnsupportedError, match="query heads.*32.*divides 32"):
        decoder_split(llama, 3)
    odd_kv = decoder(DecoderConfig(vocabulary=64, hidden=96, layers=1, heads=12, kv_heads=4,
                                   ffn_hidden=192))
    with pytest.raises(UnsupportedError, match="4 key/value heads.*divides or is a multiple"):
        decoder_split(odd_kv, 6)
    narrow = decoder(DecoderConfig(vocabulary=64, hidden=64, layers=1, heads=8, ffn_hidden=100))
    with pytest.raises(UnsupportedError, match="MLP's width.*100.*divides 100"):
        decoder_split(narrow, 8)
    with pytest.raises(UnsupportedError, match="no GroupedQueryAttention"):
        decoder_split(gpt2("small", sequence=64), 2)


def test_gpt_path_is_unchanged():
    """GPT-2 still takes Korthikanti's per-layer ratio (Table 2 tests in test_parallel.py)."""
    net = gpt2("small", sequence=1024)
    assert tensor_parallel_activation_ratio(net, 2) == sp.Rational(31, 57)


def test_breakdown_convention_splits_layer_by_layer():
    """Mixtral (breakdown): activations by row; experts' width split, the router whole."""
    net = from_config("mixtral-8x7b", batch=B, sequence=S, flash=True, loss=True)
    whole, device = split_activations(net, decoder_split(net, 1))
    assert whole == device == sp.expand(net.activation_count)
    _, half = split_activations(net, decoder_split(net, 2))
    assert sp.expand(whole - half) != 0 and sp.expand(2 * half - whole) != 0


@pytest.mark.slow
def test_estimate_llama_3_8b_with_tp_2():
    """The command that used to refuse: model states per device from the config, and notes."""
    out = main(["estimate", "llama-3-8b", "--tp", "2", "--gpus", "2", "--seq", "2048",
                "--batch", "1", "--gpu", "H100-80GB", "--json"])
    assert out == 0
    answer = estimate("llama-3-8b", tensor=2, gpus=2, sequence=2048, gpu="H100-80GB",
                      setup=PLAIN_LOOP)
    per_device = _llama_3_8b_per_device(2, 4)
    # autocast-bf16 with AdamW: fp32 weights and gradients, two fp32 moments
    assert answer.memory["parameters"] == 4 * per_device
    assert answer.memory["gradients"] == 4 * per_device
    assert answer.memory["optimizer_state"] == 8 * per_device
    whole = estimate("llama-3-8b", sequence=2048, gpu="H100-80GB", setup=PLAIN_LOOP)
    assert answer.memory["saved_activations"] < whole.memory["saved_activations"]
    notes = " ".join(answer.notes) + answer.why
    assert "Megatron-style" in notes and "not measured" in notes
    sequence_parallel = estimate("llama-3-8b", tensor=2, sequence=2048, sequence_parallel=True)
    assert sequence_parallel.settings["gpus"] == 2  # --gpus defaults to --tp x --pp
    assert sequence_parallel.memory["saved_activations"] < answer.memory["saved_activations"]


@pytest.mark.slow
def test_cli_sequence_parallel_and_auto(capsys):
    """--sequence-parallel is accepted; --gpus auto grows data parallelism in multiples of --tp."""
    assert main(["estimate", "llama-3-8b", "--tp", "2", "--sequence-parallel", "--gpus", "auto",
                 "--zero", "3", "--seq", "4096", "--flash", "--gpu", "A100-40GB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["sequence_parallel"] is True
    found = data["gpu_search"]
    assert found["gpus"] % 2 == 0 and all(n % 2 == 0 for n in (x["gpus"] for x in found["tried"]))
    assert data["peak_bytes"] <= data["budget"]["usable_bytes"]


def test_mixtral_splits_experts_like_dense_mlps():
    """Without expert parallelism each expert's matrices are split by t; the router is whole."""
    h, layers, f, experts, vocab, t = 4096, 32, 14336, 8, 32000, 8
    answer = estimate("mixtral-8x7b", tensor=t, sequence=512, flash=True, setup=PLAIN_LOOP)
    split = layers * (2 * h * h + 2 * h * 1024 + 3 * experts * h * f) + 2 * vocab * h
    whole = layers * experts * h + (2 * layers + 1) * h  # router and norms
    assert answer.memory["parameters"] == 4 * (sp.Rational(split, t) + whole)


def test_lora_adapters_split_with_their_map():
    """LoRA on q/v: B split with its column-parallel map, A whole; the frozen base as in full."""
    net = from_config("llama-3-8b")
    tuned = step_memory(net, lora=LoRA(16)).network
    counts = split_parameters(tuned, decoder_split(tuned, 4))
    h, layers, r = 4096, 32, 16
    # q: A (r x h) whole, B (h x r) / 4; v: A whole, B (1024 x r) / 4
    assert counts["trainable"][1] == layers * (2 * r * h + sp.Rational(r * h + r * 1024, 4))
    assert counts["frozen"][1] == _llama_3_8b_per_device(4, 2)
