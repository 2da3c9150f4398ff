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

The parser is built here, and each subcommand's work is imported only when it
runs: the grader's five from :mod:`memtheory.cli.exercise_commands` (which
imports :mod:`memtheory.exercises`), ``estimate`` and ``serve`` from
:mod:`memtheory.estimate` (whose parsers are built here too). So
``memtheory estimate`` never loads the grader. An ``estimate`` or ``serve``
question asked before is answered from the cache
(:mod:`memtheory.estimate.answer_cache`) before the parser is built: no sympy
is imported, nothing derived.

Examples
--------
>>> main(["sets"])  # doctest: +ELLIPSIS
ch01  Why memory runs out ...
0
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from memtheory._collector import collect_less_often
from memtheory.cli.result_paths import (
    default_exercises_path,
    default_folder_paths,
    default_result_path,
)
from memtheory.errors import MemtheoryError

__all__ = [
    "build_parser",
    "console",
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


def _jobs(text: str) -> int:
    """Read ``--jobs``: a whole number from 1 to 64."""
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number, got {text!r}") from None
    if not 1 <= jobs <= 64:
        raise argparse.ArgumentTypeError(f"--jobs takes 1 to 64 processes, got {jobs}")
    return jobs


def _exercise_command(name: str) -> Callable[[argparse.Namespace], int]:
    """Return what runs ``memtheory NAME``, a function of :mod:`memtheory.cli.exercise_commands`.

    The grader is imported when the subcommand runs, not when the parser is built, so that
    ``memtheory estimate`` and ``serve`` start without it (issue 26).

    Examples
    --------
    >>> _exercise_command("sets").__name__
    'sets'
    """

    def run(args: argparse.Namespace) -> int:
        from memtheory.cli import exercise_commands

        command: Callable[[argparse.Namespace], int] = getattr(exercise_commands, name)
        return command(args)

    run.__name__ = run.__qualname__ = name
    return run


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
    grade.set_defaults(run=_exercise_command("grade"))

    questions = commands.add_parser("questions", help="print the questions of a learner's variant")
    common(questions)
    questions.add_argument("--seed", help="seed of the variants")
    questions.add_argument("--learner", help="learner id; the seed is derived from it")
    questions.add_argument(
        "--solutions",
        action="store_true",
        help="show each worked solution, step by step, and its answer (for teachers)",
    )
    questions.set_defaults(run=_exercise_command("questions"))

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
    template.set_defaults(run=_exercise_command("template"))

    sets = commands.add_parser("sets", help="list the exercise sets")
    sets.add_argument("--sets", metavar="DIR", help="folder of exercise sets")
    sets.set_defaults(run=_exercise_command("sets"))

    misconceptions = commands.add_parser(
        "misconceptions", help="list the misconceptions the grader recognises"
    )
    misconceptions.set_defaults(run=_exercise_command("misconceptions"))
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
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] in (["estimate"], ["serve"]):
        return _answer(arguments)
    return _run(build_parser().parse_args(arguments))


FAST_EXIT = frozenset({"estimate", "serve"})
"""The subcommands whose process :func:`console` ends without tearing Python down."""


def console() -> NoReturn:
    """Run the ``memtheory`` command installed on the PATH: :func:`main`, then exit.

    ``memtheory estimate`` and ``serve`` exit at once when they have answered:
    their output is flushed, every file they keep (the caches) is already
    written and closed, and no thread, process or exit handler of theirs is
    left, so the interpreter is not torn down. Tearing it down frees every
    sympy object and cache one by one, about a fifth of a cached answer's
    whole time (issue 26). An error still raises as it would; every other
    subcommand exits through :func:`sys.exit`.
    """
    arguments = sys.argv[1:]
    collect_less_often()
    status = main(arguments)
    if arguments[:1] and arguments[0] in FAST_EXIT:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or broken stream: Python reports it as usual
            sys.exit(status)
        os._exit(status)
    sys.exit(status)


def _answer(arguments: list[str]) -> int:
    """Run ``memtheory estimate`` or ``serve``: a question asked before is answered from the cache.

    The cache is looked up before the parser is built (whose help lists the
    models, which imports sympy): only a command line that parsed and ran is kept.
    """
    from memtheory.estimate.answer_cache import answered

    if arguments[0] == "estimate":  # `estimate MODEL --serve ...` is `serve MODEL ...`
        from memtheory.estimate.serve_command import main_serve, serve_instead

        served = serve_instead(arguments[1:])
        if served is not None:
            return answered("estimate --serve", served,
                            lambda: main_serve(served, asked_as="estimate --serve"))
    return answered(arguments[0], arguments[1:],
                    lambda: _run(build_parser().parse_args(arguments)))


def _run(args: argparse.Namespace) -> int:
    """Run the parsed subcommand; a memtheory error is a message and exit status 2."""
    try:
        return args.run(args)
    except (MemtheoryError, ValueError, OSError) as error:  # the grader's errors are ours too
        from memtheory.exercises.safe_text import printable  # on error only: see _exercise_command

        print(printable(f"memtheory {args.command}: {error}"), file=sys.stderr)
        return 2

