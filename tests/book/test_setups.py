"""Every chapter that computes the memory of a step states its Setup before the first such call.

A memory figure is the figure of one step: its precision, optimizer and
implementation, attention kernel, loop and card reserve
(:class:`memtheory.recipes.Setup`). A chapter whose code calls one of the
library's memory-computing front doors (:data:`FRONT_DOORS`) must build a
``Setup(...)`` or ``Setup.recipe(...)``, or take the library's ``TEXTBOOK``
setup, in a code cell before that call, and
show it to the reader with ``describe()``, as chapter 6 does; and every step it
traces, measures or tracks (:data:`STEP_DOORS`) takes that Setup as ``setup=``.
The chapters' sources are read, not run: the check takes seconds.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.book.cells import code_cells
from tests.book.prose import BOOK, chapters

FRONT_DOORS = (
    "estimate", "training_memory", "inference_memory", "finetune_memory",
    "generation_memory", "trace", "measure", "compare_with_measurement", "fewest_gpus",
    "parallel_memory", "zero_model_states", "max_batch", "max_sequence_length",
    "plot_memory", "compare_scenarios", "sensitivity", "gradient_accumulation",
)
"""Functions that compute the bytes of a training or inference step (or solve for a size
that fits one): the answer depends on the step's assumptions, so the chapter must state them."""

_CALL = re.compile(r"(?<![\w.])(?:\w+\.)*(" + "|".join(FRONT_DOORS) + r")\(")
_SETUP = re.compile(r"(?<![\w.])(?:Setup(?:\.recipe)?\(|TEXTBOOK\b)")
_DESCRIBE = re.compile(r"\.describe\(\)")

EXEMPT: dict[str, str] = {}
"""Chapter file name -> why it computes a step without stating a Setup (none today)."""


Place = tuple[int, int]
"""Where a code line is: the source line that opens its cell, and its index in the cell."""


def code_lines(source: Path) -> list[tuple[Place, str]]:
    """Each line of the chapter's code cells, in order, with comments and defs left out."""
    lines = []
    for start, code in code_cells(source):
        for index, line in enumerate(code.splitlines()):
            text = line.split("#", 1)[0]
            if text.strip() and not text.lstrip().startswith("def "):
                lines.append(((start, index), text))
    return lines


def first_line(lines: list[tuple[Place, str]], pattern: re.Pattern[str]) -> Place | None:
    """Where the first code line matching ``pattern`` is, or None."""
    return next((place for place, text in lines if pattern.search(text)), None)


def setup_problem(source: Path) -> str | None:
    """Why ``source`` fails the rule, or None when it passes (or computes no step)."""
    lines = code_lines(source)
    call = first_line(lines, _CALL)
    if call is None:
        return None
    door = next(match.group(1) for place, text in lines
                if place == call and (match := _CALL.search(text)))
    where = f"the code cell at line {call[0]} calls {door}()"
    setup = first_line(lines, _SETUP)
    if setup is None or setup > call:
        return (f"{source.name}: {where} before any code cell builds a Setup(...) or "
                "Setup.recipe(...): state the step's Setup first, as chapter 6 does")
    shown = first_line(lines, _DESCRIBE)
    if shown is None or shown > call:
        return (f"{source.name}: {where}, but the Setup of the cell at line {setup[0]} is not "
                "shown with describe() before it: show its lines to the reader")
    return None


CHAPTERS = [path for path in chapters() if path.parent == BOOK / "chapters"]


def test_the_chapters_are_found():
    """The table of contents yields the twenty chapters the rule is checked on."""
    assert len(CHAPTERS) == len(list((BOOK / "chapters").glob("*.md"))) >= 20


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_states_its_setup_before_computing(source: Path):
    """A chapter that computes a step's memory builds and shows a Setup before the first call."""
    problem = setup_problem(source)
    if source.name in EXEMPT:
        assert problem is not None, f"{source.name} is exempt but needs no exemption: drop it"
        return
    assert problem is None, problem


def test_exemptions_name_chapters():
    """Every exemption names a chapter of the book and says why."""
    names = {path.name for path in CHAPTERS}
    assert all(name in names and reason for name, reason in EXEMPT.items())


def _chapter(tmp_path: Path, *cells: str) -> Path:
    source = tmp_path / "99_example.md"
    source.write_text("# Example\n\n" + "\n".join(f"```{{code-cell}} ipython3\n{cell}\n```\n"
                                                  for cell in cells), encoding="utf-8")
    return source


def test_a_call_without_a_setup_fails(tmp_path: Path):
    """The check names the chapter, the line and the front door when no Setup comes first."""
    source = _chapter(tmp_path, 'memory = training_memory(net, optimizer="adam")')
    problem = setup_problem(source)
    assert problem is not None and "training_memory()" in problem and "line 3" in problem


def test_a_setup_after_the_call_fails(tmp_path: Path):
    """A Setup stated after the first call does not count."""
    source = _chapter(tmp_path, "m = mt.estimate('gpt2')",
                      'S = Setup.recipe("pytorch-amp")\nS.describe()')
    assert "estimate()" in (setup_problem(source) or "")


def test_a_setup_not_shown_fails(tmp_path: Path):
    """A Setup built but never shown with describe() does not state it to the reader."""
    source = _chapter(tmp_path, 'S = Setup(precision="fp32")', "trace(model, x, {})")
    assert "describe()" in (setup_problem(source) or "")


def test_a_stated_setup_passes(tmp_path: Path):
    """A Setup built and shown before the first call passes; defs and comments are not calls."""
    source = _chapter(tmp_path, "def measure(x):\n    return x  # measure(y)",
                      'S = Setup(precision="fp32")\nS.describe()',
                      "training_memory(net, setup=S)")
    assert setup_problem(source) is None
    assert setup_problem(_chapter(tmp_path, "print(1 + 1)")) is None


STEP_DOORS = ("trace", "measure", "track")
"""Front doors that run a real (or fake) step: a chapter passes them its Setup (``setup=``), so
the step measured and the Setup stated cannot drift apart (:mod:`memtheory.torch.setup_step`)."""


def steps_without_setup(source: Path) -> list[str]:
    """Each ``trace``/``measure``/``track`` call in the code cells that passes no ``setup=``."""
    missing = []
    for start, code in code_cells(source):
        tree = ast.parse("\n".join(line for line in code.splitlines()
                                   if not line.lstrip().startswith(("%", "!"))))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in STEP_DOORS and all(k.arg != "setup" for k in node.keywords):
                missing.append(f"{source.name}: {name}() in the code cell at line {start} "
                               f"(its line {node.lineno}) passes no setup=: pass the "
                               "chapter's Setup, or a named change of it")
    return missing


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_steps_run_its_setup(source: Path):
    """Every step a chapter traces, measures or tracks is run from a Setup (``setup=``)."""
    assert steps_without_setup(source) == []


def test_a_step_without_its_setup_fails(tmp_path: Path):
    """A measure() spelling out the optimizer instead of passing setup= is named; setup= passes."""
    source = _chapter(tmp_path, 'S = Setup(precision="fp32")\nS.describe()',
                      "m = mt.torch.measure(net, x, loss, torch.optim.Adam(p), target=y)",
                      "t = trace(net, x, {}, setup=S.changed(optimizer='sgd'))")
    (problem,) = steps_without_setup(source)
    measuring_cell = code_cells(source)[1][0]
    assert "measure()" in problem and f"line {measuring_cell} " in problem
