"""Reading a learner's answer: whole numbers, numbers, sizes with units, choices.

Each parser takes what the learner wrote (text, or a number from a TOML file
or a notebook) and returns an exact value, or raises
:class:`~memtheory.exercises.errors.AnswerFormatError` with a message that
says what is wrong and how to write it. Nothing is evaluated: numbers are
matched by regular expressions and converted with :class:`sympy.Rational`.
Expressions are read by :mod:`memtheory.exercises.expressions`.

Examples
--------
>>> parse_integer("4,632,902")
4632902
>>> parse_quantity("24 MB", "MiB")
46875/2048
>>> parse_choice("b", ("SGD", "Adam"))
1
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

import sympy as sp

from memtheory.errors import UnknownUnitError
from memtheory.exercises.errors import AnswerFormatError
from memtheory.units import UNITS, parse_bytes, unit_bytes

__all__ = [
    "MAX_ANSWER_LENGTH",
    "answer_text",
    "parse_choice",
    "parse_integer",
    "parse_number",
    "parse_quantity",
]

MAX_ANSWER_LENGTH = 500
"""Longest answer text read, in characters."""

_MAX_EXPONENT = 100
_MAX_DIGITS = 80
_NON_FINITE = {"nan", "inf", "infinity", "∞", "nan%"}
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?$")
_PLAIN = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")
_FRACTION = re.compile(r"^([+-]?\d+)/(\d+)$")
_SPACE_GROUPS = re.compile(r"(?<=\d)[ \u00a0\u202f_](?=\d)")
_SIZE = re.compile(r"^(?P<number>.*?[\d.])\s*(?P<unit>[A-Za-z]+)?$")


def answer_text(raw: object) -> str:
    """Return an answer as stripped text, refusing what cannot be an answer.

    Parameters
    ----------
    raw : str, int, float, Decimal, Fraction or sympy number
        What the learner wrote.

    Raises
    ------
    AnswerFormatError
        For an empty answer, NaN or infinity, a true/false value, a list or
        table, or text longer than :data:`MAX_ANSWER_LENGTH`.

    Examples
    --------
    >>> answer_text("  22.9 MiB ")
    '22.9 MiB'
    >>> answer_text(float("nan"))
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: nan is not a finite number: ...
    """
    if raw is None:
        raise AnswerFormatError("no answer given.")
    if isinstance(raw, bool):
        raise AnswerFormatError(
            f"{str(raw).lower()} is a yes/no value, not an answer here: write a number or text."
        )
    if isinstance(raw, float | Decimal):
        if not math.isfinite(raw):
            raise AnswerFormatError(f"{raw} is not a finite number: give a number such as 12.5.")
        text = repr(raw) if isinstance(raw, float) else str(raw)
    elif isinstance(raw, int):
        text = str(raw)
    elif isinstance(raw, Fraction):
        text = f"{raw.numerator}/{raw.denominator}"
    elif isinstance(raw, sp.Basic):
        if raw.is_number and raw.is_finite is False or raw.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
            raise AnswerFormatError(f"{raw} is not a finite number: give a number such as 12.5.")
        text = str(raw)
    elif isinstance(raw, str):
        text = raw.strip()
    else:
        raise AnswerFormatError(
            f"an answer is text or a number, got a {type(raw).__name__} ({raw!r:.40}): "
            'write it as a string, e.g. "4,632,902" or "22.9 MiB".'
        )
    if not text:
        raise AnswerFormatError(
            "the answer is empty: write a number, a size, an expression or a letter."
        )
    if len(text) > MAX_ANSWER_LENGTH:
        raise AnswerFormatError(
            f"the answer is {len(text)} characters long; the limit is {MAX_ANSWER_LENGTH}."
        )
    if text.lower().lstrip("+-") in _NON_FINITE:
        raise AnswerFormatError(f"{text} is not a finite number: give a number such as 12.5.")
    return text


def _number_text(text: str) -> str:
    """Check that ``text`` is one decimal number and return it without separators."""
    compact = _SPACE_GROUPS.sub("", text.strip())
    if "," in compact:
        if not _GROUPED.match(compact):
            raise AnswerFormatError(
                f"cannot read {text!r} as a number: a comma may only group thousands (1,048,576); "
                "write decimals with a point (224.69, not 224,69)."
            )
        compact = compact.replace(",", "")
    if not _PLAIN.match(compact):
        raise AnswerFormatError(
            f"cannot read {text!r} as a number: write digits such as 4632902 or 4,632,902."
        )
    mantissa, _, exponent = compact.lower().partition("e")
    if exponent and abs(int(exponent)) > _MAX_EXPONENT:
        raise AnswerFormatError(f"{text!r}: exponents beyond 10^{_MAX_EXPONENT} are not accepted.")
    if len(mantissa) > _MAX_DIGITS:
        raise AnswerFormatError(f"{text!r} has more than {_MAX_DIGITS} digits.")
    return compact


def parse_number(raw: object) -> sp.Rational:
    """Read a number exactly: ``"12.5"``, ``"1,048,576"``, ``"1e6"``, ``"3/8"``.

    Parameters
    ----------
    raw : str or number
        Thousands may be grouped by commas, spaces or underscores.

    Returns
    -------
    sympy.Rational

    Raises
    ------
    AnswerFormatError
        If it is not one finite number.

    Examples
    --------
    >>> parse_number("1 048 576"), parse_number("2.5e3"), parse_number("3/8")
    (1048576, 2500, 3/8)
    >>> parse_number("224,69")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: cannot read '224,69' as a number: ...
    """
    text = answer_text(raw)
    fraction = _FRACTION.match(text.replace(" ", ""))
    if fraction:
        numerator, denominator = (int(g) for g in fraction.groups())
        if denominator == 0:
            raise AnswerFormatError(f"{text!r} divides by zero.")
        return sp.Rational(numerator, denominator)
    return sp.Rational(_number_text(text))


def parse_integer(raw: object) -> int:
    """Read a whole number: ``"4,632,902"``, ``"4632902"``, ``896``.

    Examples
    --------
    >>> parse_integer("9_216"), parse_integer(1e3)
    (9216, 1000)
    >>> parse_integer("12.5")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: 12.5 is not a whole number: ...
    """
    value = parse_number(raw)
    if not value.is_Integer:
        raise AnswerFormatError(
            f"{answer_text(raw)} is not a whole number: this answer is a count."
        )
    return int(value)


def parse_quantity(raw: object, unit: str) -> sp.Rational:
    """Read a size such as ``"22.9 MiB"`` or ``"24 MB"`` and return it in ``unit``, exactly.

    A number without a unit is read in ``unit`` (the unit the question asks
    for). The conversion to bytes is :func:`memtheory.units.parse_bytes`.

    Parameters
    ----------
    raw : str or number
    unit : str
        The unit of the question, e.g. ``"MiB"``.

    Returns
    -------
    sympy.Rational
        The size in ``unit``.

    Raises
    ------
    AnswerFormatError
        If the number does not parse or the unit is not a byte unit.

    Examples
    --------
    >>> parse_quantity("1,048,576 B", "MiB")
    1
    >>> parse_quantity(512, "KiB")
    512
    >>> parse_quantity("3 parsecs", "MiB")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: unknown unit 'parsecs' in '3 parsecs': ...
    """
    text = answer_text(raw)
    match = _SIZE.match(text)
    if match is None:
        raise AnswerFormatError(
            f"cannot read {text!r} as a size: write a number and a unit, e.g. '22.9 MiB' or '24 "
            f"MB'."
        )
    number = _number_text(match.group("number"))
    written_unit = match.group("unit") or unit
    try:
        nbytes = parse_bytes(f"{number} {written_unit}")
    except UnknownUnitError:
        raise AnswerFormatError(
            f"unknown unit {written_unit!r} in {text!r}: use B, kB, MB, GB (steps of 1000) or "
            f"KiB, MiB, GiB (steps of 1024); known: {', '.join(UNITS)}."
        ) from None
    except ValueError as error:
        raise AnswerFormatError(f"cannot read {text!r} as a size: {error}") from None
    return nbytes / unit_bytes(unit)


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def parse_choice(raw: object, options: Sequence[str]) -> int:
    """Read a choice: a letter (``"b"``, ``"(b)"``, ``"B)"``) or an option's text.

    Returns
    -------
    int
        The index of the chosen option.

    Examples
    --------
    >>> parse_choice("(a)", ("yes", "no")), parse_choice("  NO ", ("yes", "no"))
    (0, 1)
    >>> parse_choice("z", ("yes", "no"))
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: 'z' is not one of the options: ...
    """
    text = answer_text(raw)
    for index, option in enumerate(options):
        if _normal(text) == _normal(option):
            return index
    letter = re.fullmatch(r"\(?([A-Za-z])\)?[.)]?", text)
    if letter:
        index = ord(letter.group(1).lower()) - ord("a")
        if 0 <= index < len(options):
            return index
    last = chr(ord("a") + len(options) - 1)
    raise AnswerFormatError(
        f"{text!r} is not one of the options: answer with a letter from a to {last}, "
        "or with an option's text."
    )
