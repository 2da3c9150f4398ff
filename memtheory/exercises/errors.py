"""The exceptions of the exercise package, one type per kind of problem.

A learner's unreadable answer is an :class:`AnswerFormatError`: the grader
reports it for that exercise and goes on. An unreadable answer file is an
:class:`AnswerFileError`. Problems of the exercise sets themselves (a
template naming a missing parameter, a solver returning the wrong kind of
value) are :class:`ExerciseDefinitionError`: bugs for the set's author.

Examples
--------
>>> from memtheory.exercises.parsing import parse_integer
>>> try:
...     parse_integer("abc")
... except AnswerFormatError as error:
...     print(error)
cannot read 'abc' as a number: write digits such as 4632902 or 4,632,902.
"""

from __future__ import annotations

from memtheory.errors import MemtheoryError, UnknownNameError

__all__ = [
    "AnswerFileError",
    "AnswerFormatError",
    "ExerciseDefinitionError",
    "ExerciseError",
    "ExerciseSetsNotFoundError",
    "UnitMixupError",
    "UnknownExerciseError",
]


class ExerciseError(MemtheoryError):
    """Base class of the errors raised by :mod:`memtheory.exercises`.

    Examples
    --------
    >>> from memtheory.exercises import get_set
    >>> try:
    ...     get_set("ch99")
    ... except ExerciseError as error:
    ...     print(type(error).__name__)
    UnknownExerciseError
    """


class AnswerFormatError(ExerciseError, ValueError):
    """A learner's answer cannot be read as the kind of answer the exercise asks for.

    Examples
    --------
    >>> from memtheory.exercises import Integer
    >>> Integer().parse("4,632,902")
    4632902
    >>> Integer().parse("four")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: cannot read 'four' as a number: ...
    """


class UnitMixupError(AnswerFormatError):
    """An answer written with a unit of the wrong kind: bytes for a count, or a count for bytes.

    The answer is read, but as the wrong quantity: the grader marks it wrong and names the
    slip ``slip`` (a name in :data:`~memtheory.exercises.misconceptions.SLIPS`).

    Examples
    --------
    >>> UnitMixupError("78500 bytes is a size", slip="size_for_count").slip
    'size_for_count'
    """

    def __init__(self, message: str, *, slip: str) -> None:
        super().__init__(message)
        self.slip = slip


class AnswerFileError(ExerciseError, ValueError):
    """An answer file cannot be read (not TOML, keys of the wrong type), or would be overwritten.

    Parameters
    ----------
    message : str
        What is wrong and how to fix it.
    reason : str
        A few words for a table row (``"pipe"``, ``"link loop"``, ``"not TOML"``); the
        message is the full story.

    Examples
    --------
    >>> AnswerFileError("a.toml is a pipe; not read.", reason="pipe").reason
    'pipe'
    """

    def __init__(self, message: str = "", *, reason: str = "unreadable") -> None:
        super().__init__(message)
        self.reason = reason


class UnknownExerciseError(ExerciseError, UnknownNameError):
    """No exercise (or exercise set) has this id.

    Examples
    --------
    >>> from memtheory.exercises import get_set
    >>> get_set("ch99")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.UnknownExerciseError: no exercise set 'ch99' (did you mean ch19?)...
    """


class ExerciseSetsNotFoundError(ExerciseError, FileNotFoundError):
    """No folder of exercise sets was found.

    Examples
    --------
    >>> from memtheory.exercises import find_sets_dir
    >>> find_sets_dir("/no/such/folder")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.ExerciseSetsNotFoundError: the given path '/no/such/folder' is ...
    """


class ExerciseDefinitionError(ExerciseError, ValueError):
    """An exercise set is defined wrongly: a bug for its author, not the learner.

    Examples
    --------
    >>> from memtheory.exercises import Exercise, Integer
    >>> Exercise("q1", "How many bytes?", Integer(), solve=lambda p: 4 * p["n"], params={"n": []})
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.ExerciseDefinitionError: q1: parameter 'n' has no values.
    """
