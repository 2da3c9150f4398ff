"""Grading: one answer, a learner's answers, an answer file, a folder of answer files.

A wrong answer is compared with the answer of every misconception the
exercise lists (:meth:`~memtheory.exercises.model.Variant.diagnose`); the
feedback names those it matches. An answer that cannot be read gets a
message saying why, and the grader goes on with the next one.

Examples
--------
>>> report = grade_answers({"ch02.q1": "78,400", "ch02.q2": "896"}, sets=["ch02"])
>>> report.result("ch02.q1").misconceptions
('forgot_bias',)
>>> report.result("ch02.q2").status
'correct'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict

from memtheory.errors import MemtheoryError
from memtheory.exercises.answers import read_answer_file
from memtheory.exercises.assignment import Assignment, Override, apply_assignment, apply_overrides
from memtheory.exercises.errors import (
    AnswerFileError,
    AnswerFormatError,
    UnitMixupError,
    UnknownExerciseError,
)
from memtheory.exercises.kinds import Number, Quantity
from memtheory.exercises.loader import PathLike, find_variant, get_set, load_sets, normalize_id
from memtheory.exercises.misconceptions import SLIPS
from memtheory.exercises.model import Exercise, MistakenAnswer, Variant
from memtheory.exercises.report import ExerciseResult, FolderEntry, FolderSummary, GradeReport
from memtheory.exercises.variants import SeedLike, normalize_seed, resolve_seed

__all__ = ["grade_answers", "grade_file", "grade_folder", "grade_variant"]


class _Answered(TypedDict):
    """The fields of an :class:`ExerciseResult` known before grading."""

    id: str
    title: str
    points: int
    answer: str | None


_MAX_SHOWN = 1000


def _text(raw: object) -> str | None:
    """Return what the learner wrote as text for the report (cut short if very long)."""
    if raw is None:
        return None
    try:
        text = str(raw)
    except ValueError:  # an integer with more digits than Python prints
        return f"<a {type(raw).__name__} too large to show>"
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + f"... ({len(text)} characters)"


def _failed(exercise_id: str, title: str, raw: object, error: Exception) -> ExerciseResult:
    return ExerciseResult(
        exercise_id,
        title,
        "error",
        0,
        0,
        _text(raw),
        f"The grader could not compute this exercise ({type(error).__name__}: {error}); please "
        "report it. It is not counted.",
    )


def _mistakes(explanation: tuple[MistakenAnswer, ...]) -> str:
    return " and ".join(f"{m.title} [{m.name}]" for m in explanation)


def _misconception_feedback(
    variant: Variant, given: object, raw: object = None
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Return the feedback, the mistakes named, and the candidates when several fit equally.

    One explanation is named. Where two or more explain the answer as well (each within the
    tolerance), none is named: the feedback lists them as candidates the grader cannot tell
    apart, and they are returned as such.
    """
    explanations = variant.explain(given, raw)
    if not explanations:
        hint = variant.exercise.hint
        if not hint and isinstance(variant.kind, Quantity | Number) and variant.kind.rtol:
            hint = f"It is not within {variant.kind.rtol * 100:g}% of the exact value."
        return " ".join(part for part in ("Not correct.", hint) if part), (), ()
    hints = " ".join(dict.fromkeys(m.hint for e in explanations for m in e))
    names = tuple(dict.fromkeys(m.name for e in explanations for m in e))
    if len(explanations) == 1:
        (only,) = explanations
        details = "; and ".join(m.detail for m in only)
        text = f"Not correct. This is the answer you get if you {_mistakes(only)}: {details}. "
        return text + hints, names, ()
    within = ""
    if isinstance(variant.kind, Quantity | Number) and variant.kind.rtol:
        within = f" within {variant.kind.rtol * 100:g}%"
    options = "; or you ".join(
        f"{_mistakes(e)} ({'; and '.join(m.detail for m in e)})" for e in explanations
    )
    text = (
        f"Not correct. This answer matches {len(explanations)} possible slips{within}, and the "
        f"grader cannot tell which you made: you {options}. {hints}"
    )
    return text, (), names


def _partial(exercise: Exercise, names: tuple[str, ...]) -> tuple[int, str]:
    """Return the partial credit the set declares when one named mistake alone explains an answer.

    Examples
    --------
    >>> from memtheory.exercises.kinds import Integer
    >>> half = Exercise("q1", "?", Integer(), lambda p, how: 1, points=2,
    ...                 misconceptions=("forgot_bias",), partial={"forgot_bias": 1})
    >>> _partial(half, ("forgot_bias",))
    (1, ' Partial credit: 1 of 2 points for this one slip.')
    >>> _partial(half, ("forgot_bias", "parameters_times_batch"))
    (0, '')
    """
    if len(names) != 1 or names[0] not in exercise.partial:
        return 0, ""
    credit = exercise.partial[names[0]]
    return credit, f" Partial credit: {credit} of {exercise.points} points for this one slip."


def grade_variant(
    variant: Variant, raw: object, *, answered: bool = True, show_expected: bool = False
) -> ExerciseResult:
    """Grade one answer to one variant.

    Parameters
    ----------
    variant : Variant
    raw : object
        What the learner wrote.
    answered : bool
        False when the learner gave no answer at all.
    show_expected : bool
        Put the expected answer in the result (also done when the exercise reveals it).

    Examples
    --------
    >>> from memtheory.exercises.loader import find_variant
    >>> grade_variant(find_variant("ch02.q1"), "nan").feedback
    'Cannot grade this answer: nan is not a finite number: give a number such as 12.5.'
    """
    exercise, kind = variant.exercise, variant.kind
    title = exercise.title or exercise.id
    base: _Answered = {
        "id": variant.id,
        "title": title,
        "points": exercise.points,
        "answer": _text(raw),
    }
    try:
        expected = variant.expected
    except Exception as error:  # the set's bug must not stop the grading of the others
        return _failed(variant.id, title, raw, error)
    shown = kind.display(expected) if show_expected or exercise.reveal else None
    if not answered:
        return ExerciseResult(
            **base, status="unanswered", score=0, feedback="No answer in the file.", expected=shown
        )
    try:
        given = kind.parse(raw)
    except UnitMixupError as error:  # read, but as the wrong quantity: wrong, and named
        slip = SLIPS[error.slip]
        score, credit = _partial(exercise, (slip.name,))
        return ExerciseResult(
            **base,
            status="incorrect",
            score=score,
            feedback=f"Not correct. You {slip.title} [{slip.name}]: {error} {slip.hint}{credit}",
            misconceptions=(slip.name,),
            expected=shown,
        )
    except AnswerFormatError as error:
        empty = isinstance(raw, str) and not raw.strip()
        return ExerciseResult(
            **base,
            status="unanswered" if empty else "invalid",
            score=0,
            feedback="The answer is empty." if empty else f"Cannot grade this answer: {error}",
            expected=shown,
        )
    if kind.matches(given, expected):
        feedback = "Correct."
        if isinstance(kind, Quantity | Number) and kind.rtol and given != expected:
            feedback = f"Correct (exactly {kind.display(expected)})."
        return ExerciseResult(
            **base, status="correct", score=exercise.points, feedback=feedback, expected=shown
        )
    feedback, names, candidates = _misconception_feedback(variant, given, raw)
    score, credit = _partial(exercise, names)
    return ExerciseResult(
        **base,
        status="incorrect",
        score=score,
        feedback=feedback + credit,
        misconceptions=names,
        candidates=candidates,
        expected=shown,
    )


def grade_answers(
    answers: Mapping[str, object],
    *,
    seed: SeedLike = None,
    sets: Sequence[str] | None = None,
    sets_dir: PathLike | None = None,
    show_expected: bool = False,
    learner: str | None = None,
    seed_source: str | None = None,
    source: str | None = None,
    notes: Sequence[str] = (),
) -> GradeReport:
    """Grade answers given by exercise id.

    Parameters
    ----------
    answers : mapping of str to object
        Answer by exercise id (``"ch02.q1"``); ids are tidied (``CH2.Q1`` is ``ch02.q1``).
    seed : str, int or None
        The variants' seed; ``None`` for the book's numbers.
    sets : sequence of str, optional
        Sets to grade. By default the sets the answers mention, or all sets
        when they mention none.
    sets_dir : path, optional
        Folder of the exercise sets (see :func:`~memtheory.exercises.loader.find_sets_dir`).
    show_expected : bool
        Include expected answers.
    learner, seed_source, source, notes
        Recorded in the report.

    Returns
    -------
    GradeReport
        Every exercise of the chosen sets (unanswered ones score 0), then a
        row for each id that is not an exercise.

    Examples
    --------
    >>> blank = grade_answers({}, sets=["ch01"])
    >>> blank.score, blank.max_score > 0, {r.status for r in blank.results}
    (0, True, {'unanswered'})
    """
    all_sets = load_sets(sets_dir)
    key = normalize_seed(seed)
    given: dict[str, tuple[str, object]] = {}
    remarks = list(notes)
    for written, raw in answers.items():
        tidy = normalize_id(written)
        if tidy in given:
            remarks.append(f"{written!r} repeats {given[tidy][0]!r}; the last one is graded")
        given[tidy] = (str(written), raw)
    if sets:
        chosen = [get_set(s, sets_dir).id for s in sets]
    else:
        chosen = [s for s in all_sets if any(i.startswith(f"{s}.") for i in given)] or list(
            all_sets
        )
    every = {full for s in all_sets.values() for full in s.ids}
    results = []
    for set_id in dict.fromkeys(chosen):
        for exercise in all_sets[set_id].exercises:
            full = f"{set_id}.{exercise.id}"
            written, raw = given.get(full, (full, None))
            try:
                variant = all_sets[set_id].variant(exercise.id, key)
                results.append(
                    grade_variant(variant, raw, answered=full in given, show_expected=show_expected)
                )
            except Exception as error:  # keep grading the others
                results.append(_failed(full, exercise.title or exercise.id, raw, error))
    skipped = [
        written
        for tidy, (written, _) in given.items()
        if tidy in every and tidy.split(".")[0] not in chosen
    ]
    if skipped:
        remarks.append(f"{len(skipped)} answer(s) for other sets not graded: {', '.join(skipped)}")
    for tidy, (written, raw) in given.items():
        if tidy not in every:
            try:
                find_variant(tidy, None, sets_dir)
            except UnknownExerciseError as error:
                message = str(error)
            else:  # pragma: no cover - every id of a set is in ``every``
                message = "not an exercise of the graded sets"
            results.append(
                ExerciseResult(written, "", "unknown", 0, 0, _text(raw), f"Not graded: {message}")
            )
    return GradeReport(
        learner=learner,
        seed=key,
        seed_source=seed_source or ("canonical" if key is None else "option"),
        sets=tuple(dict.fromkeys(chosen)),
        results=tuple(results),
        source=source,
        notes=tuple(remarks),
    )


def _file_sets(
    named: Sequence[str] | None, sets_dir: PathLike | None, where: str
) -> tuple[list[str] | None, list[str]]:
    """Return the sets an answer file names that exist, and a note for each that does not."""
    if not named:
        return None, []
    known, notes = [], []
    for set_id in named:
        try:
            known.append(get_set(set_id, sets_dir).id)
        except UnknownExerciseError as error:
            notes.append(f"the file's sets name {set_id!r}, which is not graded: {error}")
    if not known:
        raise AnswerFileError(
            f"{where}: none of the sets it names exists ({'; '.join(notes)}).",
            reason="unknown sets",
        )
    return known, notes


def grade_file(
    path: str | os.PathLike[str],
    *,
    seed: SeedLike = None,
    sets: Sequence[str] | None = None,
    sets_dir: PathLike | None = None,
    show_expected: bool = False,
    within: str | os.PathLike[str] | None = None,
) -> GradeReport:
    r"""Grade an answer file (TOML); the file is only read.

    The seed is ``seed`` if given, else the file's ``seed``, else derived
    from its ``learner``, else none (the book's numbers). A set the file's
    ``sets`` names that does not exist is noted in the report and the others
    are graded.

    Parameters
    ----------
    within : path, optional
        The folder being graded: a symbolic link out of it is not followed.

    Raises
    ------
    AnswerFileError
        If the file cannot be read as an answer file, or names only sets that do not exist.

    Examples
    --------
    >>> import tempfile
    >>> file = Path(tempfile.mkdtemp()) / "answers.toml"
    >>> _ = file.write_text('[answers]\n"ch02.q1" = "78,500"\n')
    >>> grade_file(file).result("ch02.q1").status
    'correct'
    """
    document = read_answer_file(path, within=within)
    chosen_seed, seed_source = resolve_seed(
        option=seed, file_seed=document.seed, learner=document.learner
    )
    notes = list(document.notes)
    chosen = list(sets) if sets else None
    if not chosen:
        chosen, unknown = _file_sets(document.sets, sets_dir, str(path))
        notes += unknown
    return grade_answers(
        document.answers,
        seed=chosen_seed,
        sets=chosen,
        sets_dir=sets_dir,
        show_expected=show_expected,
        learner=document.learner,
        seed_source=seed_source,
        source=str(path),
        notes=notes,
    )


def _answer_files(directory: Path) -> tuple[list[Path], list[str]]:
    """Return the ``*.toml`` entries of a folder (of any kind), and the names of the others."""
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except OSError as error:
        raise AnswerFileError(
            f"cannot list the folder {directory}: {error.strerror or error}."
        ) from None
    answers = [directory / n for n in names if n.lower().endswith(".toml")]
    others = [n for n in names if not n.lower().endswith(".toml") and not n.startswith(".")]
    return answers, others


def _duplicate_learners(entries: Sequence[FolderEntry]) -> tuple[dict[str, str], list[str]]:
    """Warn on each file whose learner id another file has too, and once per such id."""
    files: dict[str, list[str]] = {}
    shown: dict[str, str] = {}
    for entry in entries:
        learner = entry.report.learner if entry.report is not None else None
        if learner and learner.strip():
            key = learner.strip().casefold()
            files.setdefault(key, []).append(entry.file)
            shown.setdefault(key, learner.strip())
    per_file, summary = {}, []
    for key, names in files.items():
        if len(names) > 1:
            summary.append(
                f"learner {shown[key]!r} is in {len(names)} files ({', '.join(names)}); "
                "each is graded"
            )
            for name in names:
                others = ", ".join(n for n in names if n != name)
                per_file[name] = f"the same learner id is in {others}"
    return per_file, summary


def _graded(
    file: Path,
    directory: Path,
    options: Mapping[str, Any],
    assignment: Assignment | None,
    overrides: Sequence[Override],
) -> tuple[FolderEntry, list[Override]]:
    """Grade one file of a folder: its entry, and the overrides that applied to it.

    The entry carries the reason when the file cannot be graded. A top-level
    function, so that a worker process can run it.
    """
    try:
        report = grade_file(file, within=directory, **options)
        if assignment is not None:
            report = apply_assignment(report, assignment)
        report, used = apply_overrides(report, overrides, file.name)
    except MemtheoryError as error:
        reason = getattr(error, "reason", None) or type(error).__name__
        return FolderEntry(file.name, error=str(error), reason=reason), []
    except Exception as error:  # one file must not stop the others
        return _grader_failed(file, error), []
    return FolderEntry(file.name, report=report), used


def _grader_failed(file: Path, error: BaseException) -> FolderEntry:
    return FolderEntry(
        file.name,
        error=f"the grader failed on this file ({type(error).__name__}: {error}); "
        "please report it.",
        reason="grader failed",
    )


Progress = Callable[[int, int], None]
"""``progress(done, total)``: called after each file of a folder is graded."""


def _grade_all(
    files: Sequence[Path], directory: Path, jobs: int, progress: Progress | None, *rest: Any
) -> list[tuple[FolderEntry, list[Override]]]:
    """Grade ``files`` in order, in ``jobs`` worker processes when more than one."""
    done: list[tuple[FolderEntry, list[Override]] | None] = [None] * len(files)
    if jobs <= 1 or len(files) < 2:
        for index, file in enumerate(files):
            done[index] = _graded(file, directory, *rest)
            if progress:
                progress(index + 1, len(files))
        return [d for d in done if d is not None]
    with ProcessPoolExecutor(max_workers=min(jobs, len(files))) as pool:
        futures = {pool.submit(_graded, f, directory, *rest): i for i, f in enumerate(files)}
        for count, future in enumerate(as_completed(futures), 1):
            index = futures[future]
            try:
                done[index] = future.result()
            except Exception as error:  # a worker that died: this file's row says so
                done[index] = (_grader_failed(files[index], error), [])
            if progress:
                progress(count, len(files))
    return [d for d in done if d is not None]


def _sets_text(sets: tuple[str, ...]) -> str:
    """``ch02, ch09``; a long run as ``ch01 ... ch20 (20 sets)``."""
    if len(sets) > 4:
        return f"{sets[0]} ... {sets[-1]} ({len(sets)} sets)"
    return ", ".join(sets) or "none"


def _mixed_sets(entries: Sequence[FolderEntry]) -> list[str]:
    """Warn when the files were graded on different sets: their totals are not comparable."""
    seen = {e.report.sets for e in entries if e.report is not None}
    if len(seen) < 2:
        return []
    listed = "; ".join(_sets_text(s) for s in sorted(seen)[:4])
    return [
        f"the files were graded on {len(seen)} different choices of sets ({listed}), so their "
        "scores are out of different totals: declare an assignment (--assignment FILE) or "
        "--set so that every learner is graded on the same exercises"
    ]


def grade_folder(
    folder: str | os.PathLike[str],
    *,
    seed: SeedLike = None,
    sets: Sequence[str] | None = None,
    sets_dir: PathLike | None = None,
    show_expected: bool = False,
    assignment: Assignment | None = None,
    overrides: Sequence[Override] = (),
    jobs: int = 1,
    progress: Progress | None = None,
) -> FolderSummary:
    r"""Grade every ``*.toml`` answer file of a folder; a file that cannot be graded is reported.

    Every file is graded on its own: one that cannot be read (not a regular
    file, a symbolic link out of the folder or in a loop, too large, not
    UTF-8, not TOML, keys nested too deeply, sets that do not exist), or on
    which the grader fails, becomes an entry with the reason (in full, and in
    a few words) and the others are graded. Files are only read. Two files with
    the same learner id are graded both, with a warning on each.

    With an ``assignment`` every file is graded on its exercises at its
    points (:func:`~memtheory.exercises.assignment.apply_assignment`), blank
    files included, and the CSV's columns are its exercises. Without one,
    files graded on different sets are warned about. ``overrides`` (scores
    set by the teacher) apply last; one that matches no file is warned about.
    With ``jobs`` above 1 the files are graded in that many worker processes
    (the results in the same order); ``progress(done, total)`` is called
    after each file.

    Raises
    ------
    AnswerFileError
        Only if the folder itself cannot be listed.
    ExerciseSetsNotFoundError, ExerciseDefinitionError
        If the exercise sets cannot be loaded (checked before any file is graded).

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "ada.toml").write_text('learner = "ada"\n[answers]\n"ch01.q1" = "1"\n')
    >>> _ = (folder / "broken.toml").write_text("this is = not = toml")
    >>> [(e.file, e.error is None) for e in grade_folder(folder).entries]
    [('ada.toml', True), ('broken.toml', False)]
    """
    directory = Path(folder)
    load_sets(sets_dir)  # a missing or broken folder of sets is the teacher's to fix: stop here
    files, others = _answer_files(directory)
    options: dict[str, Any] = {
        "seed": seed,
        "sets": list(assignment.sets) if assignment else sets,
        "sets_dir": sets_dir,
        "show_expected": show_expected,
    }
    graded = _grade_all(files, directory, jobs, progress, options, assignment, overrides)
    entries = [entry for entry, _ in graded]
    used = [override for _, applied in graded for override in applied]
    per_file, warnings = _duplicate_learners(entries)
    if assignment is None:
        warnings += _mixed_sets(entries)
    unused = [o for o in overrides if o not in used]
    if unused:
        warnings.append(
            f"{len(unused)} override(s) matched no graded file: "
            + ", ".join(f"{o.learner} {o.exercise}" for o in unused[:10])
        )
    entries = [replace(e, warning=per_file.get(e.file)) for e in entries]
    if others:
        listed = ", ".join(others[:10]) + (
            f" and {len(others) - 10} more" if len(others) > 10 else ""
        )
        warnings.append(f"{len(others)} file(s) not named *.toml were not graded: {listed}")
    columns = assignment.exercises if assignment else ()
    return FolderSummary(str(directory), tuple(entries), tuple(warnings), columns)
