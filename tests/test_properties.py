"""Properties every valid network's memory must have, checked on random networks (hypothesis)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.precision import Precision
from memtheory.sliding_window import conv_output_size, pool_output_size
from memtheory.symbols import B, H
from tests.strategies import (
    FLOAT_DTYPES,
    Window,
    conv_windows,
    explicit_precisions,
    image_networks,
    mlps,
    optimizer_names,
    pool_windows,
    precisions,
)

SETTINGS = settings(max_examples=100, deadline=None)
FAST = settings(max_examples=300, deadline=None)

networks = image_networks() | mlps()
PARAMETER_SIDE = ("parameters", "gradients", "optimizer_state", "master_weights", "buffers")


def affine_coefficients(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """``(constant, slope)`` of an expression of degree at most 1 in ``B``."""
    poly = sp.Poly(expr, B)
    assert poly.degree() <= 1, f"not affine in B: {expr}"
    return poly.coeff_monomial(1), poly.coeff_monomial(B)


# -- independent references ---------------------------------------------------------------
def pytorch_floor_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """torch.nn.Conv2d docs: floor((n + 2p - d(k-1) - 1)/s + 1)."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def pytorch_ceil_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """torch.nn.MaxPool2d docs with ceil_mode, plus Pool.h's last-window-starts-inside rule."""
    out = -(-(n + 2 * p - d * (k - 1) - 1) // s) + 1
    if (out - 1) * s >= n + p:
        out -= 1
    return out


def brute_floor_count(n: int, k: int, s: int, p: int, d: int) -> int:
    """Count window starts (padded coordinates) whose last tap is still inside the padded input."""
    padded = n + 2 * p
    return sum(1 for start in range(0, padded, s) if start + d * (k - 1) <= padded - 1)


def brute_ceil_count(n: int, k: int, s: int, p: int, d: int) -> int:
    """Step windows until one reaches the padded end; keep those starting before the right pad."""
    padded, span = n + 2 * p, d * (k - 1) + 1
    starts, start = [], 0
    while True:
        starts.append(start)
        if start + span >= padded:
            break
        start += s
    return sum(1 for t in starts if t < n + p)


def reference_counts(spec) -> tuple[int, int]:
    """Parameters and per-sample activations of an image network, from PyTorch's formulas."""
    channels, side, features = spec.channels, spec.side, None
    parameters = activations = 0
    for layer in spec.layers:
        numel = features if features is not None else channels * side * side
        if isinstance(layer, mt.Conv2d):
            k, s = int(layer.kernel_size[0]), int(layer.stride[0])
            d, g = int(layer.dilation[0]), int(layer.groups)
            out = int(layer.out_channels)
            if layer.padding != "same":
                side = pytorch_floor_size(side, k, s, int(layer.padding[0]), d)
            parameters += out * (channels // g) * k * k + (out if layer.bias else 0)
            channels = out
            activations += channels * side * side
        elif isinstance(layer, mt.MaxPool2d | mt.AvgPool2d):
            k, s, p = int(layer.kernel_size[0]), int(layer.stride[0]), int(layer.padding[0])
            d = int(layer.dilation[0]) if isinstance(layer, mt.MaxPool2d) else 1
            size = pytorch_ceil_size if layer.ceil_mode else pytorch_floor_size
            side = size(side, k, s, p, d)
            activations += channels * side * side
        elif isinstance(layer, mt.BatchNorm2d):
            parameters += 2 * channels if layer.affine else 0
            activations += numel
        elif isinstance(layer, mt.Flatten):
            features = numel
        elif isinstance(layer, mt.Dense):
            parameters += numel * int(layer.units) + (int(layer.units) if layer.bias else 0)
            features = int(layer.units)
            activations += features
        else:  # element-wise: ReLU, Sigmoid, Tanh, Dropout, Softmax
            activations += 0 if getattr(layer, "inplace", False) else numel
    return parameters, activations


# -- memory as a function of the batch ----------------------------------------------------
@SETTINGS
@given(networks, optimizer_names(), precisions())
def test_training_total_is_affine_and_nondecreasing_in_batch(spec, name, chosen):
    """Training memory is affine in B with a non-negative slope; its second difference is 0."""
    total = mt.training_memory(spec.network(), optimizer=name, precision=chosen).total
    constant, slope = affine_coefficients(total)
    assert slope >= 0 and constant >= 0
    t1, t2, t3 = (mt.evaluate(total, B=b) for b in (1, 2, 3))
    assert t1 - 2 * t2 + t3 == 0
    assert t1 <= t2 <= t3


@SETTINGS
@given(networks, optimizer_names(), precisions())
def test_parameter_side_components_do_not_depend_on_batch(spec, name, chosen):
    """Parameters, gradients, optimizer state, master weights and buffers have no B in them."""
    memory = mt.training_memory(spec.network(), optimizer=name, precision=chosen)
    for component in PARAMETER_SIDE:
        if component in memory.components:
            assert B not in memory[component].free_symbols, component
    assert B in memory["activations"].free_symbols | memory["input"].free_symbols


@SETTINGS
@given(networks, precisions(), st.integers(1, 10**6))
def test_optimizer_ordering_adam_momentum_sgd(spec, chosen, batch):
    """Adam needs at least SGD with momentum, which needs at least SGD, whatever the batch."""
    net = spec.network()
    adam, momentum, sgd = (
        mt.training_memory(net, optimizer=name, precision=chosen).total
        for name in ("adam", "sgd+momentum", "sgd")
    )
    for bigger, smaller in ((adam, momentum), (momentum, sgd)):
        gap = sp.expand(bigger - smaller)
        assert B not in gap.free_symbols  # optimizer state is parameter-shaped
        assert gap >= 0
        assert mt.evaluate(bigger, B=batch) >= mt.evaluate(smaller, B=batch)


# Parameter-shaped state tensors each torch.optim class creates per parameter (the names its
# step() puts in self.state[p]): SGD none (momentum=0), SGD momentum 'momentum_buffer', Adam and
# AdamW 'exp_avg' and 'exp_avg_sq', RMSprop 'square_avg', Adagrad 'sum' (scalar 'step' aside).
PYTORCH_STATE_TENSORS = {
    "sgd": 0,
    "sgd+momentum": 1,
    "adam": 2,
    "adamw": 2,
    "rmsprop": 1,
    "adagrad": 1,
}


@SETTINGS
@given(networks, st.sampled_from(sorted(PYTORCH_STATE_TENSORS)), precisions())
def test_optimizer_state_is_one_parameter_copy_per_pytorch_state_tensor(spec, name, chosen):
    """Optimizer state is (state tensors per parameter) * P * state dtype bytes, as torch.optim."""
    net = spec.network()
    memory = mt.training_memory(net, optimizer=name, precision=chosen)
    expected = PYTORCH_STATE_TENSORS[name] * net.parameter_count * chosen.optimizer_state.bytes
    assert memory["optimizer_state"] == expected
    assert net.parameter_count > 0


@SETTINGS
@given(networks, optimizer_names(), precisions())
def test_inference_needs_no_more_than_training(spec, name, chosen):
    """A forward pass without gradients never needs more than a training step (same precision)."""
    net = spec.network()
    training = mt.training_memory(net, optimizer=name, precision=chosen).total
    inference = mt.inference_memory(net, precision=chosen).total
    constant, slope = affine_coefficients(sp.expand(training - inference))
    assert constant >= 0 and slope >= 0


# -- precision ----------------------------------------------------------------------------
@st.composite
def precision_and_narrower(draw):
    """A fully explicit Precision and a copy with one component stored in a no-wider dtype."""
    original = draw(explicit_precisions())
    field = draw(st.sampled_from([f.name for f in dataclasses.fields(Precision)]))
    current = getattr(original, field)
    width = 0 if current is None else current.bytes
    narrower = [name for name in FLOAT_DTYPES if mt.dtype(name).bytes <= width]
    options = st.sampled_from(narrower) if narrower else st.nothing()
    if field == "master_weights":
        options = st.none() | options
    return original, dataclasses.replace(original, **{field: draw(options)}), field


@SETTINGS
@given(networks, optimizer_names(), precision_and_narrower())
def test_narrower_dtype_for_one_component_never_needs_more(spec, name, pair):
    """A no-wider dtype for any one component never increases the total, for any batch.

    Compared: a fully explicit Precision against a copy with one field replaced by a dtype of at
    most as many bytes (or master weights dropped); both B-coefficients of the training and the
    inference totals shrink or stay.
    """
    wide, narrow, field = pair
    net = spec.network()
    for memory in (
        lambda p: mt.training_memory(net, optimizer=name, precision=p),
        lambda p: mt.inference_memory(net, precision=p),
    ):
        wide_total, narrow_total = memory(wide).total, memory(narrow).total
        constant, slope = affine_coefficients(sp.expand(wide_total - narrow_total))
        assert constant >= 0 and slope >= 0, field


@SETTINGS
@given(networks, optimizer_names(), st.sampled_from(["fp16", "bf16"]))
def test_mixed_precision_versus_fp32_like_for_like(spec, name, low):
    """Mixed precision saves exactly 2 * 2 bytes per activation element against fp32.

    Mixed (2-byte weights and gradients, fp32 master weights, state and input) stores the
    parameter side in as many bytes as fp32: 2 + 2 + 4 = 4 + 4 per parameter plus the same fp32
    state (ZeRO, Rajbhandari et al. 2020, section 3.1: 16 bytes per parameter for mixed Adam,
    as fp32 Adam's 4 + 4 + 8); activations and their gradients halve; buffers follow the weights.
    """
    net = spec.network()
    fp32 = mt.training_memory(net, optimizer=name, precision="fp32")
    mixed = mt.training_memory(net, optimizer=name, precision=f"mixed-{low}")

    def parameter_side(memory):
        """Bytes of weights, gradients, optimizer state and master weights."""
        return sum(memory.components.get(c, 0) for c in PARAMETER_SIDE if c != "buffers")

    assert sp.expand(parameter_side(fp32) - parameter_side(mixed)) == 0
    assert mixed["input"] == fp32["input"]
    assert 2 * mixed["activations"] == fp32["activations"]
    assert 2 * mixed["activation_gradients"] == fp32["activation_gradients"]
    buffers_saved = (4 - 2) * net.counts().buffers
    assert (
        sp.expand(fp32.total - mixed.total - (4 - 2) * 2 * net.activation_count - buffers_saved)
        == 0
    )


@SETTINGS
@given(networks, optimizer_names())
def test_uniform_precisions_are_ordered_by_bytes(spec, name):
    """All-fp64 >= all-fp32 >= mixed-bf16 >= all-bf16 == all-fp16 >= all-fp8, for every B."""
    net = spec.network()
    totals = [
        mt.training_memory(net, optimizer=name, precision=p).total
        for p in ("fp64", "fp32", "mixed-bf16", "bf16", "fp16", "fp8_e4m3")
    ]
    for bigger, smaller in zip(totals, totals[1:], strict=False):
        constant, slope = affine_coefficients(sp.expand(bigger - smaller))
        assert constant >= 0 and slope >= 0
    assert totals[3] == totals[4]


# -- conventions --------------------------------------------------------------------------
@SETTINGS
@given(networks, st.none() | optimizer_names())
def test_rule_of_thumb_is_three_parameter_copies_and_two_activation_copies(spec, name):
    """rule_of_thumb in fp32: (3 P + 2 A) * 4 bytes + input * 4 bytes, whatever the optimizer."""
    net = spec.network()
    memory = mt.training_memory(net, optimizer=name, convention="rule_of_thumb")
    parameters, activations = net.parameter_count, net.activation_count
    expected = (3 * parameters + 2 * activations) * 4 + net.input_elements * 4
    assert sp.expand(memory.total - expected) == 0


@FAST
@given(image_networks())
def test_network_counts_match_an_independent_reference(spec):
    """Parameters and activations of a random CNN equal a walk with PyTorch's formulas."""
    net = spec.network()
    parameters, per_sample_activations = reference_counts(spec)
    assert net.parameter_count == parameters
    assert sp.expand(net.activation_count - B * per_sample_activations) == 0
    assert net.input_elements == B * spec.channels * spec.side**2


# -- exact evaluation paths ---------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(image_networks(), optimizer_names(), precisions(), st.integers(1, 1000))
def test_three_evaluation_paths_agree_with_symbolic_image_side(spec, name, chosen, batch):
    """evaluate, compile_exact and evaluate_grid agree exactly on a total over symbolic H.

    The training total of a network whose image side is H has nested floors and Mins; both grid
    dtypes (int64 and object) are checked.
    """
    total = mt.training_memory(spec.network(H), optimizer=name, precision=chosen).total
    assert H in total.free_symbols
    batches = np.array([1, batch])
    sides = np.arange(spec.side, spec.side + 5)
    expected = np.array(
        [[int(mt.evaluate(total, B=int(b), H=int(h))) for h in sides] for b in batches],
        dtype=object,
    )
    compiled = mt.compile_exact(total, ["B", "H"])
    assert [[compiled(int(b), int(h)) for h in sides] for b in batches] == expected.tolist()
    grid = mt.evaluate_grid(total, B=batches[:, None], H=sides[None, :])
    assert grid.dtype == np.int64
    assert grid.tolist() == expected.tolist()
    exact = mt.evaluate_grid(total, B=batches[:, None], H=sides[None, :], dtype=object)
    assert exact.tolist() == expected.tolist()


@SETTINGS
@given(image_networks(), st.integers(0, 6))
def test_symbolic_network_substituted_equals_numeric_network(spec, extra):
    """A network over H with H = n substituted has the shapes and counts of one built with n.

    Every side from the smallest the layers were drawn for is valid: output sizes grow with H.
    """
    side = spec.side + extra
    symbolic = spec.network(H).summary(H=side)
    numeric = spec.network(side)
    assert [r.output_shape for r in symbolic.rows] == [r.output_shape for r in numeric.rows]
    assert symbolic.parameter_count == numeric.parameter_count
    assert sp.expand(symbolic.activation_count - numeric.activation_count) == 0


# -- output sizes of sliding windows ------------------------------------------------------
@FAST
@given(conv_windows())
def test_conv_output_size_matches_pytorch_formula_and_brute_force(w: Window):
    """conv_output_size == torch.nn.Conv2d's documented formula == a count of window starts."""
    expected = pytorch_floor_size(w.size, w.kernel, w.stride, w.padding, w.dilation)
    assert expected == brute_floor_count(w.size, w.kernel, w.stride, w.padding, w.dilation)
    assert conv_output_size(w.size, w.kernel, w.stride, w.padding, w.dilation) == expected
    layer = mt.Conv2d(3, w.kernel, stride=w.stride, padding=w.padding, dilation=w.dilation)
    assert layer.output_shape((B, 2, w.size, w.size)) == (B, 3, expected, expected)


@FAST
@given(pool_windows())
def test_pool_output_size_matches_pytorch_rule_and_brute_force(w: Window):
    """pool_output_size, MaxPool2d and AvgPool2d match PyTorch's rule and a brute-force count."""
    args = (w.size, w.kernel, w.stride, w.padding, w.dilation)
    if w.ceil_mode:
        expected = pytorch_ceil_size(*args)
        assert expected == brute_ceil_count(*args)
    else:
        expected = pytorch_floor_size(*args)
        assert expected == brute_floor_count(*args)
    assert pool_output_size(*args, ceil_mode=w.ceil_mode) == expected
    pool = mt.MaxPool2d(
        w.kernel, stride=w.stride, padding=w.padding, dilation=w.dilation, ceil_mode=w.ceil_mode
    )
    assert pool.output_shape((B, 5, w.size, w.size)) == (B, 5, expected, expected)
    if w.dilation == 1:
        avg = mt.AvgPool2d(w.kernel, stride=w.stride, padding=w.padding, ceil_mode=w.ceil_mode)
        assert avg.output_shape((B, 5, w.size, w.size)) == (B, 5, expected, expected)


@FAST
@given(conv_windows(), pool_windows())
def test_rectangular_windows_use_each_axis_own_hyperparameters(tall: Window, wide: Window):
    """Conv2d and MaxPool2d with (height, width) pairs size each axis with its own window."""
    conv = mt.Conv2d(
        4,
        (tall.kernel, wide.kernel),
        stride=(tall.stride, wide.stride),
        padding=(tall.padding, wide.padding),
        dilation=(tall.dilation, wide.dilation),
    )
    out = conv.output_shape((B, 1, tall.size, wide.size))
    assert out == (
        B,
        4,
        pytorch_floor_size(tall.size, tall.kernel, tall.stride, tall.padding, tall.dilation),
        pytorch_floor_size(wide.size, wide.kernel, wide.stride, wide.padding, wide.dilation),
    )


@FAST
@given(conv_windows() | pool_windows(), st.integers(0, 20))
# A formula of its own: where it equals a size some network of the session uses, and that size
# is below 1, memtheory warns (SizeWarning); the comparison is what this test is about.
@pytest.mark.filterwarnings("ignore::memtheory.errors.SizeWarning")
def test_symbolic_output_size_substituted_equals_numeric(w: Window, extra: int):
    """The output size over a symbolic side H, at H = n, equals the size computed for n itself."""
    n = w.size + extra
    args = (w.kernel, w.stride, w.padding, w.dilation)
    symbolic = pool_output_size(H, *args, ceil_mode=w.ceil_mode)
    assert symbolic.subs(H, n) == pool_output_size(n, *args, ceil_mode=w.ceil_mode)
    assert mt.compile_exact(symbolic, ["H"])(n) == pool_output_size(n, *args, ceil_mode=w.ceil_mode)


@pytest.mark.parametrize("kernel", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("dilation", [1, 2, 3])
def test_same_padding_keeps_the_side(kernel, dilation):
    """padding='same' (stride 1) keeps every side, odd or even kernel, as PyTorch's 'same' does."""
    layer = mt.Conv2d(2, kernel, padding="same", dilation=dilation)
    for side in (1, 2, 7, 16):
        assert layer.output_shape((B, 3, side, side)) == (B, 2, side, side)
