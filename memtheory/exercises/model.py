"""Exercises, exercise sets, and variants: data plus the code that computes the answer.

An :class:`Exercise` is a question template, the parameters it may take, an
answer kind, points, the misconceptions that apply, and a *solver*: a
function ``solve(p, how)`` that computes the answer from the parameters
``p`` through memtheory and the steps of ``how`` (a
:class:`~memtheory.exercises.reasoning.Reasoning`). No answer is typed in:
the expected answer is ``solve(p, CORRECT)``, and the answer of each
misconception is the same solver run with that misconception's reasoning.

A :class:`Variant` is an exercise with its parameters drawn for one seed.

Examples
--------
>>> from memtheory import Dense, Input
>>> from memtheory.exercises.kinds import Integer
>>> dense = Exercise(
...     id="q1",
...     question="How many parameters does a dense layer from {inputs} to {units} features have?",
...     params={"inputs": (784, 512), "units": (100, 10)},
...     answer=Integer(),
...     solve=lambda p, how: how.parameter_count(
...         how.network([Input((p.inputs,)), Dense(p.units)])),
...     misconceptions=("forgot_bias",),
... )
>>> demo = ExerciseSet("demo", "A demonstration", (dense,))
>>> variant = demo.variant("q1")
>>> variant.expected
78500
>>> [(m.name, m.value) for m in variant.mistaken_answers()]
[('forgot_bias', 78400)]
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from memtheory.errors import UnknownAttributeError
from memtheory.exercises.errors import ExerciseDefinitionError, UnknownExerciseError
from memtheory.exercises.kinds import AnswerKind, Choice
from memtheory.exercises.misconceptions import MISCONCEPTIONS, SLIPS, combine_ways
from memtheory.exercises.reasoning import CORRECT, Reasoning
from memtheory.exercises.variants import SeedLike, draw_params, normalize_seed, variant_rng

__all__ = ["Exercise", "ExerciseSet", "MistakenAnswer", "Params", "Variant"]

_ID = re.compile(r"^[a-z][a-z0-9_]*$")


class Params(dict[str, Any]):
    """A variant's parameters: a dict whose keys also read as attributes (``p.filters``).

    Examples
    --------
    >>> Params(filters=32).filters
    32
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise UnknownAttributeError(
                f"no parameter {name!r}; parameters: {', '.join(self)}"
            ) from None


Solver = Callable[[Params, Reasoning], object]


@dataclass(frozen=True)
class Exercise:
    """One exercise: a question template, its parameters, and the code that answers it.

    Parameters
    ----------
    id : str
        Short id within its set (``"q1"``).
    question : str
        Template filled by :meth:`str.format` with the parameters and the
        derived values (``"{inputs:,} inputs"``). Paragraphs are separated by
        blank lines; line breaks inside a paragraph are spaces.
    answer : AnswerKind
        How the answer is read and graded.
    solve : callable
        ``solve(p, how)``: the answer for parameters ``p`` (a :class:`Params`)
        computed through memtheory and the steps of ``how``.
    params : mapping of str to sequence
        The values each parameter may take; the first is the book's.
    derive : callable, optional
        ``derive(p)``: more values for the template, computed from the
        parameters (always correctly: they are part of the question).
    constraint : callable, optional
        ``constraint(p)``: whether a combination of parameters is valid.
    misconceptions : sequence of str
        Names in :data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`
        that the grader should test a wrong answer against.
    points : int
    title : str
        A few words for tables.
    hint : str
        Shown with a wrong answer that matches no misconception.
    reveal : bool
        Show the expected answer in feedback even without ``--show-expected``.
    partial : mapping of str to int
        Partial credit: the points an answer earns when one named mistake (a
        listed misconception, or a slip in writing it) explains it alone.
        Each is at least 1 and less than ``points``.

    Examples
    --------
    >>> from memtheory.exercises.kinds import Integer
    >>> square = Exercise("q1", "What is {n} squared?", Integer(), lambda p, how: p.n**2,
    ...                   params={"n": (3, 4, 5)})
    >>> square.parameterised, square.points
    (True, 1)
    """

    id: str
    question: str
    answer: AnswerKind
    solve: Solver
    params: Mapping[str, Sequence[object]] = field(default_factory=dict)
    derive: Callable[[Params], Mapping[str, object]] | None = None
    constraint: Callable[[Params], bool] | None = None
    misconceptions: tuple[str, ...] = ()
    points: int = 1
    title: str = ""
    hint: str = ""
    reveal: bool = False
    partial: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ExerciseDefinitionError(
                f"exercise id {self.id!r} must be lower-case letters, digits, '_'."
            )
        if not isinstance(self.answer, AnswerKind):
            raise ExerciseDefinitionError(
                f"{self.id}: answer must be an AnswerKind, got {self.answer!r}."
            )
        params = {name: tuple(options) for name, options in self.params.items()}
        for name, options in params.items():
            if not options:
                raise ExerciseDefinitionError(f"{self.id}: parameter {name!r} has no values.")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "misconceptions", tuple(self.misconceptions))
        unknown = [m for m in self.misconceptions if m not in MISCONCEPTIONS]
        if unknown:
            raise ExerciseDefinitionError(
                f"{self.id}: unknown misconceptions {unknown}; known: {sorted(MISCONCEPTIONS)}."
            )
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points < 1:
            raise ExerciseDefinitionError(f"{self.id}: points must be a whole number >= 1.")
        object.__setattr__(self, "partial", dict(self.partial))
        self._check_partial()

    def _check_partial(self) -> None:
        for name, credit in self.partial.items():
            if name not in self.misconceptions and name not in SLIPS:
                raise ExerciseDefinitionError(
                    f"{self.id}: partial credit for {name!r}, which is neither one of its "
                    f"misconceptions ({', '.join(self.misconceptions) or 'none'}) nor a slip."
                )
            if isinstance(credit, bool) or not isinstance(credit, int):
                raise ExerciseDefinitionError(f"{self.id}: partial credit must be whole points.")
            if not 1 <= credit < self.points:
                raise ExerciseDefinitionError(
                    f"{self.id}: partial credit for {name!r} must be 1 to {self.points - 1} "
                    f"points, got {credit}."
                )

    @property
    def parameterised(self) -> bool:
        """Whether variants can differ."""
        return any(len(options) > 1 for options in self.params.values())


@dataclass(frozen=True)
class ExerciseSet:
    """The exercises of one book chapter.

    Parameters
    ----------
    id : str
        ``"ch02"``; exercise ids are ``"ch02.q1"``...
    title : str
    exercises : sequence of Exercise
    intro : str
        A sentence or two shown before the questions.

    Examples
    --------
    >>> from memtheory.exercises.kinds import Integer
    >>> one = Exercise("q1", "What is 2 + {n}?", Integer(), lambda p, how: 2 + p.n,
    ...                params={"n": (1, 2)})
    >>> ExerciseSet("demo", "Demo", (one,)).ids
    ('demo.q1',)
    """

    id: str
    title: str
    exercises: tuple[Exercise, ...]
    intro: str = ""

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ExerciseDefinitionError(
                f"set id {self.id!r} must be lower-case letters, digits, '_'."
            )
        object.__setattr__(self, "exercises", tuple(self.exercises))
        ids = [e.id for e in self.exercises]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ExerciseDefinitionError(f"set {self.id}: repeated exercise ids {repeated}.")

    @property
    def ids(self) -> tuple[str, ...]:
        """Full ids of the exercises, in order."""
        return tuple(f"{self.id}.{e.id}" for e in self.exercises)

    @property
    def points(self) -> int:
        """Points of the whole set."""
        return sum(e.points for e in self.exercises)

    def exercise(self, exercise_id: str) -> Exercise:
        """Return the exercise ``"q1"`` (or ``"ch02.q1"``)."""
        short = exercise_id.removeprefix(f"{self.id}.")
        for exercise in self.exercises:
            if exercise.id == short:
                return exercise
        raise UnknownExerciseError(
            f"set {self.id} has no exercise {exercise_id!r}; it has {', '.join(self.ids)}."
        )

    def variant(self, exercise_id: str, seed: SeedLike = None) -> Variant:
        """One exercise with its parameters drawn for ``seed``."""
        exercise = self.exercise(exercise_id)
        full_id = f"{self.id}.{exercise.id}"
        constraint = None
        if exercise.constraint is not None:
            check = exercise.constraint

            def constraint(values: dict[str, object]) -> bool:
                return bool(check(Params(values)))

        params = draw_params(exercise.params, seed, full_id, constraint)
        return Variant(self.id, exercise, normalize_seed(seed), Params(params))

    def variants(self, seed: SeedLike = None) -> list[Variant]:
        """Every exercise of the set for ``seed``."""
        return [self.variant(e.id, seed) for e in self.exercises]


@dataclass(frozen=True)
class MistakenAnswer:
    """The answer a misconception leads to, for one variant.

    Examples
    --------
    >>> from memtheory.exercises.loader import find_variant
    >>> find_variant("ch03.q1").mistaken_answers()[0].value
    13
    """

    name: str
    title: str
    hint: str
    detail: str
    value: Any


_SHARED_LIMIT = 4096
_SHARED: dict[tuple[int, str], tuple[Exercise, dict[str, Any]]] = {}


def _shared_answers(
    exercise: Exercise, params: Mapping[str, object], order: object = None
) -> dict[str, Any]:
    """Return the answers computed for one exercise and one set of parameters, whatever the seed.

    Learners whose seeds draw the same parameters (and, for a choice, the same order of its
    options) share the expected answer and the answers of the misconceptions, so a folder of
    submissions computes each once.
    """
    key = (id(exercise), repr(sorted(params.items())) + repr(order))
    found = _SHARED.get(key)
    if found is None or found[0] is not exercise:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.pop(next(iter(_SHARED)))
        found = (exercise, {})
        _SHARED[key] = found
    return found[1]


def _paragraphs(text: str) -> str:
    blocks = re.split(r"\n\s*\n", textwrap.dedent(text).strip())
    return "\n\n".join(" ".join(block.split()) for block in blocks)


@dataclass(frozen=True)
class Variant:
    """An exercise with its parameters fixed by a seed: the question a learner sees.

    Attributes
    ----------
    set_id : str
    exercise : Exercise
    seed : str or None
        ``None`` for the book's numbers.
    params : Params

    Examples
    --------
    >>> from memtheory.exercises.loader import find_variant
    >>> variant = find_variant("ch03.q1")
    >>> variant.params, variant.expected
    ({'size': 25}, 12)
    """

    set_id: str
    exercise: Exercise
    seed: str | None
    params: Params

    @property
    def id(self) -> str:
        """Full id, ``"ch02.q1"``."""
        return f"{self.set_id}.{self.exercise.id}"

    @cached_property
    def kind(self) -> AnswerKind:
        """The answer kind bound to these parameters; a learner's choices in their own order.

        With a seed, a choice's options are shuffled for the learner (the book's
        numbers keep the set's order), so that a copied letter is not an answer.
        """
        kind = self.exercise.answer.bind(self.params)
        if self.seed is not None and isinstance(kind, Choice):
            kind = kind.shuffled(variant_rng(self.seed, f"{self.id}/options"))
        return kind

    @cached_property
    def values(self) -> dict[str, object]:
        """Parameters and derived values: what the template is filled with."""
        values = dict(self.params)
        if self.exercise.derive is not None:
            values.update(self.exercise.derive(self.params))
        return values

    @cached_property
    def text(self) -> str:
        """The question's own text, filled in: paragraphs separated by blank lines."""
        try:
            return _paragraphs(self.exercise.question).format_map(self.values)
        except (KeyError, IndexError, ValueError) as error:
            raise ExerciseDefinitionError(
                f"{self.id}: the question template fails: {error!r}."
            ) from None

    @cached_property
    def question(self) -> str:
        """The question text, with the options (for a choice) and how to answer."""
        parts = [self.text]
        if self.kind.options_text():
            parts.append(self.kind.options_text())
        parts.append(self.kind.instructions())
        return "\n".join(parts)

    def solve_with(self, how: Reasoning) -> Any:
        """Compute the answer with ``how``, in the answer kind's form."""
        return self.kind.finalize(self.exercise.solve(self.params, how), how)

    @cached_property
    def _memo(self) -> dict[str, Any]:
        """Answers shared by every variant of this exercise with these parameters."""
        order = self.kind.options if isinstance(self.kind, Choice) else None
        return _shared_answers(self.exercise, self.params, order)

    def _remembered(self, name: str, compute: Callable[[], Any]) -> Any:
        if name not in self._memo:
            self._memo[name] = compute()
        return self._memo[name]

    @cached_property
    def expected(self) -> Any:
        """The correct answer."""
        return self._remembered("expected", lambda: self.solve_with(CORRECT))

    def mistaken_answers(self) -> list[MistakenAnswer]:
        """Compute each listed misconception's answers (each way) that differ from the correct one.

        A way that fails (the mistake makes the network invalid, say) is skipped.
        """
        return list(self._mistaken)

    @cached_property
    def _mistaken(self) -> tuple[MistakenAnswer, ...]:
        return self._remembered("mistaken", self._compute_mistaken)

    def _compute_mistaken(self) -> tuple[MistakenAnswer, ...]:
        found = []
        for name in self.exercise.misconceptions:
            entry = MISCONCEPTIONS[name]
            for way in entry.ways:
                try:
                    value = self.solve_with(way)
                except Exception:  # a mistake may make the computation impossible
                    continue
                if self.kind.matches(value, self.expected):
                    continue
                found.append(MistakenAnswer(entry.name, entry.title, entry.hint, way.detail, value))
        return tuple(found)

    def diagnose(self, given: Any) -> list[MistakenAnswer]:
        """Return the misconceptions whose answer matches ``given``, one entry per misconception."""
        matched: dict[str, MistakenAnswer] = {}
        for mistaken in self.mistaken_answers():
            if mistaken.name not in matched and self.kind.matches(given, mistaken.value):
                matched[mistaken.name] = mistaken
        return list(matched.values())

    @cached_property
    def _pairs(self) -> tuple[tuple[MistakenAnswer, ...], ...]:
        """Answers of two listed misconceptions made together (each pair of their ways)."""
        return self._remembered("pairs", self._compute_pairs)

    def _compute_pairs(self) -> tuple[tuple[MistakenAnswer, ...], ...]:
        ways = [
            (MISCONCEPTIONS[name], way)
            for name in dict.fromkeys(self.exercise.misconceptions)
            for way in MISCONCEPTIONS[name].ways
        ]
        singles = [m.value for m in self.mistaken_answers()]
        found = []
        for index, (first, first_way) in enumerate(ways):
            for second, second_way in ways[index + 1 :]:
                if first.name == second.name:
                    continue
                both = combine_ways(first_way, second_way)
                if both is None:
                    continue
                try:
                    value = self.solve_with(both)
                except Exception:  # a pair of mistakes may make the computation impossible
                    continue
                if self.kind.matches(value, self.expected) or any(
                    self.kind.matches(value, single) for single in singles
                ):
                    continue
                found.append(
                    tuple(
                        MistakenAnswer(entry.name, entry.title, entry.hint, way.detail, value)
                        for entry, way in ((first, first_way), (second, second_way))
                    )
                )
        return tuple(found)

    def _slips(self, raw: object) -> list[tuple[MistakenAnswer, ...]]:
        found: list[tuple[MistakenAnswer, ...]] = []
        for reading in self.kind.readings(raw):
            slip = SLIPS[reading.slip]
            detail = f"{str(raw).strip()} read as {self.kind.display(reading.value)}"
            answer = MistakenAnswer(slip.name, slip.title, slip.hint, detail, reading.value)
            if self.kind.matches(reading.value, self.expected):
                found.append((answer,))
                continue
            found += [
                (answer, mistaken)
                for mistaken in self.mistaken_answers()
                if self.kind.matches(reading.value, mistaken.value)
            ]
        return found

    def explain(self, given: Any, raw: object = None) -> list[tuple[MistakenAnswer, ...]]:
        """Explain a wrong answer: each explanation is the mistakes that, made together, give it.

        In order of preference: one listed misconception
        (:meth:`diagnose`); a slip in writing the answer
        (:data:`~memtheory.exercises.misconceptions.SLIPS`, read from ``raw``),
        alone or with one listed misconception; two listed misconceptions at once.

        Parameters
        ----------
        given : object
            The parsed answer.
        raw : object, optional
            What the learner wrote (needed for the slips).

        Examples
        --------
        >>> from memtheory.exercises.loader import find_variant
        >>> variant = find_variant("ch02.q1")
        >>> [[m.name for m in e] for e in variant.explain(78_400 * 64)]
        [['forgot_bias', 'parameters_times_batch']]
        """
        singles: list[tuple[MistakenAnswer, ...]] = [(m,) for m in self.diagnose(given)]
        if singles:
            return singles
        found: list[tuple[MistakenAnswer, ...]] = self._slips(raw) if raw is not None else []
        if not found:
            found = [pair for pair in self._pairs if self.kind.matches(given, pair[0].value)]
        unique: dict[tuple[str, ...], tuple[MistakenAnswer, ...]] = {}
        for explanation in found:
            unique.setdefault(tuple(sorted(m.name for m in explanation)), explanation)
        return list(unique.values())
