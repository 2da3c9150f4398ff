"""The ``memtheory`` command: grade answer files, print questions, write answer templates.

Usage::

    memtheory grade answers.toml            # table on stdout, answers.result.json beside it
    memtheory grade submissions/            # every *.toml: submissions.grades.json and .csv,
                                            # submissions.exercises.csv (per exercise: how many
                                            # right, most common mistakes) beside the folder
    memtheory grade answers.toml --set ch02 --seed 17 --json result.json --show-expected
    memtheory grade submissions/ --assignment week3.toml --overrides fixes.toml \
        --gradebook week3.gradebook.csv --jobs 4       # one denominator, an LMS's CSV
    memtheory questions --set ch02 --learner ada
    memtheory questions --set ch02 --solutions
    memtheory template --set ch02 --learner ada -o answers.toml
    memtheory sets
    memtheory misconceptions
    memtheory estimate gpt2 --batch 8 --seq 1024 --gpu "RTX 4090"   # memory per GPU, fits?
    memtheory serve llama-3-8b --context 4096 --gpu L4              # vLLM: how many sequences

Exit status: 0 when grading ran (whatever the score); 1 when a folder was
graded but some of its files could not be (a pipe, a device, a link loop, not
TOML...: each is a row of the results with the reason, and the results of the
others are written); 2 when grading could not run (no such file, an unreadable
answer file, an unknown set, no exercise sets, a result path that cannot be
written). Where the results go is checked before any file is graded: a new
path, or a regular file that ``--force`` replaces (an answer file's own
``NAME.result.json`` is replaced without it); never a device, a pipe, a folder
or a symbolic link's target.

Exercise sets are Python modules: ``--sets DIR`` (and ``$MEMTHEORY_EXERCISES``)
imports and runs every ``*.py`` of DIR. Point it only at folders you trust,
as you would ``python DIR/file.py``. Answer files are data (TOML) and are only
read.

Examples
--------
>>> main(["sets"])  # doctest: +ELLIPSIS
ch01  Why memory runs out ...
0
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from memtheory.errors import MemtheoryError
from memtheory.exercises.answers import read_regular_file
from memtheory.exercises.assignment import (
    apply_assignment,
    apply_overrides,
    read_assignment,
    read_overrides,
)
from memtheory.exercises.derivation import derive
from memtheory.exercises.errors import AnswerFileError, ExerciseError
from memtheory.exercises.grading import grade_file, grade_folder
from memtheory.exercises.loader import get_set, load_sets
from memtheory.exercises.misconceptions import MISCONCEPTIONS, SLIPS
from memtheory.exercises.model import ExerciseSet
from memtheory.exercises.outputs import check_output_paths
from memtheory.exercises.report import FORMAT, printable, write_atomic
from memtheory.exercises.variants import resolve_seed

__all__ = [
    "build_parser",
    "default_exercises_path",
    "default_folder_paths",
    "default_result_path",
    "main",
]

TRUST_NOTE = (
    "Exercise sets are Python: loading a folder of sets runs its code, so use only folders you "
    "trust. Answer files are only read."
)
"""The trust boundary of exercise sets, as the command's help states it."""


def default_result_path(answers: Path) -> Path:
    """Where the result of an answer file goes by default: ``NAME.result.json`` beside it.

    Examples
    --------
    >>> default_result_path(Path("work/answers.toml")).as_posix()
    'work/answers.result.json'
    """
    return answers.with_name(f"{answers.stem}.result.json")


def default_folder_paths(folder: Path) -> tuple[Path, Path]:
    """Where a folder's results go by default: ``NAME.grades.json`` and ``.csv`` beside it.

    Never inside the folder, where a learner's file could stand.

    Examples
    --------
    >>> [p.name for p in default_folder_paths(Path("/course/submissions"))]
    ['submissions.grades.json', 'submissions.grades.csv']
    """
    absolute = folder.resolve()
    name = absolute.name or "submissions"
    return absolute.parent / f"{name}.grades.json", absolute.parent / f"{name}.grades.csv"


def default_exercises_path(folder: Path) -> Path:
    """Where a folder's per-exercise summary goes by default: ``NAME.exercises.csv`` beside it.

    Examples
    --------
    >>> default_exercises_path(Path("/course/submissions")).name
    'submissions.exercises.csv'
    """
    absolute = folder.resolve()
    return absolute.parent / f"{absolute.name or 'submissions'}.exercises.csv"


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


def _grade(args: argparse.Namespace) -> int:
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


def _questions(args: argparse.Namespace) -> int:
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


def _template(args: argparse.Namespace) -> int:
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


def _sets(args: argparse.Namespace) -> int:
    for exercise_set in load_sets(args.sets).values():
        count = len(exercise_set.exercises)
        print(
            f"{exercise_set.id}  {exercise_set.title}  ({count} exercises, {exercise_set.points} "
            f"points)"
        )
    return 0


def _misconceptions(args: argparse.Namespace) -> int:
    for entry in (*MISCONCEPTIONS.values(), *SLIPS.values()):
        print(f"{entry.name}: {entry.title}")
        print(textwrap.fill(entry.hint, 88, initial_indent="    ", subsequent_indent="    "))
    return 0


def _jobs(text: str) -> int:
    """Read ``--jobs``: a whole number from 1 to 64."""
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number, got {text!r}") from None
    if not 1 <= jobs <= 64:
        raise argparse.ArgumentTypeError(f"--jobs takes 1 to 64 processes, got {jobs}")
    return jobs


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``memtheory`` command.

    Examples
    --------
    >>> build_parser().parse_args(["grade", "answers.toml", "--set", "ch02"]).set
    ['ch02']
    """
    parser = argparse.ArgumentParser(
        prog="memtheory",
        description="Graded exercises on the memory of neural networks.",
        epilog=TRUST_NOTE,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--sets",
            metavar="DIR",
            help="folder of exercise sets (default: $MEMTHEORY_EXERCISES, "
            "else exercises/ of the checkout). The sets are Python: every *.py of DIR is "
            "imported and run, so use only a folder you trust",
        )
        sub.add_argument(
            "--set", action="append", metavar="ID", help="only this set (repeat, or ch01,ch02)"
        )

    grade = commands.add_parser(
        "grade",
        help="grade an answer file, or a folder of them",
        description="Grade an answer file, or every *.toml of a folder. Answer files are only "
        "read: a regular file of at most 1 MiB, never a link out of the folder. A folder's "
        "results go beside it (NAME.grades.json, NAME.grades.csv, and NAME.exercises.csv: how "
        "many got each exercise right and the most common mistakes); an existing result file is "
        "replaced only with --force (an answer file's own NAME.result.json is replaced).",
        epilog=TRUST_NOTE,
    )
    grade.add_argument(
        "answers", metavar="ANSWERS", help="an answer file (TOML) or a folder of *.toml"
    )
    common(grade)
    grade.add_argument(
        "--seed", help="seed of the variants (default: the file's seed, else from its learner)"
    )
    grade.add_argument(
        "--json",
        metavar="FILE",
        help="where to write the JSON result "
        "(default: ANSWERS.result.json; FOLDER.grades.json beside a folder)",
    )
    grade.add_argument(
        "--csv",
        metavar="FILE",
        help="for a folder: where to write the CSV (default: FOLDER.grades.csv beside it)",
    )
    grade.add_argument(
        "--exercises",
        metavar="FILE",
        help="for a folder: where to write the per-exercise summary, CSV (how many got each "
        "exercise right, the most common mistakes; default: FOLDER.exercises.csv beside it)",
    )
    grade.add_argument(
        "--assignment",
        metavar="FILE",
        help="for a folder: the assignment (TOML: sets, exercises, points, due) every learner "
        "is graded on, so all have the same total; the CSV's columns are its exercises",
    )
    grade.add_argument(
        "--overrides",
        metavar="FILE",
        help="for a folder: scores set by hand (TOML: [[override]] learner, exercise, score, "
        "reason), applied after grading",
    )
    grade.add_argument(
        "--gradebook",
        metavar="FILE",
        help="for a folder: also write a gradebook CSV a learning-management system imports "
        "(learner_id, a score column per exercise, total, max_score, status)",
    )
    grade.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="for a folder: grade N files at once, in worker processes (default 1)",
    )
    grade.add_argument(
        "--force", action="store_true", help="replace result files that exist already"
    )
    grade.add_argument("--show-expected", action="store_true", help="show the expected answers")
    grade.add_argument(
        "--quiet", action="store_true", help="print no table, only where the result went"
    )
    grade.set_defaults(run=_grade)

    questions = commands.add_parser("questions", help="print the questions of a learner's variant")
    common(questions)
    questions.add_argument("--seed", help="seed of the variants")
    questions.add_argument("--learner", help="learner id; the seed is derived from it")
    questions.add_argument(
        "--solutions",
        action="store_true",
        help="show each worked solution, step by step, and its answer (for teachers)",
    )
    questions.set_defaults(run=_questions)

    template = commands.add_parser("template", help="write an answer file to fill in")
    common(template)
    template.add_argument("--seed", help="seed of the variants (written into the file)")
    template.add_argument("--learner", help="learner id (written into the file)")
    template.add_argument(
        "--solutions", action="store_true", help="fill in the reference answers (for teachers)"
    )
    template.add_argument(
        "-o", "--output", metavar="FILE", help="file to create (default: stdout); never overwritten"
    )
    template.set_defaults(run=_template)

    sets = commands.add_parser("sets", help="list the exercise sets")
    sets.add_argument("--sets", metavar="DIR", help="folder of exercise sets")
    sets.set_defaults(run=_sets)

    misconceptions = commands.add_parser(
        "misconceptions", help="list the misconceptions the grader recognises"
    )
    misconceptions.set_defaults(run=_misconceptions)
    _add_estimate(commands)
    return parser


def _add_estimate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memtheory estimate`` and ``memtheory serve`` (memtheory.estimate modules)."""
    from memtheory.estimate.command import add_estimate_parser

    add_estimate_parser(commands)
    from memtheory.estimate.serve_command import add_serve_parser

    add_serve_parser(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``memtheory`` command; return its exit status.

    Examples
    --------
    >>> main(["grade", "no/such/file.toml"])
    2
    """
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ExerciseError, MemtheoryError, ValueError, OSError) as error:
        print(printable(f"memtheory {args.command}: {error}"), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
