"""Each kind of bad input raises its own exception; its message names the culprit and the fix."""

from __future__ import annotations

import pytest
import sympy as sp

import memtheory as mt
from memtheory.precision import Precision
from memtheory.symbols import B, H


def mlp() -> mt.Network:
    """A tiny valid network to hand to the memory functions."""
    return mt.Network([mt.Input((4,)), mt.Dense(3)])


def assert_mentions(error: pytest.ExceptionInfo, *words: str) -> None:
    """The exception's message contains every word (case-insensitive)."""
    message = str(error.value).lower()
    for word in words:
        assert word.lower() in message, f"{word!r} not in {str(error.value)!r}"


# -- the hierarchy ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (mt.errors.InvalidSizeError, ValueError),
        (mt.ShapeError, ValueError),
        (mt.errors.RankError, mt.ShapeError),
        (mt.KernelTooLargeError, mt.ShapeError),
        (mt.errors.EvaluationError, ValueError),
        (mt.errors.EvaluationOverflowError, mt.errors.EvaluationError),
        (mt.errors.EvaluationOverflowError, OverflowError),
        (mt.errors.UnknownNameError, LookupError),
        (mt.errors.UnknownOptimizerError, mt.errors.UnknownNameError),
        (mt.errors.UnknownDTypeError, mt.errors.UnknownNameError),
        (mt.errors.UnknownUnitError, mt.errors.UnknownNameError),
        (mt.errors.UnknownConventionError, mt.errors.UnknownNameError),
        (mt.UnsupportedError, TypeError),
        (mt.errors.MissingArgumentError, TypeError),
    ],
)
def test_every_error_is_a_memtheory_error_and_the_expected_builtin(error, builtin):
    """Each exception class derives from MemtheoryError and from the built-in callers catch."""
    assert issubclass(error, mt.MemtheoryError)
    assert issubclass(error, builtin)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: mt.Network([mt.Input((4,)), mt.Dense(2, name="fc"), mt.Dense(2, name="fc")]),
            id="duplicate-names",
        ),
        pytest.param(lambda: mt.Network([mt.Input((4,)), "dense"]), id="not-a-layer"),
        pytest.param(lambda: mt.Input(784), id="scalar-input-shape"),
        pytest.param(lambda: mt.parse_bytes("abc"), id="unreadable-size"),
        pytest.param(lambda: mt.format_bytes(4 * B, "MiB"), id="format-symbolic"),
    ],
)
def test_deliberate_errors_are_memtheory_errors(make):
    """Errors memtheory raises on purpose are MemtheoryErrors, so one ``except`` catches them all.

    errors.py documents MemtheoryError as the "base class of every error memtheory raises on
    purpose"; a TypeError or ValueError subclass keeps builtin handlers working too.
    """
    with pytest.raises(Exception) as error:  # noqa: B017 - the type is what is checked
        make()
    assert isinstance(error.value, mt.MemtheoryError), type(error.value).__mro__


# -- windows that do not fit --------------------------------------------------------------
@pytest.mark.parametrize(
    ("layer", "kind"),
    [
        (mt.Conv2d(8, 5), "Conv2d"),
        (mt.MaxPool2d(5), "MaxPool2d"),
        (mt.Conv2d(8, 3, dilation=3), "Conv2d"),
    ],
)
def test_kernel_larger_than_padded_numeric_input(layer, kind):
    """A window wider than the padded 4x4 input raises KernelTooLargeError naming layer and fix."""
    with pytest.raises(mt.KernelTooLargeError) as error:
        mt.Network([mt.Input((3, 4, 4)), layer])
    assert_mentions(error, kind, "layer 1", "(B, 3, 4, 4)", "smaller kernel", "padding")


def test_padding_makes_a_big_kernel_fit():
    """The same 5x5 kernel fits a 4x4 input once padding 1 makes the padded side 6."""
    net = mt.Network([mt.Input((3, 4, 4)), mt.Conv2d(8, 5, padding=1)])
    assert net.output_shape == (B, 8, 4 + 2 * 1 - 5 + 1, 4 + 2 * 1 - 5 + 1)


@pytest.mark.parametrize("layer", [mt.Conv2d(8, 5), mt.MaxPool2d(5), mt.AvgPool2d(5, stride=1)])
@pytest.mark.parametrize("call", ["summary", "evaluate"])
def test_kernel_too_large_for_a_symbolic_side_is_caught_when_evaluated(layer, call):
    """Over a symbolic side H the network builds; H=3 < 5 then raises KernelTooLargeError."""
    net = mt.Network([mt.Input((3, H, H)), layer])
    getattr(net, call)(H=5)  # the window just fits
    with pytest.raises(mt.KernelTooLargeError) as error:
        getattr(net, call)(B=2, H=3)
    assert_mentions(error, layer.kind, "layer 1", "H=3", "larger input")


def test_memory_of_a_symbolic_network_refuses_a_side_its_kernel_does_not_fit():
    """Memory of a network over H refuses, at evaluation, an H its 5x5 kernel does not fit.

    At H=2 the conv "output" side is 2 - 5 + 1 = -2, whose square 4 gives a plausible but
    meaningless total; Network.summary(H=2) refuses the same value.
    """
    net = mt.Network([mt.Input((1, H, H)), mt.Conv2d(8, 5), mt.Flatten(), mt.Dense(3)])
    memory = mt.training_memory(net, optimizer="sgd")
    with pytest.raises(mt.KernelTooLargeError):
        memory.evaluate(B=1, H=2)


def test_ceil_mode_pool_numeric_and_symbolic_sides_agree():
    """A ceil-mode pool on a side smaller than its window: numeric and symbolic networks agree.

    MaxPool2d(3, stride=2, ceil_mode=True) on 2x2: PyTorch's rule gives ceil((2 - 2 - 1)/2) + 1
    = 1, and aten/src/ATen/native/Pool.h (pool2d_shape_check) only requires an output >= 1. The
    network over H at H=2 gives 1; the network built with 2 must not refuse it.
    """
    pool = mt.MaxPool2d(3, stride=2, ceil_mode=True)
    pytorch_side = -(-(2 + 2 * 0 - 1 * (3 - 1) - 1) // 2) + 1
    symbolic = mt.Network([mt.Input((1, H, H)), pool]).summary(H=2).rows[1].output_shape
    assert symbolic == (B, 1, pytorch_side, pytorch_side)
    numeric = mt.Network([mt.Input((1, 2, 2)), pool]).output_shape
    assert numeric == symbolic


def test_pool_padding_more_than_half_the_window():
    """MaxPool2d padding beyond kernel//2 is refused, as PyTorch refuses it."""
    with pytest.raises(mt.errors.InvalidSizeError) as error:
        mt.MaxPool2d(2, padding=2)
    assert_mentions(error, "MaxPool2d", "padding 2", "kernel_size // 2")


# -- sizes that are not positive whole numbers --------------------------------------------
@pytest.mark.parametrize("bad", [0, -3])
@pytest.mark.parametrize(
    ("make", "what", "kind"),
    [
        (lambda v: mt.Conv2d(v, 3), "out_channels", "Conv2d"),
        (lambda v: mt.Conv2d(8, v), "kernel_size", "Conv2d"),
        (lambda v: mt.Conv2d(8, 3, stride=v), "stride", "Conv2d"),
        (lambda v: mt.MaxPool2d(v), "kernel_size", "MaxPool2d"),
        (lambda v: mt.MaxPool2d(2, stride=v), "stride", "MaxPool2d"),
        (lambda v: mt.Dense(v), "units", "Dense"),
        (lambda v: mt.Input((3, v, 5)), "shape[1]", "Input"),
        (lambda v: mt.Input((3,), batch=v), "batch", "Input"),
    ],
)
def test_non_positive_sizes(make, what, kind, bad):
    """0 and -3 for a size raise InvalidSizeError naming the layer, the argument and the value."""
    with pytest.raises(mt.errors.InvalidSizeError) as error:
        make(bad)
    assert_mentions(error, kind, what, str(bad), "whole number >= 1")


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        (2.5, "2.5"),
        (3.0, "3.0"),
        ("3", "'3'"),
        (True, "True"),
        (sp.Rational(1, 2), "1/2"),
        (sp.Float(3.0), "3.0"),
    ],
)
@pytest.mark.parametrize(
    ("make", "what", "kind"),
    [
        (lambda v: mt.Conv2d(v, 3), "out_channels", "Conv2d"),
        (lambda v: mt.Conv2d(8, v), "kernel_size", "Conv2d"),
        (lambda v: mt.Dense(v), "units", "Dense"),
        (lambda v: mt.Input((3, v, 5)), "shape[1]", "Input"),
    ],
)
def test_non_integer_sizes(make, what, kind, bad, shown):
    """Floats (even 3.0), strings, booleans and fractions are refused, naming what was given."""
    with pytest.raises(mt.errors.InvalidSizeError) as error:
        make(bad)
    assert_mentions(error, kind, what, "whole number", shown)


def test_symbol_without_integer_assumption_is_refused():
    """A plain sympy Symbol might be 2.5; the message points to size_symbol."""
    with pytest.raises(mt.errors.InvalidSizeError) as error:
        mt.Dense(sp.Symbol("n"))
    assert_mentions(error, "Dense", "units", "not known to be a whole number", "size_symbol")


def test_same_padding_with_stride_two():
    """padding='same' needs stride 1, as in PyTorch; the message says to give numeric padding."""
    with pytest.raises(mt.errors.InvalidSizeError) as error:
        mt.Conv2d(6, 3, stride=2, padding="same")
    assert_mentions(error, "Conv2d", "'same'", "stride 1", "padding as a number")


def test_unknown_padding_word():
    """padding='full' is not a padding PyTorch knows."""
    with pytest.raises(mt.errors.InvalidSizeError) as error:
        mt.Conv2d(6, 3, padding="full")
    assert_mentions(error, "Conv2d", "'full'", "'same' or 'valid'")


# -- ranks and channels -------------------------------------------------------------------
def test_dense_after_a_4d_tensor_needs_flatten():
    """Dense straight after Conv2d raises RankError whose message says to insert Flatten."""
    with pytest.raises(mt.errors.RankError) as error:
        mt.Network([mt.Input((3, 8, 8)), mt.Conv2d(4, 3), mt.Dense(10)])
    assert_mentions(error, "layer 2", "Dense", "2-D", "4-D", "Flatten")


def test_conv_after_flatten():
    """Conv2d after Flatten raises RankError: it needs (batch, channels, height, width)."""
    with pytest.raises(mt.errors.RankError) as error:
        mt.Network([mt.Input((3, 8, 8)), mt.Flatten(), mt.Conv2d(4, 3)])
    assert_mentions(error, "layer 2", "Conv2d", "4-D", "2-D", "Flatten")


def test_batchnorm_after_flatten():
    """BatchNorm2d after Flatten raises RankError too."""
    with pytest.raises(mt.errors.RankError) as error:
        mt.Network([mt.Input((3, 8, 8)), mt.Flatten(), mt.BatchNorm2d()])
    assert_mentions(error, "BatchNorm2d", "4-D")


def test_groups_not_dividing_input_channels():
    """groups=4 with 6 input channels raises ShapeError naming both numbers."""
    with pytest.raises(mt.ShapeError) as error:
        mt.Network([mt.Input((6, 8, 8)), mt.Conv2d(8, 3, groups=4)])
    assert_mentions(error, "Conv2d", "(6)", "groups (4)", "divides")


def test_groups_not_dividing_output_channels():
    """groups=4 with 6 filters is refused at construction."""
    with pytest.raises(mt.ShapeError) as error:
        mt.Conv2d(6, 3, groups=4)
    assert_mentions(error, "out_channels (6)", "groups (4)")


def test_first_layer_must_be_input():
    """A network that starts with a Dense raises ShapeError showing an Input to add."""
    with pytest.raises(mt.ShapeError) as error:
        mt.Network([mt.Dense(3)])
    assert_mentions(error, "first layer", "Input((3, 224, 224))")


def test_input_only_first():
    """A second Input inside a network is refused."""
    with pytest.raises(mt.ShapeError) as error:
        mt.Network([mt.Input((4,)), mt.Input((4,))])
    assert_mentions(error, "only the first layer", "item 1")


def test_duplicate_layer_names():
    """Two layers both called 'fc' raise ValueError naming the repeated name."""
    with pytest.raises(ValueError, match="unique") as error:
        mt.Network([mt.Input((4,)), mt.Dense(2, name="fc"), mt.Dense(2, name="fc")])
    assert_mentions(error, "fc")


# -- unknown names ------------------------------------------------------------------------
def test_unknown_optimizer_lists_the_known_ones():
    """A misspelt optimizer raises UnknownOptimizerError listing every known optimizer."""
    with pytest.raises(mt.errors.UnknownOptimizerError) as error:
        mt.training_memory(mlp(), optimizer="adamm")
    assert_mentions(error, "'adamm'", *mt.optimizers.OPTIMIZERS)


@pytest.mark.parametrize("convention", ["breakdown", "autograd"])
def test_training_without_an_optimizer_is_a_missing_argument(convention):
    """No optimizer for a training step raises MissingArgumentError saying what to pass."""
    with pytest.raises(mt.errors.MissingArgumentError) as error:
        mt.training_memory(mlp(), convention=convention)
    assert not isinstance(error.value, mt.errors.UnknownNameError)
    assert_mentions(
        error, "needs an optimizer", 'optimizer="adam"', "memtheory.optimizers.OPTIMIZERS"
    )


def test_optimizer_is_keyword_only():
    """The optimizer comes by keyword after the model: training_memory(net, optimizer="adam")."""
    with pytest.raises(TypeError):
        mt.training_memory(mlp(), "adam")  # type: ignore[misc]


@pytest.mark.parametrize(
    "make",
    [
        lambda: mt.dtype("fp12"),
        lambda: Precision(parameters="fp12"),
        lambda: mt.training_memory(mlp(), optimizer="sgd", precision="mixed-fp12"),
    ],
)
def test_unknown_dtype(make):
    """An unknown dtype raises UnknownDTypeError listing the known dtypes."""
    with pytest.raises(mt.errors.UnknownDTypeError) as error:
        make()
    assert_mentions(error, "'fp12'", "fp32", "bf16", "int64")


def test_unknown_precision():
    """An unknown precision name raises UnknownDTypeError saying what a precision can be."""
    with pytest.raises(mt.errors.UnknownDTypeError) as error:
        mt.training_memory(mlp(), optimizer="sgd", precision="fp13")
    assert_mentions(error, "'fp13'", "mixed-fp16", "Precision")


@pytest.mark.parametrize(
    "make",
    [
        lambda: mt.format_bytes(10, "MiBs"),
        lambda: mt.parse_bytes("3 parsecs"),
        lambda: mt.convert(1, "XB"),
    ],
)
def test_unknown_unit(make):
    """An unknown unit raises UnknownUnitError listing the units and what steps by 1000 or 1024."""
    with pytest.raises(mt.errors.UnknownUnitError) as error:
        make()
    assert_mentions(error, "unknown unit", "KiB", "MB", "1000", "1024")


def test_unknown_convention():
    """An unknown convention raises UnknownConventionError listing the registered ones."""
    with pytest.raises(mt.errors.UnknownConventionError) as error:
        mt.training_memory(mlp(), optimizer="sgd", convention="exact")
    assert_mentions(error, "'exact'", "breakdown", "rule_of_thumb")


# -- evaluation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"b": 2}, ("'b'", "B, H")),
        ({"B": 0}, ("B", "positive", "0")),
        ({"B": -1}, ("B", "positive", "-1")),
        ({"B": 2.5}, ("B", "whole number", "2.5")),
        ({"B": "8"}, ("B", "number", "'8'")),
    ],
)
def test_evaluate_rejects_bad_values(values, words):
    """A misspelt name, B=0, B=-1, B=2.5 or a string raise EvaluationError naming the symbol."""
    with pytest.raises(mt.errors.EvaluationError) as error:
        mt.evaluate(B * H, **values)
    assert_mentions(error, *words)


@pytest.mark.parametrize("values", [{"B": 0}, {"B": 2.5}, {"batch": 8}])
def test_memory_evaluate_rejects_bad_values(values):
    """MemoryBreakdown.evaluate checks values the same way."""
    memory = mt.training_memory(mlp(), optimizer="sgd")
    with pytest.raises(mt.errors.EvaluationError):
        memory.evaluate(**values)


@pytest.mark.parametrize("values", [{"B": 0}, {"W": 3}])
def test_network_summary_rejects_bad_values(values):
    """Network.summary checks values the same way."""
    net = mt.Network([mt.Input((1, H, H)), mt.Conv2d(2, 3)])
    with pytest.raises(mt.errors.EvaluationError):
        net.summary(**values)
