"""How an error message shows a value the user gave: a short prefix, never the whole input.

A refusal that echoed its input in full once printed a 100,000-element list.
Every message that quotes a user's value goes through :func:`shown`: the value's
``repr`` when it is short, else a prefix built by :mod:`reprlib` (which never
builds the whole ``repr`` of a large list, dict or string) and the value's length.

Examples
--------
>>> shown(2.5), shown("sgd")
('2.5', "'sgd'")
>>> shown(list(range(100_000)))[-40:]
'9, 20, 21, 2... (a list of 100000 items)'
"""

from __future__ import annotations

import operator
import reprlib
from collections.abc import Sized
from typing import SupportsIndex, cast

__all__ = ["SHOWN_LIMIT", "shown"]

SHOWN_LIMIT = 80
"""Most characters of a value a message quotes."""

_LONGEST_INT_BITS = 4 * SHOWN_LIMIT
"""Longest int (in bits, about 96 digits) written in decimal; Python refuses past 4,300 digits."""

_ITEMS = 40
"""Most items of a container reprlib writes (any repr of SHOWN_LIMIT characters has fewer)."""


def _short() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel = 3
    short.maxstring = SHOWN_LIMIT
    short.maxother = SHOWN_LIMIT
    short.maxlong = SHOWN_LIMIT
    for kind in ("tuple", "list", "array", "dict", "set", "frozenset", "deque"):
        setattr(short, f"max{kind}", _ITEMS)
    return short


_SHORT = _short()


def shown(value: object, limit: int = SHOWN_LIMIT) -> str:
    """Return ``repr(value)`` for a message, cut to about ``limit`` characters.

    A long string or container is cut by :mod:`reprlib` and followed by its
    length; anything else whose ``repr`` is long is cut at ``limit`` characters.

    Examples
    --------
    >>> shown("0123456789" * 100, limit=20)
    "'0123456789012345678... (1000 characters)"
    >>> len(shown(2**1000)) < 100
    True
    >>> shown({"a": 1})
    "{'a': 1}"
    >>> import sympy
    >>> shown(10**5000), shown(sympy.Integer(10**5000))
    ('<an int of 16610 bits>', '<an int of 16610 bits>')
    """
    if isinstance(value, int) or getattr(value, "is_Integer", False) is True:  # sympy's too
        bits = operator.index(cast(SupportsIndex, value)).bit_length()
        if bits > _LONGEST_INT_BITS:
            return f"<an int of {bits} bits>"  # Python writes no int past 4,300 digits
    try:
        text = _SHORT.repr(value)  # reprlib names a value whose repr fails by its type
    except Exception:  # noqa: BLE001 - a repr that fails must not hide the real error
        return f"<{type(value).__name__} object>"
    if "..." not in text and len(text) <= limit:  # nothing was cut: the plain repr is as short
        try:
            plain = repr(value)
        except Exception:  # noqa: BLE001 - as above
            plain = text
        if len(plain) <= limit:
            return plain
    cut = False
    if isinstance(value, str | bytes):
        cut = len(value) > _SHORT.maxstring
        what = f"{len(value)} characters" if isinstance(value, str) else f"{len(value)} bytes"
    elif isinstance(value, Sized) and isinstance(value, tuple | list | dict | set | frozenset):
        cut = len(value) > _ITEMS
        what = f"a {type(value).__name__} of {len(value)} items"
    else:
        what = ""
    if len(text) > limit + 5:
        text, cut = text[:limit] + "...", True
    return f"{text} ({what})" if cut and what else text
