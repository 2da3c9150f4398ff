"""One exercise's grade: its status, points, feedback and the misconceptions it matched.

:class:`ExerciseResult` is what the grader hands the reports
(:mod:`~memtheory.exercises.report`) and the class summary
(:mod:`~memtheory.exercises.class_summary`), which read it and nothing else.

Examples
--------
>>> ExerciseResult("ch02.q1", "dense layer", "correct", 1, 1, "78,500", "Correct.").passed
True
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ExerciseResult"]


@dataclass(frozen=True)
class ExerciseResult:
    """The grade of one exercise.

    Attributes
    ----------
    id : str
    title : str
    status : str
        One of :data:`~memtheory.exercises.report.STATUSES`.
    score, points : int
        Points earned, points available (0 for an unknown id).
    answer : str or None
        What the learner wrote, as text.
    feedback : str
    misconceptions : tuple of str
        Names of the misconceptions that explain the answer (one explanation: a mistake, or
        mistakes made together).
    candidates : tuple of str
        Where two or more explanations fit the answer as well as each other, their
        misconceptions, none of them named in :attr:`misconceptions`.
    expected : str or None
        The expected answer, when it may be shown.

    Examples
    --------
    >>> ExerciseResult("ch03.q1", "pooling", "correct", 1, 1, "12", "Correct.").passed
    True
    """

    id: str
    title: str
    status: str
    score: int
    points: int
    answer: str | None
    feedback: str
    misconceptions: tuple[str, ...] = ()
    expected: str | None = None
    candidates: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Whether the answer is right."""
        return self.status == "correct"

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        data: dict[str, object] = {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "score": self.score,
            "points": self.points,
            "answer": self.answer,
            "feedback": self.feedback,
            "misconceptions": list(self.misconceptions),
        }
        if self.candidates:
            data["candidates"] = list(self.candidates)
        if self.expected is not None:
            data["expected"] = self.expected
        return data
