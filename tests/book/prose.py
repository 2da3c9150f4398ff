"""The prose of the book's Markdown sources: what a reader reads as text, without code or math.

:func:`prose_lines` yields each line a reader sees as running text, with what
is not prose blanked out (replaced by spaces, so offsets stay put): code cells
and code blocks, YAML front matter, directive options, headings, inline code,
``$...$`` math, ``$$`` displays, roles (``{ref}``, ``{glue:text}``, ``{term}``
...), link targets and HTML comments. Directives whose body is Markdown
(``{exercise}``, ``{note}``, ...) keep their body as prose. The glossary tests
and the numeric-claims audit read the book through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTER_FILE = re.compile(r"^\s*- file: (chapters/\S+)$", re.M)

_FENCE = re.compile(r"^(`{3,}|:{3,})\s*(\{([\w:-]+)\})?")
# Fenced blocks whose body is not Markdown prose.
_NOT_PROSE = {"code-cell", "index", "glossary", "glue:md", "glue:figure", "math", "raw",
              "bibliography", "toctree", "figure", "image", "table"}
ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
_BLANKED = [
    re.compile(r"\$[^$]+\$"),          # inline math
    re.compile(r"``[^`]+``|`[^`]*`"),  # inline code
    re.compile(r"\]\([^)]*\)"),        # a link's target (its text stays prose)
    re.compile(r"<!--.*?-->"),         # HTML comments
    re.compile(r"^\(?[\w-]+\)=\s*$"),  # labels such as (ch-batch-size)=
]


def chapters() -> list[Path]:
    """The chapter sources in the table of contents' order."""
    toc = (BOOK / "_toc.yml").read_text(encoding="utf-8")
    return [BOOK / f"{name}.md" for name in CHAPTER_FILE.findall(toc)]


@dataclass(frozen=True)
class Line:
    """One line of prose: its number in the source (1-based), its text, and the roles in it."""

    number: int
    text: str
    """The line with everything that is not prose blanked out (roles included)."""
    roles: tuple[tuple[int, str, str], ...]
    """``(column, role name, content)`` of each role on the line, in order."""


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def _fenced_lines(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Yield ``(index, line)`` of the lines outside code, front matter and directive options."""
    stack: list[tuple[str, bool]] = []  # (closing marker, whether the body is prose)
    i = 0
    if lines and lines[0].strip() == "---":  # the notebook's front matter
        i = lines.index("---", 1) + 1
    while i < len(lines):
        stripped = lines[i].strip()
        fence = _FENCE.match(stripped)
        if stack and stripped == stack[-1][0]:
            stack.pop()
        elif fence and (not stack or stack[-1][1]):
            marker, name = fence.group(1), fence.group(3)
            prose = name is not None and name not in _NOT_PROSE
            if marker.startswith("`") and name is None:
                prose = False  # a plain code block
            stack.append((marker, prose))
            i += 1
            if i < len(lines) and lines[i].strip() == "---":  # a directive's YAML options
                i = lines.index("---", i + 1) + 1
            continue
        elif (not stack or stack[-1][1]) and not re.match(r"^:[\w-]+:", stripped):
            yield i, lines[i]
        i += 1


def prose_lines(source: Path) -> Iterator[Line]:
    """Yield the prose lines of a Markdown source, display math and headings left out."""
    lines = source.read_text(encoding="utf-8").splitlines()
    in_display = False
    for index, raw in _fenced_lines(lines):
        stripped = raw.strip()
        if in_display:
            in_display = not stripped.endswith("$$")
            continue
        if stripped.startswith("$$"):
            in_display = len(stripped) == 2 or not stripped.endswith("$$")
            continue
        if stripped.startswith("#"):
            continue
        roles = tuple((m.start(), m.group(1), m.group(2)) for m in ROLE.finditer(raw))
        text = ROLE.sub(_blank, raw)
        for pattern in _BLANKED:
            text = pattern.sub(_blank, text)
        yield Line(index + 1, text, roles)
