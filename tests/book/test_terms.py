"""A learner meets every glossary term as a link before reading it as a plain word.

In each chapter, the first time a term of the glossary appears in the prose
(outside code, math, headings and captions; plurals included), it is a
``{term}`` link to the glossary, or a link to it came earlier in the chapter.
Every term the book links is in the glossary (Sphinx would warn; this says
which chapter), and every term of the glossary is used by some chapter.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.book.prose import BOOK, chapters, prose_lines

GLOSSARY = BOOK / "glossary.md"


def glossary_terms() -> list[str]:
    """The terms the glossary defines, longest first."""
    text = GLOSSARY.read_text(encoding="utf-8")
    block = text.split("```{glossary}", 1)[1].split("\n```", 1)[0]
    terms = [line.strip() for line in block.splitlines() if line and not line[0].isspace()]
    return sorted(terms, key=len, reverse=True)


def term_pattern(term: str) -> re.Pattern[str]:
    """The term as a word, with a plural; case-sensitive if it has capitals (ZeRO, not zero)."""
    body = re.escape(term).replace(r"\ ", r"\s+")
    flags = 0 if any(c.isupper() for c in term) else re.IGNORECASE
    return re.compile(rf"(?<![\w-]){body}(?:s|es)?(?![\w-])", flags)


def link_target(content: str) -> str:
    """The term a ``{term}`` role points to: ``text <term>`` or the text itself."""
    explicit = re.search(r"<([^>]+)>\s*$", content)
    return (explicit.group(1) if explicit else content).strip().lower()


def first_uses(source: Path, terms: list[str]) -> dict[str, tuple[tuple[int, int] | None, ...]]:
    """For each term, ``(first plain use, first link)`` as ``(line, column)``, or None."""
    uses: dict[str, list[tuple[int, int] | None]] = {t: [None, None] for t in terms}
    patterns = {t: term_pattern(t) for t in terms}
    for line in prose_lines(source):
        for column, role, content in line.roles:
            target = link_target(content)
            for term in terms:
                if role == "term" and target == term.lower() and uses[term][1] is None:
                    uses[term][1] = (line.number, column)
        text = line.text
        for term in terms:  # longest first: "convention" in "autograd convention" is not a use
            found = patterns[term].search(text)
            if found and uses[term][0] is None:
                uses[term][0] = (line.number, found.start())
            text = patterns[term].sub(lambda m: " " * len(m.group(0)), text)
    return {t: tuple(u) for t, u in uses.items()}


CHAPTERS = chapters()


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_each_term_is_linked_at_its_first_use(source):
    """The first plain use of a glossary term in a chapter comes after a link to it."""
    late = [f"{term!r} at line {use[0]} (first link: {link and f'line {link[0]}'})"
            for term, (use, link) in first_uses(source, glossary_terms()).items()
            if use is not None and (link is None or link > use)]
    assert late == []


def test_every_linked_term_is_defined_and_every_term_is_used():
    """Each ``{term}`` role names a glossary term, and each glossary term is linked somewhere."""
    terms = {t.lower() for t in glossary_terms()}
    linked: dict[str, str] = {}
    for source in [*CHAPTERS, GLOSSARY]:
        for line in prose_lines(source):
            for _, role, content in line.roles:
                if role == "term":
                    linked.setdefault(link_target(content), f"{source.stem}:{line.number}")
    assert {t: where for t, where in linked.items() if t not in terms} == {}
    assert sorted(terms - set(linked)) == []
