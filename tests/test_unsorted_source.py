"""The estimate's compiled code prints terms in the order sympy holds them, not sorted again.

Integer sums and products do not depend on the order, so the unsorted code computes what
the sorted code (sympy's printers' default) computes, to the byte, wherever it is evaluated.
"""

from __future__ import annotations

import itertools

import sympy as sp
from hypothesis import given, settings
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
