"""Graph networks: layers that read named earlier layers, merges, and saved-tensor ownership."""

from __future__ import annotations

import pytest
import sympy as sp

import memtheory.layers as ml
from memtheory.errors import RankError, ShapeError, UnsupportedError
from memtheory.network import Network, Node
from memtheory.symbols import B, H, S


def residual(channels: int = 8, side: object = 32) -> Network:
    """relu(x + bn(conv(x))): the smallest residual block."""
    return Network(
        [
            ml.Input((channels, side, side), name="x"),
            ml.Conv2d(channels, 3, padding=1, bias=False, name="conv"),
            ml.BatchNorm2d(name="bn"),
            Node(ml.Add(name="add"), inputs=("x", "bn")),
            ml.ReLU(name="relu"),
        ]
    )


def test_residual_block_wires_and_counts_like_its_layers():
    """A residual block's rows read what the nodes name; parameters are conv + bn only."""
    net = residual()
    assert [row.inputs for row in net.rows] == [(), ("x",), ("conv",), ("x", "bn"), ("add",)]
    assert net["add"].input_shapes == ((B, 8, 32, 32), (B, 8, 32, 32))
    assert net.parameter_count == 8 * 8 * 3 * 3 + 2 * 8
    assert not net.is_sequential


def test_add_keeps_nothing_for_backward_and_its_output_is_new_memory():
    """A sum's backward needs only its incoming gradient; out of place, its output is new."""
    net = residual()
    assert net["add"].saved == ()
    assert net["add"].activations == B * 8 * 32 * 32


def test_inplace_add_writes_into_its_first_input():
    """An in-place sum (torchvision's ``out += identity``) writes into its first input."""
    net = Network(
        [
            ml.Input((4, 8, 8), name="x"),
            ml.Conv2d(4, 3, padding=1, name="conv"),
            Node(ml.Add(inplace=True, name="add"), inputs=("conv", "x")),
            ml.ReLU(inplace=True, name="relu"),
        ]
    )
    assert net["add"].activations == 0
    assert net.storage_owner("relu") == "conv"


def test_sequential_networks_are_unchanged():
    """A plain list of layers is sequential: every row reads the row above it."""
    net = Network([ml.Input((4,)), ml.Dense(3), ml.ReLU(), ml.Dense(2)])
    assert net.is_sequential
    assert [row.inputs for row in net.rows[1:]] == [("input",), ("dense_1",), ("relu_1",)]


def test_table_says_what_a_shortcut_reads():
    """The printed table marks a layer that does not read the row above it."""
    text = residual().summary(B=1).table().text()
    assert "from x, bn" in text
    assert "from" not in Network([ml.Input((4,)), ml.Dense(3)]).summary(B=1).table().text()


def test_concat_sums_the_joined_dimension():
    """Concatenating 16 and 8 channels of the same image gives 24 channels."""
    net = Network(
        [
            ml.Input((3, H, H), name="x"),
            ml.Conv2d(16, 1, name="a"),
            Node(ml.Conv2d(8, 1, name="b"), inputs="x"),
            Node(ml.Concat(name="cat"), inputs=("a", "b")),
        ]
    )
    assert net.output_shape == (B, 24, H, H)


def test_saved_tensors_count_shared_storage_once():
    """A ReLU keeps its output and the next Dense keeps its input: the same tensor, once."""
    net = Network([ml.Input((4,)), ml.Dense(3), ml.ReLU(), ml.Dense(2)])
    kept = net.saved_tensors()
    assert [(t.saver, t.owner, t.spec.role) for t in kept] == [
        ("dense_1", "input", "input"),
        ("relu_1", "relu_1", "output"),
    ]
    assert sum(t.spec.elements for t in kept) == 4 * B + 3 * B


def test_saved_tensors_follow_views_to_their_storage():
    """Flatten is a view: the Dense after it keeps the pooling layer's output storage."""
    net = Network([ml.Input((2, 4, 4)), ml.MaxPool2d(2), ml.Flatten(), ml.Dense(3)])
    owners = {(t.saver, t.owner) for t in net.saved_tensors() if t.spec.role == "input"}
    assert owners == {("maxpool2d_1", "input"), ("dense_1", "maxpool2d_1")}


@pytest.mark.parametrize(
    ("items", "words"),
    [
        pytest.param(
            [ml.Input((4,)), Node(ml.Dense(3), inputs="nowhere")],
            ("'nowhere'", "not an earlier layer", "input"),
            id="unknown-input",
        ),
        pytest.param(
            [ml.Input((4,)), ml.Add()],
            ("Add", "two or more", "Node(Add()"),
            id="merge-with-one-input",
        ),
        pytest.param(
            [ml.Input((4,), name="x"), ml.Dense(4, name="d"), Node(ml.Dense(3), inputs=("x", "d"))],
            ("reads one input", "Add or Concat"),
            id="two-inputs-to-dense",
        ),
        pytest.param(
            [ml.Input((4,), name="x"), ml.Dense(3, name="d"), Node(ml.Add(), inputs=("x", "d"))],
            ("cannot add shapes", "(B, 4)", "(B, 3)", "projection"),
            id="add-shape-mismatch",
        ),
    ],
)
def test_wiring_mistakes_raise_shape_errors_naming_the_fix(items, words):
    """Each wiring mistake raises ShapeError whose message names the layer and the fix."""
    with pytest.raises(ShapeError) as error:
        Network(items)
    for word in words:
        assert word in str(error.value)


def test_node_needs_a_layer():
    """A Node around something that is not a layer is refused."""
    with pytest.raises(UnsupportedError):
        Node("dense", inputs="x")  # type: ignore[arg-type]


def test_symbolic_add_that_sympy_cannot_decide_is_checked_when_evaluated():
    """floor(H/2) and ceil-mode pooling agree for even H only: H=5 is refused at summary()."""
    net = Network(
        [
            ml.Input((1, H, H), name="x"),
            ml.MaxPool2d(2, name="floor"),
            Node(ml.MaxPool2d(2, ceil_mode=True, name="ceil"), inputs="x"),
            Node(ml.Add(name="add"), inputs=("floor", "ceil")),
        ]
    )
    assert net.summary(H=4).rows[-1].output_shape == (B, 1, 2, 2)
    with pytest.raises(ShapeError, match="H=5"):
        net.summary(H=5)


def test_dense_acts_on_the_last_dimension_of_a_sequence():
    """Dense on (B, S, 768) maps every position: output (B, S, units), 768*units weights."""
    fc = ml.Dense(3072)
    assert fc.output_shape((B, S, 768)) == (B, S, 3072)
    assert fc.parameter_count((B, S, 768)) == 768 * 3072 + 3072


def test_dense_still_refuses_an_image():
    """Dense after Conv2d (4-D) still raises RankError telling to insert Flatten."""
    with pytest.raises(RankError, match="Flatten"):
        Network([ml.Input((3, 8, 8)), ml.Conv2d(4, 3), ml.Dense(10)])


def test_graph_rows_substitute_their_input_shapes():
    """summary() substitutes every input shape of a merge, not only the first."""
    rows = residual(side=H).summary(B=2, H=16).rows
    assert rows[3].input_shapes == ((2, 8, 16, 16), (2, 8, 16, 16))
    assert all(d.is_number for shape in rows[3].input_shapes for d in shape)
    assert sp.sympify(rows[3].activations) == 2 * 8 * 16 * 16
