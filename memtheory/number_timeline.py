"""A timeline whose moments are plain numbers: kept as Python integers, handed out as sympy's.

An evaluated step has thousands of moments and most answers read only their largest;
converting every one into a sympy number just to ask whether it holds a symbol costs more
than the answer. :class:`NumberTimeline` keeps the Python numbers and says it has no
symbols, so :class:`~memtheory.footprint.Footprint` can skip it.

Examples
--------
>>> moments = NumberTimeline(["forward", "backward"], [12, 30])
>>> moments["backward"], max(moments.numbers())
(30, 30)
>>> type(moments["forward"]).__name__
'Integer'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction

import sympy as sp

__all__ = ["NumberTimeline", "as_sympy_number"]


class NumberTimeline(Mapping[str, sp.Expr]):
    """Bytes at each moment of a step, kept as Python numbers, handed out as sympy numbers."""

    def __init__(self, labels: Iterable[str], values: Iterable[int | Fraction]) -> None:
        self._values = dict(zip(labels, values, strict=True))

    def __getitem__(self, label: str) -> sp.Expr:
        return as_sympy_number(self._values[label])

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return repr(dict(self))

    def numbers(self) -> Iterator[int | Fraction]:
        """Return the moments' bytes as Python numbers, in order (no sympy object is made)."""
        return iter(self._values.values())


def as_sympy_number(value: int | Fraction) -> sp.Rational:
    """Return a Python integer or fraction as sympy's exact number.

    Examples
    --------
    >>> as_sympy_number(Fraction(3, 2)), as_sympy_number(7)
    (3/2, 7)
    """
    if type(value) is int:
        return sp.Integer(value)
    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    return sp.Integer(value)
