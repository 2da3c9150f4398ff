"""One table, three renderings: text for a terminal, Markdown for documents, HTML for notebooks.

Every table memtheory prints (a memory breakdown, a network's layers, a scenario
comparison, a learner's grades, the accuracy of each convention) is a
:class:`Table`: columns, rows of cells already formatted as text, optional
footer rows (totals) and notes. The same rows render as

* :meth:`Table.text`: aligned columns separated by two spaces, a rule under
  the header and above the footer, numbers right-aligned;
* :meth:`Table.markdown`: a pipe table with the alignment markers, for the
  book and for reports;
* :meth:`Table.html`: an HTML table inside a horizontally scrolling wrapper,
  so a wide table scrolls instead of being cut off; Jupyter shows it through
  ``_repr_html_``. Long identifier-like names (``ReluBackward0.result``,
  ``aten.max_pool2d_with_indices_backward.default``) may break after their
  ``.``, ``_`` and ``::`` there (a ``<wbr>``, which copies as nothing, so a
  copied name is the exact name); numbers never break.

No other module of memtheory builds table strings: it builds a :class:`Table`.

Examples
--------
>>> table = Table(
...     [Column("component"), Column("MiB", align="right")],
...     [("parameters", "2.03"), ("gradients", "2.03")],
...     footer=[("total", "4.06")],
... )
>>> print(table)
component    MiB
----------  ----
parameters  2.03
gradients   2.03
----------  ----
total       4.06
>>> print(table.markdown())
| component | MiB |
|:--|--:|
| parameters | 2.03 |
| gradients | 2.03 |
| **total** | **4.06** |
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from memtheory.errors import TableError

__all__ = ["Column", "Table"]

Align = Literal["left", "right"]

_GAP = "  "
"""Space between two columns of a text table."""

_BREAK_AFTER = re.compile(
    r"(?<=[^\W\d])\.(?=\w)"  # a dot after a letter: ReluBackward0.result, torch.float32
    r"|(?<=\w)\.(?=[^\W\d])"  # or before one: 1.x; never between two digits, as in 1.50
    r"|(?<=[^\W_])(?:_+|::)(?=[^\W_])"  # underscores or :: between letters or digits
)
"""A separator inside a name, after which HTML may break the line (numbers have none)."""

_LONG_NAME = 20
"""A word longer than this may break between its humps even when it is no code name."""

_HUMP = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z0-9])(?=[A-Z][a-z])")
"""Where a capitalised part starts: Max|Pool2D|With|Indices|Backward0, HTTP|Server."""


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Table`.

    Parameters
    ----------
    title : str
        The header; say the unit when the cells are sizes (``"MiB"``,
        ``"total (GiB)"``).
    align : {"left", "right"}, default "left"
        Numbers are right-aligned.
    wrap : int, optional
        In text, wrap cells longer than this many characters onto further
        lines (for free text such as feedback). Markdown and HTML never wrap
        by hand: the reader's window does.

    Examples
    --------
    >>> print(Table(["model", Column("MiB", "right")], [["cnn", "1.50"]]).text())
    model   MiB
    -----  ----
    cnn    1.50
    """

    title: str
    align: Align = "left"
    wrap: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.align, str) or self.align not in ("left", "right"):
            raise TableError(
                f"column {self.title!r:.60}: align must be 'left' or 'right', "
                f"got {self.align!r:.60}."
            )
        if self.wrap is not None and (
            not isinstance(self.wrap, int) or isinstance(self.wrap, bool) or self.wrap < 1
        ):
            raise TableError(
                f"column {self.title!r:.60}: wrap must be a positive width, in characters, "
                f"got {self.wrap!r:.60}."
            )


@dataclass(frozen=True)
class Table:
    """Rows of text cells under titled columns, with optional footer rows and notes.

    Parameters
    ----------
    columns : sequence of Column or str
        A plain string is a left-aligned column of that title.
    rows : iterable of sequences of str
        One cell per column, already formatted (units belong in the column
        title). Cells are converted with ``str``.
    footer : iterable of sequences of str, optional
        Totals and the like, set apart by a rule (text) or in bold (Markdown)
        or a ``<tfoot>`` (HTML). In text, a footer's first cell may run on
        over the empty cells right after it (``("total", "", "", "12")``).
    title : str, optional
        A line above the table (a caption in HTML).
    notes : iterable of str, optional
        Lines below the table.

    Examples
    --------
    >>> t = Table(["size", Column("value", align="right")], [("B", "64"), ("S", "1024")])
    >>> t.shape
    (2, 2)
    >>> "overflow-x:auto" in t.html()
    True
    """

    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    footer: tuple[tuple[str, ...], ...] = field(default=())
    title: str | None = None
    notes: tuple[str, ...] = field(default=())

    def __init__(
        self,
        columns: Sequence[Column | str],
        rows: Iterable[Sequence[object]],
        *,
        footer: Iterable[Sequence[object]] = (),
        title: str | None = None,
        notes: Iterable[str] = (),
    ) -> None:
        cols = tuple(
            c if isinstance(c, Column) else Column(str(c)) for c in _listed(columns, "columns")
        )
        if not cols:
            raise TableError("a table needs at least one column.")
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "rows", self._cells(rows, "row"))
        object.__setattr__(self, "footer", self._cells(footer, "footer row"))
        object.__setattr__(self, "title", title)
        lines = [notes] if isinstance(notes, str) else _listed(notes, "notes")  # one note
        object.__setattr__(self, "notes", tuple(str(n) for n in lines))

    def _cells(self, rows: Iterable[Sequence[object]], what: str) -> tuple[tuple[str, ...], ...]:
        result = []
        for number, row in enumerate(_listed(rows, f"the {what}s"), start=1):
            listed = _listed(row, f"{what} {number}")
            cells = tuple("" if cell is None else str(cell) for cell in listed)
            if len(cells) != len(self.columns):
                titles = ", ".join(c.title for c in self.columns)
                raise TableError(
                    f"{what} {number} has {len(cells)} cells but the table has "
                    f"{len(self.columns)} columns ({titles}): give one cell per column."
                )
            result.append(cells)
        return tuple(result)

    def titled(self, title: str | None) -> Table:
        """Return the same table with another title line (None: without one).

        Examples
        --------
        >>> print(Table(["a"], [("1",)]).titled("fp32"))
        fp32
        a
        -
        1
        """
        return Table(self.columns, self.rows, footer=self.footer, title=title, notes=self.notes)

    @property
    def shape(self) -> tuple[int, int]:
        """Number of body rows and of columns."""
        return len(self.rows), len(self.columns)

    @property
    def titles(self) -> tuple[str, ...]:
        """The column titles."""
        return tuple(c.title for c in self.columns)

    def column(self, title: str) -> tuple[str, ...]:
        """Return the body cells of the column called ``title``.

        Examples
        --------
        >>> Table(["a", "b"], [("1", "2"), ("3", "4")]).column("b")
        ('2', '4')
        """
        try:
            index = self.titles.index(title)
        except ValueError:
            raise TableError(
                f"no column {title!r}; the columns are {', '.join(self.titles)}."
            ) from None
        return tuple(row[index] for row in self.rows)

    def selected(self, *titles: str, title: str | None = None) -> Table:
        """Return a table of the columns called ``titles`` only, in that order.

        A wide table can be shown as two narrower ones (a phone shows each column),
        each with the first columns that name its rows. The footer keeps the same
        columns; ``title`` replaces the title line (default: kept), the notes are kept.

        Examples
        --------
        >>> t = Table(["name", "a", "b"], [("x", "1", "2")], title="all")
        >>> print(t.selected("name", "b"))
        all
        name  b
        ----  -
        x     2
        >>> t.selected("c")
        Traceback (most recent call last):
        ...
        memtheory.errors.TableError: no column 'c'; the columns are name, a, b.
        """
        indices = []
        for wanted in titles:
            if wanted not in self.titles:
                raise TableError(
                    f"no column {wanted!r}; the columns are {', '.join(self.titles)}."
                )
            indices.append(self.titles.index(wanted))
        if not indices:
            raise TableError("select at least one column by its title.")
        return Table(
            [self.columns[i] for i in indices],
            [[row[i] for i in indices] for row in self.rows],
            footer=[[row[i] for i in indices] for row in self.footer],
            title=self.title if title is None else title,
            notes=self.notes,
        )

    # -- text --------------------------------------------------------------------------
    def text(self) -> str:
        """Render as aligned plain text (what ``str()`` returns)."""
        widths = self._text_widths()
        header = self._text_lines(self.titles, widths)
        rule = _GAP.join("-" * w for w in widths)
        lines = [] if self.title is None else [self.title]
        lines += [*header, rule]
        for row in self.rows:
            lines += self._text_lines(row, widths)
        if self.footer:
            lines.append(rule)
            lines += [self._footer_line(row, widths) for row in self.footer]
        lines += list(self.notes)
        return "\n".join(lines)

    def _text_widths(self) -> list[int]:
        widths = []
        for i, column in enumerate(self.columns):
            cells = [column.title, *(row[i] for row in self.rows)]
            cells += [row[i] for row in self.footer if not (i == 0 and _spans(row) > 1)]
            width = max(len(cell) for cell in cells)
            if column.wrap is not None:
                longest_word = max(
                    (len(word) for cell in cells for word in cell.split()), default=0
                )
                width = min(width, max(column.wrap, longest_word, len(column.title)))
            widths.append(width)
        for row in self.footer:
            span = _spans(row)
            if span > 1:
                room = sum(widths[:span]) + len(_GAP) * (span - 1)
                widths[span - 1] += max(0, len(row[0]) - room)
        return widths

    def _text_lines(self, row: Sequence[str], widths: Sequence[int]) -> list[str]:
        wrapped = [
            (textwrap.wrap(cell, widths[i]) or [""])
            if self.columns[i].wrap is not None
            else [cell]
            for i, cell in enumerate(row)
        ]
        depth = max(len(parts) for parts in wrapped)
        return [
            _GAP.join(
                self._aligned(parts[line] if line < len(parts) else "", i, widths[i])
                for i, parts in enumerate(wrapped)
            ).rstrip()
            for line in range(depth)
        ]

    def _footer_line(self, row: Sequence[str], widths: Sequence[int]) -> str:
        span = _spans(row)
        room = sum(widths[:span]) + len(_GAP) * (span - 1)
        cells = [row[0].ljust(room)]
        cells += [self._aligned(row[i], i, widths[i]) for i in range(span, len(row))]
        return _GAP.join(cells).rstrip()

    def _aligned(self, cell: str, index: int, width: int) -> str:
        return cell.rjust(width) if self.columns[index].align == "right" else cell.ljust(width)

    # -- markdown ----------------------------------------------------------------------
    def markdown(self) -> str:
        """Render as a Markdown pipe table (footer rows in bold), title and notes as paragraphs."""
        marks = ["--:" if c.align == "right" else ":--" for c in self.columns]
        lines = [] if self.title is None else [f"**{_md(self.title)}**", ""]
        lines.append(_md_row(self.titles))
        lines.append("|" + "|".join(marks) + "|")
        lines += [_md_row(row) for row in self.rows]
        lines += [_md_row(row, bold=True) for row in self.footer]
        if self.notes:
            lines += ["", *(f"{_md(note)}  " for note in self.notes)]
            lines[-1] = lines[-1].rstrip()
        return "\n".join(lines)

    # -- html --------------------------------------------------------------------------
    def html(self) -> str:
        """Render as an HTML table in a wrapper that scrolls sideways when the table is wide."""
        from html import escape  # here, not at import: html.entities is a large table

        def cells(row: Sequence[str], tag: str) -> str:
            return "".join(
                f"<{tag}{_html_align(c)}>{_breakable(escape(cell))}</{tag}>"
                for c, cell in zip(self.columns, row, strict=True)
            )

        parts = ['<div class="memtheory-table" style="overflow-x:auto;max-width:100%">']
        parts.append('<table class="table" style="font-size:0.85em;width:auto">')
        if self.title is not None:
            parts.append(f"<caption>{escape(self.title)}</caption>")
        parts.append(f"<thead><tr>{cells(self.titles, 'th')}</tr></thead>")
        parts.append("<tbody>")
        parts += [f"<tr>{cells(row, 'td')}</tr>" for row in self.rows]
        parts.append("</tbody>")
        if self.footer:
            parts.append("<tfoot>")
            parts += [f"<tr>{cells(row, 'th')}</tr>" for row in self.footer]
            parts.append("</tfoot>")
        parts.append("</table>")
        parts += [f"<p>{escape(note)}</p>" for note in self.notes]
        parts.append("</div>")
        return "\n".join(parts)

    # -- display -----------------------------------------------------------------------
    def __str__(self) -> str:
        return self.text()

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def _repr_html_(self) -> str:
        return self.html()


def _spans(row: Sequence[str]) -> int:
    """How many columns a footer's first cell covers: itself and the empty cells after it."""
    span = 1
    while span < len(row) - 1 and row[span] == "":
        span += 1
    return span


def _md(text: str) -> str:
    """Escape what would break a pipe-table row; backslashes stay, for LaTeX in ``$...$``."""
    return text.replace("|", "\\|").replace("\n", " ")


def _md_row(cells: Iterable[str], *, bold: bool = False) -> str:
    shown = (f"**{_md(c)}**" if bold and c else _md(c) for c in cells)
    return "| " + " | ".join(shown) + " |"


def _html_align(column: Column) -> str:
    """Inline style of a cell: numbers right-aligned, and no wrapping unless the column wraps."""
    styles = [] if column.wrap is not None else ["white-space:nowrap"]
    if column.align == "right":
        styles.append("text-align:right")
    return f' style="{";".join(styles)}"' if styles else ""


def _breakable(text: str) -> str:
    """Let HTML break a long name after its ``.``, ``_`` and ``::``, with ``<wbr>``.

    A code name (one with such a separator) or a word longer than 20
    characters also breaks between the humps of its camel case
    (``ReluBackward0.result``); a word (``StackExchange``,
    ``MobileNetV2-style``) does not. ``<wbr>`` has no text: the cell reads and
    copies as the exact name. Numbers (``1.50``, ``20,480,000``) get none.
    ``text`` is already HTML-escaped; an entity (``&amp;``) holds none of the
    separators.

    Examples
    --------
    >>> _breakable("ReluBackward0.result")
    'Relu<wbr>Backward0.<wbr>result'
    >>> _breakable("aten::max_pool2d")
    'aten::<wbr>max_<wbr>pool2d'
    >>> _breakable("2: MaxPool2DWithIndicesBackward0.self, StackExchange CNN")
    '2: Max<wbr>Pool2D<wbr>With<wbr>Indices<wbr>Backward0.<wbr>self, StackExchange CNN'
    >>> _breakable("1.50 MiB, +43.3%")
    '1.50 MiB, +43.3%'
    """
    text = re.sub(r"\S+", lambda word: _humps(word.group()), text)
    return _BREAK_AFTER.sub(lambda match: match.group() + "<wbr>", text)


def _humps(word: str) -> str:
    """Put ``<wbr>`` between the humps of a code name's CamelCase, or of a long word's."""
    code = _BREAK_AFTER.search(word) is not None
    return _HUMP.sub("<wbr>", word) if code or len(word) > _LONG_NAME else word


def _listed(values: object, what: str) -> list[object]:
    """Return ``values`` as a list, or refuse what is not a sequence of them (text included)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TableError(
            f"{what} must be a list (or other iterable) of cells, got {type(values).__name__} "
            f"{values!r:.60}: wrap a single value in a list."
        )
    return list(values)
