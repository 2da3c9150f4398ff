"""Error messages quote a short prefix of what the user gave, never all of it (issue 27).

One refusal echoed a 100,000-element input in full. Every message that shows a user's value
goes through memtheory._shown.shown.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory._shown import SHOWN_LIMIT, shown
from memtheory.models import from_config
from memtheory.symbols import B, H

LONGEST = 600
"""Most characters a refusal of a huge input may have: its own words plus a short prefix."""

HUGE = [
    list(range(100_000)),
    "7" * 100_000,
    tuple("ab" * 50_000),
    {str(i): i for i in range(100_000)},
    10**5000,
]


def calls(value):
    """Public entry points that refuse ``value`` and quote it."""
    return [
        lambda: mt.Conv2d(value, 3),
        lambda: mt.MaxPool2d(2, stride=value),
        lambda: mt.Dropout(value),
        lambda: mt.Network([mt.Input((3, 8, 8))], name=value),
        lambda: mt.optimizer(value),
        lambda: mt.precision(value),
        lambda: mt.training_memory(mt.Network([mt.Input((4,)), mt.Dense(2)]), optimizer=value),
        lambda: mt.evaluate(B * H, B=value, H=2),
        lambda: mt.evaluate(value, B=1),
        lambda: mt.compile_exact(B * H, value),
        lambda: mt.format_bytes(2**20, "MiB", digits=value),
        lambda: from_config({**dict(mt.models.PRESETS["llama-2-7b"].config), "mlp_bias": value}),
        lambda: from_config({**dict(mt.models.PRESETS["llama-2-7b"].config), "head_dim": value}),
        lambda: mt.optimizer("adamw", weight_decay=value),
    ]


@pytest.mark.parametrize("value", HUGE, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("index", range(len(calls(0))))
def test_a_refusal_of_a_huge_input_is_short(value, index):
    """Each entry point refuses a 100,000-element input in a few hundred characters."""
    call = calls(value)[index]
    try:
        call()
    except mt.MemtheoryError as error:
        message = str(error)
    else:
        pytest.skip("accepted: nothing to quote")  # e.g. a huge whole number is a valid size
    assert len(message) <= LONGEST, message[:LONGEST]


@settings(max_examples=50, deadline=None)
@given(
    st.one_of(
        st.text(min_size=0, max_size=5000),
        st.lists(st.integers(), max_size=2000),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=200),
        st.integers(),
        st.floats(allow_nan=True),
    )
)
def test_shown_is_short_and_exact_when_short(value):
    """shown(v) is repr(v) whenever that is short, and about SHOWN_LIMIT characters otherwise."""
    text = shown(value)
    if len(repr(value)) <= SHOWN_LIMIT:
        assert text == repr(value)
    assert len(text) <= SHOWN_LIMIT + 40


def test_shown_says_how_long_the_input_was():
    """A cut value names its length, so the reader knows it was cut."""
    assert shown(list(range(100_000))).endswith("(a list of 100000 items)")
    assert shown("x" * 12_345).endswith("(12345 characters)")


def test_shown_survives_a_failing_repr():
    """A value whose repr raises is named by its type, and the real error still comes out."""

    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert shown(Broken()).startswith("<Broken ")


def test_a_huge_size_outside_a_traced_results_condition_is_warned_about_in_short(monkeypatch):
    """evaluate(B=10**5000) where a traced result in the process needs B < 10**10: a short warning.

    The warning quoted the size in decimal, which Python refuses past 4,300 digits: the
    evaluation raised ValueError whenever any traced result constrained B (test order decided).
    """
    from memtheory.constraints import carried
    from memtheory.constraints.size_constraint import SizeConstraint

    monkeypatch.setattr(carried, "_HELD", [False])
    monkeypatch.setattr(carried, "_HELD_SIZES", {})
    carried.note_held([SizeConstraint(10**10 - B, "B < 10**10 (a traced result's condition)")])
    with pytest.warns(mt.errors.SizeWarning) as caught:
        value = mt.evaluate(B * H, B=10**5000, H=2)
    assert value == 2 * 10**5000
    message = str(caught[0].message)
    bits = (10**5000).bit_length()
    assert message.startswith(f"B=<an int of {bits} bits> is outside B < 10**10")
    assert len(message) <= LONGEST + 200  # the warning's own advice is longer than a refusal
