"""The three exact evaluation paths: sympy evaluate, compile_exact and evaluate_grid."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.evaluation import replaced, symbols_by_name
from memtheory.evaluation.overflow import INT64_SAFE_LIMIT, magnitude_bound
from memtheory.sliding_window import pool_output_size
from memtheory.symbols import B, H, W, size_symbol


def all_paths(expression, **values):
    """The value of ``expression`` by sympy, compile_exact, int64 grid and object grid."""
    names = sorted(values)
    return (
        mt.evaluate(expression, **values),
        mt.compile_exact(expression, names)(*(values[n] for n in names)),
        mt.evaluate_grid(expression, **values).item(),
        mt.evaluate_grid(expression, dtype=object, **values).item(),
    )


# -- the int64 limit ----------------------------------------------------------------------
def test_safe_limit_is_half_of_int64():
    """The safe limit is 2**62: half of int64's largest magnitude 2**63 (numpy's iinfo)."""
    assert INT64_SAFE_LIMIT == (int(np.iinfo(np.int64).max) + 1) // 2


def test_grid_refuses_results_beyond_the_int64_safe_limit():
    """B * 2**61 * 4 at B=1 is 2**63, past the limit: int64 raises EvaluationOverflowError."""
    with pytest.raises(mt.errors.EvaluationOverflowError) as error:
        mt.evaluate_grid(B * 2**61 * 4, B=np.array([1, 2]))
    assert "dtype=object" in str(error.value)


def test_grid_refuses_exactly_the_limit():
    """B * 2**62 at B=1 reaches the limit itself and is refused."""
    with pytest.raises(mt.errors.EvaluationOverflowError):
        mt.evaluate_grid(B * 2**62, B=1)


def test_grid_accepts_just_below_the_limit():
    """B * (2**62 - 2**10) at B=1 fits (and float64 holds it exactly, so the estimate agrees)."""
    below = 2**62 - 2**10
    result = mt.evaluate_grid(B * below, B=np.array([1]))
    assert result.dtype == np.int64
    assert result.tolist() == [below]


def test_object_grid_is_exact_beyond_int64():
    """dtype=object gives the exact Python integer 2**63 * B, the same as sympy."""
    expression = B * 2**61 * 4
    batches = np.array([1, 3, 2**40], dtype=object)
    result = mt.evaluate_grid(expression, B=batches, dtype=object)
    assert result.dtype == object
    assert result.tolist() == [int(mt.evaluate(expression, B=b)) for b in (1, 3, 2**40)]
    assert result.tolist() == [2**63, 3 * 2**63, 2**103]


def test_grid_refuses_an_intermediate_that_wraps_around():
    """floor(B*H / 2**62) at B=2**30, H=2**40 is 2**8, but B*H = 2**70 wraps in int64: refused."""
    expression = sp.floor(B * H / 2**62)
    assert mt.evaluate(expression, B=2**30, H=2**40) == 2**8
    with pytest.raises(mt.errors.EvaluationOverflowError):
        mt.evaluate_grid(expression, B=2**30, H=2**40)
    assert mt.evaluate_grid(expression, B=2**30, H=2**40, dtype=object).item() == 2**8


def test_grid_refuses_an_input_too_large_for_int64():
    """A Python integer input of 2**63 cannot become int64; the error says to use dtype=object."""
    with pytest.raises(mt.errors.EvaluationOverflowError, match="dtype=object"):
        mt.evaluate_grid(B + 1, B=np.array([2**63], dtype=object))


# -- exact rational coefficients ----------------------------------------------------------
@pytest.mark.parametrize("side", [1, 2, 3, 10, 99, 12_345])
def test_triangular_number_is_exact_on_every_path(side):
    """H*(H+1)/2 equals the brute-force sum 1 + 2 + ... + H on all four paths."""
    expected = sum(range(1, side + 1))
    assert all_paths(H * (H + 1) / 2, H=side) == (expected,) * 4


@pytest.mark.parametrize("side", [1, 4, 17, 1000])
def test_sum_of_squares_times_batch_is_exact(side):
    """B*H*(H+1)*(2H+1)/6 (expanded by sympy into sixths) equals B * sum of i**2, brute force."""
    expression = sp.expand(B * H * (H + 1) * (2 * H + 1) / 6)
    assert any(isinstance(c, sp.Rational) and c.q != 1 for c in expression.atoms(sp.Rational))
    expected = 7 * sum(i * i for i in range(1, side + 1))
    assert all_paths(expression, B=7, H=side) == (expected,) * 4


def test_huge_rational_is_exact_in_python_integers():
    """At H = 10**30 (a 199-bit answer) compile_exact and object grids are exact; int64 refuses."""
    side = 10**30
    expected = side * (side + 1) // 2
    expression = H * (H + 1) / 2
    assert mt.compile_exact(expression)(side) == expected
    assert mt.evaluate_grid(
        expression, H=np.array([side], dtype=object), dtype=object
    ).tolist() == [expected]
    with pytest.raises(mt.errors.EvaluationOverflowError):
        mt.evaluate_grid(expression, H=np.array([side], dtype=object))


def test_grid_over_rationals_matches_brute_force_elementwise():
    """A broadcast grid of H*(H+1)/2 * B equals B times the brute-force sum at every point."""
    sides = np.arange(1, 60)
    batches = np.array([[1], [5], [64]])
    grid = mt.evaluate_grid(B * H * (H + 1) / 2, B=batches, H=sides)
    assert grid.shape == (3, 59)
    expected = [[b * sum(range(1, h + 1)) for h in sides.tolist()] for b in (1, 5, 64)]
    assert grid.tolist() == expected


# -- ceil mode: Min() over arrays ---------------------------------------------------------
def pytorch_ceil_size(n, k, s, p):
    """torch.nn.MaxPool2d docs, ceil_mode=True, with Pool.h's last-window-starts-inside rule."""
    out = -(-(n + 2 * p - (k - 1) - 1) // s) + 1
    if (out - 1) * s >= n + p:
        out -= 1
    return out


@pytest.mark.parametrize(
    ("kernel", "stride", "padding"), [(2, 3, 1), (3, 2, 1), (2, 2, 0), (3, 4, 1)]
)
def test_ceil_mode_min_evaluates_on_numpy_arrays(kernel, stride, padding):
    """A ceil-mode output size on arrays of sides matches PyTorch's rule elementwise.

    No Min() with whole sizes: where padding + stride exceeds the kernel the last window's
    start is always the smaller term, otherwise the rounded-up size is.
    """
    expression = pool_output_size(H, kernel, stride, padding, ceil_mode=True)
    assert not expression.has(sp.Min)
    assert expression.has(sp.floor) == (padding + stride > kernel)
    sides = np.arange(max(1, kernel - 2 * padding), 200)
    expected = [pytorch_ceil_size(n, kernel, stride, padding) for n in sides.tolist()]
    assert mt.evaluate_grid(expression, H=sides).tolist() == expected
    assert mt.evaluate_grid(expression, H=sides, dtype=object).tolist() == expected
    compiled = mt.compile_exact(expression)
    assert [compiled(n) for n in sides.tolist()] == expected


def test_ceil_rule_branch_is_exercised():
    """Kernel 2, stride 3, padding 1 hits PyTorch's decrement: n=5 gives 3, then 2."""
    rounded_up = -(-(5 + 2 * 1 - 1 - 1) // 3) + 1
    assert rounded_up == 3 and (rounded_up - 1) * 3 >= 5 + 1
    assert pool_output_size(5, 2, 3, 1, ceil_mode=True) == rounded_up - 1


# -- partial substitution and argument handling -------------------------------------------
def test_partial_substitution_keeps_the_other_symbols():
    """evaluate(B*H*W, B=2) leaves H and W symbolic: 2*H*W."""
    result = mt.evaluate(B * H * W, B=2)
    assert result == 2 * H * W
    assert result.free_symbols == {H, W}
    assert mt.evaluate(result, H=3, W=5) == 30


def test_partial_substitution_of_a_network_total():
    """Substituting only H in a training total leaves an affine expression in B alone."""
    net = mt.Network([mt.Input((3, H, H)), mt.Conv2d(4, 3, stride=2), mt.Flatten(), mt.Dense(2)])
    total = mt.training_memory(net, optimizer="adam").total
    partial = mt.evaluate(total, H=9)
    assert partial.free_symbols == {B}
    assert mt.evaluate(partial, B=4) == mt.evaluate(total, B=4, H=9)


def test_compile_exact_argument_order_and_missing_names():
    """compile_exact follows the given order, and refuses a name list that misses a symbol."""
    function = mt.compile_exact(B - 2 * H, ["H", "B"])
    assert function(1, 10) == 10 - 2 * 1
    assert mt.compile_exact(B - 2 * H)(10, 1) == 10 - 2 * 1  # sorted names: B, H
    with pytest.raises(mt.errors.EvaluationError, match="H"):
        mt.compile_exact(B * H, ["B"])


def test_evaluate_grid_broadcasts():
    """B of shape (3,) and H of shape (2, 1) broadcast to a (2, 3) grid of B*H."""
    grid = mt.evaluate_grid(B * H, B=np.array([1, 2, 3]), H=np.array([[10], [20]]))
    assert grid.tolist() == [[b * h for b in (1, 2, 3)] for h in (10, 20)]


@pytest.mark.parametrize(
    ("arrays", "word"),
    [
        ({"B": np.array([1.5])}, "whole numbers"),
        ({"B": np.array([True])}, "whole numbers"),
        ({"B": np.array(["3"])}, "whole numbers"),
        ({}, "needs values for B"),
        ({"B": 1, "X": 2}, "'X'"),
    ],
)
def test_evaluate_grid_rejects_bad_arrays(arrays, word):
    """Non-integer, boolean or text arrays, or a missing or unknown symbol raise EvaluationError."""
    with pytest.raises(mt.errors.EvaluationError, match=word):
        mt.evaluate_grid(2 * B, **arrays)


@pytest.mark.parametrize("batch", [3, np.array(3), np.array([3])])
def test_object_grid_of_a_maximum_beyond_int64_at_one_point(batch):
    """dtype=object at a single point: Max of integers past int64 is exact, not OverflowError."""
    expression = sp.Max(2**70 * B, 3 * 2**70 + H)
    expected = mt.evaluate(expression, B=3, H=5)
    grid = mt.evaluate_grid(expression, B=batch, H=5, dtype=object)
    assert grid.shape == np.shape(batch) and grid.item() == expected


def test_evaluate_grid_rejects_other_dtypes():
    """Only int64 and object are offered: float64 would lose exactness silently."""
    with pytest.raises(mt.errors.EvaluationError, match="int64"):
        mt.evaluate_grid(2 * B, B=1, dtype="float64")


def test_whole_floats_are_accepted_as_sizes():
    """B=4.0 is a whole number and evaluates like B=4, on the grid and in sympy."""
    assert mt.evaluate(3 * B, B=4.0) == 12
    assert mt.evaluate_grid(3 * B, B=np.array([4.0])).tolist() == [12]


def test_evaluate_grid_runs_the_compiled_code_once_when_no_step_can_overflow(monkeypatch):
    """A grid whose bound stays in int64 is computed once (no float64 pass); agreeing exactly."""
    from memtheory.evaluation import overflow
    from memtheory.evaluation.numpy_code import NumPyCode, numpy_function

    calls = []
    expression = 3 * B * sp.floor(H / 2) ** 2 + sp.Max(B * H, 7 * H) + 5
    compiled = numpy_function(sp.sympify(expression), ("B", "H"))

    def counted(expr, names):
        def function(*values):
            calls.append(values[0].dtype)
            return compiled.function(*values)

        return NumPyCode(compiled.expression, function)

    monkeypatch.setattr(overflow, "numpy_function", counted)
    batch, size = np.arange(1, 50).reshape(-1, 1), np.arange(1, 300).reshape(1, -1)
    grid = mt.evaluate_grid(expression, B=batch, H=size)
    assert calls == [np.dtype(np.int64)]
    for b, h in [(1, 1), (7, 33), (49, 299)]:
        assert grid[b - 1, h - 1] == mt.evaluate(expression, B=b, H=h)


@settings(max_examples=50, deadline=None)
@given(
    coefficients=st.lists(st.integers(-(10**6), 10**6), min_size=4, max_size=4),
    b=st.integers(1, 10**4),
    h=st.integers(1, 10**4),
)
def test_magnitude_bound_bounds_every_numerator_the_integer_code_computes(coefficients, b, h):
    """The bound covers the expression and the scaled numerators inside its floors."""
    c0, c1, c2, c3 = coefficients
    inner = sp.Rational(c1, 3) * H + c2
    expression = c0 * B * sp.floor(inner / 2) ** 2 + sp.ceiling(c3 * B / 7) + sp.Max(B, H)
    bound = magnitude_bound(expression, {"B": b, "H": h})
    point = {B: b, H: h}
    # 7 * ceiling(c3*B/7) is a numerator the code computes only while c3/7 is a fraction:
    # for c3 = 2835 sympy writes ceiling(405*B) as 405*B, and nothing is divided.
    rounded = [7 * sp.ceiling(c3 * B / 7)] if c3 % 7 else []
    # 6 * inner likewise only while the floor is there: with c0 = 0 (or c1 = 0, a constant
    # floor sympy evaluates) the expression holds no floor and the code divides nothing
    floored = [6 * inner] if expression.has(sp.floor) else []
    for node in (expression, *floored, *rounded):
        assert abs(node.xreplace(point)) <= bound


_SHARED = sp.floor(sp.floor(H / 2) / 2)


@given(
    st.lists(
        st.sampled_from(
            [
                B * _SHARED**2 + 40,
                3 * B * sp.floor(H / 2) + _SHARED,
                sp.Max(B * H, _SHARED + 7),
                B + 1,
                sp.Integer(12),
            ]
        ),
        max_size=6,
    ),
    st.dictionaries(st.sampled_from([B, H]), st.integers(1, 10**6), max_size=2),
)
def test_replaced_is_xreplace_with_shared_work(expressions, mapping):
    """replaced() gives exactly what xreplace gives, expression by expression."""
    rule = {symbol: sp.Integer(value) for symbol, value in mapping.items()}
    got = replaced(expressions, rule)
    expected = [e.xreplace(rule) for e in expressions]
    assert got == expected
    assert [type(g) for g in got] == [type(e) for e in expected]


@given(
    st.lists(st.fractions(max_denominator=50).filter(lambda f: abs(f) < 10**6), max_size=4),
    st.integers(-(2**90), 2**90),
    st.integers(-7, 7),
)
def test_replaced_sums_and_products_of_rationals_as_sympy_does(coefficients, b, h):
    """Sums and products left all-rational (fractions, huge integers) are sympy's own numbers."""
    terms = [sp.Rational(f.numerator, f.denominator) * B for f in coefficients]
    expressions = [sp.Add(*terms, H), sp.Mul(*terms, H), B * H + sp.Rational(1, 3), B / H]
    rule = {B: sp.Integer(b), H: sp.Integer(h or 1)}
    got = replaced(expressions, rule)
    expected = [e.xreplace(rule) for e in expressions]
    assert got == expected
    assert [type(g) for g in got] == [type(e) for e in expected]


def test_replaced_keeps_sums_unevaluated_where_sympy_does():
    """Under ``evaluate(False)`` a sum of numbers stays the unevaluated sum xreplace builds."""
    with sp.evaluate(False):
        expression = sp.Add(B, H, 2)
        got = replaced([expression], {B: sp.Integer(3), H: sp.Integer(4)})
        expected = expression.xreplace({B: sp.Integer(3), H: sp.Integer(4)})
    assert got == [expected] and isinstance(got[0], sp.Add)


def test_evaluate_deep_timeline_matches_xreplace_moment_by_moment():
    """A deep pooled CNN's autograd moments, evaluated, are each moment's own xreplace."""
    layers: list[object] = [mt.Input((3, H, H))]
    for i in range(40):
        layers.append(mt.Conv2d(2, 3, padding=1))
        if (i + 1) % 5 == 0:
            layers.append(mt.MaxPool2d(2))
    memory = mt.training_memory(
        mt.Network([*layers, mt.Flatten(), mt.Dense(3)]), optimizer="adam", convention="autograd"
    )
    evaluated = memory.evaluate(H=2**9 + 3)
    assert list(evaluated.timeline.values()) == [
        v.xreplace({H: 2**9 + 3}) for v in memory.timeline.values()
    ]
    assert evaluated.evaluate(B=3).peak == max(
        v.xreplace({H: 2**9 + 3, B: 3}) for v in memory.timeline.values()
    )
    assert symbols_by_name(memory.timeline.values()) == {"B": B, "H": H}


def test_a_warning_for_one_network_of_two_points_at_the_caller():
    """evaluate_grid and compile_exact warn (one network refuses, one takes it) at this line."""
    side = size_symbol("evaluation_warning_side")
    counts = [
        mt.ModelCounts(
            parameters=3 * side + 11,
            activations=7 * side**2 * B,
            input_elements=side**2 * B,
            constraints={label: side - shift},
        )
        for label, shift in (("tight", 4), ("loose", 2))
    ]
    activations = counts[0].activations
    assert activations == counts[1].activations  # one expression, handed out by both
    calls = [
        lambda: mt.evaluate_grid(activations, B=1, evaluation_warning_side=np.array([5, 3])),
        lambda: mt.compile_exact(activations, ["B", side.name])(1, 3),
    ]
    for call in calls:
        with pytest.warns(mt.errors.SizeWarning, match="tight") as caught:
            call()
        assert [w.filename for w in caught] == [__file__]
