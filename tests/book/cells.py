"""Run a chapter's code cells without building the book, and collect what they glue.

A chapter is a MyST notebook: its ``{code-cell}`` blocks run in order, in the
chapter's folder, as the book build runs them. :func:`glued_values` executes
them in one namespace with ``myst_nb.glue`` replaced by a recorder, so a test
can read the numbers the prose shows (``{glue:text}`name```) in seconds, where
a full build takes many minutes. Results are cached per chapter for the test
session. What the cells print (what a reader sees under them) is dropped, so
that it never reaches the output of the test that first asked for the chapter.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = BOOK / "chapters"
_OPEN = re.compile(r"^(`{3,})\{code-cell\}")
_OPTION = re.compile(r"^:[\w-]+:")


def code_cells(source: Path) -> list[tuple[int, str]]:
    """Return ``(line, code)`` of each code cell, its front matter and options left out."""
    lines = source.read_text(encoding="utf-8").splitlines()
    cells, i = [], 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        i += 1
        if not opened:
            continue
        start, body = i, []
        if i < len(lines) and lines[i].strip() == "---":  # YAML front matter
            i = lines.index("---", i + 1) + 1
        while lines[i].strip() != opened.group(1):
            if not _OPTION.match(lines[i]):
                body.append(lines[i])
            i += 1
        cells.append((start, "\n".join(body)))
    return cells


@contextlib.contextmanager
def _in_folder(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@functools.cache
def glued_values(chapter: str) -> dict[str, Any]:
    """Run ``book/chapters/<chapter>*.md`` (``"06"`` or its full stem) and return its glue.

    A cell that raises fails the caller with the chapter's file and line in
    the traceback, as the build would fail.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import myst_nb

    (source,) = sorted(CHAPTERS.glob(f"{chapter}*.md"))
    glued: dict[str, Any] = {}

    def glue(name: str, value: Any, display: bool = True) -> None:
        glued[name] = value

    namespace: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None}
    original = myst_nb.glue
    myst_nb.glue = glue  # `from myst_nb import glue` in a cell now gets the recorder
    try:
        with _in_folder(source.parent), contextlib.redirect_stdout(io.StringIO()):
            for line, code in code_cells(source):
                namespace["glue"] = glue
                exec(compile(code, f"{source.name}, cell at line {line}", "exec"), namespace)
    finally:
        myst_nb.glue = original
        plt.close("all")
    return glued
