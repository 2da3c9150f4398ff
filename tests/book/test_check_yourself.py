"""Every chapter ends with a "Check it yourself" box in plain PyTorch and its OOM remedies.

Issue 23 asks for it: right before ``## Summary``, a section ``## Check it
yourself`` with a code cell a learner can run (plain PyTorch, no memtheory), a
hidden cell that asserts the printed number against the chapter's own value
(so the box cannot drift from the text), and an "If it runs out of memory"
admonition whose bullets link the sections that teach each remedy. These tests
read the sources only; the book build (and :mod:`tests.book.cells`) runs them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.book.cells import CHAPTERS

SOURCES = sorted(CHAPTERS.glob("[0-9][0-9]_*.md"))
HEADING = "## Check it yourself"
_CELL = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n(.*?)^\1\s*$", re.M | re.S)
_ADMONITION = re.compile(
    r"^(`{3,})\{admonition\} If it runs out of memory\s*\n(.*?)^\1\s*$", re.M | re.S
)
# A ``:tags: [remove-cell]`` option, or ``tags: [remove-cell]`` in the cell's YAML front matter.
_HIDDEN = re.compile(r"^:?tags:.*\bremove-cell\b", re.M)
_LINK = re.compile(r"\{(ref|numref|doc)\}`[^`]+`|\]\([^)]+\)")
# Issue 23 asks for "five lines a learner can run": allow a few more, never a page.
MAX_LINES = 8


def section(source: Path) -> str:
    """The text of the chapter's "Check it yourself" section, up to the next ``## `` heading."""
    text = source.read_text(encoding="utf-8")
    assert text.count(f"\n{HEADING}\n") == 1, f"{source.name}: no single '{HEADING}' section"
    start = text.index(f"\n{HEADING}\n") + len(HEADING) + 2
    following = re.search(r"^## .*$", text[start:], re.M)
    assert following, f"{source.name}: '{HEADING}' is the last section; it goes before Summary"
    assert following.group(0).strip() == "## Summary", (
        f"{source.name}: '{HEADING}' must sit right before '## Summary', "
        f"not before {following.group(0)!r}"
    )
    return text[start : start + following.start()]


def cells(body: str) -> list[tuple[bool, str]]:
    """``(hidden, code)`` of each code cell in ``body``; hidden means tagged ``remove-cell``."""
    return [(bool(_HIDDEN.search(code)), code) for _, code in _CELL.findall(body)]


def code_lines(code: str) -> list[str]:
    """The non-blank lines of a cell's code, without its ``:option:`` lines and front matter."""
    lines = code.splitlines()
    if lines and lines[0].strip() == "---":  # front matter, up to its closing ``---``
        lines = lines[lines.index("---", 1) + 1 :]
    return [line for line in lines if line.strip() and not re.match(r"^:[\w-]+:", line)]


def test_every_chapter_is_listed() -> None:
    """The parametrized tests below see all twenty chapters."""
    assert [source.name[:2] for source in SOURCES] == [f"{n:02d}" for n in range(1, 21)]


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_section_sits_before_the_summary(source: Path) -> None:
    """The chapter has one "Check it yourself" section, and the next section is its Summary."""
    section(source)


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_box_is_plain_pytorch(source: Path) -> None:
    """A visible code cell imports torch and uses no memtheory: a learner can run it anywhere."""
    visible = [code for hidden, code in cells(section(source)) if not hidden]
    assert visible, f"{source.name}: the box has no visible code cell"
    assert any(re.search(r"^(import torch|from torch\b)", code, re.M) for code in visible), (
        f"{source.name}: the box's code cell must import torch"
    )
    for code in visible:
        assert "memtheory" not in code, f"{source.name}: the box must not use memtheory"


def test_code_lines_counts_what_a_learner_pastes() -> None:
    """Options and front matter are not code; blank lines are not counted; every other line is."""
    code = ":tags: [hide-input]\nimport torch\n\nx = torch.zeros(2)  # a comment\nprint(x)\n"
    assert code_lines(code) == ["import torch", "x = torch.zeros(2)  # a comment", "print(x)"]
    front = "---\ntags: [remove-cell]\n---\nimport torch\n"
    assert code_lines(front) == ["import torch"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_box_is_short(source: Path) -> None:
    """Each visible cell of the box has at most ``MAX_LINES`` non-blank lines: a box, not a page."""
    for hidden, code in cells(section(source)):
        if not hidden:
            count = len(code_lines(code))
            assert count <= MAX_LINES, (
                f"{source.name}: the box's code cell has {count} non-blank lines, over "
                f"{MAX_LINES}: use shorter idioms (sum(p.numel() for p in m.parameters()), "
                "t.nbytes, one-line models) rather than hiding setup the learner needs"
            )


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_box_is_asserted(source: Path) -> None:
    """A hidden cell asserts the box's number, so the box cannot drift from the chapter."""
    hidden = [code for is_hidden, code in cells(section(source)) if is_hidden]
    assert any(re.search(r"^\s*assert\b", code, re.M) for code in hidden), (
        f"{source.name}: add a ':tags: [remove-cell]' cell that asserts the printed number"
    )


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_remedies_link_their_sections(source: Path) -> None:
    """An "If it runs out of memory" admonition lists remedies, at least one linking its section."""
    found = _ADMONITION.search(section(source))
    assert found, f"{source.name}: no 'If it runs out of memory' admonition in the section"
    bullets = re.split(r"^\* ", found.group(2), flags=re.M)[1:]  # a bullet may wrap
    assert bullets, f"{source.name}: the admonition has no bullet"
    assert any(_LINK.search(line) for line in bullets), (
        f"{source.name}: link each remedy to the section that teaches it ({{ref}}`label`)"
    )
