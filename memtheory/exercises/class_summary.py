"""What a class got right and wrong, exercise by exercise: the teacher's view of a graded folder.

:func:`exercise_summary` reads the results of a folder
(:class:`~memtheory.exercises.report.FolderSummary`) and counts, for each
exercise, how many learners were graded on it, how many got it right, how many
answers could not be read or were left blank, and which named mistakes the
wrong answers matched, most common first (an answer explained by two mistakes
made together counts for both; one that two mistakes explain as well as each
other counts once, for the tie, as ``"a or b"``). ``memtheory grade FOLDER`` writes it beside the
grades as ``NAME.exercises.csv``, adds it to ``NAME.grades.json`` under
``"exercises"``, and prints it.

The same safety rules as the grades apply: text printed goes through
:func:`~memtheory.exercises.safe_text.printable`, and every CSV cell through
:func:`~memtheory.exercises.safe_text.csv_cell`.

Examples
--------
>>> from memtheory.exercises.report import ExerciseResult, FolderEntry, FolderSummary, GradeReport
>>> def report(learner, status, *mistakes):
...     result = ExerciseResult("ch02.q1", "dense layer", status, int(status == "correct"), 1,
...                             "78400", "...", mistakes)
...     return FolderEntry(f"{learner}.toml", GradeReport(learner, None, "canonical", ("ch02",),
...                                                       (result,)))
>>> folder = FolderSummary("class", (report("ada", "correct"), report("bob", "incorrect",
...     "forgot_bias"), report("cy", "incorrect", "forgot_bias")))
>>> (stats,) = exercise_summary(folder).exercises
>>> stats.correct, stats.learners, stats.percent_correct, stats.mistakes
(1, 3, 33.3, (('forgot_bias', 2),))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from memtheory.exercises.misconceptions import MISCONCEPTIONS, SLIPS
from memtheory.exercises.results import ExerciseResult
from memtheory.exercises.safe_text import csv_text, printable
from memtheory.tables import Column, Table

__all__ = ["ClassSummary", "ExerciseStats", "GradedFolder", "exercise_summary", "mistake_title"]

_SHOWN = 3
"""Mistakes named per exercise in the printed table (the CSV and JSON have all)."""

_EITHER = " or "
"""Joins the candidates of an answer that two or more mistakes explain as well: one count for
the tie (``"forgot_relu_output or forgot_x2"``), none for either mistake alone."""


def mistake_title(name: str) -> str:
    """Return what a named mistake means, in words (the name itself if it is not known).

    Examples
    --------
    >>> mistake_title("forgot_bias")
    'forgot the bias'
    >>> mistake_title("forgot_relu_output or forgot_x2")
    "either forgot the ReLU's own output, or forgot the x2 for activation gradients"
    """
    if _EITHER in name:
        return "either " + ", or ".join(mistake_title(part) for part in name.split(_EITHER))
    entry = MISCONCEPTIONS.get(name) or SLIPS.get(name)
    return entry.title if entry is not None else name


@dataclass(frozen=True)
class ExerciseStats:
    """How a class did on one exercise.

    Attributes
    ----------
    id, title : str
    points : int
    learners : int
        Answer files graded on this exercise.
    correct, incorrect, invalid, unanswered, errors : int
        Learners per status (``errors``: the grader failed; not counted against anyone).
    mistakes : tuple of (str, int)
        Named mistakes the wrong answers matched, with how many learners made
        each, most common first (ties by name).
    unexplained : int
        Wrong answers that matched no named mistake.
    """

    id: str
    title: str
    points: int
    learners: int
    correct: int
    incorrect: int
    invalid: int
    unanswered: int
    errors: int
    mistakes: tuple[tuple[str, int], ...]
    unexplained: int

    @property
    def percent_correct(self) -> float:
        """Share of the learners graded on it who got it right, in percent (one decimal)."""
        return round(100 * self.correct / self.learners, 1) if self.learners else 0.0

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {
            "id": self.id,
            "title": self.title,
            "points": self.points,
            "learners": self.learners,
            "correct": self.correct,
            "percent_correct": self.percent_correct,
            "incorrect": self.incorrect,
            "invalid": self.invalid,
            "unanswered": self.unanswered,
            "errors": self.errors,
            "mistakes": [
                {"name": name, "title": mistake_title(name), "learners": count}
                for name, count in self.mistakes
            ],
            "unexplained": self.unexplained,
        }


@dataclass(frozen=True)
class ClassSummary:
    """Every exercise's :class:`ExerciseStats`, in the order the results list them."""

    folder: str
    exercises: tuple[ExerciseStats, ...]

    def to_list(self) -> list[dict[str, object]]:
        """Plain data for JSON: one entry per exercise."""
        return [stats.to_dict() for stats in self.exercises]

    def rows(self) -> list[list[object]]:
        """Header and one row per exercise."""
        header: list[object] = [
            "exercise",
            "title",
            "points",
            "learners",
            "correct",
            "percent_correct",
            "incorrect",
            "invalid",
            "unanswered",
            "errors",
            "most_common_mistake",
            "most_common_mistake_learners",
            "mistakes",
            "unexplained_wrong",
        ]
        rows = [header]
        for s in self.exercises:
            top, top_count = s.mistakes[0] if s.mistakes else ("", "")
            rows.append(
                [
                    s.id,
                    s.title,
                    s.points,
                    s.learners,
                    s.correct,
                    s.percent_correct,
                    s.incorrect,
                    s.invalid,
                    s.unanswered,
                    s.errors,
                    f"{top} ({mistake_title(top)})" if top else "",
                    top_count,
                    "; ".join(f"{name}: {count}" for name, count in s.mistakes),
                    s.unexplained,
                ]
            )
        return rows

    def csv_text(self) -> str:
        """Return the rows as CSV, every text cell made safe by :func:`csv_cell`."""
        return csv_text(self.rows())

    def table(self) -> Table:
        """One row per exercise: right out of graded, and the most common mistakes."""
        rows = []
        for s in self.exercises:
            shown = ", ".join(
                f"{mistake_title(name)} [{name}] x{count}" for name, count in s.mistakes[:_SHOWN]
            )
            if len(s.mistakes) > _SHOWN:
                shown += f", {len(s.mistakes) - _SHOWN} more"
            rows.append(
                (
                    printable(s.id),
                    f"{s.correct}/{s.learners}",
                    f"{s.percent_correct}%",
                    str(s.invalid + s.unanswered),
                    printable(shown or "-"),
                )
            )
        columns = [
            Column("exercise"),
            Column("right", "right"),
            Column("percent", "right"),
            Column("blank/unreadable", "right"),
            Column("most common mistakes"),
        ]
        title = printable(f"by exercise, {self.folder}")
        return Table(columns, rows, title=title)


class _Graded(Protocol):
    """What the summary reads of a graded file's report: its results."""

    @property
    def results(self) -> Sequence[ExerciseResult]:
        """One result per exercise."""


class _Entry(Protocol):
    """What the summary reads of a folder's entry: its report, None if not graded."""

    @property
    def report(self) -> _Graded | None:
        """The file's grades, or None if it could not be graded."""


class GradedFolder(Protocol):
    """A graded folder as the summary reads it (a :class:`~.report.FolderSummary` is one)."""

    @property
    def folder(self) -> str:
        """The folder's name."""

    @property
    def entries(self) -> Sequence[_Entry]:
        """One entry per answer file."""


def exercise_summary(folder: GradedFolder) -> ClassSummary:
    """Count, for each exercise of a graded folder, who got it right and the mistakes made.

    Parameters
    ----------
    folder : GradedFolder
        A :class:`~memtheory.exercises.report.FolderSummary`: the results of
        ``memtheory grade FOLDER`` (files that could not be graded, and ids that
        are not exercises, are left out).

    Returns
    -------
    ClassSummary
    """
    found: dict[str, list[ExerciseResult]] = {}
    for entry in folder.entries:
        if entry.report is None:
            continue
        for result in entry.report.results:
            if result.status != "unknown":
                found.setdefault(result.id, []).append(result)
    stats = []
    for exercise_id, results in found.items():
        statuses = Counter(r.status for r in results)
        mistakes: Counter[str] = Counter()
        for r in results:
            if r.status == "incorrect":
                mistakes.update(dict.fromkeys(r.misconceptions, 1))
                if r.candidates:
                    mistakes[_EITHER.join(sorted(r.candidates))] += 1
        ordered = tuple(sorted(mistakes.items(), key=lambda item: (-item[1], item[0])))
        stats.append(
            ExerciseStats(
                id=exercise_id,
                title=results[0].title,
                points=max(r.points for r in results),
                learners=len(results),
                correct=statuses["correct"],
                incorrect=statuses["incorrect"],
                invalid=statuses["invalid"],
                unanswered=statuses["unanswered"],
                errors=statuses["error"],
                mistakes=ordered,
                unexplained=sum(
                    1
                    for r in results
                    if r.status == "incorrect" and not r.misconceptions and not r.candidates
                ),
            )
        )
    return ClassSummary(folder.folder, tuple(stats))
