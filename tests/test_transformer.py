"""Sequence layers: embeddings, layer norm, attention (with and without s^2 tensors), LSTM, GRU."""

from __future__ import annotations

import pytest
import sympy as sp

import memtheory.layers as ml
from memtheory.errors import InvalidSizeError, RankError, ShapeError
from memtheory.layers.base import elements
from memtheory.layers.saved_storages import saved_storages
from memtheory.network import Network
from memtheory.symbols import B, D, S, size_symbol
from memtheory.transformer_activations import (
    HEADS,
    TENSOR_PARALLEL,
    activation_bytes,
    activation_terms,
    paper_activation_bytes,
    transformer_layer,
)

a = HEADS


def test_attention_parameters_are_four_projections():
    """Query, key, value and output projections: 4h^2 weights and 4h biases (Vaswani et al.)."""
    attention = ml.MultiHeadAttention(a)
    assert sp.simplify(attention.weight_count((B, S, D)) - 4 * D**2) == 0
    assert sp.simplify(attention.bias_count((B, S, D)) - 4 * D) == 0


def test_grouped_query_attention_shrinks_key_and_value_projections():
    """With 8 query heads of 64 sharing 2 key/value heads, K and V project to 128, not 512."""
    attention = ml.MultiHeadAttention(8, kv_heads=2)
    assert attention.weight_count((B, S, 512)) == 512 * 512 * 2 + 2 * 512 * 128
    assert [t.shape for t in attention.cache_tensors((B, S, 512))] == [(B, 2, S, 64)] * 2


def test_attention_keeps_the_s_squared_tensors_unless_flash():
    """Standard attention keeps P, its mask and the dropped P (a x s x s each); flash none."""
    standard = ml.MultiHeadAttention(a, dropout=0.1).saved_for_backward((B, S, D))
    flash = ml.MultiHeadAttention(a, dropout=0.1, flash=True).saved_for_backward((B, S, D))
    square = (B, a, S, S)
    assert [t.role for t in standard if t.shape == square] == [
        "intermediate",
        "mask",
        "intermediate",
    ]
    assert not [t for t in flash if t.shape == square]
    assert [t.dtype.name for t in standard if t.role == "mask"] == ["bool"]


def test_attention_without_dropout_keeps_no_mask():
    """Attention dropout 0 keeps the softmax output only: one a x s x s tensor."""
    saved = ml.MultiHeadAttention(4).saved_for_backward((B, S, 64))
    assert [t.role for t in saved if t.shape == (B, 4, S, S)] == ["intermediate"]


def test_attention_activation_count_lists_its_new_tensors():
    """Activations: Q, K, V, P (twice with dropout), heads' output and output: 5sbh + 2as^2b."""
    count = ml.MultiHeadAttention(a, dropout=0.1).activation_count((B, S, D))
    assert sp.simplify(count - (5 * B * S * D + 2 * a * B * S**2)) == 0


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: ml.MultiHeadAttention(12).output_shape((B, 770)), RankError, ("3-D", "Embedding")),
        (lambda: ml.MultiHeadAttention(12).width((B, S, 770)), ShapeError, ("770", "head_dim")),
        (lambda: ml.MultiHeadAttention(8, kv_heads=3), InvalidSizeError, ("kv_heads", "divide")),
        (lambda: ml.MultiHeadAttention(8, dropout=1.0), InvalidSizeError, ("[0, 1)",)),
    ],
)
def test_attention_mistakes_are_explained(make, error, words):
    """Bad attention inputs or hyperparameters raise errors naming the fix."""
    with pytest.raises(error) as caught:
        make()
    for word in words:
        assert word in str(caught.value)


def test_layer_norm_has_a_scale_and_shift_per_feature_and_statistics_in_the_input_dtype():
    """LayerNorm(h): 2h parameters; keeps its input and two values per position.

    The statistics follow the input's dtype (bf16 for a bf16 model), but are fp32 under autocast,
    where a 16-bit input meets fp32 parameters (measured: tests/pytorch/test_layer_saved.py).
    """
    norm = ml.LayerNorm()
    assert norm.parameter_count((B, S, D)) == 2 * D
    stats = [t for t in norm.saved_for_backward((B, S, D)) if t.role == "statistics"]
    assert [(t.shape, t.dtype) for t in stats] == [((B, S), None), ((B, S), None)]
    mixed = saved_storages(norm, (B, S, D), dtype="bf16", autocast="bf16")
    assert [t.dtype.name for t in mixed] == ["bf16", "fp32", "fp32"]
    assert ml.LayerNorm(elementwise_affine=False).parameter_count((B, S, D)) == 0


def test_embedding_is_a_table_and_keeps_int64_ids():
    """Embedding(V, h): V*h weights; keeps the token ids as int64 (8 bytes each)."""
    net = Network([ml.Input((S,)), ml.Embedding(1000, 64)])
    assert net.parameter_count == 64_000
    assert net.output_shape == (B, S, 64)
    (ids,) = net.saved_tensors()
    assert (ids.owner, ids.spec.dtype.bytes, ids.spec.shape) == ("input", 8, (B, S))


def test_position_embedding_refuses_too_long_a_sequence():
    """A learned table of 512 positions cannot embed 513 tokens."""
    with pytest.raises(ShapeError, match="at most 512"):
        Network([ml.Input((513,)), ml.Embedding(10, 8), ml.PositionEmbedding(512)])


def test_tied_unembedding_adds_no_parameters():
    """GPT-2's lm_head reuses the token embedding: 0 parameters tied, V*h untied."""
    assert ml.Unembedding(50257).parameter_count((B, S, 768)) == 0
    assert ml.Unembedding(50257, tied=False).parameter_count((B, S, 768)) == 50257 * 768


def test_select_token_is_a_view():
    """Taking the [CLS] vector creates no memory and keeps nothing."""
    token = ml.SelectToken()
    assert token.output_shape((B, S, 768)) == (B, 768)
    assert token.activation_count((B, S, 768)) == 0
    assert token.saved_for_backward((B, S, 768)) == ()


@pytest.mark.parametrize(("layer", "gates"), [(ml.LSTM, 4), (ml.GRU, 3)])
def test_recurrent_parameters_follow_pytorchs_formula(layer, gates):
    """torch.nn.LSTM/GRU docs: weight_ih g*H x F, weight_hh g*H x H, b_ih and b_hh of g*H."""
    hidden, features = size_symbol("Hh"), size_symbol("F")
    count = layer(hidden).parameter_count((B, S, features))
    expected = gates * hidden * features + gates * hidden * hidden + 2 * gates * hidden
    assert sp.expand(count - expected) == 0


@pytest.mark.parametrize(("layer", "per_step"), [(ml.LSTM(32), 6 * 32), (ml.GRU(32), 6 * 32)])
def test_recurrent_memory_grows_linearly_with_the_sequence(layer, per_step):
    """Unrolled over S steps, a cell keeps the same per-step tensors: memory linear in S."""
    count = layer.activation_count((B, S, 16))
    assert sp.expand(count - per_step * B * S) == 0
    assert sp.degree(count, S) == 1


def test_recurrent_layers_need_a_sequence():
    """An LSTM after Flatten (2-D) raises RankError asking for (batch, sequence, features)."""
    with pytest.raises(RankError, match="sequence"):
        Network([ml.Input((4, 4)), ml.Flatten(), ml.LSTM(8)])


def test_adaptive_pooling_fixes_the_output_size():
    """ResNet's global pooling gives 1x1 per channel whatever the input side."""
    pool = ml.AdaptiveAvgPool2d()
    assert pool.output_shape((B, 2048, 7, 7)) == (B, 2048, 1, 1)
    assert elements(pool.output_shape((B, 2048, 13, 13))) == 2048 * B


# -- Korthikanti et al. 2022: activation memory per transformer layer ----------------------
CONFIGURATIONS = [
    pytest.param(1, False, "none", id="no-parallelism"),
    pytest.param(TENSOR_PARALLEL, False, "none", id="tensor-parallel"),
    pytest.param(TENSOR_PARALLEL, True, "none", id="tensor-sequence-parallel"),
    pytest.param(TENSOR_PARALLEL, False, "selective", id="tensor-parallel-selective"),
    pytest.param(TENSOR_PARALLEL, True, "selective", id="tensor-sequence-parallel-selective"),
    pytest.param(TENSOR_PARALLEL, False, "full", id="full-recompute"),
]


@pytest.mark.parametrize(("t", "sequence_parallel", "recompute"), CONFIGURATIONS)
def test_derived_activation_bytes_simplify_to_korthikanti_table_2(t, sequence_parallel, recompute):
    """Summing the layers' saved tensors gives each row of Korthikanti et al. 2022, Table 2.

    Rows: sbh(34 + 5as/h); sbh(10 + 24/t + 5as/(ht)); sbh/t (34 + 5as/h); sbh(10 + 24/t);
    34sbh/t; 2sbh (16-bit activations, one-byte dropout masks).
    """
    options = {"tensor_parallel": t, "sequence_parallel": sequence_parallel, "recompute": recompute}
    derived = activation_bytes(**options)
    assert sp.simplify(derived - paper_activation_bytes(**options)) == 0


def test_no_parallelism_is_34_sbh_plus_5_a_s2_b():
    """Section 4.1: attention 11sbh + 5as^2b, MLP 19sbh, layer norms 4sbh; 34sbh + 5as^2b in all."""
    s, b, h = S, B, D
    terms = activation_terms()
    attention = sum(n for x, n in terms if x.saver in ("layer.attn", "layer.attn_dropout"))
    mlp = sum(n for x, n in terms if x.saver.startswith("layer.mlp"))
    norms = sum(n for x, n in terms if x.saver.startswith("layer.ln"))
    assert sp.expand(attention - (11 * s * b * h + 5 * a * s**2 * b)) == 0
    assert sp.expand(mlp - 19 * s * b * h) == 0
    assert sp.expand(norms - 4 * s * b * h) == 0


def test_selective_recomputation_saves_70_percent_for_gpt3():
    """Korthikanti et al. 2022, Section 4.3: for GPT-3 (a=96, s=2048, h=12288) 5as/h = 80.

    Selective recomputation drops those 80 of 34 + 80 sbh: a 70% saving, derived from Table 2.
    """
    gpt3 = {"sequence": 2048, "batch": 1, "hidden": 12288, "heads": 96}
    full, selective = activation_bytes(**gpt3), activation_bytes(**gpt3, recompute="selective")
    sbh = 2048 * 1 * 12288
    assert (full / sbh, selective / sbh) == (34 + 80, 34)
    assert round(100 * (full - selective) / full) == 70


def test_flash_attention_keeps_what_selective_recomputation_keeps():
    """A flash kernel keeps Q, K, V and the output, like selective recomputation, plus its lse.

    The fp32 log-sum-exp is one value per row and head; the two layer norms' mean and inverse
    std follow the (fp16) activation dtype, as PyTorch's CPU kernel keeps them.
    """
    with_stats = activation_bytes(recompute="selective", statistics=True)
    lse = 4 * B * a * S
    layer_norm_stats = 2 * 2 * 2 * B * S
    assert sp.expand(with_stats - 34 * S * B * D - lse - layer_norm_stats) == 0


def test_per_layer_network_parameters_are_12h2_plus_13h():
    """The layer the derivation builds is an ordinary GPT block: 12h^2 + 13h parameters."""
    assert sp.expand(transformer_layer().parameter_count - (12 * D**2 + 13 * D)) == 0


def test_unknown_recompute_mode_is_refused():
    """An unknown recompute mode is refused: it must be none, selective or full."""
    with pytest.raises(InvalidSizeError, match="selective"):
        activation_bytes(recompute="some")  # type: ignore[arg-type]


def test_torch_attention_off_its_eval_fast_path_refuses_inference():
    """Odd heads (or no biases): nn.MultiheadAttention skips its fast path; inference says so."""
    import memtheory as mt
    from memtheory.errors import UnsupportedError

    def net(heads: int, bias: bool = True) -> Network:
        return Network([
            mt.Input((5, 8), batch=2), ml.Dense(8),
            ml.MultiHeadAttention(heads, bias=bias, implementation="torch", device="cpu"),
        ])

    for refused in (net(1), net(2, bias=False)):
        with pytest.raises(UnsupportedError, match="odd number of heads or without biases"):
            mt.inference_memory(refused, convention="autograd")
    fast = mt.inference_memory(net(2), convention="autograd")
    assert fast.peak > 0
