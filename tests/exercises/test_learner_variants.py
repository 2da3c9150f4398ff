"""ch04.q6 and ch09.q5 vary per learner; each variant's answer is recomputed here independently."""

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.exercises.book import book_exercises
from memtheory.exercises.derivation import derive
from memtheory.exercises.loader import find_variant
from memtheory.exercises.selfcheck import selfcheck_data
from memtheory.symbols import H

LEARNERS = ("alice", "bob", "carol", "dmitri", "eun-ji", "farah", "gustavo", "hana")


@pytest.mark.parametrize("exercise_id", ["ch04.q6", "ch09.q5"])
def test_learners_get_different_numbers(exercise_id):
    """Two learners get different numbers and answers, and neither gets the book's."""
    book = find_variant(exercise_id)
    variants = [find_variant(exercise_id, learner) for learner in LEARNERS]
    assert all(v.params != book.params for v in variants)
    assert len({str(v.expected) for v in variants}) >= 2
    assert len({v.question for v in variants}) >= 2


def _activation_ratio(params):
    """Training keeps each activation and its gradient (x2) for `batch` images; serving, one."""
    fp32 = 4
    training = 2 * params["activations"] * fp32 * params["batch"]
    serving = params["activations"] * fp32 * params["served"]
    return sp.Rational(training, serving)


@settings(max_examples=25, deadline=None)
@given(st.text(min_size=1, max_size=12))
def test_training_over_inference_is_twice_the_batch_ratio(learner):
    """ch04.q6: every learner's answer is the activation bytes of training over serving."""
    variant = find_variant("ch04.q6", learner)
    assert variant.expected == _activation_ratio(variant.params)
    assert f"batch {variant.params['batch']}" in variant.question
    assert f"batch {variant.params['served']}" in variant.question
    # the x2 is the breakdown's count, which chapter 4 calls an overcount: the question says so
    assert "breakdown convention" in variant.question and "overcount" in variant.question
    mistakes = {m.name: m.value for m in variant.mistaken_answers()}
    assert mistakes["forgot_x2"] == variant.expected / 2  # the gradients left out
    assert mistakes["activations_per_image"] == 2  # the batches left out: the bare x2


def _floored_height(pools):
    """Each 2x2/2 pooling floors the height's halving; padded 3x3 convolutions keep it."""

    def height(h):
        for _ in range(pools):
            h //= 2
        return h

    return height


@pytest.mark.parametrize("learner", [None, *LEARNERS])
def test_height_after_a_pooling_is_the_floored_halvings(learner):
    """ch09.q5: the formula gives, at every side tried, the height after that many poolings."""
    variant = find_variant("ch09.q5", learner)
    pools = variant.params["pools"]
    ordinal = ("first", "second", "third", "fourth", "fifth")[pools - 1]
    assert f"its {ordinal} pooling" in variant.question
    height = _floored_height(pools)
    for side in (*range(1, 70), 223, 224, 225, 1023):
        assert variant.expected.subs(H, side) == height(side), side
    assert variant.kind.matches(sp.floor(H / 2**pools), variant.expected)


@pytest.mark.parametrize("exercise_id", ["ch04.q6", "ch09.q5"])
def test_worked_solution_and_self_check_follow_the_variant(exercise_id):
    """A learner's worked solution ends on their answer; the page's box checks the book's."""
    book = find_variant(exercise_id)
    for learner in LEARNERS[:3]:
        variant = find_variant(exercise_id, learner)
        lines = derive(variant).lines
        assert lines[-1] == f"Answer: {variant.kind.display(variant.expected)}"
        data = selfcheck_data(variant)  # what a page for this variant would check against
        if variant.kind.name == "number":
            assert sp.Rational(data["expected"]) == variant.expected
            assert any(f"Substitute B = {variant.params['batch']}" in line for line in lines)
        else:  # a formula: the page compares its values at the grader's sample points
            assert data["shown"] == variant.kind.display(variant.expected)
            height = _floored_height(variant.params["pools"])
            for point, value in zip(data["points"], data["expected"], strict=True):
                assert value == height(point["H"]), point
    set_id, short = exercise_id.split(".")
    (shown,) = book_exercises(set_id, [short])  # the book: its own numbers
    assert f'data-exercise="{exercise_id}"' in shown.check
    assert f"`{book.kind.display(book.expected)}`" in shown.solution or (
        f"**{book.kind.display(book.expected)}**" in shown.solution
    )
    assert selfcheck_data(book)["shown"] == book.kind.display(book.expected)
