"""The README's "Where things are" table matches the tree.

Every path the table names exists: the files and folders of its first column,
and the ``name.py`` / ``folder/`` its second column names, read beside the
row's folders (or memtheory/). A ``[section]`` after a ``.toml`` file is a
table of that file. Every subpackage of memtheory/ (a folder with an
``__init__.py``, not private) has a row.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
HEADING = "## Where things are"

_CODE = re.compile(r"`([^`]+)`")
_PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*(\.(py|toml|bib|md)|/)$")
_SECTION = re.compile(r"^\[([\w.-]+)\]$")


def table_rows(text: str) -> list[tuple[str, str]]:
    """The ``(path, what)`` cells of the table under :data:`HEADING`, header and rule left out."""
    if HEADING not in text:
        raise AssertionError(f"README.md has no {HEADING!r} section")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells == ["path", "what"] or set(cells[0]) <= {"-", " "}:
            continue
        assert len(cells) == 2, f"a row of the table has {len(cells)} cells: {line!r}"
        rows.append((cells[0], cells[1]))
    return rows


def named_paths(cell: str) -> list[str]:
    """The backticked names in a cell that are paths (``a/b.py``, ``folder/``, ``x.toml``, ...)."""
    return [name for name in _CODE.findall(cell) if _PATH.match(name)]


def _toml_has(file: Path, dotted: str) -> bool:
    table: object = tomllib.loads(file.read_text(encoding="utf-8"))
    for key in dotted.split("."):
        if not isinstance(table, dict) or key not in table:
            return False
        table = table[key]
    return True


def _bases(path_cell: str) -> list[Path]:
    """Where a row's second column names its files: the row's folders, then memtheory/."""
    folders = []
    for name in named_paths(path_cell):
        path = ROOT / name
        folders.append(path if name.endswith("/") else path.parent)
    return [*folders, ROOT / "memtheory"]


ROWS = table_rows(README.read_text(encoding="utf-8"))


def test_the_table_is_found_and_read():
    """The section has its rows, each naming at least one path in its first column."""
    assert len(ROWS) >= 20
    for path_cell, _ in ROWS:
        assert named_paths(path_cell), f"the row {path_cell!r} names no path"


@pytest.mark.parametrize("path_cell", [row[0] for row in ROWS])
def test_each_path_of_the_first_column_exists(path_cell):
    """A file or folder the row is about is in the repository (a ``[section]`` in its .toml)."""
    names = _CODE.findall(path_cell)
    for index, name in enumerate(names):
        section = _SECTION.match(name)
        if section:
            previous = names[index - 1] if index else ""
            assert previous.endswith(".toml"), f"{name} follows no .toml file in {path_cell!r}"
            assert _toml_has(ROOT / previous, section.group(1)), f"{previous} has no {name}"
            continue
        assert _PATH.match(name), f"{name!r} in the first column is neither a path nor a section"
        path = ROOT / name
        assert path.is_dir() if name.endswith("/") else path.is_file(), f"{name} does not exist"


@pytest.mark.parametrize(("path_cell", "what"), ROWS, ids=[row[0] for row in ROWS])
def test_each_file_the_second_column_names_exists(path_cell, what):
    """``name.py`` and ``folder/`` in a description exist beside the row's folders."""
    for name in named_paths(what):
        found = [
            base / name for base in _bases(path_cell)
            if ((base / name).is_dir() if name.endswith("/") else (base / name).is_file())
        ]
        assert found, f"{name!r} ({path_cell}) is in none of {_bases(path_cell)}"


def test_every_subpackage_has_a_row():
    """Each public folder of memtheory/ with an __init__.py is in the first column."""
    listed = {name for path_cell, _ in ROWS for name in named_paths(path_cell)}
    subpackages = sorted(
        f"memtheory/{folder.name}/"
        for folder in (ROOT / "memtheory").iterdir()
        if (folder / "__init__.py").is_file() and not folder.name.startswith("_")
    )
    assert subpackages, "memtheory/ has no subpackage: the tree was not found"
    missing = [name for name in subpackages if name not in listed]
    assert not missing, f"the README's table has no row for {missing}"


def test_the_reader_catches_a_stale_row():
    """A made-up table: the reader finds its rows and the paths that do not exist."""
    text = (
        "## Where things are\n\n| path | what |\n| --- | --- |\n"
        "| `memtheory/units.py` | units (`nowhere.py`) |\n"
        "| `memtheory/gone/` | removed |\n\n## Next\n| `x/` | y |\n"
    )
    rows = table_rows(text)
    assert rows == [
        ("`memtheory/units.py`", "units (`nowhere.py`)"),
        ("`memtheory/gone/`", "removed"),
    ]
    assert not (ROOT / "memtheory/gone").exists()
    assert not any((base / "nowhere.py").exists() for base in _bases(rows[0][0]))
