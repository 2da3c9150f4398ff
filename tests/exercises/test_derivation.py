"""Worked solutions: recorded from the computation that grades, so they end on the graded answer."""

import re

import pytest
import sympy as sp

from memtheory import Dense, Input
from memtheory.cli import main
from memtheory.exercises import Exercise, ExerciseSet, Integer, Quantity, load_sets
from memtheory.exercises.derivation import Recorder, derive
from memtheory.exercises.errors import ExerciseDefinitionError
from memtheory.exercises.reasoning import CORRECT
from memtheory.exercises.step_log import note

ALL = [(s.id, e.id) for s in load_sets().values() for e in s.exercises]


@pytest.mark.parametrize(("set_id", "exercise_id"), ALL, ids=[f"{s}.{e}" for s, e in ALL])
def test_every_exercise_has_a_derivation_ending_on_the_graded_answer(sets, set_id, exercise_id):
    """Every exercise, book's numbers and a learner's: steps, then the graded answer."""
    for seed in (None, "ada"):  # the book's numbers and one learner's
        variant = sets[set_id].variant(exercise_id, seed)
        derivation = derive(variant)
        assert derivation.steps, variant.id
        assert all(line.strip() for line in derivation.lines)
        assert derivation.lines[-1] == f"Answer: {variant.kind.display(variant.expected)}"
        # the shown answer reads back as the graded one (within the kind's tolerance)
        shown = derivation.lines[-1].removeprefix("Answer: ")
        if variant.kind.name not in ("choice", "expression"):
            assert variant.kind.matches(variant.kind.parse(shown), variant.expected)


def test_recorder_steps_carry_the_numbers_of_the_computation():
    """The steps show the per-layer counts, the bytes of a size and a unit conversion."""
    how = Recorder()
    net = how.network([Input((784,)), Dense(100)])
    assert how.parameter_count(net) == CORRECT.parameter_count(net) == 784 * 100 + 100
    nbytes = how.to_bytes(2, "GiB")
    assert nbytes == 2 * 2**30
    assert how.in_unit(3 * 10**6, "MB") == 3
    text = "\n".join(how.steps)
    assert "dense_1: 78,400 + 100 = 78,500" in text
    assert f"= {2 * 2**30:,} bytes" in text
    assert "3,000,000 bytes / 1,000,000 bytes per MB = 3 MB" in text


def test_nested_steps_are_written_once():
    """A step another step calls (the optimizer inside training memory) is not repeated."""
    how = Recorder()
    from memtheory import ModelCounts

    memory = how.training_memory(ModelCounts(10, 0, 0), optimizer="adam")
    assert memory.total == 10 * 4 * 4  # weights, gradients, two Adam moments: 4 bytes each
    assert not any(line.startswith("Optimizer:") for line in how.steps)  # nested in training
    assert how.steps[-1] == "  total: 160 bytes"


def test_note_outside_a_recording_does_nothing_and_inside_records():
    """note() is silent outside a recording and records a solver's own step inside one."""
    note("ignored", 3)  # no recorder: no error, nothing kept
    lone = Exercise(
        "q1",
        "What is {n} squared?",
        Integer(),
        lambda p, how: (note("n squared", p.n**2), p.n**2)[1],
        params={"n": (7,)},
    )
    variant = ExerciseSet("demo", "Demo", (lone,)).variant("q1")
    assert derive(variant).lines == ("n squared = 49", "Answer: 49")


def test_a_solver_that_disagrees_with_the_grade_is_refused():
    """A worked solution that would not give the graded answer is an error, never shown."""
    calls = []

    def unstable(p, how):  # depends on something other than its parameters and how
        calls.append(1)
        return 10 * len(calls) * 2**20

    exercise = Exercise("q1", "How big?", Quantity("MiB"), unstable)
    variant = ExerciseSet("demo", "Demo", (exercise,)).variant("q1")
    assert variant.expected == 10
    with pytest.raises(ExerciseDefinitionError, match="worked solution gives"):
        derive(variant)


def test_questions_solutions_prints_each_worked_solution(capsys):
    """`memtheory questions --solutions` prints every worked solution; without it, none."""
    assert main(["questions", "--set", "ch07", "--solutions"]) == 0
    out = capsys.readouterr().out
    variant = load_sets()["ch07"].variant("q2")
    assert out.count("Worked solution:") == len(load_sets()["ch07"].exercises)
    assert f"    Answer: {variant.kind.display(variant.expected)}" in out
    assert "bytes per GB" in out
    assert main(["questions", "--set", "ch07"]) == 0
    assert "Worked solution" not in capsys.readouterr().out


def test_a_pooled_size_is_derived_with_its_floor(sets):
    """A pooling's output height is written as the floor formula with the question's numbers."""
    variant = sets["ch03"].variant("q1")
    size = variant.params["size"]
    text = "\n".join(derive(variant).lines)
    assert f"floor(({size} + 2*0 - 2) / 2) + 1 = {(size - 2) // 2 + 1}" in text


_CONVERSION = re.compile(r"^In (bytes|[A-Za-z]+): ")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _is_conversion(step: str) -> bool:
    return bool(_CONVERSION.match(step))


def _last_value(step: str) -> str:
    """What a step ends on: the text after its last ' = ' (or after ': ' in a block's total)."""
    tail = step.rsplit(" = ", 1)[-1] if " = " in step else step.rsplit(": ", 1)[-1]
    return tail.strip()


def _ends_on(variant, step: str) -> bool:
    """Whether ``step``'s result is the graded answer (read within the kind's tolerance)."""
    if variant.kind.name == "choice":
        return not _is_conversion(step)  # a choice ends on the reason, never a bare conversion
    tail = _last_value(step)
    if variant.kind.name == "expression":
        expected = sp.sympify(variant.expected)
        names = {symbol.name: symbol for symbol in expected.free_symbols}
        written = sp.sympify(tail.removesuffix(" bytes").replace(",", ""), locals=names)
        return sp.simplify(written - expected) == 0
    numbers = _NUMBER.findall(tail)
    if not numbers:
        return False
    value = sp.Rational(numbers[0].replace(",", ""))
    return bool(variant.kind.matches(value, variant.expected))


@pytest.mark.parametrize(("set_id", "exercise_id"), ALL, ids=[f"{s}.{e}" for s, e in ALL])
def test_every_solution_shows_its_working_and_ends_on_the_graded_answer(sets, set_id, exercise_id):
    """No solution is only a conversion or a stock sentence; its last step gives the answer.

    A solution may be only conversions when the question is itself one: a size in one unit
    read into bytes and written in another (two steps, both shown).
    """
    variant = sets[set_id].variant(exercise_id)
    derivation = derive(variant)
    steps = derivation.steps
    working = [step for step in steps if not _is_conversion(step)]
    two_way_conversion = (
        len(steps) == 2 and steps[0].startswith("In bytes: ") and _is_conversion(steps[1])
    )
    assert working or two_way_conversion, f"{variant.id} shows only a conversion: {steps}"
    assert not any("Computed directly" in step for step in steps), variant.id
    assert derivation.chapter == f"Chapter {int(set_id.removeprefix('ch'))}"
    assert _ends_on(variant, steps[-1]), f"{variant.id} ends on {steps[-1]!r}"
