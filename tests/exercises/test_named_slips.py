"""Issue 24, the learner's part: slips that got only "Not correct." are named, ties are not.

fp16 counted as fp32 (and back) in ch07, off-by-one and floor/ceil output sizes in ch03, a
forgotten ReLU output in ch04; a misconception is named only when no other listed one explains
the answer as well; a count written with its unit is read, or its unit mix-up named. Expected
values come from each variant's own expected answer (memtheory's), never typed in.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory.exercises import (
    ExerciseDefinitionError,
    Integer,
    check,
    find_variant,
    grade_folder,
    grade_variant,
    load_sets,
)
from memtheory.exercises.errors import AnswerFormatError, UnitMixupError
from memtheory.exercises.parsing import parse_count
from memtheory.exercises.steps_sizes import SIZE_MISCONCEPTIONS

SEEDS = [None, *(f"learner{i}" for i in range(40))]


def variants_where(exercise_id, keep):
    """Every variant of ``exercise_id`` over SEEDS whose parameters ``keep`` accepts."""
    found = [find_variant(exercise_id, seed) for seed in SEEDS]
    return [v for v in found if keep(v.params)]


def mistaken(variant, name):
    """The answers of one listed misconception for ``variant``."""
    return [m for m in variant.mistaken_answers() if m.name == name]


def graded(variant, value):
    """Grade ``value`` written as a learner would write it."""
    return grade_variant(variant, variant.kind.solution_text(value))


# -- fp16 vs fp32 (ch07) ---------------------------------------------------------------------------
def test_fp16_values_counted_at_4_bytes_are_named():
    """ch07.q1, the book's 1,000,000 fp16 values: 4 bytes each is named, not only 'Not correct'."""
    variant = find_variant("ch07.q1")
    assert variant.params.dtype == "fp16"
    result = check("ch07.q1", variant.expected * 2)  # 2 bytes per value, counted as 4
    assert result.misconceptions == ("half_vs_single",), result.feedback
    assert "[half_vs_single]" in result.feedback


@pytest.mark.parametrize("exercise_id", ["ch07.q1", "ch07.q2"])
def test_fp32_values_counted_at_2_bytes_are_named(exercise_id):
    """A fp32 question answered at 2 bytes per value is named (the other way round)."""
    variants = variants_where(exercise_id, lambda p: p.dtype == "fp32")
    assert variants
    for variant in variants:
        result = graded(variant, variant.expected / 2)
        assert result.misconceptions == ("half_vs_single",), result.feedback


def test_mixed_precision_step_at_4_bytes_everywhere_is_named():
    """ch07.q7: every bf16 tensor counted at 4 bytes is named."""
    variant = find_variant("ch07.q7")
    (half_as_single, *_) = [m for m in mistaken(variant, "half_vs_single") if "2-byte" in m.detail]
    result = graded(variant, half_as_single.value)
    assert result.misconceptions == ("half_vs_single",), result.feedback


# -- output sizes (ch03) ---------------------------------------------------------------------------
def test_a_dilated_output_without_the_plus_one_is_named():
    """ch03.q4: the output size one short (no + 1) is named as an off-by-one."""
    variant = find_variant("ch03.q4")
    result = check("ch03.q4", variant.expected - 1)
    assert result.misconceptions == ("output_size_off_by_one",), result.feedback


def test_a_strided_output_rounded_up_is_named_where_nothing_else_gives_it():
    """ch03.q3 at stride 3 or 4: rounding up instead of flooring is named on its own."""
    named = 0
    for variant in variants_where("ch03.q3", lambda p: p.stride > 2):
        for answer in mistaken(variant, "floor_ceil_swapped"):
            others = [
                m
                for m in variant.mistaken_answers()
                if m.name != "floor_ceil_swapped" and variant.kind.matches(answer.value, m.value)
            ]
            result = graded(variant, answer.value)
            if others:
                assert result.misconceptions == () and "floor_ceil_swapped" in result.candidates
            else:
                assert result.misconceptions == ("floor_ceil_swapped",), result.feedback
                named += 1
    assert named


def test_ceil_mode_answered_with_floor_lists_both_slips_that_give_it():
    """ch03.q9 (odd sizes): floor(x) + 1 = ceil(x), so flooring and no + 1 tie: none is named."""
    variant = find_variant("ch03.q9")
    size = variant.params.size
    floored = (size - 2) // 2 + 1
    result = check("ch03.q9", floored)
    assert not result.passed and result.misconceptions == ()
    assert set(result.candidates) == {"floor_ceil_swapped", "output_size_off_by_one"}
    assert "matches 2 possible slips" in result.feedback


# -- ties are not named (ch04.q7 and everywhere) ---------------------------------------------------
def test_a_forgotten_relu_output_is_not_reported_as_the_forgotten_x2():
    """Issue 24: ch04.q7 named 'forgot the x2' for a forgotten ReLU output (0.12% apart)."""
    variant = find_variant("ch04.q7")
    (relu,) = mistaken(variant, "forgot_relu_output")
    (x2,) = mistaken(variant, "forgot_x2")
    assert relu.value != x2.value and variant.kind.matches(relu.value, x2.value)
    result = graded(variant, relu.value)
    assert result.status == "incorrect" and result.misconceptions == ()
    assert set(result.candidates) == {"forgot_relu_output", "forgot_x2"}
    assert "This is the answer you get" not in result.feedback
    assert "within 0.5%" in result.feedback
    assert "[forgot_relu_output]" in result.feedback and "[forgot_x2]" in result.feedback


def test_the_class_summary_counts_a_tie_once_and_not_as_unexplained(tmp_path):
    """A teacher sees the forgotten ReLU output as 'forgot_relu_output or forgot_x2', once."""
    variant = find_variant("ch04.q7")
    (relu,) = mistaken(variant, "forgot_relu_output")
    folder = tmp_path / "class"
    folder.mkdir()
    answer = variant.kind.solution_text(relu.value)
    (folder / "a.toml").write_text(f'[answers]\n"ch04.q7" = "{answer}"\n')
    stats = {s.id: s for s in grade_folder(folder).by_exercise().exercises}["ch04.q7"]
    assert stats.mistakes == (("forgot_relu_output or forgot_x2", 1),)
    assert stats.unexplained == 0


BOOK_CASES = [
    (variant, answer)
    for s in load_sets().values()
    for variant in s.variants()
    for answer in variant.mistaken_answers()
]


@pytest.mark.parametrize(
    ("variant", "answer"), BOOK_CASES, ids=[f"{v.id}-{a.name}" for v, a in BOOK_CASES]
)
def test_a_misconception_is_named_only_when_no_other_explains_the_answer_as_well(variant, answer):
    """The general rule, on every listed mistake of every exercise (book numbers)."""
    result = graded(variant, answer.value)
    given = variant.kind.parse(variant.kind.solution_text(answer.value))
    fitting = {m.name for m in variant.mistaken_answers() if variant.kind.matches(given, m.value)}
    if len(fitting) > 1:
        assert result.misconceptions == (), result.feedback
        assert fitting <= set(result.candidates)
    else:
        assert result.misconceptions == (answer.name,), result.feedback
        assert result.candidates == ()


def test_every_new_misconception_is_listed_by_an_exercise():
    """Each misconception this issue adds is tried by at least one exercise."""
    listed = {name for s in load_sets().values() for e in s.exercises for name in e.misconceptions}
    assert {m.name for m in SIZE_MISCONCEPTIONS} <= listed


# -- counts written with their unit ----------------------------------------------------------------
def test_a_count_of_bytes_with_a_byte_unit_is_converted():
    """ch07.q1: '2,000,000 bytes' and the same in MB are right; GiB is converted exactly."""
    variant = find_variant("ch07.q1")
    expected = variant.expected
    assert check("ch07.q1", f"{expected:,} bytes").passed
    assert check("ch07.q1", f"{expected / 10**6:g} MB").passed
    assert Integer(unit="B").parse("1.5 GiB") == 3 * 2**30 // 2
    assert not check("ch07.q1", "1.5 GiB").passed  # read, converted, and wrong: not unreadable
    assert check("ch07.q1", "1.5 GiB").result.status == "incorrect"


def test_a_count_with_the_noun_it_counts_is_read():
    """ch02.q1: '78,500 parameters' is the count 78,500."""
    expected = find_variant("ch02.q1").expected
    assert check("ch02.q1", f"{expected:,} parameters").passed
    assert check("ch02.q1", f"{expected} trainable parameters.").passed


def test_a_size_where_a_count_is_asked_is_named():
    """ch02.q1: '78500 bytes' scores 0 and names the unit mix-up (not 'cannot read')."""
    expected = find_variant("ch02.q1").expected
    result = check("ch02.q1", f"{expected} bytes")
    assert result.result.status == "incorrect" and result.score == 0
    assert result.misconceptions == ("size_for_count",)
    assert "[size_for_count]" in result.feedback


def test_a_count_of_things_where_bytes_are_asked_is_named():
    """ch07.q1: the number of values, written as values, is named as a count for bytes."""
    variant = find_variant("ch07.q1")
    result = check("ch07.q1", f"{variant.params.count:,} values")
    assert result.result.status == "incorrect" and result.misconceptions == ("count_for_size",)


def test_a_count_of_things_where_a_size_is_asked_is_named():
    """ch02.q9-like sizes: '19,072,984 parameters' for a MiB question names the mix-up."""
    result = check("ch04.q4", "19,072,984 parameters")
    assert result.result.status == "incorrect" and result.misconceptions == ("count_for_size",)
    assert check("ch04.q4", "3 parsecs").result.status == "invalid"


def test_a_word_that_names_nothing_counted_is_refused():
    """'3 parsecs' counts nothing the exercises ask: unreadable, with how to write it."""
    with pytest.raises(AnswerFormatError, match="does not say what is counted"):
        parse_count("3 parsecs")
    assert check("ch02.q1", "78500 parsecs").result.status == "invalid"


def test_suffixes_are_still_refused():
    """524k stays refused (k could mean 1000 or 1024), with or without a byte unit asked."""
    for unit in (None, "B"):
        with pytest.raises(AnswerFormatError, match="could mean 1000 or 1024") as raised:
            parse_count("524k", unit=unit)
        assert not isinstance(raised.value, UnitMixupError)


def test_an_integer_kind_takes_only_bytes_as_its_unit():
    """Integer(unit=...) is None (things) or B (bytes): anything else is the set author's bug."""
    with pytest.raises(ExerciseDefinitionError):
        Integer(unit="MiB")


NOUNS = st.sampled_from(["parameters", "values", "activation values", "weights", "elements"])


@given(st.integers(0, 10**15), NOUNS)
def test_any_count_with_a_noun_reads_as_the_count(number, noun):
    """A count followed by a noun is the count, grouped by commas or not."""
    assert parse_count(f"{number:,} {noun}") == number
    assert parse_count(f"{number} {noun}.") == number


@given(st.integers(0, 10**12), st.sampled_from(["B", "bytes", "kB", "KiB", "MB", "MiB", "GiB"]))
def test_any_whole_size_reads_as_its_bytes(number, unit):
    """A size in any byte unit is its exact number of bytes where bytes are counted."""
    scale = {"B": 1, "bytes": 1, "kB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20}
    scale["GiB"] = 2**30
    assert parse_count(f"{number} {unit}", unit="B") == number * scale[unit]
