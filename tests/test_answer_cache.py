"""A question asked again is answered from the cache, byte for byte, without sympy (issue 26).

Each command runs in a fresh interpreter (as a user runs it) with ``MEMTHEORY_CACHE``
pointing at a temporary directory, three ways: derived (the directory empty), with
the derived step read back (only the answers deleted) and with the answer read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memtheory.estimate import answer_cache
from memtheory.estimate.answer_cache import answered, question_key

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = """
import json, sys
from memtheory.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as stop:
    status = stop.code
print(json.dumps({"status": status, "sympy": "sympy" in sys.modules}), file=sys.stderr)
"""

QUESTIONS = {
    "LoRA": ["estimate", "llama-3-8b", "--lora", "16", "--seq", "4096", "--gpu", "RTX 4090"],
    "ZeRO-3": ["estimate", "llama-3-8b", "--seq", "4096", "--gpus", "auto", "--zero", "3",
               "--gpu", "H100-80GB"],
    "serve": ["serve", "llama-3-8b", "--context", "4096", "--gpu", "L4"],
    "estimate --serve": ["estimate", "gpt2", "--serve", "--context", "1024", "--gpu", "T4"],
    "sweep": ["estimate", "gpt2", "--lora", "8", "--sweep", "seq=128,256",
              "--sweep", "batch=1,4", "--sweep", "gpu=T4,L4"],
    "json": ["estimate", "gpt2", "--batch", "4", "--seq", "512", "--gpu", "T4", "--json"],
    "check, does not fit": ["estimate", "gpt2", "--batch", "64", "--seq", "1024", "--gpu", "T4",
                            "--check"],
}
"""The README's two Llama-3-8B questions (benchmarks/estimate_command.py), serving both ways,
a sweep, --json, and --check's exit status 1."""


def _run(argv: list[str], cache: Path) -> tuple[str, int, bool]:
    """Run ``memtheory ARGV`` in a fresh interpreter: its stdout, exit status, and sympy loaded."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *argv], capture_output=True, text=True, env=environment,
        cwd=ROOT, check=False,
    )
    found = json.loads(done.stderr.strip().splitlines()[-1])
    return done.stdout, found["status"], found["sympy"]


@pytest.mark.slow
@pytest.mark.parametrize("name", QUESTIONS)
def test_the_answer_read_back_is_the_answer_derived(name: str, tmp_path: Path) -> None:
    """Derived, from the cached step, and from the cached answer: one stdout and exit status."""
    argv = QUESTIONS[name]
    derived = _run(argv, tmp_path)
    answers = list(tmp_path.glob("*-answer-*.json"))
    assert len(answers) == 1  # the answer was kept
    answers[0].unlink()
    from_step = _run(argv, tmp_path)  # the step read back, the answer derived from it again
    read_back = _run(argv, tmp_path)
    assert derived[:2] == from_step[:2] == read_back[:2]
    assert derived[0].strip() and derived[1] == (1 if "--check" in argv else 0)
    assert derived[2] and not read_back[2]  # only the answer read back needs no sympy


def test_an_answer_read_back_imports_no_sympy(tmp_path: Path) -> None:
    """Asked again, the command answers without importing sympy; asked first, it imports it."""
    argv = ["estimate", "gpt2", "--batch", "2", "--seq", "128", "--gpu", "T4"]
    first = _run(argv, tmp_path)
    again = _run(argv, tmp_path)
    assert first[2], "the check sees sympy where it is imported"
    assert not again[2]
    assert again[:2] == first[:2]


def test_a_refused_question_is_not_kept(tmp_path: Path) -> None:
    """An error (exit status 2) keeps nothing: it is said again, the second time too."""
    argv = ["estimate", "no-such-model", "--gpu", "T4"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": str(tmp_path)}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "memtheory.cli", *argv], capture_output=True,
                              text=True, env=environment, cwd=ROOT, check=False)
        assert done.returncode == 2 and "no-such-model" in done.stderr
    assert not list(tmp_path.glob("*-answer-*.json"))


def _ask(monkeypatch: pytest.MonkeyPatch, cache: Path, argv: list[str], printed: str) -> list[int]:
    """Answer ``argv`` in-process with a stand-in command that prints ``printed``; its calls."""
    monkeypatch.setenv("MEMTHEORY_CACHE", str(cache))
    calls: list[int] = []

    def run() -> int:
        calls.append(1)
        print(printed)
        return 0

    assert answered("estimate", argv, run) == 0
    return calls


def test_the_same_question_runs_once_and_prints_the_same(monkeypatch, tmp_path, capsys) -> None:
    """The second time the command is not run, and what it printed is printed again."""
    assert _ask(monkeypatch, tmp_path, ["gpt2"], "first") == [1]
    assert _ask(monkeypatch, tmp_path, ["gpt2"], "second") == []
    assert capsys.readouterr().out == "first\nfirst\n"


def test_a_config_file_is_part_of_the_question(monkeypatch, tmp_path, capsys) -> None:
    """Changing a config file's bytes asks a new question (the command runs again)."""
    config = tmp_path / "config.json"
    config.write_text('{"n_layer": 2}')
    cache = tmp_path / "cache"
    assert _ask(monkeypatch, cache, [str(config)], "two layers") == [1]
    config.write_text('{"n_layer": 3}')
    assert _ask(monkeypatch, cache, [str(config)], "three layers") == [1]
    assert _ask(monkeypatch, cache, [str(config)], "not run") == []
    assert _ask(monkeypatch, cache, ["gpt2", f"--draft={config}"], "drafted") == [1]
    config.write_text('{"n_layer": 4}')
    assert _ask(monkeypatch, cache, ["gpt2", f"--draft={config}"], "drafted again") == [1]
    assert capsys.readouterr().out.splitlines() == [
        "two layers", "three layers", "three layers", "drafted", "drafted again"
    ]


def test_a_model_folder_is_asked_by_its_config(monkeypatch, tmp_path, capsys) -> None:
    """A folder holding a config.json (the form users download) is keyed by that file's bytes."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"n_layer": 2}')
    cache = tmp_path / "cache"
    assert _ask(monkeypatch, cache, [str(folder)], "two layers") == [1]
    assert _ask(monkeypatch, cache, [str(folder)], "not run") == []
    (folder / "config.json").write_text('{"n_layer": 3}')
    assert _ask(monkeypatch, cache, [str(folder)], "three layers") == [1]
    assert capsys.readouterr().out.splitlines() == ["two layers", "two layers", "three layers"]


@pytest.mark.parametrize(
    "argv", [["model.py:build"], ["model.py"], ["gpt2", "--help"], ["gpt2", "--draft=d.py:f"]]
)
def test_traced_code_and_help_are_never_kept(argv: list[str]) -> None:
    """A traced factory (code that is not memtheory's) and --help have no key."""
    assert question_key("estimate", argv) is None


def test_a_damaged_entry_is_answered_again(monkeypatch, tmp_path, capsys) -> None:
    """A truncated or altered answer file is ignored: the command runs, and keeps it anew."""
    _ask(monkeypatch, tmp_path, ["gpt2"], "kept")
    (entry,) = tmp_path.glob("*-answer-*.json")
    for damaged in ('{"stdout": "x"', '{"stdout": "x", "stderr": "", "status": 2}', "[]"):
        entry.write_text(damaged)
        assert _ask(monkeypatch, tmp_path, ["gpt2"], "again") == [1]
    assert capsys.readouterr().out == "kept\nagain\nagain\nagain\n"


def test_another_codes_answers_are_deleted(monkeypatch, tmp_path) -> None:
    """Writing an answer deletes those another version of the code wrote, and no other file."""
    stale = tmp_path / f"{'0' * 16}-answer-{'1' * 64}.json"
    other = tmp_path / "notes.json"
    tmp_path.mkdir(exist_ok=True)
    stale.write_text("{}")
    other.write_text("{}")
    _ask(monkeypatch, tmp_path, ["gpt2"], "new")
    assert not stale.exists() and other.exists()
    assert len(list(tmp_path.glob("*-answer-*.json"))) == 1


def test_no_cache_directory_runs_the_command_every_time(monkeypatch, capsys) -> None:
    """With ``MEMTHEORY_CACHE=off`` nothing is kept: the command runs each time."""
    monkeypatch.setenv("MEMTHEORY_CACHE", "off")
    calls: list[int] = []
    for _ in range(2):
        answered("estimate", ["gpt2"], lambda: calls.append(1) or 0)
    assert calls == [1, 1]
    assert answer_cache.cache_directory() is None
