"""Grading answer files: full marks for the reference, zero for a blank, robustness, atomicity."""

import json
import os

import pytest

from memtheory.exercises import (
    AnswerFileError,
    find_variant,
    grade_answers,
    grade_file,
    read_answer_file,
    seed_from_learner,
)
from memtheory.exercises.report import write_atomic


def solutions(set_ids, seed):
    """Return the reference answers of these sets for ``seed``, written as a learner would."""
    from memtheory.exercises import load_sets

    answers = {}
    for set_id in set_ids:
        for variant in load_sets()[set_id].variants(seed):
            answers[variant.id] = variant.kind.solution_text(variant.expected)
    return answers


def test_reference_answer_file_scores_full_marks(sets, answer_file):
    """A file of every set's reference answers gets every point (nbgrader validate)."""
    seed = str(seed_from_learner("ada"))
    path = answer_file(solutions(list(sets), seed), learner="ada")
    report = grade_file(path)
    assert report.seed == seed and report.seed_source == "learner"
    assert report.score == report.max_score == sum(s.points for s in sets.values())
    assert {r.status for r in report.results} == {"correct"}


def test_blank_answer_file_scores_zero_without_crashing(sets, answer_file):
    """A file with no answers grades every set at zero (nbgrader --invert)."""
    report = grade_file(answer_file({}))
    assert report.score == 0
    assert report.max_score == sum(s.points for s in sets.values())
    assert {r.status for r in report.results} == {"unanswered"}


def test_template_with_empty_answers_scores_zero(sets, answer_file):
    """Every id present with an empty string scores zero, and each says the answer is empty."""
    answers = {full: "" for s in sets.values() for full in s.ids}
    report = grade_file(answer_file(answers, learner="bob"))
    assert report.score == 0 and all(r.feedback == "The answer is empty." for r in report.results)


def test_malformed_answers_get_messages_and_the_rest_is_graded(answer_file):
    """Each unreadable answer gets its own message; correct ones around them still score."""
    answers = {
        "ch02.q1": "78,500",
        "ch02.q2": "",
        "ch02.q3": "abc",
        "ch02.q4": "nan",
        "ch02.q5": "inf",
        "ch01.q1": "3 parsecs",
        "ch03.q5": "H**",
        "ch03.q6": "__import__('os')",
        "ch02.q99": "5",
        "ch02.q8": "235,146",
        "ch03.q1": "12",
    }
    report = grade_file(answer_file(answers))
    status = {r.id: (r.status, r.feedback) for r in report.results}
    assert status["ch02.q1"][0] == status["ch02.q8"][0] == status["ch03.q1"][0] == "correct"
    assert status["ch02.q2"] == ("unanswered", "The answer is empty.")
    assert status["ch02.q3"][0] == "invalid" and "cannot read 'abc'" in status["ch02.q3"][1]
    assert "not a finite number" in status["ch02.q4"][1]
    assert "not a finite number" in status["ch02.q5"][1]
    assert "unknown unit 'parsecs'" in status["ch01.q1"][1]
    assert "it is incomplete" in status["ch03.q5"][1]
    assert "'__import__' is not allowed" in status["ch03.q6"][1]
    assert status["ch02.q99"][0] == "unknown" and "did you mean ch02.q9" in status["ch02.q99"][1]
    unknown = report.result("ch02.q99")
    assert unknown.points == 0
    assert report.score == 1 + 1 + 1


def test_toml_values_of_other_types_are_reported(tmp_path):
    """A TOML float nan, a boolean or an array is a malformed answer, not a crash."""
    path = tmp_path / "answers.toml"
    path.write_text(
        '[answers]\n"ch02.q1" = nan\n"ch02.q2" = true\n"ch02.q3" = [1, 2]\n"ch02.q4" = 320\n'
    )
    report = grade_file(path)
    feedback = {r.id: r.feedback for r in report.results}
    assert "not a finite number" in feedback["ch02.q1"]
    assert "yes/no" in feedback["ch02.q2"]
    assert "text or a number" in feedback["ch02.q3"]
    assert report.result("ch02.q4").status == "correct"


def test_unquoted_dotted_ids_and_set_tables_are_read(tmp_path):
    """ch02.q1 = ... without quotes, and [answers.ch02] tables, are the same ids."""
    path = tmp_path / "answers.toml"
    path.write_text("[answers]\nch02.q1 = 78500\n[answers.ch03]\nq1 = 12\n")
    report = grade_file(path)
    assert report.result("ch02.q1").passed and report.result("ch03.q1").passed


def test_ids_are_tidied(answer_file):
    """CH2.Q1 is read as ch02.q1."""
    report = grade_file(answer_file({"CH2.Q1": "78500"}))
    assert report.result("ch02.q1").passed


def test_invalid_toml_is_a_clear_file_error(tmp_path):
    """A file that is not TOML raises AnswerFileError naming the problem."""
    path = tmp_path / "answers.toml"
    path.write_text('[answers]\n"ch02.q1" = 78,500\n')
    with pytest.raises(AnswerFileError, match="not valid TOML"):
        grade_file(path)


def test_grading_never_changes_the_answer_file(answer_file):
    """The answer file is byte-identical, with the same modification time, after grading."""
    path = answer_file({"ch02.q1": "78,400", "ch02.q2": "abc"}, learner="ada")
    before, stamp = path.read_bytes(), path.stat().st_mtime_ns
    grade_file(path)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stamp


def test_result_json_is_complete_and_parseable(answer_file, tmp_path):
    """The JSON result has the totals and one entry per exercise with its feedback."""
    report = grade_file(answer_file({"ch02.q1": "78,400"}, learner="ada", seed=3))
    target = write_atomic(tmp_path / "answers.result.json", report.to_json())
    data = json.loads(target.read_text())
    assert data["format"] == "memtheory-grade/1"
    assert (data["learner"], data["seed"], data["seed_source"]) == ("ada", "3", "file")
    assert data["max_score"] == report.max_score and data["sets"] == ["ch02"]
    entry = next(e for e in data["exercises"] if e["id"] == "ch02.q1")
    assert set(entry) >= {"score", "points", "status", "feedback", "misconceptions", "answer"}
    assert "expected" not in entry


def test_result_write_is_atomic(tmp_path, monkeypatch):
    """If the final rename fails, the old result stays whole and no temporary file is left."""
    target = tmp_path / "answers.result.json"
    target.write_text('{"old": true}')

    def broken(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, '{"new": true}')
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["answers.result.json"]


def test_result_is_never_written_over_the_answers(answer_file):
    """write_atomic refuses a path that is the learner's answer file."""
    path = answer_file({})
    with pytest.raises(ValueError, match="answer file"):
        write_atomic(path, "{}", protect=[path])


def test_seed_comes_from_option_then_file_then_learner(answer_file):
    """The --seed option beats the file's seed, which beats the learner id; else the book's."""
    assert grade_file(answer_file({}, learner="ada")).seed == str(seed_from_learner("ada"))
    assert grade_file(answer_file({}, learner="ada", seed=5)).seed == "5"
    assert grade_file(answer_file({}, learner="ada", seed=5), seed="9").seed == "9"
    plain = grade_file(answer_file({}))
    assert (plain.seed, plain.seed_source) == (None, "canonical")


def test_learners_get_their_own_numbers(answer_file):
    """The book's answer is wrong for a learner whose variant differs, and theirs is right."""
    book = find_variant("ch02.q1").expected
    theirs = find_variant("ch02.q1", seed_from_learner("ada")).expected
    assert book != theirs
    report = grade_file(answer_file({"ch02.q1": str(book), "ch02.q2": "1"}, learner="ada"))
    assert report.result("ch02.q1").status == "incorrect"
    assert grade_file(answer_file({"ch02.q1": str(theirs)}, learner="ada")).result("ch02.q1").passed


def test_sets_are_those_answered_unless_chosen(answer_file):
    """By default the answered sets are graded; --set picks others and notes the skipped answers."""
    path = answer_file({"ch02.q1": "78500", "ch03.q1": "12"})
    assert grade_file(path).sets == ("ch02", "ch03")
    chosen = grade_file(path, sets=["ch03"])
    assert chosen.sets == ("ch03",) and "ch02.q1" in chosen.notes[0]


def test_expected_answers_are_hidden_unless_allowed(answer_file):
    """Expected answers appear only with show_expected."""
    path = answer_file({"ch02.q1": "1"})
    assert grade_file(path).result("ch02.q1").expected is None
    assert grade_file(path, show_expected=True).result("ch02.q1").expected == "78,500"


def test_table_lists_scores_feedback_and_total(answer_file):
    """The printed table has one row per exercise, the misconception's name, and the total."""
    table = grade_file(answer_file({"ch02.q1": "78,400"})).table().text()
    assert "ch02.q9" in table and "forgot the bias" in table
    assert table.splitlines()[-1].startswith("total")


def test_answers_mapping_can_be_graded_directly():
    """grade_answers takes a mapping, for callers that do not use files."""
    report = grade_answers({"ch03.q1": 12, "ch03.q2": "13"}, sets=["ch03"])
    assert report.result("ch03.q1").passed and report.result("ch03.q2").passed


def test_answer_file_notes_ignored_keys(tmp_path):
    """Keys outside [answers] that are not learner, seed or sets are noted, not fatal."""
    path = tmp_path / "a.toml"
    path.write_text('learner = "ada"\nname = "Ada"\n[answers]\n"ch02.q1" = 1\n')
    assert read_answer_file(path).notes == ("ignored the key 'name' outside [answers]",)


def test_bad_learner_type_is_a_file_error(tmp_path):
    """A learner id that is not text is a file error."""
    path = tmp_path / "a.toml"
    path.write_text("learner = 3\n")
    with pytest.raises(AnswerFileError, match="learner must be text"):
        read_answer_file(path)


def test_a_broken_exercise_does_not_stop_the_others(tmp_path):
    """An exercise whose solver fails is reported as an error, not counted; the rest is graded."""
    folder = tmp_path / "sets"
    folder.mkdir()
    (folder / "mixed.py").write_text(
        "from memtheory.exercises import Exercise, ExerciseSet, Integer\n"
        "SET = ExerciseSet('mixed', 'Mixed', (\n"
        "    Exercise('q1', 'What is 1 + 1?', Integer(), lambda p, how: 2),\n"
        "    Exercise('q2', 'What is 1 / 0?', Integer(), lambda p, how: 1 // 0),\n"
        "))\n"
    )
    report = grade_answers({"mixed.q1": "2", "mixed.q2": "1"}, sets_dir=folder)
    assert report.result("mixed.q1").passed
    broken = report.result("mixed.q2")
    assert (broken.status, broken.points) == ("error", 0)
    assert "ZeroDivisionError" in broken.feedback
    assert (report.score, report.max_score) == (1, 1)


def test_notebook_check_uses_the_same_variant_as_the_answer_file(answer_file):
    """check(..., learner=) grades the numbers that the answer file with that learner gets."""
    from memtheory.exercises import check

    theirs = find_variant("ch02.q1", seed_from_learner("ada")).expected
    assert check("ch02.q1", theirs, learner="ada").passed
    assert grade_file(answer_file({"ch02.q1": theirs}, learner="ada")).result("ch02.q1").passed
    assert check("ch02.q1", theirs, seed=seed_from_learner("ada")).passed
