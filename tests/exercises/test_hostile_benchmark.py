"""``benchmarks/hostile_input.py`` holds a folder's grading to the command's documented exit status.

``memtheory grade FOLDER`` exits 0 when every file was graded and 1 when some could not be
(each a row of the results with its reason); the benchmark counts a raw error only where
that promise is broken, not every exit status 1.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from memtheory.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _folder_outcome():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from hostile_input import folder_outcome
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return folder_outcome


def _graded(folder: Path) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["grade", str(folder)])


def test_a_file_refused_with_its_reason_and_exit_1_kept_the_promise(tmp_path):
    """One good file, one that is not TOML: exit 1, results written, the refusal has a reason."""
    folder_outcome = _folder_outcome()
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('learner = "ada"\n"ch02.q1" = "1"\n')
    (folder / "bob.toml").write_text("this is = not = toml\n")
    code = _graded(folder)
    results = tmp_path / "submissions.grades.json"
    assert code == 1 and folder_outcome(code, results) is None
    assert folder_outcome(0, results) == "exit 0 with 1 file(s) refused"


def test_every_file_graded_is_exit_0_and_missing_results_are_a_raw_error(tmp_path):
    """All files graded: only exit 0 keeps the promise; results not written never do."""
    folder_outcome = _folder_outcome()
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('learner = "ada"\n"ch02.q1" = "1"\n')
    code = _graded(folder)
    results = tmp_path / "submissions.grades.json"
    assert code == 0 and folder_outcome(code, results) is None
    assert folder_outcome(1, results) == "exit 1 with 0 file(s) refused"
    assert folder_outcome(code, tmp_path / "absent.json") == "exit 0, results missing"
