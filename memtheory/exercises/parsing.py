"""Reading a learner's answer: whole numbers, numbers, sizes with units, choices.

Each parser takes what the learner wrote (text, or a number from a TOML file
or a notebook, NumPy scalars included) and returns an exact value, or raises
:class:`~memtheory.exercises.errors.AnswerFormatError` with a message that
says what is wrong and how to write it. Nothing is evaluated by Python or
sympy: numbers are read by :mod:`memtheory.bounded_parser`, which refuses
text that is too long, too deeply nested or too large before computing it.
Expressions are read by :mod:`memtheory.exercises.expressions`.

The answer grammar
------------------
This is the one place that states what a learner may write; the exercises'
README points here.

Numbers (counts, ratios, percentages, and the number of a size)
    Digits, grouped or not: ``4632902``, ``4,632,902``, ``4 632 902``,
    ``4_632_902`` (a comma only groups thousands: ``224,69`` is refused, write
    ``224.69``); decimals with a point; e-notation ``2.5e3``; fractions
    ``3/8``; and plain arithmetic: ``4096*128 + 128``, ``3 x 10^6``,
    ``3 × 10⁶``, ``2**30 / 10**9``. One trailing period (the end of a
    sentence) is ignored. A suffix such as ``524k`` or ``5M`` is refused
    everywhere: k means 1000 to some and 1024 to others (write ``524000``,
    ``524e3`` or ``512*1024``). Powers are whole numbers up to 64, exponents
    up to 10^100, 80 digits in one literal, 500 characters in all. From a
    notebook, Python, NumPy, ``Fraction``, ``Decimal`` and sympy numbers are
    read as the numbers they are (``True`` and NaN are refused).
Counts (:class:`~memtheory.exercises.kinds.Integer`)
    Graded exactly, so the result must be a whole number, and ``~`` or
    ``about`` is refused (write the exact count), as is a percent sign. The
    number may be followed by a noun naming what is counted (``78500
    parameters``, ``150,528 values``). Where the count is of bytes, a byte unit
    is read and converted (``2,000,000 bytes``, ``1.5 GiB`` is 1,610,612,736);
    a byte unit on a count of things, or a noun on a count of bytes, is read
    as the unit mix-up it is and named in the feedback.
Numbers graded within a tolerance (:class:`~memtheory.exercises.kinds.Number`)
    May start with ``~``, ``≈`` or ``about`` (the tolerance already allows
    for rounding). A percentage may end with ``%`` or ``percent``: on a
    question that asks for a percentage ``99.68%`` is 99.68; on one that asks
    for a ratio it is 0.9968. A fraction given where a percentage is asked
    (``0.9968`` for 99.68%), or a percentage without its sign where a ratio is
    asked (``99.68`` for 0.9968), is named in the feedback, not accepted.
Sizes (:class:`~memtheory.exercises.kinds.Quantity`)
    A number as above (``~`` allowed, arithmetic too: ``4 * 1024 MiB``), then
    a byte unit: ``22.9 MiB``, ``24MB``, ``1,048,576 bytes``, ``~14741 MiB``,
    ``0.5 gib`` (case does not matter; the ``i`` decides between steps of 1024
    and 1000). A number alone is read in the question's unit. ``k`` alone is
    refused: write ``kB`` or ``KiB``. The feedback names a figure in the right
    unit with the wrong label (``14741.48 MB`` for 14741.48 MiB), bytes
    written without a unit, and a count of things where a size is asked
    (``19,072,984 parameters``).
Formulas (:class:`~memtheory.exercises.kinds.Expression`)
    See :mod:`memtheory.exercises.expressions`: the question's symbols,
    numbers, ``+ - * / ^ **``, juxtaposition (``2B H^2``), parentheses and
    ``floor``, ``ceiling`` (``ceil``), ``Min``, ``Max`` (up to 8 arguments);
    degree at most 24 counting numerator and denominator.
Choices (:class:`~memtheory.exercises.kinds.Choice`)
    A letter (``b``, ``(b)``, ``b)``, ``B.``) or the option's text.

Examples
--------
>>> parse_integer("4,632,902"), parse_integer("4096*128+128"), parse_integer("3 x 10^6")
(4632902, 524416, 3000000)
>>> parse_quantity("24 MB", "MiB")
46875/2048
>>> parse_number("99.68 percent")
623/625
>>> parse_choice("b", ("SGD", "Adam"))
1
"""

from __future__ import annotations

import math
import numbers
import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import sympy as sp

from memtheory.bounded_parser import DEFAULT_LIMITS, parse_arithmetic, quote_text
from memtheory.errors import ParseError, UnknownUnitError
from memtheory.exercises.errors import AnswerFormatError, UnitMixupError
from memtheory.units import UNITS, parse_size, unit_bytes

__all__ = [
    "COUNT_NOUNS",
    "MAX_ANSWER_LENGTH",
    "SizeAnswer",
    "answer_text",
    "parse_choice",
    "parse_count",
    "parse_integer",
    "parse_number",
    "parse_percent",
    "parse_quantity",
    "read_size",
]

MAX_ANSWER_LENGTH = DEFAULT_LIMITS.length
"""Longest answer text read, in characters."""

_NON_FINITE = {"nan", "inf", "infinity", "∞", "nan%"}
_APPROXIMATE = re.compile(r"^(?:~|≈|about\s|approx\.?\s|approximately\s)\s*", re.IGNORECASE)
_PERCENT = re.compile(r"\s*(?:%|percent|per\s*cent|pct)$", re.IGNORECASE)
_SUFFIX = re.compile(r"^(?P<number>[\d.,_ ]*\d\.?)\s*(?P<suffix>[kKmMgGtT])$")
_POWERS_OF_1000 = {"k": 3, "m": 6, "g": 9, "t": 12}


def answer_text(raw: object) -> str:
    """Return an answer as stripped text, refusing what cannot be an answer.

    Parameters
    ----------
    raw : str, int, float, Decimal, Fraction, sympy number or NumPy scalar
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
    >>> import numpy as np
    >>> answer_text(np.int64(896)), answer_text(np.float32(0.5))
    ('896', '0.5')
    >>> answer_text(float("nan"))
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: nan is not a finite number: ...
    """
    if raw is None:
        raise AnswerFormatError("no answer given.")
    if isinstance(raw, bool) or type(raw).__name__ in ("bool_", "bool"):
        raise AnswerFormatError(
            f"{str(raw).lower()} is a yes/no value, not an answer here: write a number or text."
        )
    text = raw.strip() if isinstance(raw, str) else _number_text(_plain_number(raw))
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


def _plain_number(raw: object) -> object:
    """Return a NumPy integer or float as Python's own; anything else unchanged."""
    if isinstance(raw, numbers.Integral) and not isinstance(raw, int):
        return int(raw)
    if isinstance(raw, numbers.Real) and not isinstance(raw, float | int | Fraction | sp.Basic):
        return float(raw)
    return raw


def _number_text(raw: object) -> str:
    """Write a number given as a number (not text) as text; refuse anything else."""
    if isinstance(raw, float | Decimal):
        finite = raw.is_finite() if isinstance(raw, Decimal) else math.isfinite(raw)
        if not finite:
            raise AnswerFormatError(f"{raw} is not a finite number: give a number such as 12.5.")
        return repr(float(raw)) if isinstance(raw, float) else str(raw)
    if isinstance(raw, int):
        _check_bits(raw)
        return str(raw)
    if isinstance(raw, Fraction):
        _check_bits(raw.numerator, raw.denominator)
        return f"{raw.numerator}/{raw.denominator}"
    if isinstance(raw, sp.Basic):
        return _sympy_text(raw)
    raise AnswerFormatError(
        f"an answer is text or a number, got a {type(raw).__name__} "
        f"({quote_text(reprlib.repr(raw), 40)}): "
        'write it as a string, e.g. "4,632,902" or "22.9 MiB".'
    )


def _sympy_text(raw: sp.Basic) -> str:
    """Write a sympy number as text, refusing what is not finite or too long to print."""
    if raw.is_Rational:
        _check_bits(int(raw.p), int(raw.q))
    if raw.has(sp.nan, sp.zoo, sp.oo, -sp.oo) or raw.is_number and raw.is_finite is False:
        raise AnswerFormatError("the answer is not finite: give a number such as 12.5.")
    try:
        return str(raw)
    except ValueError:  # an integer inside has more digits than Python will print
        raise AnswerFormatError("the answer has too many digits to read.") from None


def _check_bits(*parts: int) -> None:
    """Refuse a number whose digits alone would pass the length limit (before printing it)."""
    bits = max(abs(part).bit_length() for part in parts)
    if bits > 3 * MAX_ANSWER_LENGTH:
        raise AnswerFormatError(
            f"the answer has about {int(bits * 0.30103)} digits; the limit is "
            f"{MAX_ANSWER_LENGTH} characters."
        )


def _without_period(text: str) -> str:
    """Drop one period that ends a sentence ("896.", "22.9 MiB.")."""
    if text.endswith(".") and len(text) > 1 and not text.endswith(".."):
        return text[:-1].rstrip()
    return text


def _approximate(text: str) -> tuple[str, bool]:
    match = _APPROXIMATE.match(text)
    return (text[match.end() :], True) if match else (text, False)


def _arithmetic(text: str, original: str) -> Fraction:
    suffix = _SUFFIX.match(text)
    if suffix:
        letter = suffix.group("suffix")
        power = _POWERS_OF_1000[letter.lower()]
        raise AnswerFormatError(
            f"cannot read {quote_text(original)}: {letter!r} could mean 1000 or 1024 (or their "
            f"powers); write the number in digits or e-notation "
            f"({suffix.group('number').strip()}e{power} for 10^{power})."
        )
    try:
        return parse_arithmetic(text)
    except ParseError as error:
        raise AnswerFormatError(str(error)) from None


def _number(raw: object, *, approximate_ok: bool) -> tuple[Fraction, bool]:
    """Read a number; return it and whether a percent sign followed it."""
    original = answer_text(raw)
    text = _without_period(original)
    text, approximate = _approximate(text)
    if approximate and not approximate_ok:
        raise AnswerFormatError(
            f"{quote_text(original)}: a count is graded exactly; write the exact number "
            "without '~' or 'about'."
        )
    percent = _PERCENT.search(text)
    if percent:
        text = text[: percent.start()]
    return _arithmetic(text, original), bool(percent)


def _rational(value: Fraction) -> sp.Rational:
    return sp.Rational(value.numerator, value.denominator)


def parse_number(raw: object) -> sp.Rational:
    """Read a number exactly: ``"12.5"``, ``"1,048,576"``, ``"1e6"``, ``"3/8"``, ``"2^30/10^9"``.

    A trailing ``%`` (or ``percent``) divides by 100; a leading ``~`` is allowed
    (see the module's grammar).

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
    >>> parse_number("1 048 576"), parse_number("2.5e3"), parse_number("3/8"), parse_number("50%")
    (1048576, 2500, 3/8, 1/2)
    >>> parse_number("224,69")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: cannot read '224,69' as a number: ...
    """
    value, percent = _number(raw, approximate_ok=True)
    return _rational(value / 100 if percent else value)


def parse_percent(raw: object) -> tuple[sp.Rational, bool]:
    """Read a percentage: the number (``"99.5%"`` is 99.5), and whether a % sign was written.

    Examples
    --------
    >>> parse_percent("99.68 percent"), parse_percent("0.9968")
    ((2492/25, True), (623/625, False))
    """
    value, percent = _number(raw, approximate_ok=True)
    return _rational(value), percent


def parse_integer(raw: object) -> int:
    """Read a whole number: ``"4,632,902"``, ``"4632902"``, ``896``, ``"512*1024"``.

    Examples
    --------
    >>> parse_integer("9_216"), parse_integer(1e3)
    (9216, 1000)
    >>> parse_integer("12.5")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: 12.5 is not a whole number: ...
    """
    value, percent = _number(raw, approximate_ok=False)
    text = answer_text(raw)
    if percent:
        raise AnswerFormatError(f"{quote_text(text)}: this answer is a count, not a percentage.")
    if value.denominator != 1:
        raise AnswerFormatError(f"{text} is not a whole number: this answer is a count.")
    return int(value)


_TRAILING_WORDS = re.compile(r"^(?P<number>.*[\d)])\s*(?P<words>[^\W\d_]+(?:[ -][^\W\d_]+){0,2})$")


COUNT_NOUNS = frozenset(
    """parameter param weight bias value element activation gradient number float entry
    unit neuron pixel row column token image sample step layer segment checkpoint tensor block
    head channel filter window position state copy index item""".split()
)
"""What a count may be followed by (singular; a plural ``s``/``es``/``ies`` is read too):
``78500 parameters``, ``150,528 activation values``. Other words are refused as unreadable."""


def _singular(word: str) -> str:
    word = word.casefold()
    for plural, single in (("ies", "y"), ("ices", "ex"), ("ses", "s"), ("es", "e"), ("s", "")):
        if word.endswith(plural) and word[: -len(plural)] + single in COUNT_NOUNS:
            return word[: -len(plural)] + single
    return word


def _is_byte_unit(word: str) -> bool:
    try:
        parse_size(f"1 {word}")
    except (UnknownUnitError, ParseError):
        return False
    return True


def parse_count(raw: object, *, unit: str | None = None) -> int:
    """Read a whole count, perhaps followed by what it counts: ``"78500 parameters"``.

    Parameters
    ----------
    raw : str or number
    unit : {None, "B"}
        ``"B"`` when the count is of bytes: a byte unit after the number is
        converted (``"1.5 GiB"``) and a noun (``"values"``) is a mix-up.
        ``None`` for a count of things: a noun is accepted and a byte unit is a
        mix-up.

    Raises
    ------
    UnitMixupError
        For a size where a count of things is asked, or a count of things where bytes are.
    AnswerFormatError
        If it is not a whole number (see :func:`parse_integer`).

    Examples
    --------
    >>> parse_count("78,500 parameters"), parse_count("2,000,000 bytes", unit="B")
    (78500, 2000000)
    >>> parse_count("1.5 GiB", unit="B")
    1610612736
    >>> parse_count("78500 bytes")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.UnitMixupError: '78500 bytes' is a size in bytes, not a count ...
    """
    original = answer_text(raw)
    match = _TRAILING_WORDS.match(_without_period(original))
    if match is None or not isinstance(raw, str):
        return parse_integer(raw)
    words = match.group("words")
    byte_unit = _is_byte_unit(words)
    if not byte_unit and len(words) < 2:  # 524k, 5M: refused, with how to write them
        return parse_integer(raw)
    if byte_unit:
        if unit != "B":
            raise UnitMixupError(
                f"{quote_text(original)} is a size in bytes, not a count of things.",
                slip="size_for_count",
            )
        size = read_size(original, "B").value
        if not size.is_Integer:
            raise AnswerFormatError(
                f"{quote_text(original)} is not a whole number of bytes "
                f"({_decimal_bytes(size)} bytes): give the exact count of bytes."
            )
        return int(size)
    noun = words.replace("-", " ").split()[-1]
    if _singular(noun) not in COUNT_NOUNS:
        raise AnswerFormatError(
            f"cannot read {quote_text(original)}: {noun!r} does not say what is counted; write "
            "the number alone, or with what it counts (78500 parameters, 4096 values)."
        )
    if unit == "B":
        raise UnitMixupError(
            f"{quote_text(original)} counts {words}, not bytes.",
            slip="count_for_size",
        )
    return parse_integer(match.group("number").strip())


def _decimal_bytes(value: sp.Rational) -> str:
    """Write a fraction of bytes with up to three decimals (for messages)."""
    return f"{float(value):.3f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class SizeAnswer:
    """A size as the learner wrote it: the number, the unit written (if any), and its value.

    Attributes
    ----------
    number : sympy.Rational
        The number as written.
    unit : str or None
        The unit written, canonical (``"MiB"``); ``None`` when there was none.
    value : sympy.Rational
        The size in the question's unit.

    Examples
    --------
    >>> read_size("14741.48 MB", "MiB").unit
    'MB'
    """

    number: sp.Rational
    unit: str | None
    value: sp.Rational


def read_size(raw: object, unit: str) -> SizeAnswer:
    """Read a size and keep what was written: see :func:`parse_quantity`.

    Examples
    --------
    >>> read_size("~2 KiB.", "B")
    SizeAnswer(number=2, unit='KiB', value=2048)
    """
    original = answer_text(raw)
    text, _ = _approximate(_without_period(original))
    try:
        number, written = parse_size(text, unit)
    except UnknownUnitError as error:
        written_unit = str(error.name)
        noun = written_unit.replace("-", " ").split()[-1] if written_unit.strip() else ""
        if _singular(noun) in COUNT_NOUNS:
            raise UnitMixupError(
                f"{quote_text(original)} counts {written_unit}, not bytes.", slip="count_for_size"
            ) from None
        extra = " (k alone could mean kB or KiB)" if written_unit.lower() == "k" else ""
        raise AnswerFormatError(
            f"unknown unit {written_unit!r} in {quote_text(original)}{extra}: use B, kB, MB, GB "
            f"(steps of 1000) or KiB, MiB, GiB (steps of 1024); known: {', '.join(UNITS)}."
        ) from None
    except ParseError as error:
        words = _TRAILING_WORDS.match(text)
        if words and _singular(words.group("words").replace("-", " ").split()[-1]) in COUNT_NOUNS:
            raise UnitMixupError(
                f"{quote_text(original)} counts {words.group('words')}, not bytes.",
                slip="count_for_size",
            ) from None
        message = str(error)
        if "comma may only group" in message:
            raise AnswerFormatError(
                f"cannot read {quote_text(original)}: a comma may only group thousands "
                "(1,048,576); write decimals with a point (224.69, not 224,69)."
            ) from None
        raise AnswerFormatError(message.replace(repr(text), quote_text(original))) from None
    value = number * unit_bytes(written) / unit_bytes(unit)
    return SizeAnswer(number, written if _has_unit(text) else None, value)


def _has_unit(text: str) -> bool:
    return bool(re.search(r"[A-Za-z]\s*$", text))


def parse_quantity(raw: object, unit: str) -> sp.Rational:
    """Read a size such as ``"22.9 MiB"`` or ``"24 MB"`` and return it in ``unit``, exactly.

    A number without a unit is read in ``unit`` (the unit the question asks
    for). The number and unit are split by :func:`memtheory.units.parse_size`.

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
    >>> parse_quantity(512, "KiB"), parse_quantity("~14741 MiB.", "MiB")
    (512, 14741)
    >>> parse_quantity("3 parsecs", "MiB")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFormatError: unknown unit 'parsecs' in '3 parsecs': ...
    """
    return read_size(raw, unit).value


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
