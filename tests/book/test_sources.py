"""The book's sources, checked without building: what the build would not catch or catches late."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
SOURCES = sorted(p for p in BOOK.rglob("*.md") if "_build" not in p.parts)
CHAPTER_FILE = re.compile(r"^\s*- file: (chapters/\S+)$", re.M)
LABEL = re.compile(r"^\((ch-[\w-]+)\)=$", re.M)


def test_the_intro_lists_every_chapter_in_order():
    """The intro's numbered list names every chapter of _toc.yml, in the table's order."""
    chapters = CHAPTER_FILE.findall((BOOK / "_toc.yml").read_text(encoding="utf-8"))
    labels = [LABEL.search((BOOK / f"{c}.md").read_text(encoding="utf-8"))[1] for c in chapters]
    intro = (BOOK / "intro.md").read_text(encoding="utf-8")
    listed = re.findall(r"^(\d+)\. \{ref\}`(ch-[\w-]+)`", intro, re.M)
    assert listed == [(str(n), label) for n, label in enumerate(labels, start=1)]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.relative_to(BOOK).as_posix())
def test_display_math_stands_in_its_own_block(source):
    """In the sources, every ``$$`` display has a blank line before and after it."""
    lines = source.read_text(encoding="utf-8").splitlines()
    bad, start, fences = [], None, []
    for number, line in enumerate(lines):
        stripped = line.strip()
        fence = re.match(r"^(`{3,}|:{3,})", stripped)
        if fence:  # code cells and directives: a bare marker closes the innermost one
            if fences and stripped == fences[-1]:
                fences.pop()
            else:
                fences.append(fence.group(1))
            continue
        if any(marker.startswith("`") for marker in fences):  # code, not Markdown
            continue
        if start is None and stripped.startswith("$$"):
            start = number
            if len(stripped) > 2 and stripped.endswith("$$"):
                end = number
            else:
                continue
        elif start is not None and stripped.endswith("$$"):
            end = number
        else:
            continue
        before = lines[start - 1].strip() if start else ""
        after = lines[end + 1].strip() if end + 1 < len(lines) else ""
        if before or after:
            bad.append(f"line {start + 1}: {lines[start].strip()[:60]}")
        start = None
    assert bad == []
