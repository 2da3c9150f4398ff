"""The estimate's compiled code prints terms in the order sympy holds them, not sorted again.

Integer sums and products do not depend on the order, so the unsorted code computes what
the sorted code (sympy's printers' default) computes, to the byte, wherever it is evaluated.
"""

from __future__ import annotations

import itertools

import sympy as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memtheory import Conv2d, Dense, Flatten, Input, MaxPool2d, Network, training_memory
from memtheory.estimate.compiled import UNSORTED, CompiledFootprint
from memtheory.evaluation.integer_code import ExactPythonPrinter
from memtheory.models import gpt2
from memtheory.symbols import B, H, S


def _functions(expression: sp.Expr, names: str) -> tuple[object, object]:
    sorted_code = ExactPythonPrinter().doprint(expression)
    unsorted_code = ExactPythonPrinter(UNSORTED).doprint(expression)
    assert sorted(sorted_code) == sorted(unsorted_code)  # the same characters, reordered
    return (eval(f"lambda {names}: {sorted_code}"), eval(f"lambda {names}: {unsorted_code}"))


def test_a_transformers_peak_is_the_same_unsorted():
    """GPT-2 small's exact peak (a Max of sums in B and S): equal at every size tried."""
    peak = training_memory(gpt2("small"), optimizer="adamw", convention="autograd").peak
    assert peak.free_symbols == {B, S}
    ordered, unordered = _functions(peak, "B, S")
    for batch, sequence in itertools.product((1, 2, 3, 8, 31), (1, 7, 64, 1024)):
        assert unordered(batch, sequence) == ordered(batch, sequence)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 64), side=st.integers(16, 4096))
def test_a_pooled_cnns_floors_are_the_same_unsorted(batch, side):
    """Nested floors of a pooled CNN's peak: the compiled peak is the peak, at any size."""
    layers = [Input((3, H, H))]
    for i in range(12):
        layers.append(Conv2d(8, 3, padding=1))
        if i % 4 == 3:
            layers.append(MaxPool2d(2))
    memory = training_memory(Network([*layers, Flatten(), Dense(10)]), optimizer="adam",
                             convention="autograd")
    compiled = CompiledFootprint(memory)
    assert compiled.peak(B=batch, H=side) == int(memory.evaluate(B=batch, H=side).peak)


_LEAVES = st.one_of(st.integers(-50, 10**12).map(sp.Integer), st.sampled_from([B, S, H]))


def _trees(leaves: st.SearchStrategy[sp.Expr]) -> st.SearchStrategy[sp.Expr]:
    """Sums, products, whole powers, Max and Min of integers and sizes: a peak's shapes."""
    def grown(children: st.SearchStrategy[sp.Expr]) -> st.SearchStrategy[sp.Expr]:
        many = st.lists(children, min_size=2, max_size=4)
        return st.one_of(
            many.map(lambda args: sp.Add(*args)), many.map(lambda args: sp.Mul(*args)),
            many.map(lambda args: sp.Max(*args)), many.map(lambda args: sp.Min(*args)),
            st.tuples(children, st.integers(0, 3)).map(lambda pair: pair[0] ** pair[1]),
        )
    return st.recursive(leaves, grown, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(expression=_trees(_LEAVES), sizes=st.tuples(*[st.integers(1, 10**6)] * 3))
@example(expression=B * (S + 1), sizes=(3, 5, 7))  # a sum inside a product
@example(expression=(B + 2) ** 3 * S - 5, sizes=(3, 5, 7))
@example(expression=sp.Max(B, S) * (H + 2) + sp.Min(B * S, H**2 + 1) * 3, sizes=(9, 2, 4))
def test_code_written_directly_computes_what_the_printer_computes(expression, sizes):
    """``_source`` writes a polynomial's Max without sympy's printer: the same integers.

    Against ``ExactPythonPrinter`` (as ``_source`` printed every peak before) and sympy's
    own substitution, on random sums, products, powers, Max and Min of sizes.
    """
    from memtheory.estimate.compiled import _source
    from memtheory.evaluation.integer_code import polynomial_code

    names = ["B", "H", "S"]
    written = polynomial_code(expression)
    assert written is not None  # every such tree is written directly
    direct = eval(_source(expression, names))  # noqa: S307
    printed = eval(f"lambda B, H, S: ({ExactPythonPrinter(UNSORTED).doprint(expression)})")  # noqa: S307
    value = expression.subs(dict(zip((B, H, S), sizes, strict=True)))
    assert direct(*sizes) == printed(*sizes) == int(value)


def test_a_floor_or_a_fraction_is_left_to_the_printer():
    """What is not an integer polynomial's Max is printed by ExactPythonPrinter, as before."""
    from memtheory.estimate.compiled import _source
    from memtheory.evaluation.integer_code import polynomial_code

    for expression in (sp.floor(H / 2) * B, sp.Rational(1, 2) * B * (B + 1), sp.Max(B, H / 3)):
        assert polynomial_code(expression) is None
    assert _source(sp.floor(H / 2) * B, ["B", "H"]) == (
        f"lambda B, H: ({ExactPythonPrinter(UNSORTED).doprint(sp.floor(H / 2) * B)})")
