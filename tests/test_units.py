"""Byte units: exact conversion, labelled half-up formatting, and parsing sizes people write."""

from __future__ import annotations

import pytest
import sympy as sp
from sympy.physics import units as su

import memtheory as mt
from memtheory.symbols import B
from memtheory.units import (
    BINARY_UNITS,
    DECIMAL_UNITS,
    UNITS,
    as_quantity,
    round_half_up,
    unit_bytes,
)

SYMPY_BINARY = {"KiB": su.kibibyte, "MiB": su.mebibyte, "GiB": su.gibibyte, "TiB": su.tebibyte}


def sympy_bytes(quantity) -> sp.Expr:
    """Bytes in one ``quantity``, as sympy.physics.units converts it."""
    return su.convert_to(quantity, su.byte) / su.byte


# -- unit sizes ---------------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["KiB", "MiB", "GiB", "TiB"])
def test_binary_units_are_sympy_powers_of_1024(unit):
    """KiB, MiB, GiB, TiB hold what sympy.physics.units says: 2**10, 2**20, 2**30, 2**40 bytes."""
    power = BINARY_UNITS.index(unit)
    assert sympy_bytes(SYMPY_BINARY[unit]) == 2 ** (10 * power)
    assert unit_bytes(unit) == sympy_bytes(SYMPY_BINARY[unit])


@pytest.mark.parametrize("unit", ["kB", "MB", "GB", "TB"])
def test_decimal_units_are_powers_of_1000(unit):
    """kB, MB, GB, TB are SI prefixes on the byte: 10**3, 10**6, 10**9, 10**12 (sympy's kilo...)."""
    power = DECIMAL_UNITS.index(unit)
    prefix = [None, su.kilo, su.mega, su.giga, su.tera][power]
    assert unit_bytes(unit) == prefix.scale_factor == 10 ** (3 * power)


def test_kilobyte_and_kibibyte_differ_by_24_bytes():
    """1 KiB - 1 kB = 1024 - 1000 bytes; the two are never confused."""
    assert unit_bytes("KiB") - unit_bytes("kB") == 2**10 - 10**3
    assert set(UNITS) == set(DECIMAL_UNITS) | set(BINARY_UNITS)


def test_decimal_quantities_convert_with_sympy():
    """as_quantity's decimal units are real sympy quantities: 1500 bytes as kB converts back."""
    assert su.convert_to(as_quantity(1500, "kB"), su.byte) == 1500 * su.byte
    assert su.convert_to(as_quantity(3 * 2**20, "MiB"), su.byte) == 3 * 2**20 * su.byte


# -- convert ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nbytes", "unit", "expected"),
    [
        (3 * 2**20, "MiB", 3),
        (1500, "kB", sp.Rational(3, 2)),
        (10**9, "GiB", sp.Rational(10**9, 2**30)),
        (2**30, "GB", sp.Rational(2**30, 10**9)),
    ],
)
def test_convert_is_exact(nbytes, unit, expected):
    """Convert divides by the unit's size exactly (a sympy Rational, never a float)."""
    assert mt.convert(nbytes, unit) == expected


def test_convert_keeps_symbols():
    """4 B bytes in KiB is B/256."""
    assert mt.convert(4 * B, "KiB") == B / 2**8


def test_convert_accepts_unit_aliases():
    """Unit names are case-insensitive and may be spelt out."""
    assert mt.convert(2**20, "mebibytes") == mt.convert(2**20, "mib") == 1
    assert mt.convert(10**6, "megabyte") == mt.convert(10**6, "mb") == 1


# -- format_bytes: half up, always labelled -----------------------------------------------
@pytest.mark.parametrize(
    ("nbytes", "unit", "digits", "expected"),
    [
        (1005, "kB", 2, "1.01 kB"),  # exactly 1.005 kB; float round(1.005, 2) gives 1.0
        (2**20 // 8, "MiB", 2, "0.13 MiB"),  # exactly 0.125 MiB; banker's rounding gives 0.12
        (2560, "KiB", 0, "3 KiB"),  # exactly 2.5 KiB; banker's rounding gives 2
        (3584, "KiB", 0, "4 KiB"),  # exactly 3.5 KiB
        (1004, "kB", 2, "1.00 kB"),  # below the tie
        (2**30, "GiB", 0, "1 GiB"),
    ],
)
def test_format_rounds_ties_half_up(nbytes, unit, digits, expected):
    """Exact ties round up (away from zero), as a person writes them; the unit is always printed."""
    assert mt.format_bytes(nbytes, unit, digits) == expected


def test_round_half_up_of_negative_ties_goes_away_from_zero():
    """-0.125 to 2 decimals is -0.13."""
    assert str(round_half_up(sp.Rational(-1, 8), 2)) == "-0.13"


def test_format_same_bytes_in_decimal_and_binary():
    """228,875,808 bytes is 218.27 MiB (/2**20) and 228.88 MB (/10**6): both labelled."""
    nbytes = 228_875_808
    assert mt.format_bytes(nbytes, "MiB") == f"{round_half_up(sp.Rational(nbytes, 2**20), 2)} MiB"
    assert mt.format_bytes(nbytes, "MB") == f"{round_half_up(sp.Rational(nbytes, 10**6), 2)} MB"
    assert mt.format_bytes(nbytes, "MiB") == "218.27 MiB"
    assert mt.format_bytes(nbytes, "MB") == "228.88 MB"


def test_format_keeps_every_digit_of_huge_sizes():
    """Huge sizes print every digit, never in scientific notation or rounded to 28 digits.

    10**30 + 10 bytes is 10**27 + 0.01 kB; Decimal's default 28-digit context must not round it.
    """
    assert mt.format_bytes(10**30, "B", 2) == "1" + "0" * 30 + ".00 B"
    assert mt.format_bytes(10**30 + 10, "kB", 2) == "1" + "0" * 27 + ".01 kB"


def test_format_refuses_a_symbolic_size():
    """A size with B still in it cannot be formatted; the message says to evaluate first."""
    with pytest.raises(TypeError, match="evaluate it first"):
        mt.format_bytes(4 * B, "MiB")


# -- parse_bytes --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("22.9 MiB", sp.Rational(229, 10) * 2**20),
        ("24 MB", 24 * 10**6),
        ("1,048,576", 2**20),
        ("512", 512),
        ("1.5 KiB", 3 * 2**9),
        ("  7 kib ", 7 * 2**10),
        ("1_000 B", 1000),
        ("2e3 kB", 2 * 10**6),
        (".5 GiB", 2**29),
        ("3 GB", 3 * 10**9),
        ("1 TiB", 2**40),
    ],
)
def test_parse_sizes_people_write(text, expected):
    """Numbers with optional unit, digit groups and exponents parse to exact bytes."""
    assert mt.parse_bytes(text) == expected


def test_parse_bare_number_uses_the_default_unit():
    """A bare number is in default_unit: '3' KiB-by-default is 3 * 1024 bytes."""
    assert mt.parse_bytes("3", default_unit="KiB") == 3 * 2**10
    assert mt.parse_bytes("3 MB", default_unit="KiB") == 3 * 10**6


def test_parse_is_exact_not_rounded():
    """'22.9 MiB' is 120061952/5 bytes: a fraction, kept exact, not rounded to a byte."""
    assert mt.parse_bytes("22.9 MiB") == sp.Rational(229 * 2**20, 10)
    assert mt.parse_bytes("22.9 MiB").q == 5


@pytest.mark.parametrize(
    "text", ["", "   ", "abc", "nan", "inf", "-inf MB", "1.2.3 MB", "MB", ".", "12 M B"]
)
def test_parse_malformed_strings(text):
    """Text that is not a number with a unit raises ValueError quoting it and showing an example."""
    with pytest.raises(ValueError, match="cannot read") as error:
        mt.parse_bytes(text)
    assert repr(text) in str(error.value)
    assert "22.9 MiB" in str(error.value)


def test_parse_non_string():
    """A number instead of text is refused with the same clear ValueError."""
    with pytest.raises(ValueError, match="cannot read"):
        mt.parse_bytes(1024)


@pytest.mark.parametrize("text", ["1,5 MB", "1,23 GB", "12,3456 B"])
def test_parse_refuses_commas_that_are_not_thousands_groups(text):
    """Commas that do not group digits in threes are refused, not silently dropped.

    '1,5 MB' is a European decimal comma (1.5 MB); reading it as 15 MB is off by ten times.
    """
    with pytest.raises(ValueError):
        mt.parse_bytes(text)


def test_importing_memtheory_leaves_sympy_physics_units_unimported():
    """sympy.physics.units (a quarter of the import time) loads only when a quantity is asked."""
    import subprocess
    import sys

    code = (
        "import sys, memtheory; loaded = 'sympy.physics.units' in sys.modules; "
        "memtheory.units.as_quantity(2**20, 'MiB'); "
        "print(loaded, 'sympy.physics.units' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "True"]
