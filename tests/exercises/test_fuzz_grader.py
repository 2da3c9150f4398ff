"""Fuzzing the grader: hostile answers, sizes and folders end in a result or a memtheory error.

For every input drawn (tests/strategies.py: towers of powers, deep nesting, huge literals, code,
control characters, NumPy scalars, sympy expressions; folders with pipes, devices, links out,
huge and broken files) the invariants of issue 12 are checked:

- the call finishes within a hang guard (``GUARD`` seconds: a guard against hangs, far above
  the milliseconds these calls take; timings are in benchmarks/hostile_input.py);
- it returns a result or raises a :class:`~memtheory.errors.MemtheoryError`, never a raw error;
- grading a folder leaves every learner file as it was, always writes its results, and prints
  no control character.

The last test prints how many hostile inputs were tried. The whole module runs in well under a
minute (example counts are fixed below; ``MEMTHEORY_FUZZ_SCALE=N`` multiplies them).
"""

import csv
import hashlib
import json
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings

import memtheory as mt
from memtheory.cli import main
from memtheory.errors import MemtheoryError
from memtheory.exercises import find_variant, grade_variant
from memtheory.exercises.kinds import Choice, Expression, Integer, Number, Quantity
from memtheory.exercises.report import STATUSES
from memtheory.symbols import B, H
from tests.strategies import HOSTILE_TEXTS, answer_folders, hostile_answers, hostile_texts

GUARD = 60.0
"""Seconds after which a call counts as hung."""

SCALE = int(os.environ.get("MEMTHEORY_FUZZ_SCALE", "1"))
"""Multiplies every example count: ``MEMTHEORY_FUZZ_SCALE=40`` for a long campaign."""

TALLY: Counter = Counter()
SLOWEST: dict[str, float] = {}

KINDS = (
    Integer(),
    Number(),
    Number(percent=True),
    Quantity("MiB"),
    Quantity("GB"),
    Expression((B, H)),
    Choice(("SGD", "Adam", "RMSprop")),
)
VARIANTS = [find_variant(i) for i in ("ch02.q1", "ch01.q1", "ch02.q9", "ch03.q6", "ch04.q5")]


def guarded(what, call):
    """Run ``call`` with a hang guard; return what it returned or raised, and count it."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as error:  # noqa: BLE001 - classified by the caller
            box["value"] = error

    start = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD)
    elapsed = time.perf_counter() - start
    TALLY[what] += 1
    SLOWEST[what] = max(SLOWEST.get(what, 0.0), elapsed)
    if thread.is_alive():
        TALLY["hung"] += 1
        pytest.fail(f"{what} still running after {GUARD} s")
    value = box["value"]
    if isinstance(value, BaseException) and not isinstance(value, MemtheoryError):
        TALLY["raw errors"] += 1
        raise AssertionError(f"{what} raised a raw {type(value).__name__}: {value}") from value
    return value


@settings(max_examples=250 * SCALE, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_answers)
def test_answer_parsers_end_in_a_value_or_a_memtheory_error(raw):
    """Every answer kind reads any input to a value or an AnswerFormatError, without hanging."""
    for kind in KINDS:
        guarded("answer parses", lambda kind=kind: kind.parse(raw))


@settings(max_examples=120 * SCALE, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_answers)
def test_grading_any_answer_gives_a_graded_result(raw):
    """Grading any input gives a result with a known status, never the grader's own failure."""
    for variant in VARIANTS:
        result = guarded("answers graded", lambda variant=variant: grade_variant(variant, raw))
        assert result.status in STATUSES and result.status != "error", result.feedback


@settings(max_examples=250 * SCALE)
@given(hostile_texts)
def test_parse_bytes_ends_in_bytes_or_a_memtheory_error(text):
    """parse_bytes reads any text to a non-negative exact size or a memtheory error."""
    value = guarded("sizes parsed", lambda: mt.parse_bytes(text))
    if not isinstance(value, MemtheoryError):
        assert isinstance(value, sp.Rational) and value >= 0


def _populate(folder: Path, outside: Path, entries) -> dict[str, bytes]:
    """Create the folder's entries; return the bytes of every regular file, by name."""
    for name, content in entries:
        path = folder / name
        if content == "<fifo>":
            os.mkfifo(path)
        elif content == "<dev-zero>":
            path.symlink_to("/dev/zero")
        elif content == "<link-out>":
            path.symlink_to(outside)
        elif content == "<folder>":
            path.mkdir()
        elif content == "<huge>":
            path.write_bytes(b"#" * ((1 << 20) + 1))
        else:
            path.write_bytes(content)
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.is_symlink()}


def _fingerprint(folder: Path) -> list[tuple[str, str]]:
    entries = []
    for path in sorted(folder.iterdir()):
        if path.is_symlink():
            entries.append((path.name, "link:" + os.readlink(path)))
        elif path.is_file():
            entries.append((path.name, hashlib.sha256(path.read_bytes()).hexdigest()))
        else:
            entries.append((path.name, "other"))
    return entries


@settings(max_examples=12 * SCALE, suppress_health_check=[HealthCheck.too_slow])
@given(answer_folders)
def test_folder_grading_always_writes_results_and_never_changes_a_learner_file(entries):
    """Any folder is graded: results written, learner files unchanged, nothing raw printed."""
    with tempfile.TemporaryDirectory() as root:
        base = Path(root)
        folder = base / "submissions"
        folder.mkdir()
        outside = base / "secret.toml"
        outside.write_text('learner = "outside"\n')
        before_outside = outside.read_bytes()
        _populate(folder, outside, entries)
        before = _fingerprint(folder)
        out, err = base / "out.txt", base / "err.txt"

        def grade():
            import contextlib

            with open(out, "w") as stdout, open(err, "w") as stderr:
                with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                    return main(["grade", str(folder), "--show-expected"])

        code = guarded("folders graded", grade)
        TALLY["files in folders"] += len(entries)
        assert _fingerprint(folder) == before
        assert outside.read_bytes() == before_outside
        summary = json.loads((base / "submissions.grades.json").read_text(encoding="utf-8"))
        ungraded = [f for f in summary["files"] if f["result"] is None]
        assert code == (1 if ungraded else 0)  # 1: results written, some files not graded
        assert all(f["reason"] and f["error"] for f in ungraded)
        graded = [e for e in entries if e[0].lower().endswith(".toml")]
        assert len(summary["files"]) == len(graded)
        rows = list(csv.reader((base / "submissions.grades.csv").open(encoding="utf-8")))
        assert len(rows) == len(graded) + 1
        assert all(not str(cell).startswith(("=", "+", "-", "@")) for row in rows for cell in row)
        printed = out.read_text() + err.read_text()
        assert all(c.isprintable() or c in "\n" for c in printed), repr(printed[:200])


def test_the_issue_texts_are_among_the_inputs():
    """The fixed corpus holds every hostile text of issue 12's grader part."""
    for text in ("((((9**64)**64)**64)**64)", "1e99999999 GB", "9" * 5000 + " B", "524k"):
        assert text in HOSTILE_TEXTS


def test_report_how_many_hostile_inputs_were_tried(capsys):
    """Print the tally: inputs tried; none hung, raised a raw error or changed a learner file."""
    tried = sum(v for k, v in TALLY.items() if k not in ("hung", "raw errors", "files in folders"))
    if tried == 0:
        pytest.skip("run with the fuzz tests above to get a tally")
    with capsys.disabled():
        print(
            f"\nhostile inputs tried: {tried} ("
            + ", ".join(f"{TALLY[k]} {k}" for k in sorted(SLOWEST))
            + f"; {TALLY['files in folders']} files in those folders); hung: {TALLY['hung']}, "
            f"raw errors: {TALLY['raw errors']}, learner files changed: 0; slowest: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(SLOWEST.items()))
        )
    assert TALLY["hung"] == 0 and TALLY["raw errors"] == 0
