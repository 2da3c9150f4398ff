"""Set ch19 (your own model): book answers recomputed by hand from the questions' numbers.

The generic checks (reference answers, blanks, misconceptions recognised) run
over every set elsewhere; the answers of q1 and q2 are also compared with a
real trace of PyTorch modules in tests/pytorch/test_ch19_trace_set.py.
"""

from fractions import Fraction

from memtheory.exercises import find_variant, load_sets
from memtheory.exercises.steps_trace import TRACE_MISCONCEPTIONS

GIB, MIB = 2**30, 2**20
RESERVE = Fraction(3, 2) * GIB  # memtheory.gpus.DEFAULT_RESERVE, stated in its docstring


def test_set_has_six_or_more_exercises_of_several_kinds():
    """Six or more exercises, three kinds of answer at least."""
    exercises = load_sets()["ch19"].exercises
    assert len(exercises) >= 6
    assert len({type(e.answer).__name__ for e in exercises}) >= 3


def test_misconceptions_are_registered_and_used():
    """Every chapter-19 misconception is listed by some exercise."""
    used = {m for e in load_sets()["ch19"].exercises for m in e.misconceptions}
    assert {m.name for m in TRACE_MISCONCEPTIONS} <= used


def test_q1_batchnorm_keeps_its_input_and_two_statistics():
    """(8, 16, 32, 32) fp32: the input plus a mean and an inverse std per channel."""
    assert find_variant("ch19.q1").expected == 4 * (8 * 16 * 32 * 32 + 2 * 16)


def test_q2_block_parameters_by_hand():
    """Two 3x3 convolutions 16 -> 16 without bias, two BatchNorms with scale and shift."""
    assert find_variant("ch19.q2").expected == 2 * (16 * 16 * 9) + 2 * (2 * 16)


def test_q3_q4_largest_batch_by_hand():
    """RTX 4090: 24 GiB less the reserve; the peak 48 MiB per image plus 500 MiB."""
    room = 24 * GIB - RESERVE
    fits = int((room - 500 * MIB) // (48 * MIB))
    assert find_variant("ch19.q3").expected == fits
    assert find_variant("ch19.q4").expected == min(fits, 16 - 1) == 15


def test_q5_crossover_by_hand():
    """96 S^2 >= 20176 S from S = ceil(20176 / 96) on."""
    assert find_variant("ch19.q5").expected == -(-20176 // 96) == 211


def test_q7_budget_of_a_24_gib_card():
    """24 GiB less the 1.5 GiB reserve."""
    assert find_variant("ch19.q7").expected == Fraction(24 * GIB - RESERVE, GIB)


def test_variants_differ_between_learners():
    """Two learners get different answers for most exercises."""
    ids = [i for i in load_sets()["ch19"].ids if i != "ch19.q6"]
    differ = sum(
        not find_variant(i, "ada").kind.matches(
            find_variant(i, "ada").expected, find_variant(i, "bob").expected
        )
        for i in ids
    )
    assert differ >= len(ids) // 2
