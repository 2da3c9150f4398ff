"""Every evaluation path refuses sizes a network cannot take, and sizes that are not sizes.

The network of issue 12: ``Input((3, H, H)), Conv2d(8, 5), MaxPool2d(2), Flatten(),
Dense(10)``. Its smallest side is found here with PyTorch's output-size formula (the
``torch.nn.Conv2d`` and ``torch.nn.MaxPool2d`` docs), independently of memtheory.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import memtheory as mt
from memtheory.constraints import SizeConstraint, constraints_in
from memtheory.errors import EvaluationError
from memtheory.symbols import B, H, size_symbol


def issue_network() -> mt.Network:
    """The network of issue 12: a 5x5 kernel, then 2x2 pooling, on an H x H image."""
    return mt.Network(
        [mt.Input((3, H, H)), mt.Conv2d(8, 5), mt.MaxPool2d(2), mt.Flatten(), mt.Dense(10)],
        name="issue12",
    )


def torch_sides(side: int) -> tuple[int, int]:
    """Conv2d(kernel 5) then MaxPool2d(2) output sides, by the formulas in PyTorch's docs."""
    conv = (side + 2 * 0 - 1 * (5 - 1) - 1) // 1 + 1
    pool = (conv + 2 * 0 - 1 * (2 - 1) - 1) // 2 + 1
    return conv, pool


SMALLEST = next(h for h in range(1, 100) if min(torch_sides(h)) >= 1)
"""The smallest side the network takes (6: the conv gives 2, the pooling 1)."""


@pytest.fixture(scope="module")
def memory() -> mt.MemoryBreakdown:
    """Training memory of the issue's network with SGD."""
    return mt.training_memory(issue_network(), optimizer="sgd")


def refused(call, *words: str) -> str:
    """Run ``call``; it must raise KernelTooLargeError whose message has every word."""
    with pytest.raises(mt.KernelTooLargeError) as error:
        call()
    message = str(error.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


def test_the_smallest_side_is_six():
    """The independent formula says 6: H=5 leaves the pooling a 1x1 input, which gives 0."""
    assert SMALLEST == 6 and torch_sides(5) == (1, 0) and torch_sides(2)[0] == -2


def test_evaluate_refuses_the_issue_case(memory):
    """evaluate(total, B=1, H=2) used to return 6032: now it names the layer and the condition."""
    message = refused(
        lambda: mt.evaluate(memory.total, B=1, H=2), "conv2d_1", "'issue12'", "H - 4 >= 1"
    )
    assert "H=2" in message and "H >= 5" in message


@pytest.mark.parametrize("side", range(1, SMALLEST))
def test_every_path_refuses_every_side_below_the_smallest(memory, side):
    """evaluate, evaluate_grid, compile_exact, Footprint.evaluate/grid refuse each too-small H."""
    total = memory.total
    refused(lambda: mt.evaluate(total, B=1, H=side))
    refused(lambda: mt.evaluate_grid(total, B=np.array([1, 2]), H=side))
    refused(lambda: mt.evaluate_grid(total, B=1, H=np.array([SMALLEST, side]), dtype=object))
    refused(lambda: mt.compile_exact(total, ["B", "H"])(1, side))
    refused(lambda: memory.evaluate(H=side))
    refused(lambda: memory.grid("peak", B=1, H=np.arange(side, 40)))
    refused(lambda: mt.evaluate(memory.peak, B=3, H=side))
    refused(lambda: mt.evaluate(memory["activations"], B=3, H=side))
    refused(lambda: mt.evaluate(issue_network().parameter_count, H=side))


def test_every_path_agrees_from_the_smallest_side_on(memory):
    """At and above the smallest side, the paths give the same exact numbers."""
    sides = np.arange(SMALLEST, SMALLEST + 40)
    batches = np.array([[1], [7]])
    grid = mt.evaluate_grid(memory.total, B=batches, H=sides)
    compiled = mt.compile_exact(memory.total, ["B", "H"])
    for row, b in enumerate((1, 7)):
        for column, h in enumerate(sides.tolist()):
            exact = memory.evaluate(B=b, H=h).total
            assert grid[row, column] == exact == mt.evaluate(memory.total, B=b, H=h)
            assert compiled(b, h) == exact


def test_a_partial_evaluation_keeps_the_constraints(memory):
    """evaluate(total, B=2) leaves H free, and the result still refuses H=2."""
    in_h = mt.evaluate(memory.total, B=2)
    refused(lambda: mt.evaluate(in_h, H=2), "conv2d_1")
    refused(lambda: memory.evaluate(B=2).evaluate(H=3), "conv2d_1")
    assert mt.evaluate(in_h, H=SMALLEST) == memory.evaluate(B=2, H=SMALLEST).total


def test_a_rescaled_total_keeps_the_constraints(memory):
    """The total in MiB (a rational factor) carries what the total in bytes carries."""
    refused(lambda: mt.evaluate(memory.total / 2**20, B=1, H=2))


def test_new_expressions_are_checked_within_the_network(memory):
    """An expression built by arithmetic is new; within= names the network whose sizes apply."""
    net = issue_network()
    adam = mt.training_memory(net, optimizer="adam")
    saving = adam.total - memory.total
    refused(lambda: mt.evaluate(saving, within=net, H=2), "conv2d_1")
    refused(lambda: mt.evaluate_grid(saving, within=adam, H=np.array([9, 5])), "maxpool2d_1")
    refused(lambda: mt.compile_exact(saving, within=net)(5), "maxpool2d_1")
    assert mt.evaluate(saving, within=net, H=9) == adam.evaluate(B=1, H=9).total - (
        memory.evaluate(B=1, H=9).total
    )


def test_a_hand_built_expression_warns_and_within_refuses():
    """4 * activations + 1 is new: evaluating it at H=2 warns, naming the layer; within= refuses."""
    net = issue_network()
    built = 4 * net.activation_count + 1
    assert constraints_in(built) == ()  # nothing carried: it is not the network's
    with pytest.warns(mt.errors.SizeWarning, match="conv2d_1") as caught:
        value = mt.evaluate(built, B=1, H=2)
    assert value == built.xreplace({B: 1, H: 2}) and "within=" in str(caught[0].message)
    with pytest.warns(mt.errors.SizeWarning, match="maxpool2d_1"):
        mt.evaluate_grid(built, B=1, H=np.array([9, 5]))
    with pytest.warns(mt.errors.SizeWarning, match="conv2d_1"):
        mt.compile_exact(built)(1, 3)
    refused(lambda: mt.evaluate(built, within=net, B=1, H=2), "conv2d_1")


def test_an_unrelated_expression_neither_warns_nor_is_refused(recwarn):
    """A formula in a size no network uses evaluates quietly, even to a negative number."""
    side = size_symbol("unused_side")
    issue_network()
    assert mt.evaluate((side - 4) ** 2 + side - 4, unused_side=2) == 2
    assert mt.evaluate_grid(side - 4, unused_side=np.array([1, 9])).tolist() == [-3, 5]
    assert not [w for w in recwarn if issubclass(w.category, mt.errors.SizeWarning)]


def test_a_fixed_batch_with_one_symbolic_side_is_checked():
    """With B fixed and W numeric, sympy multiplies H - 4 out; the carried totals still check."""
    net = mt.Network([mt.Input((3, H, 32), batch=2), mt.Conv2d(8, 5), mt.Flatten(), mt.Dense(10)])
    memory = mt.training_memory(net, optimizer="sgd")
    assert not memory["activations"].has(H - 4)  # multiplied out: no H - 4 left to find
    refused(lambda: mt.evaluate(memory["activations"], H=3), "conv2d_1")
    refused(lambda: mt.evaluate(net.activation_count, H=3), "conv2d_1")
    refused(lambda: mt.evaluate(memory.total, H=4), "conv2d_1")


def test_networks_sharing_an_expression_check_only_what_both_require():
    """Two networks over one input: the input batch carries nothing, and a padded net is free."""
    tight = issue_network()
    padded = mt.Network([mt.Input((3, H, H)), mt.Conv2d(8, 5, padding=2), mt.Flatten()])
    assert padded.size_checks() == ()
    tight_memory = mt.training_memory(tight, optimizer="sgd")
    padded_memory = mt.training_memory(padded, optimizer="sgd")
    assert tight_memory["input"] == padded_memory["input"]
    assert mt.evaluate(padded_memory["input"], B=1, H=2) == 4 * 3 * 2 * 2
    assert mt.evaluate(padded_memory.total, B=1, H=1) == padded_memory.evaluate(B=1, H=1).total


def test_constraints_survive_checkpointing_and_scenarios():
    """Checkpointed counts keep the network's constraints; compare_scenarios refuses H=2."""
    from memtheory.techniques import checkpointed_counts

    net = issue_network()
    counts = checkpointed_counts(net, 2)
    assert {c.where for c in counts.size_checks()} == {c.where for c in net.size_checks()}
    refused(lambda: mt.training_memory(counts, optimizer="sgd").evaluate(B=1, H=2))
    refused(lambda: mt.compare_scenarios(net, intervals=(None, 2), B=1, H=2))


def test_other_what_if_paths_refuse_too_small_sides(memory):
    """sensitivity, the best checkpoint interval and plot_memory check the sizes too."""
    from memtheory.techniques import best_network_interval

    net = issue_network()
    refused(lambda: mt.sensitivity(memory, B=2, H=5), "maxpool2d_1")
    refused(lambda: best_network_interval(net, H=3), "conv2d_1")
    refused(lambda: mt.compare_scenarios(net, intervals=("best",), B=1, H=4), "conv2d_1")
    assert best_network_interval(net, H=SMALLEST) >= 1


def test_plot_memory_refuses_a_range_with_too_small_sides(memory):
    """plot_memory over H = 1..20 would draw sizes no layer takes: it is refused."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from memtheory.plotting import plot_memory

    refused(lambda: plot_memory(memory, "H", range(1, 21), B=2), "conv2d_1")
    axes = plot_memory(memory, "H", range(SMALLEST, 21), B=2)
    assert len(axes.lines[0].get_xdata()) == 21 - SMALLEST


def test_solvers_refuse_too_small_sides_and_start_at_the_smallest(memory):
    """max_batch at H=2 is refused; max_value over H starts at the smallest side that fits."""
    net = issue_network()
    refused(lambda: mt.max_batch(net, "1 GiB", optimizer="sgd", H=2), "conv2d_1")
    largest = mt.max_value(memory, "H", "1 GiB", B=4)
    assert (
        memory.evaluate(B=4, H=largest).total <= 2**30 < memory.evaluate(B=4, H=largest + 1).total
    )
    tight = memory.evaluate(B=4, H=SMALLEST).total
    assert mt.max_value(memory, "H", tight, B=4) == SMALLEST
    with pytest.raises(mt.DoesNotFitError, match=f"H={SMALLEST}"):
        mt.max_value(memory, "H", tight - 1, B=4)


def test_check_reports_the_first_failing_constraint_with_its_values():
    """The message names the values, the layer, the size it would have and the condition."""
    rule = SizeConstraint(sp.floor(H / 2) - 2, "layer 2 of 'n', MaxPool2d 'pool'")
    message = refused(lambda: mt.evaluate(B * H, within=[rule], B=1, H=5), "H=5", "'pool'")
    assert "would be 0" in message and "floor(H/2) - 2 >= 1" in message and "H >= 6" in message


# -- sizes are positive integers on every path -------------------------------------------
@pytest.mark.parametrize("bad", [-5, 0])
def test_grid_refuses_non_positive_sizes(memory, bad):
    """evaluate_grid(total, B=[-5]) used to give -653296, and B=0 was accepted."""
    with pytest.raises(mt.errors.EvaluationError, match="B must be positive"):
        mt.evaluate_grid(memory.total, B=np.array([bad]), H=50)
    with pytest.raises(mt.errors.EvaluationError, match="B must be positive"):
        mt.evaluate_grid(memory.total, B=np.array([3, bad]), H=50, dtype=object)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ((2.5, 3), "whole number"),
        ((0, 3), "positive"),
        ((3, -1), "positive"),
        ((True, 3), "number"),
        (("2", 3), "number"),
        ((None, 3), "number"),
        ((float("nan"), 3), "finite"),
        ((sp.Rational(1, 2), 3), "whole number"),
    ],
)
def test_compiled_functions_refuse_what_is_not_a_size(values, words):
    """compile_exact(4*B*H)(2.5, 3) used to return 30.0."""
    with pytest.raises(mt.errors.EvaluationError, match=words):
        mt.compile_exact(4 * B * H, ["B", "H"])(*values)


def test_compiled_functions_take_numpy_integers_and_names():
    """np.int64 is an integer; arguments may be named; the result is an exact int."""
    f = mt.compile_exact(4 * B * H, ["B", "H"])
    assert f(np.int64(2), np.int32(3)) == 24 and type(f(np.int64(2), 3)) is int
    assert f(2, H=3) == f(B=2, H=3) == 24 == f(2.0, 3)
    with pytest.raises(mt.errors.EvaluationError, match="takes 2"):
        f(1)
    with pytest.raises(mt.errors.EvaluationError, match="no argument named"):
        f(1, X=3)


def test_evaluate_accepts_numpy_integers():
    """np.int64 values are integers: evaluate gives the same exact number as for int."""
    assert mt.evaluate(4 * B * H, B=np.int64(2), H=np.uint16(3)) == 24


# -- boolean options are strictly booleans ----------------------------------------------
def _bool_options() -> list[tuple[type, str]]:
    """Every public layer class with each of its options declared bool."""
    import dataclasses

    import memtheory.layers as layers

    found = []
    for name in layers.__all__:
        cls = getattr(layers, name)
        is_layer = isinstance(cls, type) and issubclass(cls, mt.layers.Layer)
        if is_layer and dataclasses.is_dataclass(cls):
            for field in dataclasses.fields(cls):
                if field.type in ("bool", bool):
                    found.append((cls, field.name))
    return found


MINIMAL_ARGS = {
    "Conv2d": (8, 3),
    "Dense": (4,),
    "Linear": (4,),
    "MaxPool2d": (2,),
    "AvgPool2d": (2,),
    "MultiHeadAttention": (2,),
    "GroupedQueryAttention": (2,),
    "Embedding": (10, 4),
    "PositionEmbedding": (10,),
    "TokenTypeEmbedding": (2,),
    "LSTM": (4,),
    "GRU": (4,),
    "Unembedding": (10,),
    "Rotary": (8,),
    "RotaryTable": (8,),
    "MixtureOfExperts": (4, 2, 8),
}


def test_the_bool_options_are_found():
    """The scan sees the options the issue is about (Conv2d's bias, pooling's ceil_mode, ...)."""
    names = {(cls.__name__, field) for cls, field in _bool_options()}
    assert {("Conv2d", "bias"), ("Dense", "bias"), ("MaxPool2d", "ceil_mode")} <= names
    assert {("ReLU", "inplace"), ("BatchNorm2d", "affine"), ("LayerNorm", "bias")} <= names
    assert len(names) >= 20


@pytest.mark.parametrize(("cls", "field"), _bool_options(), ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("bad", ["no", "False", 0, 1, None, 1.0])
def test_bool_options_refuse_everything_but_true_and_false(cls, field, bad):
    """Conv2d(8, 3, bias="no") used to count a bias: every bool option is strict."""
    with pytest.raises(mt.InvalidArgumentError, match=f"{field} must be True or False"):
        cls(*MINIMAL_ARGS.get(cls.__name__, ()), **{field: bad})


def test_bias_false_and_numpy_bools():
    """bias=False drops the bias; NumPy's booleans count as the booleans they are."""
    with_bias = mt.Conv2d(8, 3, bias=np.True_)
    assert with_bias.bias is True and mt.Conv2d(8, 3, bias=np.False_).bias is False
    shape = (B, 3, 8, 8)
    assert (
        with_bias.parameter_count(shape) - mt.Conv2d(8, 3, bias=False).parameter_count(shape) == 8
    )


# -- memtheory's errors where raw Python ones were ---------------------------------------
@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: mt.Network(None), mt.UnsupportedError, "list of layers"),
        (lambda: mt.Network(5), mt.UnsupportedError, "list of layers"),
        (lambda: mt.Network("conv"), mt.UnsupportedError, "list of layers"),
        (
            lambda: mt.max_batch(issue_network(), None, optimizer="sgd", H=50),
            mt.errors.EvaluationError,
            "memory limit",
        ),
        (
            lambda: mt.max_batch(issue_network(), float("inf"), optimizer="sgd", H=50),
            mt.errors.EvaluationError,
            "memory limit",
        ),
        (
            lambda: mt.evaluate_grid(4 * B * H, B=np.array([1, 2]), H=np.array([1, 2, 3])),
            mt.errors.EvaluationError,
            "broadcast",
        ),
        (lambda: mt.evaluate_grid(4 * B * H, B=1, H=2, dtype="foo"), EvaluationError, "dtype"),
        (lambda: mt.evaluate_grid(4 * B * H, B=1, H=2, dtype=[1]), EvaluationError, "dtype"),
        (lambda: mt.format_bytes(float("nan")), mt.InvalidArgumentError, "finite"),
        (lambda: mt.format_bytes(float("inf")), mt.InvalidArgumentError, "finite"),
        (lambda: mt.format_bytes(-float("inf"), "GiB"), mt.InvalidArgumentError, "finite"),
        (lambda: mt.format_bytes(sp.nan), mt.InvalidArgumentError, "finite"),
        (lambda: mt.format_bytes("12 MiB"), mt.InvalidArgumentError, "parse_bytes"),
        (lambda: mt.format_bytes(None), mt.InvalidArgumentError, "number of bytes"),
        (lambda: mt.format_bytes(2**20, digits=-1), mt.InvalidArgumentError, "digits"),
        (lambda: mt.evaluate("B*H", B=2), mt.errors.EvaluationError, "sympy expression"),
        (lambda: mt.compile_exact(B * H, "BH"), mt.errors.EvaluationError, "list of symbol names"),
    ],
)
def test_raw_python_errors_are_memtheory_errors(call, error, words):
    """Each used to raise TypeError, AttributeError or ValueError from deep inside."""
    with pytest.raises(error, match=words):
        call()


def test_negative_byte_counts_format_with_their_sign():
    """A difference of two sizes may be negative: it formats with its sign, rounded half up."""
    assert mt.format_bytes(-3 * 2**19) == "-1.50 MiB"
    assert mt.format_bytes(-(2**30) - 2**29, "GiB", 1) == "-1.5 GiB"


def test_a_size_two_networks_share_names_both_and_layer_order_wins():
    """Another network with the pooled size floor(H/2) - 2: the warning names both owners.

    The warning used to name whichever network was built first in the process, so this test
    file's expectations depended on what other tests had built before it.
    """
    strided = mt.Network(
        [mt.Input((3, H, H)), mt.Conv2d(4, 2, stride=2), mt.Conv2d(4, 3)], name="strided"
    )
    assert strided.rows[-1].output_shape[-1] == sp.floor(H / 2) - 2
    net = issue_network()
    built = 4 * net.activation_count + 1
    with pytest.warns(mt.errors.SizeWarning, match="one of these networks") as caught:
        mt.evaluate_grid(built, B=1, H=np.array([9, 5]))
    # the warning about these networks: a traced result elsewhere in the process (another
    # test's, in the same worker) can add a warning of its own about H before it
    message = next(str(w.message) for w in caught if "one of these networks" in str(w.message))
    assert "'strided', Conv2d" in message and "'issue12', MaxPool2d 'maxpool2d_1'" in message
    with pytest.warns(mt.errors.SizeWarning, match="conv2d_1"):  # H - 4 < 1: issue12's first layer
        mt.evaluate(built, B=1, H=2)
