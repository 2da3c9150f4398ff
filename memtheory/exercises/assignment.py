r"""An assignment: which exercises, worth how many points, due when, declared once for a class.

Without one, each answer file is graded on the sets it mentions, so two
learners can be scored out of different totals. An assignment fixes the
exercises (whole sets and single exercises), their points and the due date
for every learner: a blank file is scored against it too, and the columns of
the gradebook are its exercises, in its order.

The file is TOML::

    name = "Week 3: shapes and backpropagation"
    due = "2026-12-01"
    sets = ["ch03"]                 # every exercise of these sets
    exercises = ["ch04.q1", "ch04.q7"]  # and these
    [points]                        # optional: points other than the set's
    "ch04.q7" = 4

A teacher's **overrides** (a score set by hand, with the reason) are another
TOML file::

    [[override]]
    learner = "ada"                 # the learner id, or the answer file's name
    exercise = "ch03.q5"
    score = 1
    reason = "the floor written as int(), accepted"

Examples
--------
>>> assignment = parse_assignment({"sets": ["ch01"], "exercises": ["ch02.q1"],
...                                "points": {"ch02.q1": 3}})
>>> assignment.exercises[-1], assignment.points_of("ch02.q1", 1)
('ch02.q1', 3)
>>> assignment.sets[0]
'ch01'
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from memtheory.exercises.answers import read_regular_file
from memtheory.exercises.errors import AnswerFileError, UnknownExerciseError
from memtheory.exercises.loader import PathLike, load_sets, normalize_id
from memtheory.exercises.report import ExerciseResult, GradeReport

__all__ = [
    "Assignment",
    "Override",
    "apply_assignment",
    "apply_overrides",
    "parse_assignment",
    "parse_overrides",
    "read_assignment",
    "read_overrides",
]


@dataclass(frozen=True)
class Assignment:
    """The exercises every learner is graded on, their points and the due date.

    Attributes
    ----------
    exercises : tuple of str
        Full exercise ids, in the order of the gradebook's columns.
    points : mapping of str to int
        Points that replace an exercise's own.
    due : str or None
    name : str
    """

    exercises: tuple[str, ...]
    points: Mapping[str, int] = field(default_factory=dict)
    due: str | None = None
    name: str = ""

    @property
    def sets(self) -> tuple[str, ...]:
        """The sets the exercises belong to, in order."""
        return tuple(dict.fromkeys(i.split(".")[0] for i in self.exercises))

    def points_of(self, exercise_id: str, own: int) -> int:
        """Return the points ``exercise_id`` is worth here (``own``: the set's)."""
        return self.points.get(exercise_id, own)


def _bad(where: str, message: str) -> AnswerFileError:
    return AnswerFileError(f"{where}: {message}", reason="bad assignment")


def _ids(value: object, key: str, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where, f'{key} must be a list of ids, e.g. {key} = ["ch02"].')
    return list(value)


def _points(value: object, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(where, '[points] must be a table: "ch02.q1" = 2.')
    points = {}
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise _bad(where, f"the points of {key!r} must be a whole number >= 1.")
        points[normalize_id(str(key))] = number
    return points


def parse_assignment(
    data: Mapping[str, object], where: str = "assignment", sets_dir: PathLike | None = None
) -> Assignment:
    """Read an assignment from parsed TOML, checking every id against the exercise sets.

    Raises
    ------
    AnswerFileError
        For a key of the wrong type, an unknown set or exercise, points for an
        exercise the assignment does not list, or no exercise at all.
    """
    known = load_sets(sets_dir)
    chosen: dict[str, None] = {}
    for set_id in _ids(data.get("sets"), "sets", where):
        tidy = normalize_id(set_id)
        if tidy not in known:
            raise _bad(where, f"no set {set_id!r}; the sets are {', '.join(known)}.")
        chosen.update((full, None) for full in known[tidy].ids)
    for exercise_id in _ids(data.get("exercises"), "exercises", where):
        tidy = normalize_id(exercise_id)
        set_id = tidy.split(".")[0]
        if set_id not in known or tidy not in known[set_id].ids:
            raise _bad(where, f"no exercise {exercise_id!r}.")
        chosen[tidy] = None
    if not chosen:
        raise _bad(where, 'it names no exercise: sets = ["ch02"] or exercises = ["ch02.q1"].')
    points = _points(data.get("points"), where)
    stray = [i for i in points if i not in chosen]
    if stray:
        raise _bad(where, f"[points] names exercises it does not assign: {', '.join(stray)}.")
    due = data.get("due")
    name = data.get("name", "")
    return Assignment(tuple(chosen), points, None if due is None else str(due), str(name))


def _toml(path: str | os.PathLike[str], what: str) -> dict[str, object]:
    try:
        return tomllib.loads(read_regular_file(path).decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise AnswerFileError(
            f"{path}: the {what} is not TOML ({error}).", reason="not TOML"
        ) from None


def read_assignment(path: str | os.PathLike[str], sets_dir: PathLike | None = None) -> Assignment:
    """Read an assignment file (TOML; see the module's docstring)."""
    return parse_assignment(_toml(path, "assignment"), str(path), sets_dir)


def apply_assignment(report: GradeReport, assignment: Assignment) -> GradeReport:
    """Keep the assigned exercises of ``report`` in the assignment's order, at its points.

    The report must have been graded on the assignment's sets. A score is
    scaled to the assignment's points (rounded down: full credit stays full).
    Answers to exercises outside the assignment are noted, not scored.

    Examples
    --------
    >>> from memtheory.exercises.grading import grade_answers
    >>> assignment = Assignment(("ch02.q1",), {"ch02.q1": 5})
    >>> report = grade_answers({"ch02.q1": "78,500", "ch02.q2": "896"}, sets=["ch02"])
    >>> fixed = apply_assignment(report, assignment)
    >>> fixed.score, fixed.max_score, len(fixed.results)
    (5, 5, 1)
    """
    by_id = {r.id: r for r in report.results}
    missing = [i for i in assignment.exercises if i not in by_id]
    if missing:
        raise UnknownExerciseError(f"the report has no result for {', '.join(missing)}.")
    results = []
    for exercise_id in assignment.exercises:
        result = by_id[exercise_id]
        points = assignment.points_of(exercise_id, result.points)
        score = result.score * points // result.points if result.points else 0
        results.append(replace(result, points=points, score=score))
    assigned = set(assignment.exercises)
    extra = [r.id for r in report.results if r.id not in assigned and r.status != "unanswered"]
    notes = list(report.notes)
    if extra:
        notes.append(
            f"{len(extra)} answer(s) outside the assignment, not scored: {', '.join(extra)}"
        )
    unknown = [r for r in report.results if r.status == "unknown"]
    return replace(report, results=(*results, *unknown), notes=tuple(notes))


@dataclass(frozen=True)
class Override:
    """A score the teacher sets by hand for one learner's exercise, with the reason."""

    learner: str
    exercise: str
    score: int
    reason: str


def parse_overrides(data: Mapping[str, object], where: str = "overrides") -> tuple[Override, ...]:
    """Read ``[[override]]`` entries from parsed TOML.

    Examples
    --------
    >>> parse_overrides({"override": [{"learner": "ada", "exercise": "CH2.Q1", "score": 1,
    ...                                "reason": "accepted"}]})[0].exercise
    'ch02.q1'
    """
    entries = data.get("override", [])
    if not isinstance(entries, list):
        raise _bad(where, "write each override as a [[override]] table.")
    found = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, Mapping):
            raise _bad(where, f"override {number} is not a table.")
        learner, exercise, score = entry.get("learner"), entry.get("exercise"), entry.get("score")
        if not isinstance(learner, str) or not isinstance(exercise, str):
            raise _bad(where, f"override {number} needs learner and exercise, as text.")
        if isinstance(score, bool) or not isinstance(score, int) or score < 0:
            raise _bad(where, f"override {number}: score must be a whole number >= 0.")
        reason = str(entry.get("reason", "set by the teacher"))
        found.append(Override(learner, normalize_id(exercise), score, reason))
    return tuple(found)


def read_overrides(path: str | os.PathLike[str]) -> tuple[Override, ...]:
    """Read an overrides file (TOML; see the module's docstring)."""
    return parse_overrides(_toml(path, "overrides file"), str(path))


def _overridden(result: ExerciseResult, override: Override) -> ExerciseResult:
    score = min(override.score, result.points)
    feedback = f"Score set by the teacher to {score}/{result.points}: {override.reason}"
    return replace(result, score=score, feedback=f"{feedback} (graded: {result.feedback})")


def apply_overrides(
    report: GradeReport, overrides: Sequence[Override], file: str = ""
) -> tuple[GradeReport, list[Override]]:
    """Apply the overrides whose learner is the report's learner (or ``file``'s name).

    Returns the report and the overrides that applied. A score above the
    exercise's points is capped at them.

    Examples
    --------
    >>> from memtheory.exercises.grading import grade_answers
    >>> report = grade_answers({"ch02.q1": "1"}, sets=["ch02"], learner="ada")
    >>> fixed, used = apply_overrides(report, [Override("ada", "ch02.q1", 1, "accepted")])
    >>> fixed.result("ch02.q1").score, len(used)
    (1, 1)
    """
    names = {n.casefold() for n in (report.learner, file, os.path.splitext(file)[0]) if n}
    mine = [o for o in overrides if o.learner.casefold() in names]
    by_exercise = {o.exercise: o for o in mine}
    results = tuple(
        _overridden(r, by_exercise[r.id]) if r.id in by_exercise else r for r in report.results
    )
    used = [o for o in mine if any(r.id == o.exercise for r in report.results)]
    return replace(report, results=results), used
