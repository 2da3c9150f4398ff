"""The tests of the built book run where ``make test`` looks for them.

``make test`` builds the book beside the quick tests, then runs the tests marked
``built_book`` from the paths the Makefile names in ``AFTER_BOOK_PATHS``: a marked
test anywhere else would run in neither pytest call, since the quick run leaves
every marked test out.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def after_book_paths() -> list[Path]:
    """Return the paths of ``AFTER_BOOK_PATHS`` in the Makefile."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^AFTER_BOOK_PATHS := (.+)$", makefile, re.MULTILINE)
    assert found, "the Makefile names no AFTER_BOOK_PATHS"
    return [ROOT / path for path in found.group(1).split()]


def marked_files() -> list[Path]:
    """Return every test file that marks a test (or itself) ``built_book``."""
    return [path for path in sorted((ROOT / "tests").rglob("test_*.py"))
            if "mark.built_book" in path.read_text(encoding="utf-8")]


def outside(files: list[Path], paths: list[Path]) -> list[str]:
    """Return the files (relative to the repository) under none of ``paths``."""
    return [file.relative_to(ROOT).as_posix() for file in files
            if not any(file == path or path in file.parents for path in paths)]


def test_every_built_book_test_lives_where_make_test_runs_them():
    """Each file marking ``built_book`` is under a path ``make test`` runs after the book."""
    files = marked_files()
    assert len(files) >= 4  # the HTML check, the browser tests, the calculator, the anchors
    stray = outside(files, after_book_paths())
    assert not stray, f"add these to AFTER_BOOK_PATHS in the Makefile: {stray}"


def test_a_marked_file_elsewhere_is_named():
    """A marked file outside those paths is named, so the first test can fail."""
    stray = ROOT / "tests" / "pytorch" / "test_something.py"
    assert outside([stray], after_book_paths()) == ["tests/pytorch/test_something.py"]
