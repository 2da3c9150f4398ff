"""The book's exercises: every exercise has Markdown for the book, and the chapters paste only that.

The chapters end with ``exercise`` / ``solution`` directives whose bodies paste
what :func:`memtheory.exercises.book.glue_exercises` glued. These tests read the
chapters' sources (no build needed) and run the text functions without myst_nb.
"""

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from memtheory.exercises import Choice, Expression, find_variant, load_sets
from memtheory.exercises.book import (
    SELF_CHECK_TEXT,
    answer_rules,
    book_exercises,
    escape,
    glue_exercises,
    grading_key,
    grading_text,
    label,
)
from memtheory.exercises.derivation import derive
from memtheory.exercises.selfcheck import selfcheck_script

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book" / "chapters").glob("*.md"))
ALL_IDS = [full for s in load_sets().values() for full in s.ids]

CALL = re.compile(r'glue_exercises\(\s*"(\w+)"\s*,\s*\[([^\]]*)\]\s*\)')
GLUE_MD = re.compile(r"```\{glue:md\}\s+(\S+)|\{glue:md\}`([^`:]+)(?::\w+)?`")
GLUE_TEXT = re.compile(r"\{glue:text\}`(ex-[^`:]+)(?::[^`]*)?`")
EXERCISE_LABEL = re.compile(r"^:::\{exercise\}.*\n:label: (\S+)", re.M)
SOLUTION_OF = re.compile(r"^:::\{solution\} (\S+)\n:class: dropdown$", re.M)


def glued_by(text):
    """Return the keys the chapter's glue_exercises calls provide, and the labels they show."""
    keys, labels = set(), []
    for set_id, ids in CALL.findall(text):
        chosen = re.findall(r'"(\w+)"', ids)
        for exercise in book_exercises(set_id, chosen):
            keys |= set(exercise.texts())
            labels.append(exercise.label)
        keys.add(grading_key(set_id))
    return keys, labels


@pytest.mark.parametrize("exercise_id", ALL_IDS)
def test_every_exercise_has_a_question_and_a_solution(exercise_id):
    """Each exercise gives a title, a question with how to answer, and the computed answer."""
    set_id, short = exercise_id.split(".")
    (exercise,) = book_exercises(set_id, [short])
    variant = find_variant(exercise_id)
    assert exercise.id == exercise_id and exercise.label == label(exercise_id)
    assert exercise.title.strip()
    assert exercise.question.strip() and exercise.solution.startswith("Where each step is taught: ")
    assert "\n\nWorking, step by step" in exercise.solution
    working = "\n".join(derive(variant).steps)  # the worked solution, in a code block
    assert f"```text\n{working}\n```" in exercise.solution
    assert "\n\nAnswer: " in exercise.solution
    assert "{" not in exercise.question and "}" not in exercise.question, "a placeholder left"
    if isinstance(variant.kind, Choice):
        for option in variant.kind.options:
            assert escape(option) in exercise.question
    if isinstance(variant.kind, Expression):
        assert f"`{variant.kind.display(variant.expected)}`" in exercise.solution
    else:
        assert f"**{escape(variant.kind.display(variant.expected))}**" in exercise.solution
    for mistaken in variant.mistaken_answers():
        assert escape(mistaken.title) in exercise.solution


def test_whole_sets_and_full_ids():
    """Without ids every exercise of the set comes, in order; full ids work like short ones."""
    assert [e.id for e in book_exercises("ch03")] == list(load_sets()["ch03"].ids)
    assert [e.id for e in book_exercises("ch3", ["ch03.q2", "q1"])] == ["ch03.q2", "ch03.q1"]


def test_texts_need_no_myst_nb():
    """book_exercises runs where myst_nb cannot be imported (it is the book extra, not core)."""
    code = (
        "import sys; sys.modules['myst_nb'] = None\n"
        "from memtheory.exercises.book import book_exercises\n"
        "assert len(book_exercises('ch02')) == 9\n"
        "import memtheory, memtheory.exercises\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "ok", done.stderr


def test_glue_exercises_glues_every_text_under_its_key(monkeypatch):
    """Titles are glued as text; questions, solutions and the grading note as Markdown."""
    display = pytest.importorskip("IPython.display")
    glued = {}

    def glue(key, value, display=True):
        assert display is False and key not in glued
        glued[key] = value

    monkeypatch.setitem(sys.modules, "myst_nb", types.SimpleNamespace(glue=glue))
    exercises = glue_exercises("ch06", ["q2", "q7"])
    expected = {k: v for e in exercises for k, v in e.texts().items()}
    assert set(glued) == set(expected) | {grading_key("ch06")}
    checks = {f"{e.label}-question": e.check for e in exercises}
    for key, text in expected.items():
        value = glued[key]
        if key.endswith("-title"):
            assert value == text
        elif key in checks:  # the question, then its self-check answer box
            assert isinstance(value, display.Markdown)
            assert value.data == f"{text}\n\n{checks[key]}"
            assert checks[key].startswith('<div class="mt-selfcheck"')
        else:
            assert isinstance(value, display.Markdown) and value.data == text
    note = glued[grading_key("ch06")].data
    assert note.startswith("How to answer: ") and grading_text("ch06") in note
    assert SELF_CHECK_TEXT in note and note.endswith(selfcheck_script())


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_chapters_paste_only_keys_the_function_glues(chapter):
    """Every {glue:md} key and exercise title of a chapter is one its glue calls provide."""
    text = chapter.read_text(encoding="utf-8")
    provided, labels = glued_by(text)
    used = {a or b for a, b in GLUE_MD.findall(text)} | set(GLUE_TEXT.findall(text))
    assert used <= provided, sorted(used - provided)
    assert EXERCISE_LABEL.findall(text) == labels


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_each_exercise_has_a_dropdown_solution_and_the_grading_note(chapter):
    """Each glued exercise has its dropdown solution; the section ends saying how to be graded."""
    text = chapter.read_text(encoding="utf-8")
    _, labels = glued_by(text)
    if not labels:
        pytest.skip("no exercises from the sets in this chapter")
    solved = SOLUTION_OF.findall(text)
    for name in labels:
        assert f"```{{glue:md}} {name}-question" in text
        assert name in solved and f"```{{glue:md}} {name}-solution" in text
    for set_id, _ in CALL.findall(text):
        assert f"```{{glue:md}} {grading_key(set_id)}" in text


def test_exercise_labels_are_unique_across_the_book():
    """No two chapters show the same exercise (labels must be unique for sphinx-exercise)."""
    labels = [name for c in CHAPTERS for name in glued_by(c.read_text(encoding="utf-8"))[1]]
    assert labels and len(labels) == len(set(labels))


def test_every_exercise_of_every_set_is_in_the_book_with_its_answer_box():
    """Issue 24: every graded exercise is shown by a chapter, so each has a self-check box."""
    shown = set()
    for chapter in CHAPTERS:
        for set_id, ids in CALL.findall(chapter.read_text(encoding="utf-8")):
            shown |= {f"{set_id}.{short}" for short in re.findall(r'"(\w+)"', ids)}
    assert sorted(set(ALL_IDS) - shown) == []


def test_every_chapter_ends_with_exercises_from_its_set():
    """Every chapter shows exercises of a set, its own chapter's from chapter 10 on (15-20 too)."""
    with_sets = {c.stem[:2] for c in CHAPTERS if glued_by(c.read_text(encoding="utf-8"))[1]}
    assert {f"{n:02}" for n in range(1, 21)} <= with_sets
    for chapter in CHAPTERS:
        if int(chapter.stem[:2]) >= 10:
            sets = {set_id for set_id, _ in CALL.findall(chapter.read_text(encoding="utf-8"))}
            assert sets == {f"ch{chapter.stem[:2]}"}, chapter.stem


def test_fine_tuning_and_distributed_chapters_show_their_sets():
    """Chapters 17 and 18 show every exercise of their sets (ch17, ch18)."""
    for stem, set_id in (("17_fine_tuning", "ch17"), ("18_distributed_training", "ch18")):
        text = (ROOT / "book" / "chapters" / f"{stem}.md").read_text(encoding="utf-8")
        _, labels = glued_by(text)
        expected = [label(full) for full in load_sets()[set_id].ids]
        assert labels == expected, stem


def test_answer_rules_are_said_once_and_only_for_kinds_shown():
    """A chapter's note names the rules of its kinds of answer; questions keep a short form."""
    (size,) = book_exercises("ch01", ["q1"])
    (choice,) = book_exercises("ch01", ["q5"])
    assert size.question.endswith("*In MiB, within 0.5%.*")
    assert "converted" not in size.question and "letter" not in choice.question
    kinds = [find_variant(i).kind for i in ("ch01.q1", "ch01.q5")]
    rules = answer_rules(kinds)
    assert "converted" in rules and "letter of one option" in rules
    assert "symbolic equivalence" not in rules and "commas" not in rules
    assert answer_rules([]) == ""
