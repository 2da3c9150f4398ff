r"""Grading results and how they are reported: text tables, JSON, CSV, atomic writes.

What learners wrote reaches a teacher's terminal and spreadsheet, so it is
made harmless on the way: every text printed (tables, notes) has its
control characters (a newline, an ANSI escape such as ``\x1b[2J``, a
right-to-left override) shown as escapes by :func:`printable`, and every CSV
cell that a spreadsheet would run as a formula (starting with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return) is prefixed with ``'`` by
:func:`csv_cell`. JSON keeps the data as written (JSON escapes control
characters itself).

Examples
--------
>>> result = ExerciseResult("ch02.q1", "dense layer", "correct", 1, 1, "78,500", "Correct.")
>>> report = GradeReport(learner="ada", seed=None, seed_source="canonical", sets=("ch02",),
...                      results=(result,))
>>> report.score, report.max_score, report.percent
(1, 1, 100.0)
>>> print(report.table())
learner ada, book numbers (no seed), sets ch02
exercise  score  status   feedback
--------  -----  -------  --------
ch02.q1   1/1    correct  Correct.
--------  -----  -------  --------
total     1/1    100.0%
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import memtheory
from memtheory.exercises.class_summary import ClassSummary, exercise_summary
from memtheory.exercises.errors import AnswerFileError, UnknownExerciseError
from memtheory.exercises.outputs import same_file
from memtheory.exercises.results import ExerciseResult
from memtheory.exercises.safe_text import csv_cell, csv_text, printable
from memtheory.tables import Column, Table

__all__ = [
    "FORMAT",
    "STATUSES",
    "ExerciseResult",
    "FolderEntry",
    "FolderSummary",
    "GradeReport",
    "csv_cell",
    "csv_text",
    "printable",
    "write_atomic",
]

FORMAT = "memtheory-grade/1"
"""Identifier of the JSON result format."""

STATUSES = {
    "correct": "the answer is right",
    "incorrect": "the answer was read but is wrong",
    "invalid": "the answer could not be read (see the feedback)",
    "unanswered": "no answer, or an empty one",
    "unknown": "the id is not an exercise: not graded, no points",
    "error": "the grader failed on this exercise (a bug to report); no points lost",
}
"""Every status an exercise result can have, and what it means."""

_FEEDBACK_WIDTH = 72


@dataclass(frozen=True)
class GradeReport:
    """The grades of one learner's answers.

    Attributes
    ----------
    learner : str or None
    seed : str or None
        The seed of the variants; ``None`` for the book's numbers.
    seed_source : str
        Where the seed came from: ``"option"``, ``"file"``, ``"learner"`` or ``"canonical"``.
    sets : tuple of str
        The sets graded.
    results : tuple of ExerciseResult
    source : str or None
        The answer file.
    notes : tuple of str
        Remarks about the file (ignored keys, answers for sets not graded).

    Examples
    --------
    >>> GradeReport("ada", "7", "file", ("ch03",), ()).heading()
    'learner ada, seed 7 (from the file), sets ch03'
    """

    learner: str | None
    seed: str | None
    seed_source: str
    sets: tuple[str, ...]
    results: tuple[ExerciseResult, ...]
    source: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def score(self) -> int:
        """Points earned."""
        return sum(r.score for r in self.results)

    @property
    def max_score(self) -> int:
        """Points available."""
        return sum(r.points for r in self.results)

    @property
    def percent(self) -> float:
        """Score as a percentage, one decimal."""
        return round(100 * self.score / self.max_score, 1) if self.max_score else 0.0

    def result(self, exercise_id: str) -> ExerciseResult:
        """Return the result of one exercise."""
        for result in self.results:
            if result.id == exercise_id:
                return result
        raise UnknownExerciseError(f"no result for {exercise_id!r}")

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON: totals, then one entry per exercise."""
        return {
            "format": FORMAT,
            "memtheory_version": memtheory.__version__,
            "answers_file": self.source,
            "learner": self.learner,
            "seed": self.seed,
            "seed_source": self.seed_source,
            "sets": list(self.sets),
            "score": self.score,
            "max_score": self.max_score,
            "percent": self.percent,
            "exercises": [r.to_dict() for r in self.results],
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        """Return the result as JSON text."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def heading(self) -> str:
        """Who, which numbers, which sets."""
        seed = {
            "canonical": "book numbers (no seed)",
            "learner": f"seed {self.seed} (from the learner id)",
            "file": f"seed {self.seed} (from the file)",
            "option": f"seed {self.seed} (from --seed)",
        }[self.seed_source]
        who = f"learner {self.learner}" if self.learner else "anonymous learner"
        return f"{who}, {seed}, sets {', '.join(self.sets)}"

    def table(self, width: int = _FEEDBACK_WIDTH) -> Table:
        """Per-exercise score, status, expected answer (when shown) and feedback, then the total.

        Feedback wraps at ``width`` characters in the text rendering.
        """
        show_expected = any(r.expected is not None for r in self.results)
        columns = [Column("exercise"), Column("score"), Column("status")]
        columns += [Column("expected")] if show_expected else []
        columns.append(Column("feedback", wrap=width))
        rows = [
            [printable(r.id), f"{r.score}/{r.points}", r.status]
            + ([printable(r.expected or "-")] if show_expected else [])
            + [printable(r.feedback)]
            for r in self.results
        ]
        total = ["total", f"{self.score}/{self.max_score}", f"{self.percent}%"]
        total += [""] * (len(columns) - len(total))
        notes = [f"note: {printable(note)}" for note in self.notes]
        return Table(columns, rows, footer=[total], title=printable(self.heading()), notes=notes)

    def __str__(self) -> str:
        return self.table().text()


@dataclass(frozen=True)
class FolderEntry:
    """One answer file of a folder: its report, or why it could not be graded, and any warning.

    ``error`` says in full why the file was not graded; ``reason`` says it in a few words,
    for a table row (``"a pipe"``, ``"link loop"``, ``"not TOML"``).

    Examples
    --------
    >>> FolderEntry("eve.toml", error="not valid TOML", reason="not TOML").report is None
    True
    """

    file: str
    report: GradeReport | None = None
    error: str | None = None
    warning: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class FolderSummary:
    """The grades of every answer file in a folder, for a teacher.

    Examples
    --------
    >>> summary = FolderSummary("answers", (FolderEntry("bad.toml", error="not TOML"),))
    >>> summary.csv_text().splitlines()[0]
    'file,learner,seed,score,max_score,percent,error,warning'
    """

    folder: str
    entries: tuple[FolderEntry, ...]
    warnings: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()

    @property
    def exercise_ids(self) -> list[str]:
        """The assignment's exercises (:attr:`columns`), else every graded one in order."""
        if self.columns:
            return list(self.columns)
        ids: dict[str, None] = {}
        for entry in self.entries:
            if entry.report:
                ids.update((r.id, None) for r in entry.report.results if r.status != "unknown")
        return list(ids)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON: one entry per file, with its full result."""
        return {
            "format": f"{FORMAT}-folder",
            "memtheory_version": memtheory.__version__,
            "folder": self.folder,
            "files": [
                {
                    "file": e.file,
                    "error": e.error,
                    "reason": e.reason,
                    "warning": e.warning,
                    "result": e.report.to_dict() if e.report else None,
                }
                for e in self.entries
            ],
            "exercises": self.by_exercise().to_list(),
            "warnings": list(self.warnings),
        }

    def by_exercise(self) -> ClassSummary:
        """Each exercise: who got it right, the most common mistakes (:mod:`.class_summary`)."""
        return exercise_summary(self)

    def to_json(self) -> str:
        """Return the summary as JSON text."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def rows(self) -> list[list[object]]:
        """Header and one row per file: totals and each exercise's score."""
        ids = self.exercise_ids
        header: list[object] = [
            "file",
            "learner",
            "seed",
            "score",
            "max_score",
            "percent",
            *ids,
            "error",
            "warning",
        ]
        rows = [header]
        for entry in self.entries:
            report = entry.report
            warning = entry.warning or ""
            if report is None:
                blank = [""] * (5 + len(ids))
                rows.append([entry.file, *blank, entry.error or "", warning])
                continue
            scores = {r.id: r.score for r in report.results}
            rows.append(
                [
                    entry.file,
                    report.learner or "",
                    report.seed or "",
                    report.score,
                    report.max_score,
                    report.percent,
                    *(scores.get(i, "") for i in ids),
                    "",
                    warning,
                ]
            )
        return rows

    def csv_text(self) -> str:
        """Return the rows as CSV, every text cell made safe by :func:`csv_cell`."""
        return csv_text(self.rows())

    def gradebook_rows(self) -> list[list[object]]:
        """Return a gradebook a learning-management system imports: learner id, then scores.

        One row per file: the learner id (the file's name without ``.toml``
        when it gives none), each exercise's score, the total and the points
        available. A file that could not be graded has empty scores and a
        short status (never the error text); the full reasons are in the JSON.

        Examples
        --------
        >>> summary = FolderSummary("answers", (FolderEntry("eve.toml", error="not valid TOML "
        ...     "(Expected '=' after a key)", reason="not TOML"),), columns=("ch02.q1",))
        >>> summary.gradebook_rows()
        [['learner_id', 'ch02.q1', 'total', 'max_score', 'status'], ['eve', '', '', '', 'not TOML']]
        """
        ids = self.exercise_ids
        rows: list[list[object]] = [["learner_id", *ids, "total", "max_score", "status"]]
        for entry in self.entries:
            stem = entry.file[:-5] if entry.file.lower().endswith(".toml") else entry.file
            report = entry.report
            if report is None:
                rows.append([stem, *([""] * (len(ids) + 2)), entry.reason or "not graded"])
                continue
            scores = {r.id: r.score for r in report.results}
            learner = (report.learner or "").strip() or stem
            status = "graded" if not entry.warning else "graded; learner id repeated"
            rows.append(
                [learner, *(scores.get(i, "") for i in ids), report.score, report.max_score, status]
            )
        return rows

    def gradebook_csv(self) -> str:
        """Return :meth:`gradebook_rows` as CSV (text cells made safe by :func:`csv_cell`)."""
        return csv_text(self.gradebook_rows())

    @property
    def failed(self) -> tuple[FolderEntry, ...]:
        """The files that could not be graded."""
        return tuple(e for e in self.entries if e.report is None)

    def table(self) -> Table:
        """One row per file: learner, score and percent, or in a few words why it was not graded.

        The full reasons follow the table as notes, so that rows stay narrow.

        Examples
        --------
        >>> summary = FolderSummary("answers", (FolderEntry("bad.toml", error="bad.toml: not "
        ...     "valid TOML (Expected '=' after a key) ...", reason="not TOML"),))
        >>> print(summary.table().text())  # doctest: +NORMALIZE_WHITESPACE
        1 answer file(s) in answers
        file      learner  score  percent  note
        --------  -------  -----  -------  --------------------
        bad.toml  -            -        -  not graded: not TOML
        not graded: bad.toml: bad.toml: not valid TOML (Expected '=' after a key) ...
        """
        rows = []
        for entry in self.entries:
            if entry.report is None:
                reason = entry.reason or "see below"
                rows.append((printable(entry.file), "-", "-", "-", f"not graded: {reason}"))
            else:
                r = entry.report
                rows.append(
                    (
                        printable(entry.file),
                        printable(r.learner or "(no learner)"),
                        f"{r.score}/{r.max_score}",
                        f"{r.percent}%",
                        "learner id repeated" if entry.warning else "",
                    )
                )
        columns = [
            Column("file"),
            Column("learner"),
            Column("score", "right"),
            Column("percent", "right"),
            Column("note"),
        ]
        title = printable(f"{len(self.entries)} answer file(s) in {self.folder}")
        notes = [f"not graded: {printable(e.file)}: {printable(e.error)}" for e in self.failed]
        notes += [f"warning: {printable(w)}" for w in self.warnings]
        return Table(columns, rows, title=title, notes=notes)


def write_atomic(
    path: str | os.PathLike[str], text: str, *, protect: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """Write ``text`` to ``path`` atomically.

    The text goes to a temporary file in the same folder, then :func:`os.replace` puts it in place.

    A reader sees the old file or the new one, never half of one; on failure
    the temporary file is removed and ``path`` is untouched.

    Parameters
    ----------
    path : path
    text : str
    protect : paths
        Files that must never be overwritten (the learner's answers).

    Raises
    ------
    AnswerFileError
        If ``path`` is one of ``protect``, or exists and is not a regular file (a symbolic
        link, a folder, a pipe, a device): its target is never written through.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "result.json", "{}").read_text()
    '{}'
    >>> write_atomic(folder / "answers.toml", "", protect=[folder / "answers.toml"])
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFileError: refusing to write the result over ...
    """
    target = Path(path)
    for protected in protect:
        if same_file(target, protected):
            raise AnswerFileError(
                f"refusing to write the result over {target}, which is an answer file."
            )
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(target).st_mode):
            raise AnswerFileError(
                f"{target} is not a regular file (a link, a folder, a pipe or a device): "
                "results are written only to regular files or new paths."
            )
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return target
