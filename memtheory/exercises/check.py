"""Checking one answer in a notebook, as otter-grader's ``check`` does.

Examples
--------
>>> check("ch02.q1", "78,500")
ch02.q1: passed (1/1). Correct.
>>> result = check("ch02.q1", 78_400)
>>> result.passed, result.misconceptions
(False, ('forgot_bias',))
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.exercises.grading import grade_variant
from memtheory.exercises.loader import PathLike, find_variant
from memtheory.exercises.report import ExerciseResult, printable
from memtheory.exercises.variants import SeedLike, resolve_seed

__all__ = ["CheckResult", "check", "question"]


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check` found: pass or fail, points, feedback; prints as one line.

    Attributes
    ----------
    result : ExerciseResult

    Examples
    --------
    >>> bool(check("ch03.q1", "12"))
    True
    """

    result: ExerciseResult

    @property
    def passed(self) -> bool:
        """Whether the answer is right."""
        return self.result.passed

    @property
    def score(self) -> int:
        """Points earned."""
        return self.result.score

    @property
    def points(self) -> int:
        """Points available."""
        return self.result.points

    @property
    def feedback(self) -> str:
        """What to make of the answer."""
        return self.result.feedback

    @property
    def misconceptions(self) -> tuple[str, ...]:
        """Names of the misconceptions the answer matches."""
        return self.result.misconceptions

    @property
    def candidates(self) -> tuple[str, ...]:
        """Misconceptions that explain the answer equally well, none of them named."""
        return self.result.candidates

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "not passed"
        points = f"({self.score}/{self.points})"
        return printable(f"{self.result.id}: {verdict} {points}. {self.feedback}")

    __repr__ = __str__

    def __bool__(self) -> bool:
        return self.passed


def check(
    exercise_id: str,
    answer: object,
    seed: SeedLike = None,
    *,
    learner: str | None = None,
    sets_dir: PathLike | None = None,
    show_expected: bool = False,
) -> CheckResult:
    """Grade one answer now: ``check("ch02.q3", answer)``.

    Parameters
    ----------
    exercise_id : str
        ``"ch02.q3"``.
    answer : object
        A number, text such as ``"22.9 MiB"``, a formula (text or sympy), or a letter.
    seed : str, int or None
        The variant's seed, as in an answer file's ``seed``; ``None`` for the
        book's numbers (unless ``learner`` is given).
    learner : str, optional
        A learner id, as in an answer file's ``learner``: the seed is derived
        from it, so the numbers are those the grader uses for that learner.
    sets_dir : path, optional
        Folder of the exercise sets. They are Python modules: every ``*.py``
        of the folder is imported, which runs its code (see Notes).
    show_expected : bool
        Put the expected answer in the result.

    Returns
    -------
    CheckResult
        Shown in a notebook as one line: pass or fail, points, feedback.

    Raises
    ------
    UnsupportedError
        If ``learner`` is not text, or ``seed`` is neither a whole number nor text.

    Notes
    -----
    Trust boundary: an exercise set is code, not data. ``sets_dir`` (like
    ``--sets`` and ``$MEMTHEORY_EXERCISES``) runs every ``*.py`` of the folder
    with your permissions, as ``python file.py`` would: give it only a folder
    you trust. The answer, on the other hand, is never run: it is read by
    :mod:`memtheory.bounded_parser` within limits (see
    :mod:`memtheory.exercises.parsing` for what it may look like).

    Examples
    --------
    >>> check("ch03.q1", 13)
    ch03.q1: not passed (0/1). Not correct. This is the answer you get if you rounded ...
    >>> from memtheory.exercises.variants import seed_from_learner
    >>> adas = find_variant("ch03.q1", seed_from_learner("ada")).expected
    >>> check("ch03.q1", adas, learner="ada").passed
    True
    """
    variant = find_variant(exercise_id, resolve_seed(option=seed, learner=learner)[0], sets_dir)
    return CheckResult(grade_variant(variant, answer, show_expected=show_expected))


def question(
    exercise_id: str,
    seed: SeedLike = None,
    *,
    learner: str | None = None,
    sets_dir: PathLike | None = None,
) -> str:
    """Return the question of one exercise, for ``seed`` (the book's numbers without one).

    Examples
    --------
    >>> print(question("ch03.q1"))
    A 2x2 max pooling with stride 2 ...
    """
    return find_variant(
        exercise_id, resolve_seed(option=seed, learner=learner)[0], sets_dir
    ).question
