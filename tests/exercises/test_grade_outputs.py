"""Issue 24, the teacher's part: every gradable file gets its result, whatever the others are.

A link loop, a pipe, a device, a folder named ``*.toml``, a huge file, bad encoding or keys
nested a thousand deep each become a row with a short reason; results are written for the
others; the exit status says some files were not graded. Where results go is checked before
grading, and a result never goes to a device, a pipe, a folder or through a symbolic link.
"""

import csv
import json
import os
import threading

import pytest

from memtheory.cli import main
from memtheory.exercises import AnswerFileError, find_variant, grade_file, grade_folder
from memtheory.exercises.answers import MAX_FILE_BYTES, MAX_KEY_DEPTH


def finishes(call, seconds=60.0):
    """Run ``call`` in a thread and return what it returned (or raised); fail if it hangs."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as error:  # noqa: BLE001 - the test inspects what came out
            box["value"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return box["value"]


def answer(exercise_id):
    """The right answer to the book's variant of ``exercise_id``, as a learner writes it."""
    variant = find_variant(exercise_id)
    return variant.kind.solution_text(variant.expected)


def deep_key_file(levels):
    """An answer file whose one key is nested ``levels`` deep, as dotted parts (~5 bytes each)."""
    return "[answers]\n" + "ch02." * levels + 'q1 = "1"\n'


def hostile_folder(tmp_path):
    """A folder with one good file and one of each kind of file that cannot be graded."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text(f'[answers]\n"ch02.q2" = "{answer("ch02.q2")}"\n')
    (folder / "loop_a.toml").symlink_to(folder / "loop_b.toml")
    (folder / "loop_b.toml").symlink_to(folder / "loop_a.toml")
    os.mkfifo(folder / "pipe.toml")
    (folder / "null.toml").symlink_to(os.devnull)  # a device, reached through a link out
    (folder / "dir.toml").mkdir()
    (folder / "big.toml").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    (folder / "latin1.toml").write_bytes('learner = "Zoë"\n'.encode("latin-1"))
    (folder / "deep.toml").write_text(deep_key_file(990))
    return folder


SHORT_REASONS = {
    "loop_a.toml": "link loop",
    "loop_b.toml": "link loop",
    "pipe.toml": "a pipe",
    "null.toml": "link out of the folder",
    "dir.toml": "a folder",
    "big.toml": "too large",
    "latin1.toml": "not UTF-8",
    "deep.toml": "keys nested too deeply",
}


def test_a_link_loop_and_other_ungradable_files_are_rows_with_short_reasons(tmp_path):
    """Two links pointing at each other (and the rest) each get a row; ada's file is graded."""
    folder = hostile_folder(tmp_path)
    summary = finishes(lambda: grade_folder(folder))
    assert not isinstance(summary, BaseException), summary
    reasons = {e.file: e.reason for e in summary.entries if e.report is None}
    assert reasons == SHORT_REASONS
    graded = [e for e in summary.entries if e.report is not None]
    assert [e.file for e in graded] == ["ada.toml"] and graded[0].report.score == 1
    assert all(e.error for e in summary.failed)


def test_the_command_writes_every_result_and_exits_1_when_some_files_were_not_graded(
    tmp_path, capsys
):
    """Issue 24: a link loop crashed `grade FOLDER` (RuntimeError) after grading: no results."""
    folder = hostile_folder(tmp_path)
    status = finishes(lambda: main(["grade", str(folder)]))
    assert status == 1
    data = json.loads((tmp_path / "submissions.grades.json").read_text())
    rows = {f["file"]: f for f in data["files"]}
    assert rows["ada.toml"]["result"]["score"] == 1
    assert {name: rows[name]["reason"] for name in SHORT_REASONS} == SHORT_REASONS
    with (tmp_path / "submissions.grades.csv").open(encoding="utf-8") as stream:
        table = {row["file"]: row for row in csv.DictReader(stream)}
    assert table["ada.toml"]["score"] == "1" and table["loop_a.toml"]["error"]
    assert (tmp_path / "submissions.exercises.csv").exists()
    printed = capsys.readouterr().out
    table_rows = [line for line in printed.splitlines() if line.startswith("loop_a.toml")]
    assert table_rows and table_rows[0].split()[1] == "-"  # the learner column holds no error
    assert table_rows[0].rstrip().endswith("not graded: link loop")


def test_a_folder_whose_files_are_all_graded_exits_0(tmp_path):
    """The exit status is 0 when every file was graded, whatever the scores."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('[answers]\n"ch02.q2" = "1"\n')
    assert main(["grade", str(folder), "--quiet"]) == 0


def test_a_deep_dotted_key_is_a_clear_error_for_a_single_file(tmp_path, capsys):
    """Issue 24: a 4.9 KB file with a key ~990 levels deep gave a RecursionError traceback."""
    path = tmp_path / "deep.toml"
    path.write_text(deep_key_file(990))
    assert 4000 < path.stat().st_size < 6000
    with pytest.raises(AnswerFileError, match="nested more than") as raised:
        grade_file(path)
    assert raised.value.reason == "keys nested too deeply"
    assert main(["grade", str(path)]) == 2
    err = capsys.readouterr().err
    assert "nested more than" in err and "Traceback" not in err


def test_keys_just_within_the_depth_limit_are_read(tmp_path):
    """A key nested as deep as allowed is read (and, not being an exercise, reported unknown)."""
    path = tmp_path / "ok.toml"
    path.write_text(deep_key_file(MAX_KEY_DEPTH - 1))
    report = grade_file(path)
    assert any(r.status == "unknown" for r in report.results)


@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "symlink"])
def test_force_never_writes_to_a_device_pipe_folder_or_through_a_link(tmp_path, kind, capsys):
    """Outputs go only to regular files or new paths, checked before any grading."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('[answers]\n"ch02.q2" = "1"\n')
    target = tmp_path / "out.json"
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    if kind == "device":
        target = "/dev/full"
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    else:
        target.symlink_to(precious)
    status = finishes(lambda: main(["grade", str(folder), "--json", str(target), "--force"]))
    assert status == 2
    err = capsys.readouterr().err
    assert "regular files or new paths" in err
    assert precious.read_text() == "keep me"
    assert not (tmp_path / "submissions.grades.csv").exists()  # refused before grading


def test_force_replaces_a_previous_result_file(tmp_path):
    """--force replaces a regular file that holds an earlier result."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('[answers]\n"ch02.q2" = "1"\n')
    assert main(["grade", str(folder), "--quiet"]) == 0
    results = tmp_path / "submissions.grades.json"
    results.write_text("old")
    assert main(["grade", str(folder), "--quiet", "--force"]) == 0
    assert json.loads(results.read_text())["files"][0]["file"] == "ada.toml"


def test_an_output_in_a_missing_folder_is_refused_before_grading(tmp_path, capsys, monkeypatch):
    """Whether the results can be written is known before a single file is graded."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('[answers]\n"ch02.q2" = "1"\n')
    graded = []
    monkeypatch.setattr(
        "memtheory.cli.exercise_commands.grade_folder",
        lambda *a, **k: graded.append(1) or grade_folder(*a, **k),
    )
    assert main(["grade", str(folder), "--csv", str(tmp_path / "no" / "such" / "g.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert graded == []


def test_a_single_file_result_never_goes_through_a_link(tmp_path):
    """Grading one file: --json pointing at a link to another file is refused, even with --force."""
    path = tmp_path / "answers.toml"
    path.write_text('[answers]\n"ch02.q2" = "1"\n')
    other = tmp_path / "other.txt"
    other.write_text("mine")
    link = tmp_path / "result.json"
    link.symlink_to(other)
    assert main(["grade", str(path), "--json", str(link), "--force", "--quiet"]) == 2
    assert other.read_text() == "mine" and link.is_symlink()
