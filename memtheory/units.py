"""Byte units: converting, formatting and parsing memory sizes, always labelled.

memtheory computes in bytes. Decimal units step by :math:`10^3` (kB, MB, GB,
TB, PB, EB) and binary units by :math:`2^{10}` (KiB, MiB, GiB, TiB, PiB, EiB). The binary units
are sympy's own information quantities (:mod:`sympy.physics.units`); the
decimal ones are defined here on top of sympy's ``byte``, so that a size can
also be handed to :func:`sympy.physics.units.convert_to`.

Many sources write "MB" and divide by :math:`1024^2`; memtheory never does:
a label always says which unit it is.

Examples
--------
>>> format_bytes(228_875_808, "MiB")
'218.27 MiB'
>>> format_bytes(228_875_808, "MB")
'228.88 MB'
>>> parse_bytes("22.9 MiB")
120061952/5
"""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal
from fractions import Fraction
from functools import cache
from typing import TYPE_CHECKING

import sympy as sp

from memtheory._shown import shown
from memtheory.bounded_parser import DEFAULT_LIMITS, parse_arithmetic, quote_text
from memtheory.errors import InvalidArgumentError, ParseError, UnknownUnitError, UnsupportedError
from memtheory.registry import Registry

if TYPE_CHECKING:
    from sympy.physics.units import Quantity

__all__ = [
    "BINARY_UNITS",
    "DECIMAL_UNITS",
    "UNITS",
    "UNIT_REGISTRY",
    "as_quantity",
    "convert",
    "format_bytes",
    "parse_bytes",
    "parse_size",
    "round_half_up",
    "unit_bytes",
]


_POWERS: dict[str, tuple[int, int]] = {
    "B": (2, 0),
    "kB": (10, 3),
    "MB": (10, 6),
    "GB": (10, 9),
    "TB": (10, 12),
    "PB": (10, 15),
    "EB": (10, 18),
    "KiB": (2, 10),
    "MiB": (2, 20),
    "GiB": (2, 30),
    "TiB": (2, 40),
    "PiB": (2, 50),
    "EiB": (2, 60),
}
"""Each unit as base ** exponent bytes: the SI prefixes and the IEC binary prefixes."""

UNITS: dict[str, int] = {name: base**exponent for name, (base, exponent) in _POWERS.items()}
"""Bytes in one of each unit (a test checks them against :mod:`sympy.physics.units`)."""

DECIMAL_UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
"""Units that step by 1000."""

BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
"""Units that step by 1024."""

UNIT_REGISTRY: Registry[int] = Registry(
    "unit",
    UNITS,
    aliases={
        "byte": "B",
        "bytes": "B",
        "kilobyte": "kB",
        "kilobytes": "kB",
        "megabyte": "MB",
        "megabytes": "MB",
        "gigabyte": "GB",
        "gigabytes": "GB",
        "terabyte": "TB",
        "terabytes": "TB",
        "petabyte": "PB",
        "petabytes": "PB",
        "exabyte": "EB",
        "exabytes": "EB",
        "kibibyte": "KiB",
        "kibibytes": "KiB",
        "mebibyte": "MiB",
        "mebibytes": "MiB",
        "gibibyte": "GiB",
        "gibibytes": "GiB",
        "tebibyte": "TiB",
        "tebibytes": "TiB",
        "pebibyte": "PiB",
        "pebibytes": "PiB",
        "exbibyte": "EiB",
        "exbibytes": "EiB",
    },
    error=UnknownUnitError,
    hint="(kB/MB/GB step by 1000, KiB/MiB/GiB by 1024)",
    separators=False,
)
"""Bytes per unit by any accepted spelling: the exact symbol, any case ("mb" is MB, "mib"
MiB: the "i" always decides), or the word ("mebibytes")."""


def unit_bytes(unit: str) -> int:
    """Return the number of bytes in one ``unit``.

    Examples
    --------
    >>> unit_bytes("MiB"), unit_bytes("MB")
    (1048576, 1000000)
    """
    return UNIT_REGISTRY[unit]


def convert(nbytes: sp.Expr | int, unit: str) -> sp.Expr:
    """Express a byte count in ``unit``, exactly (a sympy expression).

    Parameters
    ----------
    nbytes : sympy expression or int
        Size in bytes; may contain symbols.
    unit : str
        Target unit, e.g. ``"MiB"`` or ``"GB"``.

    Examples
    --------
    >>> convert(3 * 2**20, "MiB")
    3
    >>> convert(1500, "kB")
    3/2
    >>> from memtheory.symbols import B
    >>> convert(4 * B, "KiB")
    B/256
    >>> convert(sp.Rational(1164, 5), "B")
    1164/5
    """
    value = _byte_count(nbytes, "convert")
    if value.has(sp.Float):  # exact numbers stay as they are: nsimplify(1164/5) is no 1164/5
        value = sp.nsimplify(value)
    return value / unit_bytes(unit)


def as_quantity(nbytes: sp.Expr | int, unit: str = "B") -> sp.Expr:
    """Return the size as a :mod:`sympy.physics.units` quantity in ``unit``.

    Examples
    --------
    >>> as_quantity(2**21, "MiB")
    2*mebibyte
    """
    canonical = UNIT_REGISTRY.canonical(unit)
    return convert(nbytes, canonical) * _quantities()[canonical]


@cache
def _quantities() -> dict[str, Quantity]:
    """Each unit as a :mod:`sympy.physics.units` quantity (imported on first use: it is slow)."""
    from sympy.physics import units as su
    from sympy.physics.units import Quantity

    def decimal(name: str, abbrev: str, power: int) -> Quantity:
        quantity = Quantity(name, abbrev=abbrev)
        quantity.set_global_relative_scale_factor(sp.Integer(10) ** (3 * power), su.byte)
        return quantity

    return {
        "B": su.byte,
        "kB": decimal("kilobyte", "kB", 1),
        "MB": decimal("megabyte", "MB", 2),
        "GB": decimal("gigabyte", "GB", 3),
        "TB": decimal("terabyte", "TB", 4),
        "PB": decimal("petabyte", "PB", 5),
        "EB": decimal("exabyte", "EB", 6),
        "KiB": su.kibibyte,
        "MiB": su.mebibyte,
        "GiB": su.gibibyte,
        "TiB": su.tebibyte,
        "PiB": su.pebibyte,
        "EiB": su.exbibyte,
    }


def round_half_up(value: sp.Expr | int | Fraction, digits: int) -> Decimal:
    """Round an exact number to ``digits`` decimals, halves away from zero.

    Printed figures are compared with memtheory's exact values through this
    function, so that ``2.035`` becomes ``2.04`` as a person would write it.

    Examples
    --------
    >>> round_half_up(sp.Rational(4063, 2000), 2)
    Decimal('2.03')
    >>> round_half_up(sp.Rational(1, 8), 2)
    Decimal('0.13')
    """
    exact = sp.Rational(value) * 10**digits
    magnitude = sp.floor(abs(exact) + sp.Rational(1, 2))
    signed = int(magnitude) if exact >= 0 else -int(magnitude)
    return Decimal(f"{signed}E-{digits}") if digits > 0 else Decimal(signed)


def format_bytes(nbytes: sp.Expr | int, unit: str = "MiB", digits: int = 2) -> str:
    """Format a byte count as ``"<value> <unit>"``, rounded half up.

    Parameters
    ----------
    nbytes : sympy expression or int
        Size in bytes; must evaluate to a finite number. It may be negative (a
        difference of two sizes, such as what a technique saves); text, booleans,
        NaN and infinities are refused.
    unit : str
        Unit to print in; the label is always printed.
    digits : int
        Decimals to keep, 0 to 100.

    Examples
    --------
    >>> format_bytes(2**30, "GiB", 0)
    '1 GiB'
    >>> format_bytes(2**30, "GB", 3)
    '1.074 GB'
    """
    canonical = UNIT_REGISTRY.canonical(unit)
    if (
        isinstance(digits, bool)
        or not isinstance(digits, numbers.Integral)
        or not (0 <= digits <= 100)
    ):
        raise InvalidArgumentError(
            f"format_bytes: digits must be a whole number from 0 to 100, got {shown(digits)}."
        )
    value = convert(_byte_count(nbytes, "format_bytes"), canonical)
    if not value.is_number:
        raise UnsupportedError(
            f"format_bytes needs a number, got the expression {nbytes}; evaluate it first."
        )
    if not value.is_extended_real or not value.is_finite:
        raise InvalidArgumentError(f"format_bytes needs a finite number of bytes, got {nbytes}.")
    return f"{round_half_up(value, int(digits)):f} {canonical}"


def _byte_count(nbytes: object, caller: str) -> sp.Expr:
    """``nbytes`` as a sympy expression; refuses text, booleans, NaN and infinities.

    A byte count may be negative: a difference of two sizes (what a technique saves) is one.
    """
    if isinstance(nbytes, sp.Expr):
        return nbytes
    if isinstance(nbytes, numbers.Real) and not isinstance(nbytes, bool):
        if isinstance(nbytes, numbers.Integral):
            return sp.Integer(int(nbytes))
        if isinstance(nbytes, numbers.Rational):
            return sp.Rational(int(nbytes.numerator), int(nbytes.denominator))
        real = float(nbytes)
        if math.isfinite(real):
            return sp.Float(real)
        raise InvalidArgumentError(f"{caller} needs a finite number of bytes, got {shown(nbytes)}.")
    raise InvalidArgumentError(
        f"{caller} needs a number of bytes (or a sympy expression), got {shown(nbytes)} "
        f"({type(nbytes).__name__}); read a size written as text with parse_bytes first."
    )


_SIZE = re.compile(r"^(?P<number>.*?[\d.)⁰¹²³⁴⁵⁶⁷⁸⁹])\s*(?P<unit>[A-Za-z]+)?$", re.DOTALL)


_RADIX = re.compile(r"(?<![\d.])0[xXoObB]\s*[0-9a-fA-F]")
"""A hexadecimal, octal or binary literal (``0x10``): read as arithmetic it would be 0 x 10."""


def _is_bits(unit: str) -> bool:
    """Whether ``unit`` names bits: ``Gb``, ``Mib``, ``kbit``, ``gigabits``.

    An all-lowercase symbol (``mb``, ``gib``) stays the byte unit, as the
    registry reads any case; a lowercase ``b`` after a capital prefix, or the
    word bit, is bits.
    """
    lowered = unit.lower()
    if "bit" in lowered:
        return True
    return len(unit) > 1 and unit.endswith("b") and unit != lowered


def _unreadable(text: object, reason: str = "") -> ParseError:
    why = f" ({reason.rstrip('.')})" if reason else ""
    return ParseError(
        f"cannot read {quote_text(text)} as a size{why}: write a number and a unit, e.g. "
        "'22.9 MiB' (commas only between groups of three digits, a point for decimals)."
    )


def parse_size(text: str, default_unit: str = "B") -> tuple[sp.Rational, str]:
    """Split a size such as ``"22.9 MiB"`` into its exact number and its unit's symbol.

    The number is read by :func:`memtheory.bounded_parser.parse_arithmetic`:
    digits grouped by commas, spaces or underscores, e-notation, and plain
    arithmetic (``"4 * 1024 MiB"``, ``"3 x 10^6 B"``), within its limits, so
    that no text (``"1e99999999 GB"``, five thousand nines) takes long to read.

    Parameters
    ----------
    text : str
        A number with an optional unit.
    default_unit : str
        Unit assumed when the text has none.

    Returns
    -------
    number : sympy.Rational
        The number as written, in ``unit``.
    unit : str
        The canonical symbol of the unit (``"mib"`` gives ``"MiB"``).

    Raises
    ------
    ParseError
        If the text is not a non-negative number with an optional unit, or
        breaks a limit of the reader.
    UnknownUnitError
        If the unit is not a byte unit.

    Examples
    --------
    >>> parse_size("22.9 mib")
    (229/10, 'MiB')
    >>> parse_size("2 x 1024", default_unit="KiB")
    (2048, 'KiB')
    """
    if isinstance(text, str) and len(text) > DEFAULT_LIMITS.length:
        raise _unreadable(
            text, f"the text is {len(text)} characters long; the limit is {DEFAULT_LIMITS.length}"
        )
    match = _SIZE.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise _unreadable(text)
    number_text, unit = match.group("number"), match.group("unit")
    if _RADIX.search(text):  # "0xba" splits as 0 and a unit "xba": look at the whole text
        raise ParseError(
            f"cannot read {quote_text(text)} as a size: it looks like a number in another "
            "base (0x, 0o, 0b); write the size in decimal, e.g. '16 B'."
        )
    if unit is not None and _is_bits(unit):
        raise UnknownUnitError(
            f"{quote_text(unit)} in {quote_text(text)} is a unit of bits, not bytes (a "
            "lowercase b after a prefix, or 'bit', means bits: 8 Gb is 1 GB). memtheory "
            "reads sizes in bytes: divide by 8 and write a byte unit, e.g. '1 GB' or '1 GiB'."
        )
    try:
        number = parse_arithmetic(number_text)
    except ParseError as error:
        raise _unreadable(text, str(error)) from None
    if number < 0:
        raise ParseError(f"a size cannot be negative, got {quote_text(text)}.")
    canonical = UNIT_REGISTRY.canonical(unit or default_unit)
    return sp.Rational(number.numerator, number.denominator), canonical


def parse_bytes(text: str, default_unit: str = "B") -> sp.Rational:
    """Parse a size such as ``"22.9 MiB"``, ``"24 MB"`` or ``"1,048,576"`` into bytes.

    Parameters
    ----------
    text : str
        A number with an optional unit; commas, spaces and underscores group
        digits, and the number may be plain arithmetic (see :func:`parse_size`).
    default_unit : str
        Unit assumed when the text has none.

    Returns
    -------
    sympy.Rational
        The exact number of bytes the text denotes (not rounded).

    Raises
    ------
    ParseError
        If the text is not a non-negative number with an optional unit (commas
        must group thousands: ``"1,5 MB"`` is refused, not read as 15 MB), or is
        too long or too large to read (``"1e99999999 GB"``).
    UnknownUnitError
        If the unit is not a byte unit.

    Examples
    --------
    >>> parse_bytes("1.5 KiB")
    1536
    >>> parse_bytes("3 parsecs")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownUnitError: unknown unit 'parsecs'. Known units: B, kB, MB, ...
    """
    number, unit = parse_size(text, default_unit)
    return number * unit_bytes(unit)
