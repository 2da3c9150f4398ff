"""Sizes that are not byte counts are refused, and the large units exist (issue 27).

``parse_bytes("0x10 B")`` read ``0 x 10`` and returned 0; ``parse_bytes("8 Gb")`` read gigabits
as gigabytes (eight times too much). Unit sizes are checked against sympy.physics.units
(``pebibyte``, ``exbibyte``, and the SI prefixes ``peta`` and ``exa``).
"""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st
from sympy.physics import units as su

import memtheory as mt
from memtheory.units import BINARY_UNITS, DECIMAL_UNITS, UNITS, as_quantity, unit_bytes


def sympy_bytes(quantity) -> sp.Expr:
    """Bytes in one ``quantity``, as sympy.physics.units converts it."""
    return su.convert_to(quantity, su.byte) / su.byte


@pytest.mark.parametrize(
    ("unit", "quantity"), [("PiB", su.pebibyte), ("EiB", su.exbibyte)]
)
def test_pebibytes_and_exbibytes_are_sympys(unit, quantity):
    """PiB and EiB hold what sympy.physics.units says, and step by 1024 from TiB."""
    assert unit_bytes(unit) == sympy_bytes(quantity)
    assert unit_bytes(unit) == unit_bytes(BINARY_UNITS[BINARY_UNITS.index(unit) - 1]) * 1024


@pytest.mark.parametrize(("unit", "prefix"), [("PB", su.peta), ("EB", su.exa)])
def test_petabytes_and_exabytes_are_si_prefixes(unit, prefix):
    """PB and EB are SI's peta and exa on the byte, and step by 1000 from TB."""
    assert unit_bytes(unit) == prefix.scale_factor
    assert unit_bytes(unit) == unit_bytes(DECIMAL_UNITS[DECIMAL_UNITS.index(unit) - 1]) * 1000
    assert su.convert_to(as_quantity(3 * prefix.scale_factor, unit), su.byte) == (
        3 * prefix.scale_factor * su.byte
    )


def test_the_new_units_parse_and_format():
    """Every spelling reads; the unit tables stay the union of both series."""
    assert mt.parse_bytes("2 PB") == 2 * su.peta.scale_factor
    assert mt.parse_bytes("1 exbibyte") == sympy_bytes(su.exbibyte)
    assert mt.format_bytes(sympy_bytes(su.pebibyte) * 3, "PiB") == "3.00 PiB"
    assert set(UNITS) == set(DECIMAL_UNITS) | set(BINARY_UNITS)


@given(st.integers(0, 2**64), st.sampled_from(["x", "X"]), st.sampled_from(["", " B", " MiB"]))
def test_a_hexadecimal_size_is_refused(number, x, unit):
    """0x10 B used to be read as 0 x 10 = 0 bytes: any 0x literal is refused."""
    text = f"0{x}{number:x}{unit}"
    with pytest.raises(mt.errors.ParseError, match="decimal"):
        mt.parse_bytes(text)


@pytest.mark.parametrize("unit", ["Gb", "Mb", "Kb", "Tb", "Gib", "Mib", "kbit", "Gbit", "gigabits"])
def test_bits_are_not_bytes(unit):
    """8 Gb is a gigabit figure: refused with a message that says so, never read as 8 GB."""
    with pytest.raises(mt.errors.UnknownUnitError, match="bits, not bytes"):
        mt.parse_bytes(f"8 {unit}")


@pytest.mark.parametrize("unit", ["gb", "mib", "GB", "GiB", "B", "kB"])
def test_byte_spellings_still_read(unit):
    """Lowercase byte symbols stay bytes, as the unit registry documents (any case)."""
    assert mt.parse_bytes(f"8 {unit}") == 8 * unit_bytes(unit)


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_multiplication_still_reads(left, right):
    """'3 x 10' is arithmetic, and a number ending in zero next to x is not hexadecimal."""
    assert mt.parse_bytes(f"{left} x {right} B") == left * right
    assert mt.parse_bytes(f"{left}0x{right} B") == left * 10 * right
