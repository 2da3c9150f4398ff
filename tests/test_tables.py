"""The one table renderer: text, Markdown and HTML drawn from the same rows."""

import html
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given

from memtheory import Column, Table
from memtheory.errors import TableError
from tests.strategies import tables


class _Cells(HTMLParser):
    """Collect the text of every th/td cell, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_cells(table: Table) -> list[list[str]]:
    """Return the cells of the table's HTML rendering, header row first."""
    parser = _Cells()
    parser.feed(table.html())
    return parser.rows


def markdown_cells(table: Table) -> list[list[str]]:
    """Return the cells of the table's Markdown rendering, header first, rule dropped."""
    lines = [ln for ln in table.markdown().splitlines() if ln.startswith("|")]
    rows = []
    for line in lines[:1] + lines[2:]:
        cells = re.split(r" (?<!\\)\| ", line[2:-2]) if line != "|  |" else [""]
        rows.append([c.replace("\\|", "|").strip("*") for c in cells])
    return rows


@given(tables())
def test_html_has_every_cell_of_every_row(table):
    """HTML keeps every cell, in order: header, body and footer, escaped and unescaped back."""
    expected = [list(table.titles), *map(list, table.rows), *map(list, table.footer)]
    assert html_cells(table) == expected


@given(tables())
def test_markdown_has_every_cell_of_every_row(table):
    """Markdown keeps every cell (pipes escaped), with one alignment marker per column."""
    expected = [list(table.titles), *map(list, table.rows), *map(list, table.footer)]
    got = markdown_cells(table)
    assert len(got) == len(expected)
    for row_got, row_expected in zip(got, expected, strict=True):
        assert [c.strip() for c in row_got] == [c.strip("*").strip() for c in row_expected]


@given(tables())
def test_text_columns_line_up(table):
    """In text, each header, body and footer row starts every column at the same place."""
    lines = table.text().split("\n")
    offset = 1 if table.title is not None else 0
    rule = lines[offset + 1]
    assert set(rule) <= {"-", " "}
    starts = [m.start() for m in re.finditer(r"-+", rule)]
    assert len(starts) == len(table.columns)
    body = lines[offset + 2 : offset + 2 + len(table.rows)]
    for line, row in zip(body, table.rows, strict=True):
        for start, cell, column in zip(starts, row, table.columns, strict=True):
            width = len(rule[start:].split(" ")[0])
            shown = line[start : start + width]
            assert (
                shown
                == (cell.rjust(width) if column.align == "right" else cell.ljust(width))[
                    : len(shown)
                ]
            )


def test_numbers_right_aligned_and_footer_after_a_rule():
    """A right-aligned column pads on the left; the footer sits under a second rule."""
    table = Table(
        ["name", Column("MiB", align="right")],
        [("a", "1.00"), ("bb", "22.50")],
        footer=[("total", "23.50")],
    )
    assert table.text().splitlines() == [
        "name     MiB",
        "-----  -----",
        "a       1.00",
        "bb     22.50",
        "-----  -----",
        "total  23.50",
    ]


def test_footer_label_runs_over_the_empty_cells_after_it():
    """A footer 'total' may span the empty columns that follow it, as in a layer table."""
    table = Table(
        ["#", "layer", Column("weights", "right")],
        [("0", "conv", "896")],
        footer=[("total of all layers", "", "896")],
    )
    lines = table.text().splitlines()
    assert lines == [
        "#  layer             weights",
        "-  ----------------  -------",
        "0  conv                  896",
        "-  ----------------  -------",
        "total of all layers      896",
    ]


def test_wrapped_column_keeps_words_and_indents_continuations():
    """A column with wrap= breaks long text onto lines that start under that column."""
    table = Table(["id", Column("feedback", wrap=10)], [("q1", "one two three four five")])
    lines = table.text().splitlines()
    assert lines[2].startswith("q1  one two")
    assert all(line.startswith("    ") for line in lines[3:])
    assert " ".join(line[4:] for line in lines[2:]) == "one two three four five"


def test_html_scrolls_wide_tables_and_escapes():
    """HTML wraps the table in a sideways-scrolling div and escapes markup in cells."""
    table = Table(["x"], [("<script>alert(1)</script>",)], title="a & b", notes=["n<1"])
    out = table.html()
    assert out.startswith('<div class="memtheory-table" style="overflow-x:auto')
    assert "<script>" not in out and html.escape("<script>") in out
    assert "<caption>a &amp; b</caption>" in out and "<p>n&lt;1</p>" in out


def _cell_html(table: Table, text: str) -> str:
    """Return the inner HTML of the first th/td cell whose text content is ``text``."""
    for match in re.finditer(r"<t[dh][^>]*>(.*?)</t[dh]>", table.html()):
        if match.group(1).replace("<wbr>", "") == text:
            return match.group(1)
    raise AssertionError(f"no cell reads {text!r}")


def test_html_lets_long_names_break_after_their_separators():
    """A long name gets <wbr> after each . _ :: in HTML; its text and the plain text stay exact."""
    name = "aten.max_pool2d_with_indices_backward.default"
    node = "ReluBackward0.result"
    table = Table(["kept by", Column("bytes", "right")], [(node, "20,480,000")],
                  footer=[(f"peak ({name})", "1.50")])
    cell = _cell_html(table, f"peak ({name})")
    separators = name.count(".") + name.count("_")
    assert cell.count("<wbr>") == separators
    assert all(part.endswith((".", "_")) for part in cell.split("<wbr>")[:-1])
    assert _cell_html(table, node) == "Relu<wbr>Backward0.<wbr>result"
    assert _cell_html(Table(["op"], [("at::native::add",)]), "at::native::add") == (
        "at::<wbr>native::<wbr>add"
    )
    assert html_cells(table)[1] == [node, "20,480,000"]  # what a reader copies
    assert name in table.text() and "<wbr>" not in table.text() + table.markdown()


def test_html_breaks_only_long_camel_case_words_between_their_humps():
    """A code name breaks before its capitals; a plain word stays whole, however CamelCase."""
    long, short = "MaxPool2DWithIndicesBackward0", "StackExchange"
    table = Table(["kept by", "model"], [(f"2: {long}.self", short)])
    parts = _cell_html(table, f"2: {long}.self").split("<wbr>")
    assert parts == ["2: Max", "Pool2D", "With", "Indices", "Backward0.", "self"]
    assert _cell_html(table, short) == short


@pytest.mark.parametrize("number", ["20,480,000", "1.50", "+43.3%", "-7.90%", "3.14e-05", "v1.2"])
def test_html_never_breaks_a_number(number):
    """Numbers (digits around a dot or comma) get no <wbr> and keep their no-wrap cell."""
    cell = Table([Column("n", "right")], [(number,)]).html()
    assert f'<td style="white-space:nowrap;text-align:right">{number}</td>' in cell


def test_notebooks_get_html_and_markdown():
    """Jupyter's rich display hooks return the HTML and Markdown renderings."""
    table = Table(["a"], [("1",)])
    assert table._repr_html_() == table.html()
    assert table._repr_markdown_() == table.markdown()
    assert str(table) == table.text()


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Table([], []), "at least one column"),
        (lambda: Table(["a", "b"], [("1",)]), "row 1 has 1 cells but the table has 2 columns"),
        (lambda: Column("a", align="centre"), "align must be 'left' or 'right'"),
        (lambda: Column("a", wrap=0), "wrap must be a positive width"),
    ],
)
def test_bad_tables_say_what_is_wrong(build, match):
    """A malformed table or column raises TableError naming the problem."""
    with pytest.raises(TableError, match=match):
        build()


def test_column_by_title():
    """A column's cells come back by its title; an unknown title names the columns."""
    table = Table(["a", "b"], [("1", "2")])
    assert table.column("a") == ("1",)
    with pytest.raises(TableError, match="the columns are a, b"):
        table.column("c")
