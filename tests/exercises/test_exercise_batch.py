"""The batch exercises (ch06, ch09) get their largest batch from memtheory.whatif, the one solver.

The solver itself (counting, the formula, refusals) is tested in tests/test_whatif.py.
"""

import itertools

import pytest
import sympy as sp

from memtheory import ModelCounts, training_memory
from memtheory.exercises import Params, find_variant, load_sets
from memtheory.exercises.model import Variant
from memtheory.symbols import B
from memtheory.whatif import max_batch, max_value

TRAINING_QUESTION = ModelCounts.per_sample(
    parameters=19_072_984, activations=532_752, input_elements=9_000
)
"""The training-memory question's network (document 000), with the question's own counts."""

BATCH_EXERCISES = ("ch06.q2", "ch06.q6", "ch06.q7", "ch09.q4")


def test_training_question_network_on_4_gib():
    """The training-memory question's network with Adam fits 928 images in 4 GiB.

    Per image: (2 x 532,752 activations + 9,000 inputs) x 4 bytes; fixed: 19,072,984 x 16 bytes.
    """
    total = training_memory(TRAINING_QUESTION, optimizer="adam").total
    derived = (4 * 2**30 - 19_072_984 * 16) // ((2 * 532_752 + 9_000) * 4)
    assert max_value(total, B, 4 * 2**30) == derived == 928
    assert find_variant("ch06.q2").expected == derived


def test_book_variant_agrees_with_max_batch():
    """ch06.q2's book answer is what memtheory.whatif.max_batch says for the same model and GPU."""
    assert find_variant("ch06.q2").expected == max_batch(
        TRAINING_QUESTION, "4 GiB", optimizer="adam"
    )


def test_formula_exercise_gives_the_number_exercise_at_4_gib():
    """ch06.q7's formula in M, at M = 4 GiB, is ch06.q2's answer (same model, same optimizer)."""
    formula = find_variant("ch06.q7").expected
    (memory,) = formula.free_symbols
    assert formula.subs(memory, 4 * 2**30) == find_variant("ch06.q2").expected


def test_vgg16_batch_is_chapter_6s_plan():
    """ch09.q4 (VGG-16, Adam, a card sold as 24 GB) answers what chapter 6's table plans.

    Chapter 6 plans with the autograd peak of the pytorch-fp32 recipe with Adam, on the card
    less memtheory's 1.5 GiB reserve (memtheory.gpus). The exercise used to grade the
    breakdown's total on the whole card (194), the count the chapters call an overcount;
    that answer, under the reserve, is now the named slip breakdown_for_autograd.
    """
    from memtheory.exercises import check
    from memtheory.gpus import usable_memory
    from memtheory.models import vgg16
    from memtheory.recipes import Setup

    setup = Setup.recipe("pytorch-fp32", optimizer="adam")
    usable = usable_memory("RTX 4090").usable  # sold as 24 GB
    planned = max_batch(vgg16(), usable, setup=setup)
    assert find_variant("ch09.q4").expected == planned
    breakdown = max_batch(vgg16(), usable, setup=setup, convention="breakdown")
    old = max_batch(vgg16(), "24 GiB", setup=setup, convention="breakdown")
    assert breakdown < planned and old != planned
    result = check("ch09.q4", breakdown)
    assert not result.passed and result.misconceptions == ("breakdown_for_autograd",)
    assert not check("ch09.q4", old).passed


@pytest.mark.parametrize("exercise_id", BATCH_EXERCISES)
def test_every_variant_fits_at_least_one_sample(exercise_id):
    """For every combination of parameters a batch of one fits, so no learner's answer is 'none'.

    max_value raises DoesNotFitError when nothing fits; the sets need no 0 for that case.
    """
    set_id, short = exercise_id.split(".")
    exercise = load_sets()[set_id].exercise(short)
    names = list(exercise.params)
    for combination in itertools.product(*exercise.params.values()):
        variant = Variant(set_id, exercise, "x", Params(zip(names, combination, strict=True)))
        if exercise_id == "ch06.q7":  # a formula in M: at least one image fits, it says
            assert variant.expected.has(sp.floor)
        else:
            assert variant.expected >= 1
