"""Set ch20 (measuring on a GPU): book answers derived by hand from the allocator's stated rules.

Rules (PyTorch, c10/cuda/CUDACachingAllocator.cpp and the "CUDA semantics" notes): blocks are
multiples of 512 bytes; requests up to 1 MiB use 2 MiB segments, larger ones under 10 MiB use
20 MiB segments, and from 10 MiB segments are the request rounded up to 2 MiB.
"""

from fractions import Fraction

from memtheory.exercises import find_variant, load_sets
from memtheory.exercises.steps_gpu import GPU_MISCONCEPTIONS

MIB = 2**20


def test_set_has_six_or_more_exercises_of_several_kinds():
    """Six or more exercises of three kinds; every chapter-20 misconception is used."""
    exercises = load_sets()["ch20"].exercises
    assert len(exercises) >= 6
    assert len({type(e.answer).__name__ for e in exercises}) >= 3
    used = {m for e in exercises for m in e.misconceptions}
    assert {m.name for m in GPU_MISCONCEPTIONS} <= used


def test_book_answers_by_hand():
    """Each book answer from the rules, worked out by hand."""
    assert find_variant("ch20.q1").expected == 4096  # 4,000 bytes -> 8 blocks of 512
    assert find_variant("ch20.q2").expected == 2048 - 2000  # fp16 x 1,000 -> 4 blocks
    assert find_variant("ch20.q3").expected == 0  # 512 x 512 x 4 = 1 MiB: still small
    assert find_variant("ch20.q4").expected == 20  # 4 MB -> a 20 MiB segment
    assert find_variant("ch20.q5").expected == 1000 * 4096
    assert find_variant("ch20.q6").expected == -(-5000 * 1024 // (2 * MIB)) == 3  # 516 -> 1024
    assert find_variant("ch20.q7").expected == 100 * Fraction(512 - 40, 512)
