"""The autograd convention: saved tensors counted once per storage, and the peak of a step.

Expected values are derived in each test from the layer shapes and PyTorch's
rules (which tensors each operation saves: ``tools/autograd/derivatives.yaml``;
what ``torch.optim`` allocates: ``torch/optim/adam.py``). The same numbers were
measured with PyTorch 2.13 on CPU by ``memtheory.torch.measure`` (tests/pytorch
checks that wherever PyTorch is installed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import sympy as sp

import memtheory as mt
import memtheory.network
from memtheory.conventions.autograd import (
    AutogradConvention,
    autocast_precision,
    forward_storages,
)
from memtheory.layers.base import Layer, Shape, TensorSpec
from memtheory.precision import Precision
from memtheory.symbols import B, H
from memtheory.worked_examples import small_cnn_network

F32, I64 = 4, 8


def autograd(net, optimizer="sgd", *, convention="autograd", **options):
    """Training memory of ``net`` under the autograd convention (or the one given)."""
    return mt.training_memory(net, optimizer=optimizer, convention=convention, **options)


def test_registered_under_its_name():
    """The convention is registered as "autograd" and found by name."""
    assert isinstance(mt.convention("autograd"), AutogradConvention)
    assert "autograd" in mt.conventions.CONVENTIONS


def test_model_counts_are_refused_with_a_reason():
    """Totals cannot say which tensors share storage, so ModelCounts raise UnsupportedError."""
    counts = mt.ModelCounts(parameters=10, activations=5, input_elements=1)
    with pytest.raises(mt.UnsupportedError, match="needs a memtheory Network"):
        autograd(counts)


def test_small_cnn_saved_activations_by_storage():
    """The StackExchange CNN, cross-entropy, batch 64: each saved storage once, the input apart.

    Pool 1 keeps conv 1's output and int64 indices; conv 2 keeps pool 1's output; pool 2 keeps
    conv 2's output and indices; dense 1 keeps pool 2's output through the Flatten view; dense
    2 keeps dense 1's output; the loss keeps its log-probabilities and a scalar total weight.
    Measured with PyTorch 2.13: 53,288,452 bytes.
    """
    layers = list(small_cnn_network(batch=64).layers)[:-1]
    net = mt.Network([*layers, mt.CrossEntropyLoss()])
    b = 64
    expected = (
        b * 32 * 50 * 50 * F32
        + b * 32 * 25 * 25 * I64
        + b * 32 * 25 * 25 * F32
        + b * 64 * 25 * 25 * F32
        + b * 64 * 12 * 12 * I64
        + b * 64 * 12 * 12 * F32
        + b * 500 * F32
        + b * 10 * F32
        + F32
    )
    memory = autograd(net)
    assert memory["saved_activations"] == expected == 53_288_452
    assert memory["input"] == b * 3 * 50 * 50 * F32
    assert memory["targets"] == b * I64


def test_relu_output_kept_by_the_next_dense_counts_once():
    """ReLU keeps its output and the next Dense keeps it as input: one storage, counted once."""
    net = mt.Network([mt.Input((8,), batch=4), mt.Dense(16), mt.ReLU(), mt.Dense(2)])
    assert autograd(net)["saved_activations"] == 4 * 16 * F32


def test_inplace_relu_shares_the_convolution_output():
    """An in-place ReLU writes into the conv output; the pool after it keeps that same storage."""
    conv_out = 2 * 4 * 8 * 8
    indices = 2 * 4 * 4 * 4
    inplace = mt.Network(
        [mt.Input((3, 8, 8), batch=2), mt.Conv2d(4, 3, padding=1), mt.ReLU(inplace=True)]
        + [mt.MaxPool2d(2)]
    )
    separate = mt.Network(
        [mt.Input((3, 8, 8), batch=2), mt.Conv2d(4, 3, padding=1), mt.ReLU(), mt.MaxPool2d(2)]
    )
    assert autograd(inplace)["saved_activations"] == conv_out * F32 + indices * I64
    assert autograd(separate)["saved_activations"] == conv_out * F32 + indices * I64
    # A separate ReLU allocates a second conv-sized tensor; the conv output is freed after it.
    moment = "forward relu_1"
    assert (
        autograd(separate).timeline[moment] - autograd(inplace).timeline[moment] == conv_out * F32
    )


def test_dropout_mask_dtype_follows_the_device():
    """CPU dropout keeps its noise in the activation dtype (4 bytes); CUDA keeps a bool mask."""

    def saved(device):
        net = mt.Network([mt.Input((10,), batch=3), mt.Dense(10), mt.Dropout(0.5, device=device)])
        return autograd(net)["saved_activations"]

    assert saved("cpu") == 3 * 10 * F32
    assert saved("cuda") == 3 * 10 * 1


def test_dropout_device_and_mask_dtype_must_agree():
    """Dropout refuses an unknown device, and a mask dtype that contradicts the device."""
    with pytest.raises(mt.errors.InvalidSizeError, match="device"):
        mt.Dropout(0.5, device="tpu")
    with pytest.raises(mt.errors.InvalidSizeError, match="contradicts"):
        mt.Dropout(0.5, mask_dtype="int8", device="cpu")
    assert mt.Dropout(0.5, mask_dtype=None, device="cpu").mask_dtype is None


def test_adam_step_counters_are_one_fp32_scalar_per_parameter_tensor():
    """Adam keeps state["step"], a float32 scalar, per tensor: 2 layers x (weight, bias) = 16 B."""
    net = mt.Network([mt.Input((4,), batch=2), mt.Dense(3), mt.Dense(2)])
    adam = autograd(net, "adam")
    assert adam["optimizer_step_counters"] == 4 * F32
    assert adam["optimizer_state"] == 2 * (4 * 3 + 3 + 3 * 2 + 2) * F32
    assert "optimizer_step_counters" not in autograd(net, "sgd").components


def test_peak_of_a_one_layer_step_derived_by_hand():
    """Dense(3) on (2, 4) trained on output.sum() with SGD: the peak is in its backward.

    Step start: weights and last step's gradients (15 values each) and the input (8): 152 B.
    zero_grad frees the gradients; forward adds the (2, 3) output and the scalar loss; backward
    adds the seed gradient (4) and the new gradients (60; no input gradient: the input needs
    none): 60 + 32 + 24 + 4 + 4 + 60 = 184 B.
    """
    net = mt.Network([mt.Input((4,), batch=2), mt.Dense(3)])
    memory = autograd(net)
    assert memory.timeline["step start"] == 60 + 60 + 32
    assert memory.peak == 184
    assert memory.peak_moment == "backward dense_1"


def test_adam_for_loop_temporaries_are_two_tensors_and_the_previous_denom():
    """For-loop Adam: sqrt and quotient of a tensor while the previous one's denom is bound.

    Dense(1000) on 10 features: weight 10,000 values, bias 1,000. The bias (after the weight)
    gives 2 x 4,000 + 40,000 = 48,000 B, the weight alone 80,000 B: the temporaries are 80,000.
    Foreach takes all square roots at once (44,000 B); fused allocates none.
    """
    net = mt.Network([mt.Input((10,), batch=1), mt.Dense(1000)])
    params = (10 * 1000 + 1000) * F32
    # Weights, gradients, two moments, two step counters, input, output, loss scalar.
    fused = 4 * params + 2 * F32 + 10 * F32 + 1000 * F32 + F32
    moments = {
        name: autograd(net, "adam", convention=AutogradConvention(name)).timeline["optimizer step"]
        for name in ("for-loop", "foreach", "fused")
    }
    assert moments == {
        "fused": fused,
        "for-loop": fused + 2 * 10_000 * F32,
        "foreach": fused + params,
    }


def test_symbolic_batch_peak_agrees_with_numeric_networks():
    """The peak over a symbolic batch B, evaluated, equals the peak of the network built at B."""

    def net(batch):
        return mt.Network(
            [
                mt.Input((3, 16, 16), batch=batch),
                mt.Conv2d(8, 3, padding=1),
                mt.ReLU(),
                mt.MaxPool2d(2),
                mt.Flatten(),
                mt.Dense(10),
                mt.CrossEntropyLoss(),
            ]
        )

    symbolic = autograd(net(B), "adam")
    assert symbolic.peak.free_symbols == {B}
    for batch in (1, 7, 64):
        assert symbolic.evaluate(B=batch).peak == autograd(net(batch), "adam").peak
    grid = symbolic.grid("peak", B=np.array([1, 7, 64]))
    assert list(grid) == [autograd(net(b), "adam").peak for b in (1, 7, 64)]


def test_autocast_saves_low_precision_weight_copies():
    """Under autocast conv and linear layers save bf16 copies of their weights (2 B each).

    The first Dense's input needs no gradient, so it keeps no weight copy; the second does.
    """
    net = mt.Network([mt.Input((6,), batch=2), mt.Dense(5), mt.ReLU(), mt.Dense(3)])
    memory = autograd(net, "sgd", precision=autocast_precision("bf16"))
    assert memory["weight_copies"] == 5 * 3 * 2
    assert memory["parameters"] == (6 * 5 + 5 + 5 * 3 + 3) * F32
    # Saved: the bf16 cast of the input (kept by the first Dense), the ReLU output in bf16,
    # and the loss-less sum.
    assert memory["saved_activations"] == 2 * 6 * 2 + 2 * 5 * 2


def test_precisions_torch_cannot_run_are_refused():
    """fp32 activations with bf16 weights are not a torch setting, with or without a master copy."""
    net = mt.Network([mt.Input((4,), batch=2), mt.Dense(3)])
    with pytest.raises(mt.UnsupportedError):
        autograd(net, precision=Precision(parameters="bf16", activations="fp32"))
    with pytest.raises(mt.UnsupportedError, match="master copy"):
        autograd(net, precision=Precision(parameters="bf16", activations="fp32",
                                          master_weights="fp32"))


def test_inference_total_is_the_peak():
    """Inference: weights, input, and the largest set of activations alive at once."""
    net = mt.Network([mt.Input((8,), batch=2), mt.Dense(32), mt.Dense(4), mt.Softmax()])
    memory = mt.inference_memory(net, convention="autograd")
    params = (8 * 32 + 32 + 32 * 4 + 4) * F32
    # The peak is dense_2's moment: its input (2 x 32) and output (2 x 4) both alive.
    assert memory.peak == params + 2 * 8 * F32 + 2 * 32 * F32 + 2 * 4 * F32
    assert memory.total == memory.peak


def test_unsupported_models_and_options_name_the_problem():
    """A layer it does not model, a parameter-free network, an optimizer without a rule."""

    @dataclass(frozen=True)
    class Mystery(Layer):
        name: str | None = None
        kind = "Mystery"

        def output_shape(self, input_shape: Shape) -> Shape:
            return input_shape

        def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
            return ()

    with pytest.raises(mt.UnsupportedError, match="Mystery"):
        autograd(mt.Network([mt.Input((4,)), mt.Dense(3), Mystery()]))
    with pytest.raises(mt.UnsupportedError, match="no parameters"):
        autograd(mt.Network([mt.Input((4,)), mt.ReLU()]))
    with pytest.raises(mt.UnsupportedError, match="Lion"):  # not in torch.optim
        autograd(mt.Network([mt.Input((4,)), mt.Dense(3)]), "lion")
    with pytest.raises(ValueError, match="implementation"):
        AutogradConvention("vectorised")


def test_a_shortcut_keeps_the_block_input_and_adds_no_saved_storage():
    """A shortcut x -> fc -> x + fc: the sum saves nothing; fc keeps the (uncounted) batch.

    Derived: the Dense keeps its input (the batch, counted as ``input``); the Add
    keeps nothing; the output 2 x 4 fp32 (32 bytes) is held by the caller.
    """
    net = mt.Network(
        [mt.Input((4,), batch=2, name="x"), mt.Dense(4, name="fc"),
         mt.network.Node(mt.layers.Add(), inputs=("x", "fc"))]
    )
    memory = autograd(net)
    assert memory["saved_activations"] == 0
    assert memory["input"] == 2 * 4 * 4


def test_breakdown_table_prints_the_peak_and_where_it_is():
    """A breakdown with a timeline prints its peak and moment below the total."""
    net = mt.Network([mt.Input((4,), batch=2), mt.Dense(3)])
    table = autograd(net).table("B", 0)
    assert table.text().splitlines()[-1].split() == [
        "peak", "live", "(backward", "dense_1)", "184"
    ]
    plain = mt.training_memory(net, optimizer="sgd")
    assert plain.peak == plain.total and plain.peak_moment is None
    assert "peak" not in plain.table("B", 0).text()


def test_peak_moment_needs_numbers():
    """Which moment is the peak is only known once the symbols have values."""
    memory = autograd(mt.Network([mt.Input((4,)), mt.Dense(3)]))
    with pytest.raises(ValueError, match="evaluate"):
        _ = memory.peak_moment
    assert memory.evaluate(B=2).peak_moment == "backward dense_1"
    assert isinstance(memory.peak, sp.Expr)


def test_forward_storages_add_up_to_the_saved_activations():
    """The storages whose category is saved_activations sum to the convention's figure."""
    layers = list(small_cnn_network(batch=8).layers)[:-1]
    net = mt.Network([*layers, mt.CrossEntropyLoss()])
    storages = forward_storages(net)
    saved = sum(s.nbytes for s in storages if s.category == "saved_activations")
    assert saved == autograd(net)["saved_activations"]
    # Pool 2's output is kept by dense_1 through the Flatten view: one storage, one keeper.
    pooled = next(s for s in storages if (s.layer, s.role) == ("maxpool2d_2", "output"))
    assert pooled.kept_by == ("dense_1",)
    assert pooled.nbytes == 8 * 64 * 12 * 12 * F32


def test_symbolic_peak_is_the_timeline_maximum_at_every_size():
    """The peak keeps only undominated moments, yet equals the timeline's maximum everywhere.

    Over image side H and batch B, with an unpadded convolution (negative terms in H) and a
    ceil-mode pool (a Min in the shape: its padding + stride exceed its kernel), for Adam's
    nested temporaries too.
    """
    net = mt.Network(
        [
            mt.Input((3, H, H)),
            mt.Conv2d(8, 3),
            mt.ReLU(),
            mt.MaxPool2d(2, stride=2, padding=1, ceil_mode=True),
            mt.Conv2d(4, 5, padding=2),
            mt.Flatten(),
            mt.Dense(10),
            mt.CrossEntropyLoss(),
        ]
    )
    for optimizer in ("sgd", "adam"):
        memory = autograd(net, optimizer)
        assert len(memory.peak.args) < len(memory.timeline)
        for side in (5, 6, 7, 12, 31):
            for batch in (1, 2, 17):
                values = memory.evaluate(B=batch, H=side)
                assert values.peak == max(values.timeline.values())


def test_saved_tensors_and_the_convention_agree_on_a_residual_network():
    """Network.saved_tensors() and the convention read the same Layer.autograd descriptions.

    On a two-stage bottleneck ResNet (shortcuts, in-place sums and ReLUs, BN, pooling): the
    storages saved_tensors() lists, less the caller's batch and targets, sum to the convention's
    saved activations.
    """
    from memtheory.models import resnet

    built = resnet((1, 1), image_size=32, batch=2, classes=10)
    net = mt.Network(
        [mt.Node(row.layer, inputs=row.inputs) if row.inputs else row.layer for row in built.rows]
        + [mt.CrossEntropyLoss()]
    )
    fp32 = mt.dtypes.dtype("fp32")
    listed = sum(
        t.nbytes(fp32)
        for t in net.saved_tensors()
        if t.owner != "input" and t.spec.role != "target"
    )
    assert listed == autograd(net)["saved_activations"]


def test_a_saved_view_of_another_saved_tensor_adds_no_storage():
    """A layer saving a tensor and a view of it (attention's V in its packed projection)."""

    @dataclass(frozen=True)
    class Packed(Layer):
        name: str | None = None
        kind = "Packed"
        autograd_checked = True

        def output_shape(self, input_shape: Shape) -> Shape:
            return input_shape

        def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
            batch, features = input_shape
            return (
                TensorSpec("intermediate", (batch, 3 * features), label="packed"),
                TensorSpec("intermediate", (batch, features), view_of=0, label="v"),
            )

    net = mt.Network([mt.Input((4,), batch=2), mt.Dense(4), Packed()])
    packed = 2 * 3 * 4 * 4  # (B, 3F) fp32; the view adds nothing
    assert autograd(net)["saved_activations"] == packed
    assert [t.spec.label for t in net.saved_tensors() if t.saver == "packed_1"] == ["packed"]


def test_a_tied_projection_names_the_parameter_it_reads():
    """Unembedding states the matrix it reads; without that Embedding the convention says so."""
    from memtheory.layers import Embedding, LayerNorm, Unembedding
    from memtheory.layers.base import ReadParameter

    head = Unembedding(11, name="lm_head")
    assert head.autograd(((2, 5, 8),)).reads_parameter == ReadParameter("Embedding", "weight", 11)
    alone = mt.Network([mt.Input((5, 8), batch=2), LayerNorm(), head])
    with pytest.raises(mt.errors.UnsupportedError, match="weight of a Embedding with 11 rows"):
        mt.training_memory(alone, optimizer="sgd", convention="autograd")
    tied = mt.Network([mt.Input((5,), batch=2), Embedding(11, 8, name="wte"), LayerNorm(), head])
    untied = mt.Network([mt.Input((5,), batch=2), Embedding(11, 8, name="wte"), LayerNorm(),
                      Unembedding(11, tied=False, name="lm_head")])
    sgd = {"optimizer": "sgd", "convention": "autograd"}
    # the tie adds no parameter: the head's gradient joins the embedding's
    assert mt.training_memory(tied, **sgd)["gradients"] + 11 * 8 * 4 == mt.training_memory(
        untied, **sgd
    )["gradients"]
