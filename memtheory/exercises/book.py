r"""Exercises at the end of a book chapter: questions and solutions from the sets, as Markdown.

A chapter does not retype its exercises. One hidden code cell glues, for the
exercises it shows, each question and its solution (the book's numbers,
answers computed by memtheory) as Markdown under stable keys, and the page
pastes them into ``exercise`` and ``solution`` directives:

.. code-block:: markdown

    ```{code-cell} ipython3
    :tags: [remove-cell]

    from memtheory.exercises.book import glue_exercises

    glue_exercises("ch02", ["q1", "q2"])
    ```

    :::{exercise} {glue:text}`ex-ch02-q1-title`
    :label: ex-ch02-q1

    ```{glue:md} ex-ch02-q1-question
    :format: myst
    ```
    :::

    :::{solution} ex-ch02-q1
    :class: dropdown

    ```{glue:md} ex-ch02-q1-solution
    :format: myst
    ```
    :::

    ```{glue:md} ex-ch02-grading
    :format: myst
    ```

:func:`book_exercises` returns the texts (it needs only memtheory);
:func:`glue_exercises` glues them with ``myst_nb.glue``, which comes with the
``book`` extra. A question lists the options of a choice and says how to
answer; a solution shows the working step by step (recorded from the
computation that grades it), the answer (a formula typeset, a size with its
bytes) and the answer each likely mistake leads to, with its hint.

Examples
--------
>>> (q1,) = book_exercises("ch02", ["q1"])
>>> q1.label, sorted(q1.texts())
('ex-ch02-q1', ['ex-ch02-q1-question', 'ex-ch02-q1-solution', 'ex-ch02-q1-title'])
>>> print(q1.solution)
Where each step is taught: <a href="02_counting_parameters.html#dense-layers">2. ...</a>, ...
<BLANKLINE>
Working, step by step (the computation that grades the answer):
<BLANKLINE>
```text
Output shapes, layer by layer:
  input: (64, 784)
  dense_1: (64, 100)
Parameters, layer by layer (weights + biases):
  dense_1: 78,400 + 100 = 78,500
  total: 78,500
```
<BLANKLINE>
Answer: **78,500**
<BLANKLINE>
Answers that common mistakes lead to:
<BLANKLINE>
- **78,400**: forgot the bias. Each filter of a convolution ... per layer.
- **5,024,000**: multiplied the parameters by the batch size. The weights, ...
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

import sympy as sp

from memtheory.exercises.derivation import derive
from memtheory.exercises.kinds import (
    AnswerKind,
    Choice,
    Expression,
    Integer,
    Number,
    Quantity,
)
from memtheory.exercises.loader import PathLike, get_set
from memtheory.exercises.model import MistakenAnswer, Variant
from memtheory.exercises.sections import Section
from memtheory.exercises.selfcheck import selfcheck_html, selfcheck_script
from memtheory.units import unit_bytes

__all__ = [
    "SELF_CHECK_TEXT",
    "BookExercise",
    "answer_rules",
    "book_exercises",
    "escape",
    "glue_exercises",
    "grading_key",
    "grading_text",
    "label",
    "section_links",
    "short_instructions",
]

SELF_CHECK_TEXT = (
    "The box under each exercise checks your answer in this page (offline, nothing is sent), "
    "with the grader's tolerance and its feedback on likely mistakes, for the book's numbers. "
    "It reads the grader's ways of writing an answer; formulas are compared at sample points, "
    "and `memtheory grade` remains the reference."
)
"""Said once per chapter, with the grading note: what the answer boxes do and where they stop."""

KINDS = ("title", "question", "solution")
"""What is glued per exercise: ``<label>-title``, ``-question`` and ``-solution``."""

_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~$])")


def escape(text: str) -> str:
    r"""Escape the characters Markdown (MyST, with dollar math) would read as markup.

    Examples
    --------
    >>> print(escape("(* for products, ** for powers, $5)"))
    (\* for products, \*\* for powers, \$5)
    """
    return _SPECIAL.sub(r"\\\1", text)


def label(exercise_id: str) -> str:
    """Return the book's label of an exercise: ``"ch02.q1"`` becomes ``"ex-ch02-q1"``.

    Labels are unique across the book, since exercise ids are.

    Examples
    --------
    >>> label("ch06.q7")
    'ex-ch06-q7'
    """
    return "ex-" + exercise_id.replace(".", "-").replace("_", "-")


def grading_key(set_id: str) -> str:
    """Return the glue key of a set's one-sentence note on grading.

    Examples
    --------
    >>> grading_key("ch02")
    'ex-ch02-grading'
    """
    return f"ex-{set_id}-grading"


def grading_text(set_id: str) -> str:
    """Return the sentence that ends a chapter's exercises: how to have answers graded.

    Examples
    --------
    >>> print(grading_text("ch02"))
    To have your answers graded, `memtheory template --set ch02 -o answers.toml` writes ...
    """
    return (
        f"To have your answers graded, `memtheory template --set {set_id} -o answers.toml` "
        f"writes an answer file for the exercises of set {set_id} (add `--learner NAME` for "
        "numbers of your own), and `memtheory grade answers.toml` marks it, naming the likely "
        "mistake behind a wrong answer."
    )


def _percent(rtol: float) -> str:
    return f"{rtol * 100:g}%"


def short_instructions(kind: AnswerKind) -> str:
    """Return how to answer one exercise in a few words; :func:`answer_rules` says the rest once.

    Examples
    --------
    >>> from memtheory.exercises.kinds import Quantity
    >>> short_instructions(Quantity("MiB", rtol=0.005))
    'In MiB, within 0.5%.'
    """
    if isinstance(kind, Quantity):
        return f"In {kind.unit}, within {_percent(kind.rtol)}."
    if isinstance(kind, Integer):
        return "A whole number."
    if isinstance(kind, Number):
        what = "a percentage" if kind.percent else kind.what
        close = "exactly" if kind.rtol == 0 else f"within {_percent(kind.rtol)}"
        return f"{what[0].upper()}{what[1:]}, {close}."
    if isinstance(kind, Expression):
        return f"A formula in {', '.join(s.name for s in kind.symbols)}."
    if isinstance(kind, Choice):
        return "One option."
    return kind.instructions()


_RULES: tuple[tuple[type[AnswerKind], str], ...] = (
    (
        Quantity,
        "A size is answered in the unit its question names: a number alone is read in that "
        "unit, and a number with a unit (B, kB, MB, GB, KiB, MiB, GiB) is converted. MB means "
        "10^6 bytes and MiB means 2^20 bytes.",
    ),
    (Integer, "A whole number may group its thousands with commas (4,632,902)."),
    (Number, "Decimals are written with a point; a percentage may end in %."),
    (
        Expression,
        "A formula uses * for products, ** or ^ for powers and floor(...) to round down; it is "
        "graded by symbolic equivalence, not by how it is written.",
    ),
    (Choice, "A choice is answered with the letter of one option, or with its text."),
)


def answer_rules(kinds: Iterable[AnswerKind]) -> str:
    """Return the rules for writing answers of these kinds, said once for a chapter's exercises.

    Examples
    --------
    >>> from memtheory.exercises.kinds import Choice, Integer
    >>> print(answer_rules([Integer(), Choice(("yes", "no"))]))
    How to answer: a whole number may group ... with its text.
    """
    present = [kind for kind in kinds]
    rules = [text for cls, text in _RULES if any(isinstance(k, cls) for k in present)]
    if not rules:
        return ""
    first, *rest = rules
    return " ".join(["How to answer: " + first[0].lower() + first[1:], *rest])


def _answer(kind: AnswerKind, value: object, *, exact: bool = True) -> str:
    """Markdown for an answer: a formula typeset, anything else in bold; ``exact`` adds detail.

    The detail is the formula as a learner types it, or a size's exact bytes.
    """
    if isinstance(kind, Expression):
        expression = sp.sympify(value)
        shown = f"${sp.latex(expression, fold_short_frac=True)}$"  # a/b inline: one line high
        return f"{shown} (typed `{kind.display(expression)}`)" if exact else shown
    shown = f"**{escape(kind.display(value))}**"
    if exact and isinstance(kind, Quantity):
        nbytes = sp.Rational(value) * unit_bytes(kind.unit)
        if nbytes.is_Integer:
            shown += f" ({int(nbytes):,} bytes)"
    return shown


def _question(variant: Variant) -> str:
    parts = [escape(variant.text)]
    if isinstance(variant.kind, Choice):
        options = variant.kind._options()  # bound: a tuple of texts
        parts.append(
            "\n".join(f"- **{chr(ord('a') + i)})** {escape(str(o))}" for i, o in enumerate(options))
        )
    parts.append(f"*{escape(short_instructions(variant.kind))}*")
    return "\n\n".join(parts)


def section_links(sections: Iterable[Section]) -> str:
    """Return links to the book's sections that teach a solution's steps, as one line of HTML.

    A chapter's page links to the others beside it (``book/chapters/``), at the
    heading's anchor (:attr:`~memtheory.exercises.sections.Section.anchor`).

    Examples
    --------
    >>> from memtheory.exercises.sections import STEP_SECTIONS
    >>> print(section_links([STEP_SECTIONS["in_unit"]]))  # doctest: +NORMALIZE_WHITESPACE
    Where each step is taught:
    <a href="01_why_memory_runs_out.html#units-mb-is-not-mib">1. Units: MB is not MiB</a>.
    """
    links = [
        f'<a href="{section.page}.html#{section.anchor}">'
        f"{section.chapter}. {html.escape(section.plain_title)}</a>"
        for section in sections
    ]
    return "Where each step is taught: " + ", ".join(links) + "." if links else ""


def _working(variant: Variant) -> str:
    """Return the worked solution (:func:`~memtheory.exercises.derivation.derive`), a code block.

    It starts with links to the sections that teach its steps.
    """
    derivation = derive(variant)
    working = "Working, step by step (the computation that grades the answer):\n\n```text\n" + (
        "\n".join(derivation.steps) + "\n```"
    )
    links = section_links(derivation.sections)
    return f"{links}\n\n{working}" if links else working


def _solution(variant: Variant) -> str:
    parts = [
        _working(variant),
        f"Answer: {_answer(variant.kind, variant.expected)}",
    ]
    found: dict[str, tuple[MistakenAnswer, list[str]]] = {}
    for mistaken in variant.mistaken_answers():
        shown = _answer(variant.kind, mistaken.value, exact=False)
        values = found.setdefault(mistaken.name, (mistaken, []))[1]
        if shown not in values:
            values.append(shown)
    if found:
        lines = [
            f"- {' or '.join(values)}: {escape(m.title)}. {escape(m.hint)}"
            for m, values in found.values()
        ]
        parts.append("Answers that common mistakes lead to:\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class BookExercise:
    """One exercise as a chapter shows it: the book's numbers, as Markdown.

    Attributes
    ----------
    id : str
        ``"ch02.q1"``.
    title : str
        A few words, plain text (the ``exercise`` directive's title).
    question : str
        The question in MyST Markdown: the text, a choice's options, how to answer.
    solution : str
        The worked solution, the answer computed by memtheory, and the answer
        of each mistake the exercise lists, with its hint.
    check : str
        The self-check answer box (:func:`~memtheory.exercises.selfcheck.selfcheck_html`):
        one line of HTML, glued after the question.

    Examples
    --------
    >>> [exercise] = book_exercises("ch03", ["q1"])
    >>> exercise.id, exercise.label, exercise.title
    ('ch03.q1', 'ex-ch03-q1', 'pooling an odd size')
    >>> list(exercise.texts())
    ['ex-ch03-q1-title', 'ex-ch03-q1-question', 'ex-ch03-q1-solution']
    """

    id: str
    title: str
    question: str
    solution: str
    check: str = ""

    @property
    def label(self) -> str:
        """The ``exercise`` directive's label, ``"ex-ch02-q1"``."""
        return label(self.id)

    def texts(self) -> dict[str, str]:
        """Return the glue keys and their texts: ``<label>-title``, ``-question``, ``-solution``."""
        return {f"{self.label}-{kind}": getattr(self, kind) for kind in KINDS}


def book_exercises(
    set_id: str, exercise_ids: Iterable[str] | None = None, *, sets_dir: PathLike | None = None
) -> list[BookExercise]:
    """Return the questions and solutions of a set's exercises, with the book's numbers.

    Parameters
    ----------
    set_id : str
        ``"ch02"``.
    exercise_ids : iterable of str, optional
        ``["q1", "q3"]`` (or full ids), in the order to show; every exercise
        of the set when omitted.
    sets_dir : path, optional
        Folder of the exercise sets.

    Examples
    --------
    >>> [e.id for e in book_exercises("ch03", ["q1", "ch03.q5"])]
    ['ch03.q1', 'ch03.q5']
    """
    chosen = get_set(set_id, sets_dir)
    ids = [e.id for e in chosen.exercises] if exercise_ids is None else list(exercise_ids)
    found = []
    for exercise_id in ids:
        variant = chosen.variant(exercise_id)  # no seed: the book's numbers
        title = variant.exercise.title or variant.exercise.id
        found.append(
            BookExercise(
                variant.id,
                title,
                _question(variant),
                _solution(variant),
                selfcheck_html(variant),
            )
        )
    return found


def glue_exercises(
    set_id: str, exercise_ids: Iterable[str] | None = None, *, sets_dir: PathLike | None = None
) -> list[BookExercise]:
    """Glue the questions, solutions and grading note of a chapter's exercises (``myst_nb.glue``).

    Each text of :meth:`BookExercise.texts` is glued under its key (the title
    as plain text, the rest as Markdown), and under :func:`grading_key` the
    chapter's note said once: :func:`answer_rules` for the kinds of answer
    shown, then :func:`grading_text`. Each question ends with
    :func:`short_instructions` only, then its answer box (:attr:`BookExercise.check`); the
    note ends with :data:`SELF_CHECK_TEXT` and the checker's script. Call it from a hidden
    code cell of the chapter; it needs ``myst_nb`` (the ``book`` extra).

    Returns
    -------
    list of BookExercise
        What was glued.

    Examples
    --------
    Called from a hidden code cell of chapter 3, it glues the keys the chapter's text names:

    >>> glued = glue_exercises("ch03", ["q1"])
    >>> [key for exercise in glued for key in exercise.texts()] + [grading_key("ch03")]
    ['ex-ch03-q1-title', 'ex-ch03-q1-question', 'ex-ch03-q1-solution', 'ex-ch03-grading']
    """
    from IPython.display import Markdown
    from myst_nb import glue

    exercises = book_exercises(set_id, exercise_ids, sets_dir=sets_dir)
    chosen = get_set(set_id, sets_dir)
    rules = answer_rules(chosen.variant(exercise.id).kind for exercise in exercises)
    for exercise in exercises:
        glue(f"{exercise.label}-title", exercise.title, display=False)
        question = f"{exercise.question}\n\n{exercise.check}"  # the answer box under it
        glue(f"{exercise.label}-question", Markdown(question), display=False)
        glue(f"{exercise.label}-solution", Markdown(exercise.solution), display=False)
    note = escape(rules) + "\n\n" + grading_text(set_id) if rules else grading_text(set_id)
    note += "\n\n" + SELF_CHECK_TEXT + "\n\n" + selfcheck_script()
    glue(grading_key(set_id), Markdown(note), display=False)
    return exercises
