"""Every long chapter opens with "The chapter at a glance": one linked line per section.

Issue 23 asks for a summary box up front in the long chapters (chapter 11 was about
21,000 px tall). The box sits before the chapter's first section and links every
section a learner reads (not "Check it yourself", "Summary" or "Exercises", which
every chapter ends with), through the label just above or just below the section's
heading, so a section added later without a line in the box fails here. The links themselves are
checked by the book's ``-W`` build.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.book.cells import CHAPTERS

LONG = 600
"""Source lines from which a chapter is long enough to need the box."""

_BOX = re.compile(r"^(`{3,})\{admonition\} The chapter at a glance\s*\n(.*?)^\1\s*$", re.M | re.S)
_ENDINGS = ("Check it yourself", "Summary", "Exercises")


def _long_chapters() -> list[Path]:
    return [path for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.md"))
            if len(path.read_text(encoding="utf-8").splitlines()) > LONG]


def _sections(text: str) -> dict[str, str | None]:
    """Each ``## `` heading a learner reads, with its label (or None).

    The label is on the line above the heading (then it is the section's anchor), or the
    first line after it (a target at the section's start that leaves the section its own
    anchor, which the exercises' solutions link to).
    """
    lines = text.splitlines()
    found: dict[str, str | None] = {}
    for index, line in enumerate(lines):
        if line.startswith("## ") and line[3:] not in _ENDINGS:
            after = next((x for x in lines[index + 1:] if x.strip()), "")
            label = (re.fullmatch(r"\(([\w-]+)\)=", lines[index - 1])
                     or re.fullmatch(r"\(([\w-]+)\)=", after))
            found[line[3:]] = label.group(1) if label else None
    return found


def test_the_long_chapters_are_the_ones_the_issue_names() -> None:
    """Chapter 11, the example the issue measured, is among them (a renamed folder finds none)."""
    assert "11_theory_vs_measurement.md" in [path.name for path in _long_chapters()]


@pytest.mark.parametrize("chapter", _long_chapters(), ids=lambda path: path.stem)
def test_a_long_chapter_opens_with_a_box_linking_every_section(chapter: Path) -> None:
    """One box, before the first section, with one linked line per section and none else."""
    text = chapter.read_text(encoding="utf-8")
    boxes = list(_BOX.finditer(text))
    assert len(boxes) == 1, f"{chapter.name}: no single 'The chapter at a glance' box"
    assert boxes[0].start() < text.index("\n## "), f"{chapter.name}: the box comes after a section"
    sections = _sections(text)
    unlabelled = [heading for heading, label in sections.items() if label is None]
    assert not unlabelled, f"{chapter.name}: give these sections a label for the box: {unlabelled}"
    linked = re.findall(r"^\* \{ref\}`[^`<]+<([\w-]+)>`: \S", boxes[0].group(2), re.M)
    assert linked == list(sections.values()), (
        f"{chapter.name}: the box must link each section once, in order: {list(sections)}"
    )
