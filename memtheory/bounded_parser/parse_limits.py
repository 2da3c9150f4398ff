"""The limits every text is read within (:class:`Limits`), checked before anything is computed.

Examples
--------
>>> DEFAULT_LIMITS.power
64
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "Limits"]


@dataclass(frozen=True)
class Limits:
    """The bounds a text must keep to be read (see the module's table).

    Examples
    --------
    >>> Limits().power, Limits(length=80).length
    (64, 80)
    """

    length: int = 500
    depth: int = 40
    digits: int = 80
    exponent: int = 100
    power: int = 64
    bits: int = 1100
    degree: int = 24
    terms: int = 2000
    nodes: int = 2000
    arguments: int = 8


DEFAULT_LIMITS = Limits()
"""The limits used when none are given: ample for any memory figure or formula."""
