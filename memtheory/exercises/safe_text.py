r"""Text a learner wrote, made harmless for a teacher's terminal and spreadsheet.

:func:`printable` shows control and bidirectional-format characters (a newline,
an ANSI escape such as ``\x1b[2J``, a right-to-left override) as escapes;
:func:`csv_cell` prefixes with ``'`` every CSV cell that a spreadsheet would run
as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return); :func:`csv_text` writes rows of such cells.

Examples
--------
>>> printable("ada\nbob")
'ada\\nbob'
"""

from __future__ import annotations

import csv
import io
import unicodedata

__all__ = ["csv_cell", "csv_text", "printable"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def printable(text: object) -> str:
    r"""Return ``text`` with every control or bidirectional-format character written as an escape.

    Examples
    --------
    >>> printable("ada\x1b[2J\nbob")
    'ada\\x1b[2J\\nbob'
    >>> printable("Zoë")
    'Zoë'
    """
    shown = str(text)
    if shown.isprintable():
        return shown
    return "".join(c if c.isprintable() or c == " " else _escape(c) for c in shown)


def _escape(char: str) -> str:
    if unicodedata.category(char) in ("Zs",):
        return " "
    return repr(char)[1:-1] if char.isascii() else f"\\u{ord(char):04x}"


def csv_cell(value: object) -> object:
    r"""Return a CSV cell that a spreadsheet shows as text: no formula, no control characters.

    Numbers are kept as they are.

    Examples
    --------
    >>> csv_cell('=HYPERLINK("http://x")'), csv_cell("ada"), csv_cell(3)
    ('\'=HYPERLINK("http://x")', 'ada', 3)
    """
    if not isinstance(value, str):
        return value
    text = printable(value)
    return f"'{text}" if text.startswith(_FORMULA_START) else text


def csv_text(rows: list[list[object]]) -> str:
    r"""Return ``rows`` as CSV text, every cell made safe by :func:`csv_cell`.

    Examples
    --------
    >>> csv_text([["learner", "score"], ["=1+1", 3]])
    "learner,score\n'=1+1,3\n"
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([csv_cell(cell) for cell in row] for row in rows)
    return buffer.getvalue()
