"""Answer kinds: how an exercise's answer is read, compared, and shown.

=================  ======================================================
kind               graded by
=================  ======================================================
:class:`Integer`   exact equality (a count)
:class:`Quantity`  a size in bytes, read with its unit, within a relative tolerance
:class:`Number`    a plain number, within a relative tolerance
:class:`Expression`  symbolic equivalence (sympy), not spelling
:class:`Choice`    the option chosen, by letter or by text
=================  ======================================================

A kind turns what the solver computed into the answer's form
(:meth:`AnswerKind.finalize`: a byte count becomes a size in the question's
unit), reads what the learner wrote (:meth:`AnswerKind.parse`) and compares
the two (:meth:`AnswerKind.matches`).

Examples
--------
>>> from memtheory.exercises.reasoning import CORRECT
>>> size = Quantity("MiB")
>>> expected = size.finalize(779_021_856, CORRECT)
>>> size.matches(size.parse("742.9 MiB"), expected), size.matches(size.parse("779 MB"), expected)
(True, True)
>>> size.display(expected)
'742.93 MiB'
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sympy as sp

from memtheory.exercises.errors import AnswerFormatError, ExerciseDefinitionError
from memtheory.exercises.expressions import equivalent, parse_expression
from memtheory.exercises.numeric import decimal_text
from memtheory.exercises.parsing import (
    parse_choice,
    parse_count,
    parse_number,
    parse_percent,
    parse_quantity,
    read_size,
)
from memtheory.exercises.reasoning import Reasoning
from memtheory.units import UNITS, unit_bytes

__all__ = ["AnswerKind", "Choice", "Expression", "Integer", "Number", "Quantity", "Reading"]

_UNIT_MEANING = {
    "B": "bytes",
    "kB": "1 kB = 10^3 bytes",
    "MB": "1 MB = 10^6 bytes",
    "GB": "1 GB = 10^9 bytes",
    "TB": "1 TB = 10^12 bytes",
    "KiB": "1 KiB = 2^10 bytes",
    "MiB": "1 MiB = 2^20 bytes",
    "GiB": "1 GiB = 2^30 bytes",
    "TiB": "1 TiB = 2^40 bytes",
}


_TWINS = {"kB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB"}
_TWINS.update({binary: decimal for decimal, binary in list(_TWINS.items())})


@dataclass(frozen=True)
class Reading:
    """Another way to read what a learner wrote, and the slip it would mean.

    Attributes
    ----------
    slip : str
        A name in :data:`~memtheory.exercises.misconceptions.SLIPS`.
    value : object
        The answer under that reading, in the kind's form.

    Examples
    --------
    >>> Quantity("MiB").readings("14741.48 MB")
    (Reading(slip='unit_label_swapped', value=368537/25),)
    """

    slip: str
    value: Any


def _percent(rtol: float) -> str:
    return f"{rtol * 100:g}%"


def _number(value: object, what: str) -> sp.Rational:
    number = sp.sympify(value)
    if not number.is_number or not number.is_finite or not number.is_rational:
        raise ExerciseDefinitionError(
            f"{what}: expected an exact number, the solver gave {value!r}."
        )
    return sp.Rational(number)


def _close(given: sp.Expr, expected: sp.Expr, rtol: float) -> bool:
    if expected == 0:
        return given == 0
    return abs(given - expected) <= sp.Rational(str(rtol)) * abs(expected)


class AnswerKind(ABC):
    """What an answer is: how to finalize, parse, compare and show it.

    Examples
    --------
    >>> kinds = (Integer(), Quantity(), Number(), Expression(), Choice(("a", "b")))
    >>> sorted(kind.name for kind in kinds)
    ['choice', 'expression', 'integer', 'number', 'quantity']
    """

    name: ClassVar[str] = "answer"

    def bind(self, params: Mapping[str, Any]) -> AnswerKind:
        """Bind the kind to one variant's parameters (a choice's options may depend on them)."""
        return self

    def finalize(self, value: object, how: Reasoning) -> Any:
        """Turn what a solver returned into a value of this kind."""
        return value

    @abstractmethod
    def parse(self, raw: object) -> Any:
        """Read a learner's answer; raise AnswerFormatError if it cannot be read."""

    @abstractmethod
    def matches(self, given: Any, expected: Any) -> bool:
        """Whether ``given`` counts as ``expected``."""

    @abstractmethod
    def display(self, value: Any) -> str:
        """``value`` for people (the expected answer in a report)."""

    def solution_text(self, value: Any) -> str:
        """``value`` as a learner would write it, so that it parses back (reference solutions)."""
        return self.display(value)

    def readings(self, raw: object) -> tuple[Reading, ...]:
        """Other readings of ``raw``, each the answer a slip in writing it would give (none here).

        The grader tries them when ``raw`` is wrong: a reading that matches the
        expected answer, or a listed misconception's, names the slip.
        """
        return ()

    @abstractmethod
    def instructions(self) -> str:
        """How to write the answer, appended to the question."""

    def options_text(self) -> str:
        """Return the options, for a choice; empty otherwise."""
        return ""


@dataclass(frozen=True)
class Integer(AnswerKind):
    """A whole number (a count), graded exactly.

    Parameters
    ----------
    unit : {None, "B"}
        ``"B"`` when the count is of bytes: ``"2,000,000 bytes"`` and ``"1.5 GiB"`` are read
        and converted, and a noun (``"2,000,000 values"``) is the unit mix-up it is. ``None``
        for a count of things: a noun may follow the number (``"78500 parameters"``) and a
        byte unit is a mix-up. See :func:`~memtheory.exercises.parsing.parse_count`.

    Examples
    --------
    >>> Integer().parse("4,632,902"), Integer().display(4632902)
    (4632902, '4,632,902')
    >>> Integer(unit="B").parse("2 MB"), Integer().parse("78500 parameters")
    (2000000, 78500)
    """

    unit: str | None = None
    name: ClassVar[str] = "integer"

    def __post_init__(self) -> None:
        if self.unit not in (None, "B"):
            raise ExerciseDefinitionError(
                f"Integer: unit must be None (a count of things) or 'B' (bytes), got {self.unit!r}."
            )

    def finalize(self, value: object, how: Reasoning) -> int:
        """Return the count as an int."""
        number = _number(value, "Integer answer")
        if not number.is_Integer:
            raise ExerciseDefinitionError(f"Integer answer: {value} is not a whole number.")
        return int(number)

    def parse(self, raw: object) -> int:
        """Read a whole number, with what it counts or (for bytes) a byte unit."""
        return parse_count(raw, unit=self.unit)

    def matches(self, given: int, expected: int) -> bool:
        """Equal."""
        return given == expected

    def display(self, value: int) -> str:
        """With thousands separators."""
        return f"{value:,}"

    def solution_text(self, value: int) -> str:
        """Plain digits."""
        return str(value)

    def instructions(self) -> str:
        """Whole number (of bytes, where the unit is B)."""
        if self.unit == "B":
            return (
                "Give a whole number of bytes (commas may group thousands: 4,632,902); a byte "
                "unit after it is converted (2 MB is 2,000,000 bytes, 1 KiB is 1,024)."
            )
        return "Give a whole number (commas may group thousands: 4,632,902)."


@dataclass(frozen=True)
class Quantity(AnswerKind):
    """A memory size, asked in ``unit``, graded within a relative tolerance.

    The learner may write any byte unit (``"24 MB"`` for a question in MiB is
    converted); a number alone is read in ``unit``.

    Parameters
    ----------
    unit : str
        The unit the question asks for (``"MiB"``, ``"GB"``...).
    rtol : float
        Relative tolerance, stated in the question.

    Examples
    --------
    >>> Quantity("GB", rtol=0.01).instructions()
    'Answer in GB (1 GB = 10^9 bytes); ... Answers within 1% of the exact value are accepted.'
    """

    unit: str = "MiB"
    rtol: float = 0.005
    name: ClassVar[str] = "quantity"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ExerciseDefinitionError(
                f"Quantity: unknown unit {self.unit!r}; use one of {list(UNITS)}."
            )
        if not 0 < self.rtol < 0.5:
            raise ExerciseDefinitionError(f"Quantity: rtol must be in (0, 0.5), got {self.rtol}.")

    def finalize(self, value: object, how: Reasoning) -> sp.Rational:
        """Bytes written in :attr:`unit`, as ``how`` writes them."""
        return _number(how.in_unit(value, self.unit), f"Quantity answer in {self.unit}")

    def parse(self, raw: object) -> sp.Rational:
        """Read a size and express it in :attr:`unit`."""
        return parse_quantity(raw, self.unit)

    def matches(self, given: sp.Rational, expected: sp.Rational) -> bool:
        """Within :attr:`rtol` of ``expected``."""
        return _close(given, expected, self.rtol)

    def display(self, value: sp.Rational) -> str:
        """Two decimals (more for small values), and the unit."""
        return f"{decimal_text(value, 3, min_decimals=2)} {self.unit}"

    def solution_text(self, value: sp.Rational) -> str:
        """Seven significant digits, and the unit."""
        return f"{decimal_text(value, 7)} {self.unit}"

    def readings(self, raw: object) -> tuple[Reading, ...]:
        """Read the number under the twin of the unit written (MB for MiB), or as bytes if bare."""
        try:
            size = read_size(raw, self.unit)
        except AnswerFormatError:
            return ()
        if size.unit is None:
            if self.unit == "B":
                return ()
            return (Reading("bare_bytes", size.number / unit_bytes(self.unit)),)
        if size.unit in _TWINS:
            twin = unit_bytes(_TWINS[size.unit])
            return (Reading("unit_label_swapped", size.number * twin / unit_bytes(self.unit)),)
        return ()

    def bytes_text(self, value: sp.Rational) -> str:
        """Write the value in bytes, for reports."""
        return f"{decimal_text(value * unit_bytes(self.unit), 12)} bytes"

    def instructions(self) -> str:
        """State the unit, its meaning, and the tolerance."""
        return (
            f"Answer in {self.unit} ({_UNIT_MEANING[self.unit]}); a number alone is read as "
            f"{self.unit}, other units (B, kB, MB, GB, KiB, MiB, GiB) are converted. Answers "
            f"within "
            f"{_percent(self.rtol)} of the exact value are accepted."
        )


@dataclass(frozen=True)
class Number(AnswerKind):
    """A plain number (a ratio, a percentage, bytes per parameter), within a relative tolerance.

    Parameters
    ----------
    rtol : float
        Relative tolerance; 0 means exact.
    what : str
        What the number is, for the instructions (``"a ratio"``).
    percent : bool
        The number is a percentage: ``"99.5%"`` is read as 99.5.

    Examples
    --------
    >>> Number(rtol=0.001).matches(Number().parse("1.0737"), sp.Rational(2**30, 10**9))
    True
    >>> Number(percent=True).parse("99.5%")
    199/2
    """

    rtol: float = 0.005
    what: str = "a number"
    percent: bool = False
    name: ClassVar[str] = "number"

    def finalize(self, value: object, how: Reasoning) -> sp.Rational:
        """Return the exact number."""
        return _number(value, "Number answer")

    def parse(self, raw: object) -> sp.Rational:
        """Read a number; for a percentage a trailing % (or ``percent``) is dropped.

        On a question that asks for a plain number, ``"99.68%"`` is 0.9968.
        """
        if self.percent:
            return parse_percent(raw)[0]
        return parse_number(raw)

    def readings(self, raw: object) -> tuple[Reading, ...]:
        """Read a fraction as a percentage, or a percentage as a fraction (when no % is written)."""
        try:
            value, sign = parse_percent(raw)
        except AnswerFormatError:
            return ()
        if sign:
            return ()
        if self.percent:
            return (Reading("fraction_for_percent", value * 100),)
        return (Reading("percent_for_fraction", value / 100),)

    def matches(self, given: sp.Rational, expected: sp.Rational) -> bool:
        """Within :attr:`rtol` (exact if 0)."""
        return given == expected if self.rtol == 0 else _close(given, expected, self.rtol)

    def display(self, value: sp.Rational) -> str:
        """Whole numbers as they are, others with four significant digits."""
        text = str(int(value)) if value.is_Integer else decimal_text(value, 4)
        return text + ("%" if self.percent else "")

    def solution_text(self, value: sp.Rational) -> str:
        """Eight significant digits."""
        return decimal_text(value, 8)

    def instructions(self) -> str:
        """State what to give and how close it must be."""
        what = "a percentage, such as 99.5 or 99.5%" if self.percent else self.what
        close = "exactly" if self.rtol == 0 else f"within {_percent(self.rtol)}"
        return f"Give {what}; it must be right {close} (write decimals with a point)."


@dataclass(frozen=True)
class Expression(AnswerKind):
    """A formula, graded by symbolic equivalence.

    Parameters
    ----------
    symbols : sequence of sympy.Symbol
        The symbols the learner may use (memtheory's ``B``, ``H``, ... or any
        made with :func:`memtheory.symbols.size_symbol`).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> kind = Expression((B,))
    >>> kind.matches(kind.parse("8*(B + 2)"), 8 * B + 16)
    True
    """

    symbols: tuple[sp.Symbol, ...] = field(default=())
    sizes: tuple[int, ...] = field(default=())
    name: ClassVar[str] = "expression"

    def __post_init__(self) -> None:
        object.__setattr__(self, "symbols", tuple(self.symbols))

    def bind(self, params: Mapping[str, Any]) -> Expression:
        """Keep the variant's whole-number parameters: equivalence is also sampled at them."""
        sizes = tuple(
            dict.fromkeys(
                int(v)
                for v in params.values()
                if isinstance(v, int) and not isinstance(v, bool) and v > 1
            )
        )
        return Expression(self.symbols, sizes)

    @property
    def symbol_map(self) -> dict[str, sp.Symbol]:
        """Symbols by name."""
        return {s.name: s for s in self.symbols}

    def finalize(self, value: object, how: Reasoning) -> sp.Expr:
        """Return the formula; its symbols must be among :attr:`symbols`."""
        expr = sp.sympify(value)
        extra = sorted(s.name for s in expr.free_symbols if s not in self.symbols)
        if extra:
            raise ExerciseDefinitionError(
                f"Expression answer {expr} uses undeclared symbols {extra}."
            )
        return expr

    def parse(self, raw: object) -> sp.Expr:
        """Read a formula safely."""
        return parse_expression(raw, self.symbol_map)

    def matches(self, given: sp.Expr, expected: sp.Expr) -> bool:
        """Equivalent as functions of positive integers (see :func:`equivalent`)."""
        return equivalent(given, expected, sizes=self.sizes)

    def display(self, value: sp.Expr) -> str:
        """Sympy's text form."""
        return sp.sstr(value)

    def instructions(self) -> str:
        """Symbols and syntax."""
        names = ", ".join(s.name for s in self.symbols)
        return (
            f"Write a formula in {names} (* for products, ** or ^ for powers, floor(...) to round "
            "down); it is graded by symbolic equivalence, not by how it is written."
        )


@dataclass(frozen=True)
class Choice(AnswerKind):
    """One of several options, chosen by letter or by text.

    Parameters
    ----------
    options : sequence of str, or callable
        The options, or a function of the variant's parameters returning them.
        The solver returns the text (or index) of the right option.

    Examples
    --------
    >>> kind = Choice(("SGD", "Adam"))
    >>> kind.parse("b"), kind.display(1), kind.solution_text(1)
    (1, 'b) Adam', 'b')
    """

    options: Sequence[str] | Callable[[Mapping[str, Any]], Sequence[str]] = ()
    written: tuple[str, ...] = ()
    name: ClassVar[str] = "choice"

    def shuffled(self, rng: random.Random) -> Choice:
        """Return the bound options in an order drawn from ``rng`` (a learner's own order).

        A solver may still return an option's index in the order the set wrote them.

        Examples
        --------
        >>> kind = Choice(("SGD", "Adam", "RMSprop")).shuffled(random.Random(3))
        >>> sorted(kind.options) == ["Adam", "RMSprop", "SGD"], kind.written[0]
        (True, 'SGD')
        >>> kind.options[kind.finalize(0, None)]
        'SGD'
        """
        written = self._options()
        order = list(written)
        rng.shuffle(order)
        return Choice(tuple(order), written)

    def bind(self, params: Mapping[str, Any]) -> Choice:
        """Fix the options for these parameters."""
        options = self.options(params) if callable(self.options) else self.options
        options = tuple(str(o) for o in options)
        if len(options) < 2 or len(set(options)) != len(options):
            raise ExerciseDefinitionError(
                f"Choice needs two or more distinct options, got {options}."
            )
        return Choice(options)

    def _options(self) -> tuple[str, ...]:
        if callable(self.options):
            raise ExerciseDefinitionError("Choice: bind the options to the parameters first.")
        return tuple(self.options)

    def finalize(self, value: object, how: Reasoning) -> int:
        """Return the index of the option the solver returned."""
        options = self._options()
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(options):
            return options.index(self.written[value]) if self.written else value
        if value in options:
            return options.index(value)
        raise ExerciseDefinitionError(
            f"Choice: the solver returned {value!r}, not one of {options}."
        )

    def parse(self, raw: object) -> int:
        """Read a letter or an option's text."""
        return parse_choice(raw, self._options())

    def matches(self, given: int, expected: int) -> bool:
        """Compare the options chosen."""
        return given == expected

    def display(self, value: int) -> str:
        """Letter and text."""
        return f"{chr(ord('a') + value)}) {self._options()[value]}"

    def solution_text(self, value: int) -> str:
        """Write the letter."""
        return chr(ord("a") + value)

    def instructions(self) -> str:
        """Letter or text."""
        return "Answer with the letter of one option, or with its text."

    def options_text(self) -> str:
        """One line per option."""
        return "\n".join(f"  {chr(ord('a') + i)}) {o}" for i, o in enumerate(self._options()))
