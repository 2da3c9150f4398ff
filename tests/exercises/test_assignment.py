"""A teacher's workflow: a declared assignment, partial credit, overrides, a gradebook, --jobs."""

import csv
import io
import json
import tomllib

import pytest

from memtheory import Dense, Input
from memtheory.cli import main
from memtheory.exercises import Exercise, ExerciseSet, Integer, find_variant
from memtheory.exercises.assignment import (
    Assignment,
    Override,
    apply_overrides,
    parse_assignment,
    parse_overrides,
)
from memtheory.exercises.errors import AnswerFileError, ExerciseDefinitionError
from memtheory.exercises.grading import grade_answers, grade_folder, grade_variant

WEEK = """
name = "week 3"
due = "2026-12-01"
sets = ["ch03"]
exercises = ["ch02.q1"]
[points]
"ch02.q1" = 4
"""


@pytest.fixture
def folder(tmp_path, answer_file):
    """Four learners: one on ch02 only, one on ch03 only, a blank file, and a file not TOML."""
    sub = tmp_path / "class"
    sub.mkdir()
    ada = find_variant("ch02.q1", "ada")
    answer_file(
        {"ch02.q1": ada.kind.solution_text(ada.expected)}, "class/ada.toml", "ada", seed="ada"
    )
    bob = find_variant("ch03.q1", "bob")
    answer_file(
        {"ch03.q1": bob.kind.solution_text(bob.expected)}, "class/bob.toml", "bob", seed="bob"
    )
    (sub / "blank.toml").write_text("")
    (sub / "eve.toml").write_text("this is = not = toml, " + "x" * 300)
    (tmp_path / "week.toml").write_text(WEEK)
    return sub


def _assignment(tmp_path, sets):
    return parse_assignment(tomllib.loads((tmp_path / "week.toml").read_text()))


def test_an_assignment_gives_every_learner_the_same_denominator(folder, sets):
    """Each graded file, the blank one included, is out of the assignment's points."""
    assignment = _assignment(folder.parent, sets)
    expected_total = sum(e.points for e in sets["ch03"].exercises) + 4  # ch02.q1 at 4 points
    summary = grade_folder(folder, assignment=assignment)
    graded = [e.report for e in summary.entries if e.report is not None]
    assert len(graded) == 3
    assert {r.max_score for r in graded} == {expected_total}
    scores = {r.learner or "blank": r.score for r in graded}
    assert scores == {"ada": 4, "bob": sets["ch03"].exercise("q1").points, "blank": 0}
    assert summary.exercise_ids == [*sets["ch03"].ids, "ch02.q1"]  # the CSV's columns, fixed
    assert summary.csv_text().splitlines()[0].count("ch0") == len(sets["ch03"].ids) + 1


def test_without_an_assignment_mixed_sets_are_warned_about(folder):
    """Files graded on different sets give a warning that names the fix."""
    summary = grade_folder(folder)
    assert any("different choices of sets" in w and "--assignment" in w for w in summary.warnings)
    same = grade_folder(folder, sets=["ch03"])
    assert not any("different choices" in w for w in same.warnings)


def test_the_gradebook_has_learner_ids_and_scores_and_never_the_error_text(folder):
    """One row per file: learner id, a score per exercise, the total; a short status."""
    summary = grade_folder(folder, assignment=_assignment(folder.parent, None))
    rows = list(csv.reader(io.StringIO(summary.gradebook_csv())))
    assert rows[0][0] == "learner_id" and rows[0][-3:] == ["total", "max_score", "status"]
    by_id = {row[0]: row for row in rows[1:]}
    assert set(by_id) == {"ada", "bob", "blank", "eve"}
    assert by_id["eve"][-1] == "not TOML" and set(by_id["eve"][1:-1]) == {""}
    assert max(len(",".join(row)) for row in rows) < 200  # no error text in any cell
    assert by_id["ada"][rows[0].index("ch02.q1")] == "4"


def test_overrides_set_a_score_capped_at_the_points_and_unused_ones_are_warned(folder):
    """An override replaces the score (at most the points) and says why; a stray is warned."""
    overrides = parse_overrides(
        {
            "override": [
                {"learner": "bob", "exercise": "ch03.q2", "score": 99, "reason": "accepted"},
                {"learner": "zed", "exercise": "ch03.q2", "score": 1},
            ]
        }
    )
    summary = grade_folder(folder, sets=["ch03"], overrides=overrides)
    bob = next(e.report for e in summary.entries if e.report and e.report.learner == "bob")
    result = bob.result("ch03.q2")
    assert result.score == result.points
    assert result.feedback.startswith(f"Score set by the teacher to {result.points}/")
    assert any("matched no graded file" in w and "zed" in w for w in summary.warnings)


def test_an_override_applies_by_file_name_when_the_file_names_no_learner():
    """A file without a learner id is matched by its name."""
    report = grade_answers({}, sets=["ch01"])
    fixed, used = apply_overrides(report, [Override("blank", "ch01.q1", 1, "ok")], "blank.toml")
    assert used and fixed.result("ch01.q1").score == 1


def test_partial_credit_is_given_for_one_named_slip_only():
    """A declared slip alone earns its partial credit; another wrong answer earns nothing."""
    exercise = Exercise(
        "q1",
        "How many parameters does a dense layer from 784 to 100 have?",
        Integer(),
        lambda p, how: how.parameter_count(how.network([Input((784,)), Dense(100)])),
        misconceptions=("forgot_bias",),
        points=3,
        partial={"forgot_bias": 2},
    )
    variant = ExerciseSet("demo", "Demo", (exercise,)).variant("q1")
    slipped = grade_variant(variant, str(784 * 100))  # the weights without the 100 biases
    assert (slipped.score, slipped.misconceptions) == (2, ("forgot_bias",))
    assert "Partial credit: 2 of 3" in slipped.feedback
    assert grade_variant(variant, "5").score == 0
    assert grade_variant(variant, str(784 * 100 + 100)).score == 3


def test_the_sets_partial_credit_for_a_unit_slip():
    """ch09.q3 declares 1 of 2 points for MB read as MiB: the decimal-unit answer earns it."""
    variant = find_variant("ch09.q3")
    assert variant.exercise.partial == {"mib_vs_mb": 1}
    nbytes = variant.expected * 2**30  # the graded answer is in GiB
    decimal = nbytes / 10**9  # the same bytes in GB, written as if they were GiB
    result = grade_variant(variant, f"{float(decimal):.4f}")
    assert result.misconceptions == ("mib_vs_mb",) and result.score == 1


@pytest.mark.parametrize(
    ("partial", "message"),
    [({"forgot_x2": 1}, "neither one of its"), ({"forgot_bias": 2}, "must be 1 to 1")],
)
def test_partial_credit_is_checked_when_the_set_is_defined(partial, message):
    """Partial credit names one of the exercise's mistakes and is less than its points."""
    with pytest.raises(ExerciseDefinitionError, match=message):
        Exercise(
            "q1",
            "?",
            Integer(),
            lambda p, how: 1,
            points=2,
            misconceptions=("forgot_bias",),
            partial=partial,
        )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "names no exercise"),
        ({"sets": ["ch99"]}, "no set 'ch99'"),
        ({"exercises": ["ch02.q99"]}, "no exercise"),
        ({"sets": ["ch01"], "points": {"ch02.q1": 2}}, "does not assign"),
        ({"sets": ["ch01"], "points": {"ch01.q1": 0}}, "whole number >= 1"),
        ({"sets": 3}, "must be a list"),
    ],
)
def test_a_bad_assignment_is_refused_with_the_fix(data, message):
    """An assignment names real sets and exercises, and points only for what it assigns."""
    with pytest.raises(AnswerFileError, match=message):
        parse_assignment(data)


def test_jobs_give_the_same_results_as_one_process(folder):
    """Grading in two worker processes gives the rows of one process, in the same order."""
    one = grade_folder(folder, sets=["ch03"])
    done = []
    two = grade_folder(folder, sets=["ch03"], jobs=2, progress=lambda d, t: done.append((d, t)))
    assert two.csv_text() == one.csv_text()
    assert done[-1] == (4, 4) and len(done) == 4


def test_the_cli_writes_the_gradebook_and_refuses_bad_jobs(folder, capsys):
    """Grade FOLDER --assignment --gradebook --jobs 2 writes every output; --jobs 0 is refused."""
    book = folder.parent / "gradebook.csv"
    code = main(
        [
            "grade",
            str(folder),
            "--assignment",
            str(folder.parent / "week.toml"),
            "--gradebook",
            str(book),
            "--jobs",
            "2",
            "--quiet",
        ]
    )
    assert code == 1  # eve.toml could not be graded; the others were
    assert book.read_text().startswith("learner_id,ch03.q1,")
    data = json.loads((folder.parent / "class.grades.json").read_text())
    assert len({f["result"]["max_score"] for f in data["files"] if f["result"]}) == 1
    with pytest.raises(SystemExit):
        main(["grade", str(folder), "--jobs", "0"])
    assert "1 to 64" in capsys.readouterr().err


def test_assignment_type_is_plain_data():
    """An Assignment's sets follow its exercises' order."""
    assert Assignment(("ch03.q1", "ch02.q1", "ch03.q2")).sets == ("ch03", "ch02")


def test_a_learners_choices_come_in_their_own_order(sets):
    """With a seed the options are shuffled: the right option's text is kept, its letter varies."""
    for set_id, exercise_id in (("ch18", "q7"), ("ch04", "q3"), ("ch05", "q3")):
        book = sets[set_id].variant(exercise_id)
        right = book.kind.options[book.expected]
        letters = set()
        for index in range(30):
            variant = sets[set_id].variant(exercise_id, f"learner-{index}")
            assert sorted(variant.kind.options) == sorted(book.kind.options)
            assert variant.kind.options[variant.expected] == right
            letters.add(variant.kind.solution_text(variant.expected))
            again = sets[set_id].variant(exercise_id, f"learner-{index}")
            assert again.kind.options == variant.kind.options  # the same learner, the same order
        assert len(letters) > 1, f"{set_id}.{exercise_id}: every learner has the same letter"


def test_a_long_folder_prints_its_progress(tmp_path, capsys):
    """A folder of 20 files or more says on stderr how far grading has come, ending at the end."""
    folder = tmp_path / "many"
    folder.mkdir()
    for index in range(20):
        (folder / f"l{index:02d}.toml").write_text(f'learner = "l{index}"\n')
    assert main(["grade", str(folder), "--set", "ch01", "--jobs", "2"]) == 0
    err = capsys.readouterr().err
    assert "graded 20/20 files" in err and err.count("graded ") >= 2
