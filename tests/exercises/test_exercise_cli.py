"""The memtheory command: grade a file or a folder, print questions, write templates."""

import csv
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import memtheory
from memtheory.cli import main
from memtheory.exercises import find_variant, seed_from_learner

REPO = Path(memtheory.__file__).resolve().parents[1]


def test_grade_file_prints_table_and_writes_json_beside(answer_file, capsys):
    """Grading a file prints the table and writes NAME.result.json beside it."""
    path = answer_file({"ch02.q1": "78,400"})
    assert main(["grade", str(path)]) == 0
    out = capsys.readouterr().out
    assert "forgot the bias" in out and "total" in out
    result = json.loads(path.with_name("answers.result.json").read_text())
    assert result["exercises"][0]["misconceptions"] == ["forgot_bias"]


def test_grade_options_set_seed_json_and_expected(answer_file, tmp_path, capsys):
    """--set, --seed, --json and --show-expected are honoured."""
    path = answer_file({"ch03.q1": "12"})
    target = tmp_path / "out.json"
    code = main(
        [
            "grade",
            str(path),
            "--set",
            "ch03",
            "--seed",
            "7",
            "--json",
            str(target),
            "--show-expected",
        ]
    )
    assert code == 0
    data = json.loads(target.read_text())
    assert data["sets"] == ["ch03"] and data["seed"] == "7"
    assert all("expected" in e for e in data["exercises"])
    assert "expected" in capsys.readouterr().out


def test_grade_folder_writes_json_and_csv_summary_beside_it(tmp_path, capsys):
    """Grading a folder writes NAME.grades.json and .csv beside it; an unreadable file is a row.

    The exit status is 1: the results are written, but one file could not be graded.
    """
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('learner = "ada"\n[answers]\n"ch03.q9" = "1"\n')
    (folder / "bob.toml").write_text('learner = "bob"\n[answers]\n"ch03.q9" = "oops"\n')
    (folder / "eve.toml").write_text("not = valid = toml\n")
    assert main(["grade", str(folder)]) == 1
    summary = json.loads((tmp_path / "submissions.grades.json").read_text())
    assert [f["file"] for f in summary["files"]] == ["ada.toml", "bob.toml", "eve.toml"]
    assert summary["files"][2]["error"] and summary["files"][0]["result"]["learner"] == "ada"
    rows = list(csv.DictReader((tmp_path / "submissions.grades.csv").open()))
    assert [r["learner"] for r in rows] == ["ada", "bob", ""]
    assert rows[0]["ch03.q1"] == "0" and rows[2]["error"]
    assert "3 answer file(s)" in capsys.readouterr().out


def test_grading_a_folder_leaves_the_answer_files_alone(tmp_path):
    """Folder grading writes nothing into the folder and leaves every answer file as it was."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    path = folder / "ada.toml"
    path.write_text('learner = "ada"\n[answers]\n"ch03.q1" = "12"\n')
    before = path.read_bytes()
    main(["grade", str(folder)])
    assert path.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["ada.toml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "submissions",
        "submissions.exercises.csv",
        "submissions.grades.csv",
        "submissions.grades.json",
    ]


def test_missing_or_broken_answer_file_exits_2(tmp_path, capsys):
    """A missing file or invalid TOML stops with status 2 and a message on stderr."""
    assert main(["grade", str(tmp_path / "none.toml")]) == 2
    broken = tmp_path / "broken.toml"
    broken.write_text("[answers\n")
    assert main(["grade", str(broken)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_template_then_grade_round_trip(tmp_path, capsys):
    """A learner's template lists their questions; its reference version scores full marks."""
    blank, solved = tmp_path / "blank.toml", tmp_path / "solved.toml"
    assert main(["template", "--set", "ch02", "--learner", "ada", "-o", str(blank)]) == 0
    assert (
        main(["template", "--set", "ch02", "--learner", "ada", "--solutions", "-o", str(solved)])
        == 0
    )
    question = find_variant("ch02.q1", seed_from_learner("ada")).question.splitlines()[0]
    assert question[:60] in " ".join(blank.read_text().replace("# ", "").split())
    document = tomllib.loads(blank.read_text())
    assert document["learner"] == "ada" and set(document["answers"].values()) == {""}
    capsys.readouterr()
    main(["grade", str(solved), "--quiet"])
    assert json.loads((tmp_path / "solved.result.json").read_text())["percent"] == 100.0
    main(["grade", str(blank), "--quiet"])
    assert json.loads((tmp_path / "blank.result.json").read_text())["score"] == 0


def test_template_never_overwrites(tmp_path, capsys):
    """The template command refuses an existing file and leaves it unchanged."""
    path = tmp_path / "answers.toml"
    path.write_text("mine")
    assert main(["template", "--set", "ch01", "-o", str(path)]) == 2
    assert path.read_text() == "mine" and "never overwritten" in capsys.readouterr().err


def test_questions_and_listings(capsys):
    """The questions command prints a variant; sets and misconceptions list what exists."""
    assert main(["questions", "--set", "ch03", "--learner", "ada"]) == 0
    out = capsys.readouterr().out
    assert "[ch03.q1]" in out and str(seed_from_learner("ada")) in out
    assert main(["sets"]) == 0 and "ch08" in capsys.readouterr().out
    assert main(["misconceptions"]) == 0 and "per_image_gradients" in capsys.readouterr().out


def test_sets_folder_from_option_or_environment(tmp_path, monkeypatch, capsys):
    """--sets DIR and MEMTHEORY_EXERCISES choose the folder; a missing folder is a clear error."""
    folder = tmp_path / "sets"
    folder.mkdir()
    (folder / "tiny.py").write_text(
        "from memtheory.exercises import Exercise, ExerciseSet, Integer\n"
        "SET = ExerciseSet('tiny', 'Tiny', (Exercise('q1', 'What is {a} + 1?', Integer(),\n"
        "    lambda p, how: p.a + 1, params={'a': (1, 2, 3)}),))\n"
    )
    answers = tmp_path / "answers.toml"
    answers.write_text('[answers]\n"tiny.q1" = "2"\n')
    assert main(["grade", str(answers), "--sets", str(folder), "--quiet"]) == 0
    assert json.loads((tmp_path / "answers.result.json").read_text())["score"] == 1
    monkeypatch.setenv("MEMTHEORY_EXERCISES", str(folder))
    assert main(["sets"]) == 0 and "tiny" in capsys.readouterr().out
    monkeypatch.setenv("MEMTHEORY_EXERCISES", str(tmp_path / "nowhere"))
    assert main(["sets"]) == 2
    assert "MEMTHEORY_EXERCISES" in capsys.readouterr().err


def test_command_runs_as_a_process(answer_file):
    """Running python -m memtheory.cli grade works end to end in a fresh interpreter."""
    path = answer_file({"ch02.q1": "78,500"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "memtheory.cli", "grade", str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ch02.q1" in done.stdout and path.with_name("answers.result.json").exists()


def test_console_script_is_declared():
    """pyproject.toml declares the memtheory console script."""
    pyproject = REPO / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no pyproject.toml in this checkout")
    scripts = tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {})
    assert scripts.get("memtheory") == "memtheory.cli:console"
