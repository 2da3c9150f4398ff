"""What-if toolkit: largest batch or sequence that fits, sensitivity, scenario tables, plots."""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory.layers as ml
from memtheory import ModelCounts, training_memory
from memtheory.errors import (
    EvaluationError,
    MissingArgumentError,
    UnknownNameError,
    UnsupportedError,
)
from memtheory.evaluation import compile_exact
from memtheory.models import gpt2, vgg
from memtheory.network import Network
from memtheory.symbols import B, H, S
from memtheory.techniques import generation_memory, zero_model_states
from memtheory.whatif import (
    DoesNotFitError,
    compare_scenarios,
    max_batch,
    max_sequence_length,
    max_value,
    max_value_formula,
    memory_limit,
    sensitivity,
    total_bytes,
)

CNN = Network(
    [
        ml.Input((3, H, H)),
        ml.Conv2d(16, 3, padding=1),
        ml.MaxPool2d(2),
        ml.Conv2d(32, 3, padding=1),
        ml.MaxPool2d(2),
        ml.Flatten(),
        ml.Dense(10),
    ]
)


def test_affine_total_is_solved_exactly():
    """Training memory a*B + c fits floor((limit - c) / a) samples: solved, then checked."""
    memory = training_memory(CNN, optimizer="adam").total.subs(H, 32)
    per_sample, fixed = memory.coeff(B), memory.subs(B, 0)
    limit = 10**9
    assert max_batch(CNN, limit, optimizer="adam", H=32) == (limit - fixed) // per_sample


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=10**7, max_value=10**11), st.sampled_from([16, 32, 50, 64]))
def test_max_batch_is_exact_for_random_limits(limit, side):
    """For any limit, total(b) <= limit < total(b + 1), checked with exact integers."""
    total = compile_exact(training_memory(CNN, optimizer="adam").total.subs(H, side), ["B"])
    b = max_batch(CNN, limit, optimizer="adam", H=side)
    assert total(b) <= limit < total(b + 1)


@settings(max_examples=15, deadline=None)
@given(st.integers(min_value=10**6, max_value=10**10))
def test_max_image_side_with_floors_is_bisected_exactly(limit):
    """Memory over the image side H has floors (pooling): bisection, then the same exact check."""
    total = training_memory(CNN, optimizer="sgd").total.subs(B, 8)
    function = compile_exact(total, ["H"])
    if function(4) > limit:
        with pytest.raises(DoesNotFitError):
            max_value(total, "H", limit, start=4)
        return
    side = max_value(total, "H", limit, start=4)
    assert function(side) <= limit < function(side + 1)


def test_limits_are_bytes_or_labelled_sizes():
    """'80 GB' is 80 * 10^9 bytes and '24 GiB' is 24 * 2^30 bytes."""
    assert memory_limit("80 GB") == 80 * 10**9
    assert memory_limit("24 GiB") == 24 * 2**30
    with pytest.raises(EvaluationError):
        memory_limit(-5)


def test_batch_one_that_does_not_fit_says_so():
    """VGG-16's Adam states alone (138M x 16 bytes) exceed 2 GB: DoesNotFitError with both sizes."""
    net = vgg((64, "M"), image_size=224)
    with pytest.raises(DoesNotFitError) as error:
        max_batch(net, "2 GB", optimizer="adam")
    message = str(error.value)
    assert "B=1" in message and "2.00 GB" in message and "larger device" in message


def test_every_other_size_needs_a_value():
    """Solving for B over a network of symbolic side H asks for H."""
    with pytest.raises(EvaluationError, match="H"):
        max_batch(CNN, "1 GB", optimizer="adam")


def test_max_sequence_length_of_generation_is_capped_by_positions():
    """GPT-2 xl in fp16 on 24 GiB: 128 sequences fit 576 tokens; 32 fit all 1,024 positions."""
    memory = generation_memory(gpt2("xl"))
    short = max_sequence_length(memory, "24 GiB", B=128)
    assert memory.evaluate(B=128, S=short).total <= 24 * 2**30
    assert memory.evaluate(B=128, S=short + 1).total > 24 * 2**30
    assert max_sequence_length(memory, "24 GiB", B=32) == 1024


def test_quadratic_sequence_length_is_solved_and_checked():
    """GPT-2 training memory has S^2 terms (attention): the quadratic is solved, then checked."""
    net = gpt2("small")
    total = training_memory(net, optimizer="adam", precision="mixed-fp16").total.subs(B, 4)
    s = max_sequence_length(net, "8 GiB", optimizer="adam", precision="mixed-fp16", B=4)
    assert s < 1024
    assert total.subs(S, s) <= 8 * 2**30 < total.subs(S, s + 1)


def test_sensitivity_of_a_product_has_unit_elasticities():
    """For T = c * B * S every elasticity is 1: one percent more of either, one percent more T."""
    result = sensitivity(3 * B * S, B=8, S=1024)
    assert [r.elasticity for r in result.rows] == [1, 1]
    assert result["S"].step == 3 * 8


def test_gpt2_training_is_more_sensitive_to_sequence_than_to_batch():
    """Attention's S^2 makes S's elasticity exceed B's; the elasticities are exact derivatives."""
    result = sensitivity(gpt2("small"), optimizer="adam", B=8, S=1024)
    total = training_memory(gpt2("small"), optimizer="adam").total
    derivative = sp.diff(total, S).subs({B: 8, S: 1024})
    assert result["S"].derivative == derivative
    assert result.most_sensitive == "S"
    assert 1 < result["S"].elasticity < 2 and 0 < result["B"].elasticity < 1
    assert "elasticity" in result.table().text()


def test_compare_scenarios_tabulates_every_combination_consistently():
    """A comparison is the product of its options, each total matching a direct computation."""
    counts = ModelCounts.per_sample(parameters=10**8, activations=10**6, input_elements=10**4)
    table = compare_scenarios(
        counts,
        optimizers=("sgd", "adam"),
        precisions=("fp32", "mixed-fp16"),
        zero_stages=(0, 3),
        devices=8,
        limit="2 GB",
        B=4,
    )
    assert len(table.scenarios) == 8
    adam_zero3 = next(
        s
        for s in table.scenarios
        if (s.optimizer, s.precision, s.zero_stage) == ("adam", "mixed-fp16", 3)
    )
    states = zero_model_states(10**8, 8, 3).total
    activations = 4 * (10**6 * 2 * 2 + 10**4 * 4)
    assert adam_zero3.total == states + activations
    text = table.table("GB").text()
    assert "stage 3" in text and "fits 2.00 GB" in text


def test_compare_scenarios_refuses_checkpointing_without_layers():
    """Checkpointing needs a Network's layers: counts alone are refused."""
    counts = ModelCounts(parameters=1, activations=1, input_elements=1)
    with pytest.raises(UnsupportedError, match="Network"):
        compare_scenarios(counts, intervals=(3,))


def test_plot_memory_draws_the_curve_and_the_limit():
    """The memory plot draws memory against B, the limit, and the largest batch that fits."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from memtheory.plotting import plot_checkpointing_tradeoff, plot_memory

    ax = plot_memory(CNN, "B", range(1, 129), optimizer="adam", limit="20 MB", unit="MB", H=32)
    labels = [line.get_label() for line in ax.get_lines()]
    best = max_batch(CNN, "20 MB", optimizer="adam", H=32)
    assert labels == ["memory", "limit 20.00 MB", f"largest B = {best}"]
    assert ax.get_ylabel() == "memory (MB)"
    assert plot_checkpointing_tradeoff(9).get_ylabel().startswith("peak")
    matplotlib.pyplot.close("all")


# -- the largest value as a formula, and counting (moved from the exercises' own solver) ----------
TRAINING_QUESTION = ModelCounts.per_sample(
    parameters=19_072_984, activations=532_752, input_elements=9_000
)
"""The training-memory question's network (document 000): the question's own counts."""


def brute_force(slope, intercept, limit):
    """Return the largest b >= 0 with slope * b + intercept <= limit, by counting."""
    best = 0
    while slope * (best + 1) + intercept <= limit:
        best += 1
    return best


@pytest.mark.parametrize(
    ("slope", "intercept", "limit"),
    [(100, 50, 1000), (100, 50, 1050), (100, 50, 149), (100, 50, 150), (7, 0, 6), (3, 10, 5)],
)
def test_max_value_matches_counting(slope, intercept, limit):
    """The floor of the root is the largest batch, at the boundary too; none fitting raises."""
    expected = brute_force(slope, intercept, limit)
    if expected == 0:
        with pytest.raises(DoesNotFitError):
            max_value(slope * B + intercept, "B", limit)
    else:
        assert max_value(slope * B + intercept, "B", limit) == expected


@pytest.mark.parametrize(
    "total", [sp.Integer(5), -B + 100, B * H + 1], ids=["constant", "falling", "two"]
)
def test_max_value_refuses_totals_without_a_largest_batch(total):
    """A total that ignores B, falls with B, or has another free symbol is refused (ValueError)."""
    with pytest.raises(EvaluationError):
        max_value(total, "B", 1000)


M = sp.Symbol("M", integer=True, positive=True)


def test_formula_of_the_training_question_network_is_floor_of_the_root():
    """Adam on doc. 000: floor((M - 19,072,984 x 16) / ((2 x 532,752 + 9,000) x 4)); 4 GiB: 928."""
    total = training_memory(TRAINING_QUESTION, optimizer="adam").total
    formula = max_value_formula(total, "B", M)
    assert sp.simplify(formula - sp.floor((M - 19_072_984 * 16) / ((2 * 532_752 + 9_000) * 4))) == 0
    assert formula.subs(M, 4 * 2**30) == max_value(total, "B", 4 * 2**30) == 928


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=305_167_744 + 4_298_016, max_value=10**13),
    st.sampled_from(["adam", "sgd+momentum", "sgd", "rmsprop"]),
)
def test_affine_formula_agrees_with_max_value_at_any_limit(limit, optimizer):
    """floor((M - b)/a) at M = limit is max_value's answer, wherever one sample fits."""
    total = training_memory(TRAINING_QUESTION, optimizer=optimizer).total
    formula = max_value_formula(total, B, M)
    assert formula.subs(M, limit) == max_value(total, B, limit)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=3 * 2**30, max_value=2**40))
def test_quadratic_formula_agrees_with_max_value_at_any_limit(limit):
    """GPT-2 small at batch 8 is quadratic in S (attention): the larger root's floor is it."""
    total = training_memory(gpt2("small"), optimizer="adam").total.subs(B, 8)
    formula = max_value_formula(total, S, M)
    assert formula.subs(M, limit) == max_value(total, S, limit)


def test_formula_takes_a_breakdown_and_keeps_other_sizes_symbolic():
    """A network's memory, affine in B with floors of H in it, gives a formula in M and H."""
    memory = training_memory(CNN, optimizer="adam")
    formula = max_value_formula(memory, "B", M)
    assert formula.free_symbols == {M, H}
    assert formula.subs({H: 32, M: 10**9}) == max_batch(CNN, 10**9, optimizer="adam", H=32)
    assert max_value_formula(memory, "B", M, H=32).free_symbols == {M}


@pytest.mark.parametrize(
    ("total", "error"),
    [
        (sp.Integer(5), EvaluationError),
        (-B + 100, EvaluationError),
        (-(B**2) + 100 * B, EvaluationError),
        (B**3 + 1, UnsupportedError),
        (sp.floor(B / 2) * 10 + 1, UnsupportedError),
        (B**2 * H + 1, EvaluationError),
    ],
    ids=["constant", "falling", "concave", "cubic", "floor", "quadratic-with-another-size"],
)
def test_formula_refuses_totals_it_cannot_solve(total, error):
    """No formula for a total without B, falling in B, of degree > 2 or with floors, or unsized."""
    with pytest.raises(error):
        max_value_formula(total, "B", M)


def test_elasticity_never_exceeds_the_degree_of_the_total():
    """The StackExchange CNN's memory is at most quadratic in H, so its H-elasticity is at most 2.

    At H=50 the floors matter (25 -> 12); the elasticity must be that of one smooth
    function, not a relaxed derivative over the floored total (which gave 2.08).
    """
    from memtheory.whatif import sensitivity
    from memtheory.worked_examples import small_cnn_network

    for size in (50, 51, 64, 97):
        result = sensitivity(small_cnn_network(image_size=H), optimizer="adam", B=32, H=size)
        assert 0 < result["H"].elasticity <= 2
        assert 0 < result["B"].elasticity <= 1


# -- peak or total -----------------------------------------------------------------------
MLP = Network([ml.Input((64,)), ml.Dense(64), ml.ReLU(), ml.Dense(10)])


def test_by_peak_and_by_total_differ_under_autograd():
    """Under the autograd convention the traced peak and the sum of components differ."""
    options = {"optimizer": "adam", "convention": "autograd"}
    memory = training_memory(MLP, **options)
    peak = total_bytes(MLP, **options, by="peak")
    total = total_bytes(MLP, **options, by="total")
    assert (peak, total) == (memory.peak, memory.total)
    assert peak.subs(B, 32) != total.subs(B, 32)
    assert total_bytes(memory) == peak and total_bytes(memory, by="total") == total
    by_peak = max_batch(MLP, "1 MiB", **options)
    by_total = max_batch(MLP, "1 MiB", **options, by="total")
    assert by_peak != by_total
    assert by_peak == max_value(memory.peak, "B", "1 MiB")
    assert by_total == max_value(memory.total, "B", "1 MiB")


def test_by_peak_and_by_total_agree_under_breakdown():
    """Without a timeline (breakdown convention) the peak is the total: both choices agree."""
    peak = total_bytes(MLP, optimizer="adam", by="peak")
    assert peak == total_bytes(MLP, optimizer="adam", by="total")
    assert peak == training_memory(MLP, optimizer="adam").total
    assert max_batch(MLP, "1 MiB", optimizer="adam", by="peak") == max_batch(
        MLP, "1 MiB", optimizer="adam", by="total"
    )


def test_by_is_checked():
    """Only "peak" and "total" are choices; anything else is an unknown name."""
    with pytest.raises(UnknownNameError, match="peak"):
        total_bytes(MLP, optimizer="adam", by="max")  # type: ignore[arg-type]


def test_what_if_arguments_are_keyword_only_and_symbols_are_named_symbol():
    """optimizer= is keyword-only after the model; symbol= names the size to solve for."""
    with pytest.raises(TypeError):
        max_batch(CNN, "1 GB", "adam", H=32)  # type: ignore[misc]
    with pytest.raises(MissingArgumentError, match='optimizer="adam"'):
        max_batch(CNN, "1 GB", H=32)
    assert max_batch(CNN, "1 GB", optimizer="adam", symbol="B", H=32) == max_batch(
        CNN, "1 GB", optimizer="adam", H=32
    )
    assert max_sequence_length(gpt2("small"), "80 GB", optimizer="adam", symbol="S", B=1) == 1024


def test_public_names_stay_importable_from_the_package():
    """The whatif package re-exports its modules' public names, and memtheory re-exports those."""
    import memtheory
    import memtheory.whatif as whatif

    for name in whatif.__all__:
        assert getattr(whatif, name) is not None
    assert memtheory.max_batch is whatif.solve.max_batch
    assert memtheory.compare_scenarios is whatif.scenarios.compare_scenarios
    assert not hasattr(memtheory, "compare")
