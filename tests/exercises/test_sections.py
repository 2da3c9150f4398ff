"""Worked solutions name the book's sections that teach their steps, and those sections exist."""

import re
from pathlib import Path

import pytest

from memtheory.exercises import load_sets
from memtheory.exercises.book import book_exercises
from memtheory.exercises.derivation import Recorder, derive
from memtheory.exercises.sections import STEP_SECTIONS, anchor
from memtheory.exercises.step_log import recording

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"
HTML = ROOT / "book" / "_build" / "html" / "chapters"
SECTIONS = sorted(set(STEP_SECTIONS.values()), key=lambda s: (s.page, s.title))

# Kinds a solution takes that teach nothing of their own: the step that does the teaching
# is taken with them (a network's counts, a memory's convention, precision and optimizer).
BOOKKEEPING = {"network", "training_memory", "inference_memory"}

_FENCE = re.compile(r"^(`{3,}|~{3,})")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_LABEL = re.compile(r"^\(([\w-]+)\)=\s*$")


def headings(page):
    """Return the (label, title) of each heading of a chapter's source, outside code blocks."""
    found, fence, label = [], None, ""
    for line in (CHAPTERS / f"{page}.md").read_text(encoding="utf-8").splitlines():
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and line.strip() == fence:
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        if match := _LABEL.match(line):
            label = match.group(1)
        elif match := _HEADING.match(line):
            found.append((label, match.group(2)))
            label = ""
        elif line.strip():
            label = ""
    return found


@pytest.mark.parametrize("section", SECTIONS, ids=[f"{s.page}:{s.anchor}" for s in SECTIONS])
def test_every_named_section_is_a_heading_of_its_chapter(section):
    """The section's heading is in its chapter's source, with its label; its anchor is unique."""
    assert section.page == f"{section.chapter:02d}_" + section.page[3:]
    page = headings(section.page)
    assert (section.label, section.title) in page, f"{section.title!r} not in {section.page}"
    anchors = [label or anchor(title) for label, title in page]
    assert anchors.count(section.anchor) == 1, section.anchor


@pytest.mark.parametrize("section", SECTIONS, ids=[f"{s.page}:{s.anchor}" for s in SECTIONS])
def test_anchors_are_the_ones_docutils_gives(section):
    """A heading's anchor is docutils' make_id of its text (as Sphinx writes the section's id)."""
    nodes = pytest.importorskip("docutils.nodes")
    shown = re.sub(r"[`$]", "", section.title).replace("\\", "")
    expected = section.label or nodes.make_id(shown)
    assert section.anchor == expected


@pytest.mark.built_book
@pytest.mark.skipif(not HTML.is_dir(), reason="the book is not built (make book)")
def test_anchors_are_on_the_built_pages():
    """Each section's anchor is an id on its built page."""
    for section in SECTIONS:
        page = (HTML / f"{section.page}.html").read_text(encoding="utf-8")
        assert f'id="{section.anchor}"' in page, section


def _kinds(variant):
    recorder = Recorder()
    with recording(recorder):
        variant.solve_with(recorder)
    return recorder.kinds


def test_every_solution_names_a_section_and_every_kind_has_one(sets):
    """Each of the solutions (book's numbers and a learner's) names a section of the book.

    Every kind of step a solver takes has its section in STEP_SECTIONS, or is bookkeeping,
    so a new step cannot go unnamed.
    """
    unmapped = set()
    for chosen in sets.values():
        for exercise in chosen.exercises:
            for seed in (None, "ada"):
                variant = chosen.variant(exercise.id, seed)
                derivation = derive(variant)
                assert derivation.sections, variant.id
                assert derivation.lines[0] == "Uses, from the book (where each step is taught):"
                for section in derivation.sections:
                    assert f"  {section}" in derivation.lines, variant.id
                unmapped |= set(_kinds(variant)) - set(STEP_SECTIONS) - BOOKKEEPING
    assert not unmapped, f"kinds of step with no section: {sorted(unmapped)}"


def test_a_solution_names_the_sections_of_the_steps_it_takes(sets):
    """Counting a CNN's parameters names the convolution and dense sections; units name ch. 1."""
    parameters = derive(sets["ch02"].variant("q3")).sections
    assert {s.title for s in parameters} >= {"Convolutions", "Dense layers", "A whole network"}
    kv_cache = derive(sets["ch14"].variant("q1")).sections
    assert [s.title for s in kv_cache] == ["The key/value cache", "Units: MB is not MiB"]


def test_the_books_solutions_link_each_section():
    """The book's solution links each section the derivation names, at its anchor."""
    (exercise,) = book_exercises("ch14", ["q1"])
    for section in derive(load_sets()["ch14"].variant("q1")).sections:
        assert f'href="{section.page}.html#{section.anchor}"' in exercise.solution
