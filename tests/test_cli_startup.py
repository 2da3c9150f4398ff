"""``memtheory estimate`` starts without the course and validation code (issue 26).

Each check runs the command in a fresh interpreter (a test session has imported
everything already) and lists which of the heavy packages it loaded. The grader's
own subcommand is run the same way, as a control: it must load the grader, which
shows that the check sees an import when there is one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    "memtheory.exercises",
    "memtheory.calculator",
    "memtheory.plotting",
    "memtheory.validation",
    "torch",
)
"""Packages ``memtheory estimate`` has no use for: the grader, the course pages, torch."""

_SCRIPT = """
import contextlib, io, json, sys
from memtheory.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        status = main(sys.argv[1:])
    except SystemExit as stop:
        status = stop.code
heavy = json.loads({heavy!r})
loaded = sorted(n for n in sys.modules if any(n == h or n.startswith(h + ".") for h in heavy))
print(json.dumps({{"status": status, "loaded": loaded}}))
"""


ESTIMATE_WORK = (
    "memtheory.estimate.plan",
    "memtheory.estimate.step",
    "memtheory.estimate.serving",
)
"""What answers ``estimate`` and ``serve``: the grader's subcommands have no use for it."""


def _run(*argv: str, heavy: tuple[str, ...] = HEAVY) -> dict[str, object]:
    """Run ``memtheory ARGV`` in a fresh interpreter; its exit status and the heavy modules."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": "off"}
    script = _SCRIPT.format(heavy=json.dumps(heavy))
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        cwd=ROOT,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "argv",
    [
        ("estimate", "--help"),
        ("estimate", "gpt2", "--batch", "1", "--seq", "128"),
        ("serve", "--help"),
    ],
    ids=" ".join,
)
def test_estimate_and_serve_load_no_course_code_and_no_torch(argv: tuple[str, ...]) -> None:
    """The command runs (exit 0) without importing the grader, the course pages or torch."""
    result = _run(*argv)
    assert result == {"status": 0, "loaded": []}


def test_the_grader_is_loaded_when_a_grader_subcommand_runs() -> None:
    """``memtheory sets`` imports memtheory.exercises: the check above would see it."""
    result = _run("sets")
    assert result["status"] == 0
    assert "memtheory.exercises" in result["loaded"]  # type: ignore[operator]


@pytest.mark.parametrize("argv", [("sets",), ("misconceptions",)], ids=" ".join)
def test_grader_subcommands_load_no_estimate_work(argv: tuple[str, ...]) -> None:
    """The parser names ``estimate`` and ``serve`` without importing what answers them."""
    result = _run(*argv, heavy=ESTIMATE_WORK)
    assert result == {"status": 0, "loaded": []}


def test_the_estimate_work_is_loaded_when_estimate_runs() -> None:
    """Control for the check above: ``memtheory estimate`` does load it."""
    result = _run("estimate", "gpt2", "--batch", "1", "--seq", "128", heavy=ESTIMATE_WORK)
    assert result["status"] == 0
    assert "memtheory.estimate.plan" in result["loaded"]  # type: ignore[operator]


def _console(arguments: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m memtheory.cli ARGUMENTS`` (the console entry) with its own disk cache."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": str(cache)}
    environment.pop("PYTHONUNBUFFERED", None)  # its output buffered, as a user's is
    return subprocess.run([sys.executable, "-m", "memtheory.cli", *arguments], env=environment,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize("limit", [[], ["--limit", "100 MB", "--reserve", "0 GB", "--check"]],
                         ids=["answer", "does not fit, --check"])
def test_console_exits_fast_with_the_whole_answer_and_its_caches_kept(tmp_path, capsys, limit):
    """The console entry ends ``estimate`` without tearing Python down (os._exit).

    What it prints and its exit status are main()'s, and the answer and replay entries it
    keeps are on disk, where the next command, at a new batch, reads them.
    """
    from memtheory.cli import main

    question = ["estimate", "mobilenet-v2", "--batch", "7", *limit]
    cache = tmp_path / "cache"
    done = _console(question, cache)
    os.environ["MEMTHEORY_CACHE"] = "off"  # main() here derives afresh and keeps nothing
    try:
        status = main(question)
    finally:
        del os.environ["MEMTHEORY_CACHE"]
    printed = capsys.readouterr()
    assert (done.stdout, done.stderr, done.returncode) == (printed.out, printed.err, status)
    assert status == (1 if limit else 0)
    assert sorted(p.name.split("-")[1] for p in cache.glob("*.json")) == ["answer", "replay"]
    again = _console([*question[:3], "9", *question[4:]], cache)
    assert again.returncode == status and "batch 9" in again.stdout


def test_console_runs_other_subcommands_through_sys_exit(tmp_path):
    """``memtheory sets`` through the console entry prints every set and exits 0."""
    done = _console(["sets"], tmp_path / "cache")
    assert done.returncode == 0 and done.stdout.startswith("ch01")
    assert done.stdout.endswith("\n") and done.stderr == ""


def test_the_command_collects_cycles_less_often_and_main_leaves_the_collector_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``console`` (the installed command) raises the youngest generation's threshold first.

    ``main`` is what a caller's own process runs: it must not touch the collector.
    """
    import gc

    import memtheory.cli as cli
    from memtheory._collector import YOUNG_OBJECTS

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    def main(arguments: list[str]) -> int:
        seen.append(gc.get_threshold())
        return 0

    monkeypatch.setattr(sys, "argv", ["memtheory", "sets"])
    try:
        assert cli.main(["sets"]) in (0, 1, 2)
        assert gc.get_threshold() == before
        monkeypatch.setattr(cli, "main", main)
        with pytest.raises(SystemExit) as stop:
            cli.console()
    finally:
        after = gc.get_threshold()
        gc.set_threshold(*before)
    assert stop.value.code == 0
    assert seen == [(YOUNG_OBJECTS, *before[1:])]
    assert after == seen[0]
    assert YOUNG_OBJECTS > before[0]

