"""The README's command-line examples print what the README shows.

Every fenced ``bash`` block of README.md that holds one ``memtheory estimate`` or
``memtheory serve`` command and is followed by a ``text`` block is run in process;
its output must be the text block, line for line. A README that quotes an answer
the command no longer gives fails here instead of misleading a reader.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from memtheory.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"```bash\n(memtheory (?:[^\n]*\\\n)*[^\n]+)\n```\s*\n```text\n(.*?)```",
                    re.DOTALL)
"""A ``memtheory`` command (lines ending in a backslash continue it) and its ``text`` block."""


def _examples() -> list[tuple[str, str]]:
    return [(command, shown) for command, shown in _BLOCK.findall(README.read_text("utf-8"))]


def test_the_readme_has_command_examples_with_their_output() -> None:
    """The pattern finds the README's examples (a renamed fence would skip them all)."""
    assert len(_examples()) >= 3
    assert any("--sweep" in command for command, _ in _examples())


@pytest.mark.parametrize(("command", "shown"), _examples(), ids=lambda v: v[:60])
def test_readme_command_prints_what_the_readme_shows(command: str, shown: str) -> None:
    """The command exits 0 and prints the README's text block, line for line."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(shlex.split(command.replace("\\\n", " "))[1:])
    assert status == 0
    printed = [line.rstrip() for line in out.getvalue().strip().splitlines()]
    assert printed == [line.rstrip() for line in shown.strip().splitlines()]
