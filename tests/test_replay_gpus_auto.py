"""``memtheory estimate --gpus auto`` at new sizes from its replay entry: the derived answer.

Issue 26: ``--gpus auto`` searches the device counts at each size, so its entry
keeps the peak per device of every data-parallel size the search tried (integer
code in B and S) and the answer at each count found
(:func:`memtheory.estimate.replay.searched_at`). Each case derives a question
once with the cache on, then asks it at other sizes: the entry must print what
the derived path (:func:`~memtheory.estimate.command.main_estimate`, no cache
read) prints, text and ``--json``, byte for byte, with the same exit status. A
size whose search reaches a count the entry has not kept is derived once, and
the entry answers it from then on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memtheory.cli import main
from memtheory.estimate import replay
from memtheory.estimate.command import main_estimate

ROOT = Path(__file__).resolve().parents[1]

ZERO3 = ["--gpus", "auto", "--zero", "3"]
CASES = {
    "README's ZeRO-3 question, H100-80GB": (
        ["llama-3-8b", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu", "H100-80GB"],
        (1, 4096), [(1, 4088), (1, 2000), (1, 128), (1, 100), (2, 64)],
    ),
    "Llama-3-8B, A100-40GB": (
        ["llama-3-8b", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu", "A100-40GB"],
        (1, 64), [(1, 100), (3, 32), (1, 4096), (1, 3000)],
    ),
    "GPT-2 (a position limit), every count, a memory limit": (
        ["gpt2", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu-counts", "any", "--limit",
         "3.5 GB"],
        (1, 1024), [(1, 1000), (1, 1), (2, 300), (3, 1024)],
    ),
    "GPT-2, --check (both verdicts), RTX 4090": (
        ["gpt2", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu", "RTX 4090", "--check"],
        (16, 1024), [(16, 1000), (64, 1024), (1, 64), (200, 1024)],
    ),
}
"""Questions derived once at their first sizes, then asked at each of the others."""


def _argv(template: list[str], batch: int, sequence: int) -> list[str]:
    return [part.format(b=batch, s=sequence) for part in template]


def _derived(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, int]:
    """What the derived path prints for ``argv``, and its exit status (no answer or entry read)."""
    capsys.readouterr()
    status = main_estimate(argv)
    return capsys.readouterr().out, status


def _replayed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, int | None]:
    capsys.readouterr()
    status = replay.replayed(argv)
    return capsys.readouterr().out, status


def _entry(cache: Path) -> dict:
    (path,) = cache.glob("*-replay-*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _not_kept(argv: list[str], cache: Path, capsys: pytest.CaptureFixture[str]) -> bool:
    """Whether the entry lacks a peak the derived search at ``argv`` tried, or its answer.

    Why the entry left the question to the derived path.
    """
    found = json.loads(_derived([*argv, "--json"], capsys)[0])["gpu_search"]
    entry = _entry(cache)
    group = entry["search"]["group"]
    peaks = {str(row["gpus"] // group) for row in found["tried"]}
    answer = str((found["gpus"] or group) // group)  # none fits: the answer on one replica
    return not peaks <= set(entry["search"]["peaks"]) or answer not in entry["answers"]


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache directory of the test's own (the tests' default keeps nothing on disk)."""
    monkeypatch.setenv("MEMTHEORY_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_new_sizes_print_what_the_derived_path_prints(name, cache, capsys) -> None:
    """Each question at new sizes: the entry prints the derived text and JSON, byte for byte."""
    template, first, others = CASES[name]
    capsys.readouterr()
    assert main(["estimate", *_argv(template, *first)]) in (0, 1)
    capsys.readouterr()
    assert "search" in _entry(cache), "the derived answer left a --gpus auto entry"
    straight, statuses = 0, set()
    for sizes in others:
        argv = _argv(template, *sizes)
        replayed = _replayed(argv, capsys)
        if replayed[1] is None:  # a count not kept yet: derived once, then kept
            assert _not_kept(argv, cache, capsys), sizes

            assert main(["estimate", *argv]) in (0, 1)
            replayed = _replayed(argv, capsys)
        else:
            straight += 1
        assert replayed[1] is not None, f"{sizes}: answered from the entry"
        assert replayed == _derived(argv, capsys), sizes
        statuses.add(replayed[1])
        as_json = [*argv, "--json"]
        assert _replayed(as_json, capsys) == _derived(as_json, capsys), sizes
    assert straight, "some sizes were answered from the entry as first written"
    assert statuses == ({0, 1} if "--check" in template else {0})


@pytest.mark.slow
def test_a_count_not_kept_is_derived_once_then_kept(cache, capsys) -> None:
    """At 128 tokens two H100s suffice, not the four found at 4096: derived once, then replayed."""
    template = CASES["README's ZeRO-3 question, H100-80GB"][0]
    assert main(["estimate", *_argv(template, 1, 4096)]) == 0
    before = _entry(cache)
    assert list(before["answers"]) == ["4"]
    assert set(before["search"]["peaks"]) == {"1", "2", "4"}  # 1, 2 and 4 tried
    argv = _argv(template, 1, 128)
    assert _replayed(argv, capsys) == ("", None)
    assert main(["estimate", *argv]) == 0
    after = _entry(cache)
    assert set(after["answers"]) == {"2", "4"}  # the new count beside the old
    for sizes in [(1, 4096), (1, 128), (1, 120)]:
        argv = _argv(template, *sizes)
        replayed = _replayed(argv, capsys)
        assert replayed[1] == 0
        assert replayed == _derived(argv, capsys)


def test_a_search_entry_without_a_count_answers_nothing(cache, capsys) -> None:
    """An entry whose search needs a peak it lacks, or is damaged, leaves the question to derive."""
    argv = ["llama-3-8b", "--seq", "512", *ZERO3, "--gpu", "H100-80GB"]
    found = replay._path(argv)  # noqa: SLF001 - where the entry would be
    assert found is not None
    answer = {"default_sequence": 512, "positions": 8192, "kind": "sequence"}
    search = {"names": ["B", "S"], "usable": 100, "group": 1, "most": 4096, "every": False,
              "whole": False, "counts": "powers of two", "peaks": {"1": "lambda B, S: (B*S)"}}
    for broken in [search, {**search, "peaks": {"1": "lambda B, S: (B*S"}}, {"names": ["B"]}]:
        found[0].write_text(json.dumps({"format": replay.FORMAT, "search": broken,
                                         "answers": {"1": answer}}))
        assert replay.replayed(argv) is None
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_the_read_back_path_imports_no_sympy(tmp_path: Path) -> None:
    """In fresh interpreters, the ZeRO-3 question at new sizes imports no sympy.

    Run as benchmarks/estimate_command.py runs it (its ``PROBED`` command, which
    says on standard error whether sympy was imported): the benchmark's verdict
    line rests on that probe.
    """
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from estimate_command import PROBED, QUESTIONS, new_sizes
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": str(tmp_path)}
    question = QUESTIONS["ZeRO-3"]
    runs = []
    for argv in [question, new_sizes(question, 0)]:
        done = subprocess.run([sys.executable, "-c", PROBED, "estimate", *argv],
                              capture_output=True, text=True, env=environment, cwd=ROOT,
                              check=False)
        runs.append((done.stdout, done.returncode, done.stderr.strip().splitlines()[-1]))
    (first, _, derived), (again, status, read_back) = runs
    assert derived == "sympy imported: True", "the probe sees sympy where it is imported"
    assert read_back == "sympy imported: False"
    assert "sequence 4088" in again and first != again
    environment["MEMTHEORY_CACHE"] = "off"
    done = subprocess.run(
        [sys.executable, "-m", "memtheory.cli", "estimate", *new_sizes(question, 0)],
        capture_output=True, text=True, env=environment, cwd=ROOT, check=False,
    )
    assert (done.stdout, done.returncode) == (again, status)
