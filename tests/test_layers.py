"""Each layer's formulas and saved tensors, worked by hand; Network naming and its summary table."""

from __future__ import annotations

import pytest
import sympy as sp

import memtheory as mt
from memtheory.symbols import B, C, H
from memtheory.tables import Table


def roles(specs):
    """(role, dtype name or None, shape) of each saved tensor or buffer."""
    return [(s.role, s.dtype.name if s.dtype else None, s.shape) for s in specs]


# -- Conv2d -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("in_channels", "out_channels", "kernel", "groups"),
    [(3, 32, (3, 3), 1), (8, 16, (3, 5), 2), (12, 12, (3, 3), 12), (6, 9, (1, 7), 3)],
)
def test_conv_weights_are_out_times_in_over_groups_times_window(
    in_channels, out_channels, kernel, groups
):
    """Each of out filters spans in/g channels and a kh x kw window; one bias per filter."""
    layer = mt.Conv2d(out_channels, kernel, groups=groups)
    shape = (B, in_channels, 20, 20)
    kh, kw = kernel
    assert layer.weight_count(shape) == out_channels * (in_channels // groups) * kh * kw
    assert layer.bias_count(shape) == out_channels
    assert mt.Conv2d(out_channels, kernel, groups=groups, bias=False).bias_count(shape) == 0


def test_conv_weights_with_symbolic_channels():
    """With C input channels and 2 groups a 3x3 conv to 8 filters has 8 (C/2) 9 = 36 C weights."""
    assert mt.Conv2d(8, 3, groups=2).weight_count((B, C, H, H)) == 8 * (C / 2) * 3 * 3


def test_conv_activations_and_saved_input():
    """A conv keeps its output (B * out * h_out * w_out elements) and saves its input."""
    layer = mt.Conv2d(16, 3, stride=2, padding=1)
    shape = (B, 3, 32, 32)
    side = (32 + 2 * 1 - 3) // 2 + 1
    assert layer.activation_count(shape) == B * 16 * side * side
    assert roles(layer.saved_for_backward(shape)) == [("input", None, shape)]


def test_conv_valid_padding_means_zero():
    """padding='valid' is the same as padding=0."""
    assert mt.Conv2d(4, 3, padding="valid").padding == (0, 0)
    assert mt.Conv2d(4, 3, padding="valid").output_shape((B, 1, 10, 10)) == (
        B,
        4,
        10 - 3 + 1,
        10 - 3 + 1,
    )


# -- Dense, Flatten, Input ----------------------------------------------------------------
def test_dense_parameters_are_in_times_out_plus_out():
    """Dense(500) after 9216 features has 9216*500 weights and 500 biases, output (B, 500)."""
    layer = mt.Dense(500)
    assert layer.weight_count((B, 9216)) == 9216 * 500
    assert layer.bias_count((B, 9216)) == 500
    assert mt.Dense(500, bias=False).parameter_count((B, 9216)) == 9216 * 500
    assert layer.output_shape((B, 9216)) == (B, 500)
    assert roles(layer.saved_for_backward((B, 9216))) == [("input", None, (B, 9216))]


def test_linear_is_dense():
    """Linear is PyTorch's name for the same layer."""
    assert mt.layers.Linear is mt.Dense


def test_flatten_is_a_view_with_no_activations():
    """Flatten multiplies the non-batch sizes, creates no activation and saves nothing."""
    layer = mt.Flatten()
    assert layer.output_shape((B, 64, 12, 12)) == (B, 64 * 12 * 12)
    assert layer.output_shape((B, C, H, H)) == (B, C * H**2)
    assert layer.activation_count((B, 64, 12, 12)) == 0
    assert not layer.stores_output()
    assert layer.saved_for_backward((B, 64, 12, 12)) == ()


def test_input_shape_batch_and_nothing_saved():
    """Input prepends the batch (symbolic B by default) and has no parameters or saved tensors."""
    assert mt.Input((3, 50, 50)).output_shape(()) == (B, 3, 50, 50)
    assert mt.Input((784,), batch=128).output_shape(()) == (128, 784)
    assert mt.Input((3, 50, 50)).saved_for_backward(()) == ()
    assert mt.Input((3, 50, 50)).parameter_count(()) == 0


# -- pooling ------------------------------------------------------------------------------
def test_maxpool_keeps_input_and_int64_indices_shaped_like_its_output():
    """MaxPool2d saves its input and one int64 index per output element (8 bytes each)."""
    pool = mt.MaxPool2d(2, stride=2)
    shape = (B, 64, 25, 25)
    out = (B, 64, (25 - 2) // 2 + 1, (25 - 2) // 2 + 1)
    assert pool.output_shape(shape) == out
    saved = pool.saved_for_backward(shape)
    assert roles(saved) == [("input", None, shape), ("indices", "int64", out)]
    assert saved[1].nbytes(mt.dtype("fp16")) == 8 * B * 64 * 12 * 12
    assert pool.parameter_count(shape) == 0


def test_avgpool_keeps_only_its_input():
    """AvgPool2d saves its input and no indices."""
    shape = (B, 8, 7, 7)
    assert roles(mt.AvgPool2d(7).saved_for_backward(shape)) == [("input", None, shape)]
    assert mt.AvgPool2d(7).output_shape(shape) == (B, 8, 1, 1)


def test_pool_stride_defaults_to_kernel():
    """As in PyTorch, a pool's stride defaults to its kernel size."""
    assert mt.MaxPool2d(3).stride == (3, 3)
    assert mt.AvgPool2d((2, 4)).stride == (2, 4)


# -- activations --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("layer", "role"),
    [
        (mt.ReLU(), "output"),
        (mt.Sigmoid(), "output"),
        (mt.layers.Tanh(), "output"),
        (mt.layers.GELU(), "input"),
        (mt.layers.SiLU(), "input"),
        (mt.layers.LeakyReLU(), "input"),
        (mt.layers.ELU(), "input"),
        (mt.Softmax(), "output"),
        (mt.layers.LogSoftmax(), "output"),
    ],
)
def test_elementwise_layers_save_what_their_derivative_reads(layer, role):
    """Each activation saves the tensor its derivative reads, and keeps an input-sized output.

    ReLU, sigmoid, tanh and softmax use their output; GELU, SiLU, LeakyReLU and ELU their input
    (PyTorch's tools/autograd/derivatives.yaml).
    """
    shape = (B, 32, 5, 5)
    assert roles(layer.saved_for_backward(shape)) == [(role, None, shape)]
    assert layer.activation_count(shape) == B * 32 * 5 * 5
    assert layer.output_shape(shape) == shape


@pytest.mark.parametrize("kind", [mt.ReLU, mt.layers.LeakyReLU, mt.layers.ELU])
def test_inplace_activation_stores_no_new_activation(kind):
    """An in-place activation overwrites its input: 0 new elements, and it keeps its output."""
    layer = kind(inplace=True)
    shape = (B, 32, 50, 50)
    assert layer.activation_count(shape) == 0
    assert not layer.stores_output()
    assert roles(layer.saved_for_backward(shape)) == [("output", None, shape)]


@pytest.mark.parametrize("kind", [mt.layers.GELU, mt.layers.SiLU, mt.Sigmoid, mt.layers.Tanh])
def test_activations_without_inplace_variant_refuse_it(kind):
    """inplace=True is refused where PyTorch's module has no in-place variant."""
    with pytest.raises(mt.errors.InvalidSizeError, match="in-place"):
        kind(inplace=True)


def test_cross_entropy_keeps_log_probabilities_and_int64_targets():
    """CrossEntropyLoss on (B, 10): B*10 log-probabilities + 1 loss, the total weight, targets.

    NLL keeps the log-probabilities, a scalar total weight and the B int64 targets.
    """
    loss = mt.CrossEntropyLoss()
    assert loss.output_shape((B, 10)) == ()
    assert loss.activation_count((B, 10)) == B * 10 + 1
    assert roles(loss.saved_for_backward((B, 10))) == [
        ("intermediate", None, (B, 10)),
        ("intermediate", None, ()),
        ("target", "int64", (B,)),
    ]
    stages = loss.autograd(((B, 10),)).stages
    assert [(s.label, s.saved) for s in stages] == [("log_softmax", (0,)), ("nll_loss", (0, 1, 2))]


# -- BatchNorm2d and Dropout --------------------------------------------------------------
def test_batchnorm_parameters_buffers_and_saved_statistics():
    """BatchNorm2d: 2C parameters, mean/var/counter buffers, saves input and 2 statistics.

    Over C channels: C scales and C shifts; running mean and variance (C each, parameter dtype)
    and the int64 num_batches_tracked scalar; per-channel batch mean and inverse std in the
    parameters' dtype (bf16 in a bf16 model; measured, tests/pytorch/test_graphs.py).
    """
    bn = mt.BatchNorm2d()
    shape = (B, 64, 56, 56)
    assert (bn.weight_count(shape), bn.bias_count(shape)) == (64, 64)
    assert roles(bn.buffers(shape)) == [
        ("buffer", None, (64,)),
        ("buffer", None, (64,)),
        ("buffer", "int64", ()),
    ]
    assert roles(bn.saved_for_backward(shape)) == [
        ("input", None, shape),
        ("statistics", None, (64,)),
        ("statistics", None, (64,)),
    ]
    assert bn.autograd((shape,)).parameter_dtype == (1, 2)
    assert len(bn.autograd((shape,), training=False).saved) == 1
    assert bn.activation_count(shape) == B * 64 * 56 * 56


def test_batchnorm_options_remove_parameters_and_buffers():
    """affine=False has no parameters; track_running_stats=False keeps no buffers."""
    shape = (B, 8, 4, 4)
    assert mt.BatchNorm2d(affine=False).parameter_count(shape) == 0
    assert mt.BatchNorm2d(track_running_stats=False).buffers(shape) == ()


def test_network_counts_buffers_of_parameter_dtype():
    """A network's buffer count is running mean plus variance (2C), without the int64 counter."""
    net = mt.Network([mt.Input((3, 8, 8)), mt.Conv2d(16, 3), mt.BatchNorm2d()])
    assert net.counts().buffers == 2 * 16


@pytest.mark.parametrize(
    ("mask_dtype", "expected"), [("bool", "bool"), ("uint8", "uint8"), (None, None)]
)
def test_dropout_mask_dtype(mask_dtype, expected):
    """Dropout keeps a mask the size of its input: one-byte bool by default, or activation dtype."""
    shape = (B, 500)
    layer = mt.Dropout(0.5, mask_dtype=mask_dtype)
    assert roles(layer.saved_for_backward(shape)) == [("mask", expected, shape)]


def test_dropout_default_mask_is_one_byte_per_element():
    """The default bool mask of a (B, 500) input takes 500 B bytes whatever the activation dtype."""
    (mask,) = mt.Dropout().saved_for_backward((B, 500))
    assert mask.nbytes(mt.dtype("fp32")) == 500 * B


def test_dropout_zero_and_inplace():
    """p=0 saves nothing; in place, Dropout creates no new activation."""
    assert mt.Dropout(0.0).saved_for_backward((B, 10)) == ()
    assert mt.Dropout(0.5, inplace=True).activation_count((B, 10)) == 0
    assert mt.Dropout(0.5).activation_count((B, 10)) == 10 * B


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, True])
def test_dropout_probability_must_be_below_one(p):
    """Dropout refuses a probability p outside [0, 1), and a bool."""
    with pytest.raises(mt.errors.InvalidSizeError, match=r"\[0, 1\)"):
        mt.Dropout(p)


# -- Network naming and the summary table -------------------------------------------------
def test_auto_names_count_per_kind():
    """Unnamed layers are named kind_1, kind_2, ... per kind; the input is 'input'."""
    net = mt.Network(
        [
            mt.Input((3, 16, 16)),
            mt.Conv2d(4, 3),
            mt.ReLU(),
            mt.MaxPool2d(2),
            mt.Conv2d(4, 3),
            mt.ReLU(),
            mt.Flatten(),
            mt.Dense(10),
            mt.Dense(2),
        ]
    )
    assert [layer.name for layer in net] == [
        "input",
        "conv2d_1",
        "relu_1",
        "maxpool2d_1",
        "conv2d_2",
        "relu_2",
        "flatten_1",
        "dense_1",
        "dense_2",
    ]
    assert net["conv2d_2"].index == 4


def test_auto_names_skip_names_the_user_took():
    """A user's own 'conv2d_1' is kept, and the unnamed conv gets the next free name."""
    net = mt.Network([mt.Input((3, 16, 16)), mt.Conv2d(4, 3), mt.Conv2d(4, 3, name="conv2d_1")])
    assert [layer.name for layer in net] == ["input", "conv2d_2", "conv2d_1"]


def test_unknown_layer_name_lists_the_layers():
    """Looking up a missing layer raises KeyError listing the names there are."""
    net = mt.Network([mt.Input((4,)), mt.Dense(2)])
    with pytest.raises(KeyError, match="dense_1"):
        net["dense_9"]


def small_cnn() -> mt.Network:
    """Conv, in-place ReLU, pool, conv, flatten, dense, softmax over a 3x8x8 input."""
    return mt.Network(
        [
            mt.Input((3, 8, 8)),
            mt.Conv2d(4, 3, padding=1),
            mt.ReLU(inplace=True),
            mt.MaxPool2d(2),
            mt.Conv2d(4, 3),
            mt.Flatten(),
            mt.Dense(5),
            mt.Softmax(),
        ]
    )


def test_small_cnn_counts_by_hand():
    """Weights 4*3*9 + 4*4*9 + 16*5 = 332, biases 4+4+5 = 13, activations 256+64+16+5+5 each."""
    net = small_cnn()
    assert net.weight_count == 4 * 3 * 9 + 4 * 4 * 9 + (4 * 2 * 2) * 5
    assert net.bias_count == 4 + 4 + 5
    per_sample = 4 * 8 * 8 + 0 + 4 * 4 * 4 + 4 * 2 * 2 + 0 + 5 + 5
    assert net.activation_count == per_sample * B
    assert net.input_elements == 3 * 8 * 8 * B


def table_cells(table: Table) -> tuple[list[list[str]], list[str]]:
    """Split a summary table into its layer rows and its total row (empty cells dropped)."""
    rows = [[cell for cell in row if cell] for row in table.rows]
    return rows, [cell for cell in table.footer[0] if cell]


@pytest.mark.parametrize("batch", [1, 64])
def test_summary_table_has_a_row_per_layer_and_totals_that_add_up(batch):
    """The printed table has one row per layer and a total row that sums the rows.

    The activations total excludes the input row's count, as the table's footer says.
    """
    net = small_cnn()
    summary = net.summary(B=batch)
    rows, total = table_cells(summary.table())
    assert [row[1] for row in rows] == [layer.name for layer in net]
    weights, biases, activations = (sum(int(row[i]) for row in rows) for i in (-3, -2, -1))
    input_row = int(rows[0][-1])
    assert input_row == 3 * 8 * 8 * batch
    assert total == ["total", str(weights), str(biases), str(activations - input_row)]
    assert summary.parameter_count == weights + biases
    assert summary.activation_count == activations - input_row
    assert str(summary) == summary.table().text()


def test_summary_totals_are_sums_of_row_formulas():
    """Symbolically, parameter and activation totals are the sums over the rows."""
    summary = small_cnn().summary()
    assert summary.parameter_count == sum(r.weights + r.biases for r in summary.rows)
    assert sp.expand(summary.activation_count - sum(r.activations for r in summary.rows[1:])) == 0
    assert summary.input_elements == 3 * 8 * 8 * B


# -- the layers the builders added --------------------------------------------------------------
def test_relu6_keeps_its_input_and_in_place_a_copy_of_it():
    """ReLU6 (hardtanh) reads its input; in place, autograd saves a copy of it first."""
    shape = (B, 16, 7, 7)
    assert roles(mt.layers.ReLU6().saved_for_backward(shape)) == [("input", None, shape)]
    in_place = mt.layers.ReLU6(inplace=True)
    assert roles(in_place.saved_for_backward(shape)) == [("intermediate", None, shape)]
    assert not in_place.stores_output()
    relu6 = mt.layers.ReLU6()
    assert in_place.activation_count(shape) == relu6.activation_count(shape) == 16 * 49 * B


def test_vision_transformer_input_layers_chain_to_the_sequence_the_encoder_reads():
    """Conv patches -> (B, 196, 768) view -> class token (B, 197, 768) -> positions added."""
    patches = mt.layers.PatchSequence().output_shape((B, 768, 14, 14))
    assert patches == (B, 196, 768)
    assert mt.layers.PatchSequence().activation_count((B, 768, 14, 14)) == 0
    with_token = mt.layers.ClassToken().output_shape(patches)
    assert with_token == (B, 197, 768)
    assert mt.layers.ClassToken().parameter_count(patches) == 768
    assert mt.layers.ClassToken().activation_count(patches) == 197 * 768 * B
    positions = mt.layers.LearnedPositions(197)
    assert positions.output_shape(with_token) == with_token
    assert positions.parameter_count(with_token) == 197 * 768
    for layer in (mt.layers.PatchSequence(), mt.layers.ClassToken(), positions):
        assert layer.saved_for_backward(with_token if layer is positions else patches) == ()


def test_learned_positions_refuse_another_sequence_length():
    """The table is added whole, so the sequence must have exactly its length."""
    with pytest.raises(mt.ShapeError, match="197 positions"):
        mt.layers.LearnedPositions(197).output_shape((B, 50, 768))


def test_language_model_loss_keeps_fp32_log_probabilities_and_labels():
    """Causal: fp32 log-probs and a shifted int64 copy of the labels; masked: the labels."""
    logits = (B, 11, 97)
    causal = mt.layers.LanguageModelLoss().saved_for_backward(logits)
    assert [(t.role, t.dtype.name, t.shape) for t in causal] == [
        ("intermediate", "fp32", logits),
        ("intermediate", "int64", (B, 11)),
    ]
    masked = mt.layers.LanguageModelLoss(shift=False, upcast=False).saved_for_backward(logits)
    assert [(t.role, t.dtype, t.shape) for t in masked][0] == ("intermediate", None, logits)
    assert masked[1].role == "target"
    assert mt.layers.LanguageModelLoss().output_shape(logits) == ()
    with pytest.raises(mt.errors.RankError, match="CrossEntropyLoss"):
        mt.layers.LanguageModelLoss().output_shape((B, 97))


@pytest.mark.parametrize(
    ("layer", "shape"),
    [
        (mt.Dense(10), (B, 20)),
        (mt.Dense(10, bias=False), (B, 4, 20)),
        (mt.Conv2d(12, 3, groups=3), (B, 6, 9, 9)),
        (mt.BatchNorm2d(), (B, 6, 9, 9)),
        (mt.LayerNorm(bias=False), (B, 4, 20)),
        (mt.Embedding(50, 8), (B, 4)),
        (mt.layers.PositionEmbedding(16), (B, 4, 8)),
        (mt.layers.TokenTypeEmbedding(2), (B, 4, 8)),
        (mt.layers.Unembedding(50, tied=False, bias=True), (B, 4, 8)),
        (mt.MultiHeadAttention(4, kv_heads=2), (B, 4, 16)),
        (mt.MultiHeadAttention(4, bias=False), (B, 4, 16)),
        (mt.layers.LSTM(8), (B, 4, 5)),
        (mt.layers.GRU(8, bias=False), (B, 4, 5)),
        (mt.layers.ClassToken(), (B, 4, 8)),
        (mt.layers.LearnedPositions(4), (B, 4, 8)),
        (mt.ReLU(), (B, 4)),
    ],
)
def test_parameter_shapes_add_up_to_the_parameter_count(layer, shape):
    """Every layer's parameter tensors hold exactly its weights and biases."""
    shapes = layer.parameter_shapes(shape)
    assert sp.expand(sum((sp.Mul(*s) for _, s in shapes), sp.Integer(0))) == sp.expand(
        layer.parameter_count(shape)
    )
    assert len({name for name, _ in shapes}) == len(shapes)
