"""The per-exercise summary of a graded folder: how many got each exercise right, which mistakes."""

import csv
import json

from memtheory.cli import main
from memtheory.exercises import find_variant, grade_variant
from memtheory.exercises.class_summary import exercise_summary, mistake_title
from memtheory.exercises.report import ExerciseResult, FolderEntry, FolderSummary, GradeReport


def _toml(answers):
    lines = ["[answers]", *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in answers.items())]
    return "\n".join(lines) + "\n"


def _class(tmp_path):
    """Six answer files (book numbers) whose answers are built from the grader's own values."""
    q1, q2 = find_variant("ch02.q1"), find_variant("ch02.q2")
    right1, right2 = q1.kind.solution_text(q1.expected), q2.kind.solution_text(q2.expected)
    mistakes1 = {m.name: m.value for m in q1.mistaken_answers()}
    mistakes2 = {m.name: m.value for m in q2.mistaken_answers()}
    answers = {
        "ada": {"ch02.q1": right1, "ch02.q2": right2},
        "bob": {"ch02.q1": str(mistakes1["forgot_bias"]), "ch02.q2": right2},
        "cy": {"ch02.q1": str(mistakes1["forgot_bias"]), "ch02.q2": "oops"},
        "di": {"ch02.q1": str(mistakes1["parameters_times_batch"])},
        "ed": {"ch02.q1": "1", "ch02.q2": str(mistakes2["forgot_input_depth"])},
        "fi": {"ch02.q1": "", "ch02.q2": str(mistakes2["forgot_input_depth"])},
    }
    folder = tmp_path / "class"
    folder.mkdir()
    for name, given in answers.items():
        (folder / f"{name}.toml").write_text(_toml(given), encoding="utf-8")
    return folder, answers, {"ch02.q1": q1, "ch02.q2": q2}


def test_grade_folder_writes_the_per_exercise_summary_beside_the_grades(tmp_path, capsys):
    """Counts and mistakes per exercise agree with the grader's verdict on each answer."""
    folder, answers, variants = _class(tmp_path)
    assert main(["grade", str(folder), "--set", "ch02"]) == 0
    printed = capsys.readouterr().out
    path = tmp_path / "class.exercises.csv"
    rows = {r["exercise"]: r for r in csv.DictReader(path.open(encoding="utf-8"))}
    grades = json.loads((tmp_path / "class.grades.json").read_text(encoding="utf-8"))
    by_id = {e["id"]: e for e in grades["exercises"]}
    for exercise_id, variant in variants.items():
        verdicts = [
            grade_variant(variant, given.get(exercise_id), answered=exercise_id in given)
            for given in answers.values()
        ]
        right = sum(v.status == "correct" for v in verdicts)
        named: dict[str, int] = {}
        for v in verdicts:
            for name in v.misconceptions if v.status == "incorrect" else ():
                named[name] = named.get(name, 0) + 1
        top = max(named, key=named.get)
        row = rows[exercise_id]
        assert int(row["learners"]) == len(answers) and int(row["correct"]) == right
        assert float(row["percent_correct"]) == round(100 * right / len(answers), 1)
        assert row["most_common_mistake"] == f"{top} ({mistake_title(top)})"
        assert int(row["most_common_mistake_learners"]) == named[top]
        assert by_id[exercise_id]["mistakes"][0] == {
            "name": top,
            "title": mistake_title(top),
            "learners": named[top],
        }
        assert f"{mistake_title(top)} [{top}] x{named[top]}" in printed
    # the counts written out for this class: q1 has 1 right, forgot_bias twice, a blank
    assert rows["ch02.q1"]["most_common_mistake"].startswith("forgot_bias")
    assert (rows["ch02.q1"]["correct"], rows["ch02.q1"]["unanswered"]) == ("1", "1")
    assert rows["ch02.q1"]["unexplained_wrong"] == "1"  # the answer "1"
    assert rows["ch02.q2"]["invalid"] == "1"  # "oops"
    assert "by exercise" in printed and "class.exercises.csv" in printed


def test_the_summary_is_never_overwritten_without_force(tmp_path, capsys):
    """An existing summary file (or a teacher's file at that path) needs --force to be replaced."""
    folder, _, _ = _class(tmp_path)
    mine = tmp_path / "class.exercises.csv"
    mine.write_text("the teacher's own notes\n")
    assert main(["grade", str(folder), "--set", "ch02", "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err
    assert mine.read_text() == "the teacher's own notes\n"
    assert not (tmp_path / "class.grades.json").exists()  # nothing written at all
    elsewhere = tmp_path / "summary.csv"
    assert (
        main(["grade", str(folder), "--set", "ch02", "--quiet", "--exercises", str(elsewhere)]) == 0
    )
    assert mine.read_text() == "the teacher's own notes\n" and elsewhere.exists()
    same = ["--csv", str(tmp_path / "x.csv"), "--exercises", str(tmp_path / "x.csv")]
    assert main(["grade", str(folder), "--quiet", "--force", *same]) == 2
    assert main(["grade", str(folder), "--set", "ch02", "--quiet", "--force"]) == 0
    assert mine.read_text().startswith("exercise,title,")


def test_summary_cells_are_safe_in_a_spreadsheet_and_a_terminal():
    """A title that starts like a formula is quoted; control characters are shown as escapes."""
    result = ExerciseResult(
        "s.q1", "=HYPERLINK(1)", "incorrect", 0, 1, "x", "...", ("forgot_bias",)
    )
    other = ExerciseResult("s.q2\x1b[2J", "t", "unknown", 0, 0, "x", "...")
    report = GradeReport("ada", None, "canonical", ("s",), (result, other))
    summary = exercise_summary(
        FolderSummary(
            "f\x1b[31m", (FolderEntry("a.toml", report), FolderEntry("b.toml", None, "bad"))
        )
    )
    assert [s.id for s in summary.exercises] == ["s.q1"]  # unknown ids and ungraded files left out
    text = summary.csv_text()
    assert "'=HYPERLINK(1)" in text and "\n=" not in text and ",=" not in text
    table = str(summary.table())
    assert "\x1b" not in table and "\\x1b" in table
