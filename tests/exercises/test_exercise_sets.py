"""The exercise sets: coverage, reference solutions score full marks, blanks score zero, variants.

The book's variant of chapter 8 is checked against the worked examples of
memtheory.worked_examples, which cite the source documents.
"""

import pytest

from memtheory.exercises import (
    MISCONCEPTIONS,
    Choice,
    Expression,
    Integer,
    Number,
    Quantity,
    find_variant,
    grade_variant,
    load_sets,
)
from memtheory.units import unit_bytes
from memtheory.worked_examples import worked_example

SEEDS = (None, "alice", 7, "bob")
ALL_IDS = [full for s in load_sets().values() for full in s.ids]


def test_one_set_per_chapter_and_enough_exercises(sets):
    """Chapters 1 to 8 each have a set, and there are at least 60 exercises in all."""
    assert {f"ch0{n}" for n in range(1, 9)} <= set(sets)
    assert len(sets) >= 8
    assert sum(len(s.exercises) for s in sets.values()) >= 60
    assert all(len(s.exercises) >= 5 for s in sets.values())


def test_every_answer_kind_is_used(sets):
    """Integers, sizes with units, numbers, formulas and choices all appear."""
    kinds = {type(e.answer) for s in sets.values() for e in s.exercises}
    assert {Integer, Quantity, Number, Expression, Choice} <= kinds


def test_every_misconception_is_used_by_some_exercise(sets):
    """Each named misconception is listed by at least one exercise."""
    used = {m for s in sets.values() for e in s.exercises for m in e.misconceptions}
    assert used == set(MISCONCEPTIONS)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_reference_solution_scores_full_marks(exercise_id, seed):
    """The reference answer, written as a learner would, gets every point (nbgrader validate)."""
    variant = find_variant(exercise_id, seed)
    result = grade_variant(variant, variant.kind.solution_text(variant.expected))
    assert result.status == "correct", (exercise_id, seed, result.feedback)
    assert result.score == variant.exercise.points


@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_blank_answer_scores_zero(exercise_id):
    """An empty answer scores nothing and says so (nbgrader --invert)."""
    result = grade_variant(find_variant(exercise_id, "alice"), "")
    assert (result.status, result.score) == ("unanswered", 0)
    assert "empty" in result.feedback


@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_question_is_filled_and_says_how_to_answer(exercise_id):
    """The question has no unfilled placeholder, and a size question names its unit."""
    variant = find_variant(exercise_id, "alice")
    assert "{" not in variant.question and "}" not in variant.question
    if isinstance(variant.kind, Quantity):
        assert f"Answer in {variant.kind.unit}" in variant.question
        assert "%" in variant.question


@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_variants_are_reproducible(exercise_id):
    """The same seed gives the same numbers, question and answer."""
    first, second = find_variant(exercise_id, "carol"), find_variant(exercise_id, "carol")
    assert first.params == second.params
    assert first.question == second.question
    assert first.kind.matches(first.expected, second.expected)


@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_seeds_give_other_numbers_than_the_book(exercise_id):
    """A parameterised exercise gets numbers other than the book's for every seed, and varies."""
    variant = find_variant(exercise_id, None)
    if not variant.exercise.parameterised:
        pytest.skip("not parameterised")
    drawn = [find_variant(exercise_id, seed).params for seed in ("alice", "bob", "carol", 1, 2)]
    assert all(params != variant.params for params in drawn)
    assert len({tuple(sorted(p.items())) for p in drawn}) >= 2


@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_listed_misconceptions_are_diagnostic_in_the_book_variant(exercise_id):
    """Each misconception an exercise lists leads to a wrong answer for the book's numbers."""
    variant = find_variant(exercise_id, None)
    found = {m.name for m in variant.mistaken_answers()}
    assert set(variant.exercise.misconceptions) <= found


@pytest.mark.parametrize(
    ("exercise_id", "document_figure", "unit"),
    [
        ("ch08.q1", ("000", "answer: total"), "MiB"),
        ("ch08.q2", ("000", "question: per-image gradients"), "MiB"),
        ("ch08.q3", ("001", "P2 activations per image"), None),
        ("ch08.q5", ("001", "batch 64 total in bytes"), "MB"),
        ("ch08.q6", ("002", "observed memory"), "GiB"),
        ("ch08.q7", ("003", "training with Adam, activations aside"), "MB"),
        ("ch08.q8", ("004", "BERT-base: total"), "MiB"),
    ],
)
def test_book_variant_of_chapter_8_is_the_worked_example(exercise_id, document_figure, unit):
    """The book's numbers of chapter 8 reproduce each document's exact worked-example figure."""
    document, label = document_figure
    exact = worked_example(document).figure(label).exact
    expected = find_variant(exercise_id, None).expected
    assert expected == (exact if unit is None else exact / unit_bytes(unit))
