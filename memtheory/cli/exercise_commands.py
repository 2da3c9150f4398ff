"""What ``memtheory grade``, ``questions``, ``template``, ``sets`` and ``misconceptions`` do.

The exercise grader's subcommands, apart from the parser (:mod:`memtheory.cli`) so
that the grader (:mod:`memtheory.exercises`) is imported only when one of them
runs: ``memtheory estimate`` and ``serve`` start without it. Each function takes
the parsed arguments and returns the exit status.

Examples
--------
>>> from memtheory.cli import build_parser
>>> misconceptions(build_parser().parse_args(["misconceptions"]))  # doctest: +ELLIPSIS
forgot_bias: ...
0
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from memtheory.cli.result_paths import (
    default_exercises_path,
    default_folder_paths,
    default_result_path,
)
from memtheory.exercises.answers import read_regular_file
from memtheory.exercises.assignment import (
    apply_assignment,
    apply_overrides,
    read_assignment,
    read_overrides,
)
from memtheory.exercises.derivation import derive
from memtheory.exercises.errors import AnswerFileError
from memtheory.exercises.grading import grade_file, grade_folder
from memtheory.exercises.loader import get_set, load_sets
from memtheory.exercises.misconceptions import MISCONCEPTIONS, SLIPS
from memtheory.exercises.model import ExerciseSet
from memtheory.exercises.outputs import check_output_paths
from memtheory.exercises.report import FORMAT, printable, write_atomic
from memtheory.exercises.variants import resolve_seed

__all__ = ["grade", "misconceptions", "questions", "sets", "template"]


def _is_own_result(path: Path) -> bool:
    """Whether ``path`` holds a memtheory result for one answer file (which may be replaced)."""
    try:
        data = json.loads(read_regular_file(path).decode("utf-8"))
    except (AnswerFileError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def _set_ids(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _chosen_sets(args: argparse.Namespace) -> list[ExerciseSet]:
    ids = _set_ids(args.set)
    if ids:
        return [get_set(s, args.sets) for s in ids]
    return list(load_sets(args.sets).values())


def _grade_folder(args: argparse.Namespace, target: Path, sets: list[str] | None) -> int:
    for set_id in sets or ():
        get_set(set_id, args.sets)  # an unknown --set is the teacher's: stop before grading
    default_json, default_csv = default_folder_paths(target)
    json_path = Path(args.json) if args.json else default_json
    csv_path = Path(args.csv) if args.csv else default_csv
    exercises_path = Path(args.exercises) if args.exercises else default_exercises_path(target)
    gradebook = Path(args.gradebook) if args.gradebook else None
    protected = [p for p in target.iterdir() if p.name.lower().endswith(".toml")]
    outputs = [json_path, csv_path, exercises_path, *([gradebook] if gradebook else [])]
    # before grading: a result path that cannot be written is known at once
    check_output_paths(outputs, force=args.force, protect=protected)
    assignment = read_assignment(args.assignment, args.sets) if args.assignment else None
    if assignment is not None and sets:
        print(
            "memtheory grade: --assignment chooses the exercises; --set ignored.", file=sys.stderr
        )
    summary = grade_folder(
        target,
        seed=args.seed,
        sets=sets,
        sets_dir=args.sets,
        show_expected=args.show_expected,
        assignment=assignment,
        overrides=read_overrides(args.overrides) if args.overrides else (),
        jobs=args.jobs,
        progress=None if args.quiet else _progress,
    )
    write_atomic(json_path, summary.to_json(), protect=protected)
    write_atomic(csv_path, summary.csv_text(), protect=protected)
    if gradebook:
        write_atomic(gradebook, summary.gradebook_csv(), protect=protected)
    by_exercise = summary.by_exercise()
    write_atomic(exercises_path, by_exercise.csv_text(), protect=protected)
    if not args.quiet:
        print(summary.table())
        print()
        print(by_exercise.table())
    failed = len(summary.failed)
    if failed:
        print(
            f"memtheory grade: {failed} file(s) could not be graded; the reasons are in the "
            "results.",
            file=sys.stderr,
        )
    print(
        printable(f"summary written to {json_path} and {csv_path}; by exercise to {exercises_path}")
    )
    return 1 if failed else 0


_PROGRESS_FROM = 20
"""Folders of at least this many files print their progress (on stderr)."""


def _progress(done: int, total: int) -> None:
    """Print ``graded done/total`` on stderr about every tenth of a long folder."""
    step = max(1, total // 10)
    if total >= _PROGRESS_FROM and (done % step == 0 or done == total):
        print(f"memtheory grade: graded {done}/{total} files", file=sys.stderr, flush=True)


def grade(args: argparse.Namespace) -> int:
    """``memtheory grade``: grade an answer file (a result beside it) or a folder of them.

    Examples
    --------
    >>> from memtheory.cli import build_parser
    >>> grade(build_parser().parse_args(["grade", "no/such/file.toml"]))
    2
    """
    target = Path(args.answers)
    sets = _set_ids(args.set)
    if target.is_dir():
        return _grade_folder(args, target, sets)
    if not target.exists() and not target.is_symlink():
        print(printable(f"memtheory grade: no such file or folder: {target}"), file=sys.stderr)
        return 2
    json_path = Path(args.json) if args.json else default_result_path(target)
    check_output_paths([json_path], force=args.force, replaceable=_is_own_result, protect=[target])
    assignment = read_assignment(args.assignment, args.sets) if args.assignment else None
    report = grade_file(
        target,
        seed=args.seed,
        sets=list(assignment.sets) if assignment else sets,
        sets_dir=args.sets,
        show_expected=args.show_expected,
    )
    if assignment is not None:
        report = apply_assignment(report, assignment)
    if args.overrides:
        report, _ = apply_overrides(report, read_overrides(args.overrides), target.name)
    write_atomic(json_path, report.to_json(), protect=[target])
    for option in ("csv", "exercises", "gradebook"):
        if getattr(args, option):
            print(
                f"memtheory grade: --{option} applies to a folder of answer files; ignored.",
                file=sys.stderr,
            )
    if not args.quiet:
        print(report.table())
    print(printable(f"result written to {json_path}"))
    return 0


def _seed_for(args: argparse.Namespace) -> tuple[str | None, str]:
    return resolve_seed(option=args.seed, learner=args.learner)


def questions(args: argparse.Namespace) -> int:
    """``memtheory questions``: print the questions of a learner's variant (or worked).

    With ``--solutions``, each worked solution step by step and its answer.

    Examples
    --------
    >>> from memtheory.cli import build_parser
    >>> questions(build_parser().parse_args(["questions", "--set", "ch02"]))  # doctest: +ELLIPSIS
    Questions for the book's numbers.
    ...
    0
    """
    seed, source = _seed_for(args)
    label = "the book's numbers" if seed is None else f"seed {seed} ({source})"
    print(f"Questions for {label}.")
    for exercise_set in _chosen_sets(args):
        print(f"\n== {exercise_set.id}: {exercise_set.title} ==")
        if exercise_set.intro:
            print(textwrap.fill(exercise_set.intro, 88))
        for variant in exercise_set.variants(seed):
            points = variant.exercise.points
            print(f"\n[{variant.id}] ({points} point{'s' if points > 1 else ''})")
            for line in variant.question.splitlines():
                print(
                    textwrap.fill(
                        line, 88, subsequent_indent="    " if line.startswith("  ") else ""
                    )
                )
            if args.solutions:
                print("Worked solution:")
                for line in derive(variant).lines:
                    print(printable("    " + line))
    return 0


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def template(args: argparse.Namespace) -> int:
    """``memtheory template``: write an answer file to fill in (stdout, or a new file).

    Examples
    --------
    >>> from memtheory.cli import build_parser
    >>> template(build_parser().parse_args(["template", "--set", "ch02"]))  # doctest: +ELLIPSIS
    # memtheory answers: write each answer between the quotes, then run
    ...
    0
    """
    seed, source = _seed_for(args)
    lines = [
        "# memtheory answers: write each answer between the quotes, then run",
        "#   memtheory grade FILE",
    ]
    if args.learner:
        lines.append(f"learner = {_toml_string(args.learner)}")
    if args.seed is not None:
        lines.append(f"seed = {_toml_string(str(args.seed))}")
    elif seed is None:
        lines.append("# no learner and no seed: the questions use the book's numbers")
    lines += ["", "[answers]"]
    for exercise_set in _chosen_sets(args):
        lines += ["", f"# ===== {exercise_set.id}: {exercise_set.title} ====="]
        for variant in exercise_set.variants(seed):
            lines.append("")
            lines.append(f"# {variant.id} ({variant.exercise.points} point(s))")
            for paragraph in variant.question.splitlines():
                lines += [f"# {line}" for line in textwrap.wrap(paragraph, 86)] or ["#"]
            answer = variant.kind.solution_text(variant.expected) if args.solutions else ""
            lines.append(f"{_toml_string(variant.id)} = {_toml_string(answer)}")
    text = "\n".join(lines) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    output = Path(args.output)
    if output.exists():
        print(
            f"memtheory template: {output} exists; it is never overwritten. Choose another name.",
            file=sys.stderr,
        )
        return 2
    write_atomic(output, text)
    print(
        f"template written to {output} ({'reference solutions' if args.solutions else 'blank'}, "
        f"{source} numbers)"
    )
    return 0


def sets(args: argparse.Namespace) -> int:
    """``memtheory sets``: list the exercise sets, each with its exercises and points.

    Examples
    --------
    >>> from memtheory.cli import build_parser
    >>> sets(build_parser().parse_args(["sets"]))  # doctest: +ELLIPSIS
    ch01  Why memory runs out ...
    0
    """
    for exercise_set in load_sets(args.sets).values():
        count = len(exercise_set.exercises)
        print(
            f"{exercise_set.id}  {exercise_set.title}  ({count} exercises, {exercise_set.points} "
            f"points)"
        )
    return 0


def misconceptions(args: argparse.Namespace) -> int:
    """``memtheory misconceptions``: list the misconceptions the grader recognises, with hints."""
    for entry in (*MISCONCEPTIONS.values(), *SLIPS.values()):
        print(f"{entry.name}: {entry.title}")
        print(textwrap.fill(entry.hint, 88, initial_indent="    ", subsequent_indent="    "))
    return 0
