"""Folder grading throughput: `memtheory grade FOLDER` with --jobs 1 and --jobs 2 side by side.

A folder of ``--learners`` answer files (default 40), each answering every exercise of
``--sets`` (default ch02, ch03, ch04, ch06) for its own seed: a third right, a third with a
named mistake, a third wrong in no listed way (the slowest to grade: every misconception and
pair is tried). The same folder is graded with each ``--jobs`` value, results compared (they
must be the same rows), and files per second printed. Issue 24 measured 300 learners x 4 sets
in 4 min 40 s wall (73 s CPU) with one process. On a machine with N free cores, ``--jobs N``
should approach N times the throughput; on a loaded 2-core machine the gain is smaller.

Run: ``python benchmarks/grading.py [--learners 40] [--jobs 1 2] [--sets ch02 ch03]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from memtheory.exercises import load_sets
from memtheory.exercises.grading import grade_folder
from memtheory.exercises.model import _SHARED
from memtheory.tables import Column, Table


def _answer(variant: object, index: int) -> str:
    """A right answer, a named mistake's answer, or a wrong one, by the learner's number."""
    kind, expected = variant.kind, variant.expected  # type: ignore[attr-defined]
    if index % 3 == 0:
        return str(kind.solution_text(expected))
    mistaken = variant.mistaken_answers()  # type: ignore[attr-defined]
    if index % 3 == 1 and mistaken:
        return str(kind.solution_text(mistaken[0].value))
    return "7" if kind.name != "choice" else "a"


def write_folder(folder: Path, learners: int, set_ids: list[str]) -> None:
    """Write ``learners`` answer files for ``set_ids`` into ``folder``."""
    sets = load_sets()
    for index in range(learners):
        seed = f"learner-{index}"
        lines = [f"learner = {json.dumps(seed)}", f"seed = {json.dumps(seed)}", "[answers]"]
        for set_id in set_ids:
            for variant in sets[set_id].variants(seed):
                try:
                    text = _answer(variant, index)
                except Exception:  # an answer kind that cannot write this value: leave it out
                    continue
                lines.append(f"{json.dumps(variant.id)} = {json.dumps(text)}")
        (folder / f"learner{index:04d}.toml").write_text("\n".join(lines) + "\n")


def _cpu() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def main() -> None:
    """Grade one folder with each ``--jobs`` value and print the throughput of each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=40)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sets", nargs="+", default=["ch02", "ch03", "ch04", "ch06"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp) / "class"
        folder.mkdir()
        write_folder(folder, args.learners, args.sets)
        rows, first = [], None
        for jobs in args.jobs:
            _SHARED.clear()  # no answers remembered from writing the folder or the last run
            start, cpu = time.perf_counter(), _cpu()
            summary = grade_folder(folder, sets=args.sets, jobs=jobs)
            wall, own_cpu = time.perf_counter() - start, _cpu() - cpu
            text = summary.csv_text()
            first = first or text
            rows.append(
                (
                    f"--jobs {jobs}",
                    f"{args.learners}",
                    f"{wall:.1f}",
                    f"{args.learners / wall:.2f}",
                    f"{own_cpu:.1f}",
                    "yes" if text == first else "NO",
                )
            )
    columns = [
        Column("run"),
        Column("files", "right"),
        Column("wall s", "right"),
        Column("files/s", "right"),
        Column("CPU s", "right"),
        Column("same rows", "right"),
    ]
    title = (
        f"Grading a folder: {args.learners} learners x sets {', '.join(args.sets)} "
        f"({os.cpu_count()} CPUs seen)"
    )
    print(Table(columns, rows, title=title).text())


if __name__ == "__main__":
    main()
