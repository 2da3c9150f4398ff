"""Hostile input against the grader and the byte parser: how many tried, how long, what came out.

A seeded campaign (the same inputs every run) of texts a careless or adversarial learner could
write: the cases of issue 12 (towers of powers, ``1e99999999 GB``, five thousand nines, CSV
formulas, terminal escapes), random arithmetic with deep nesting and huge literals, random
characters, and folders of submissions holding pipes, device links, links out of the folder,
huge and broken files. Each input runs under a hang guard; the script prints how many inputs
were tried, how many hung, raised a raw (non-memtheory) error or changed a learner's file, and
the slowest and median times.

Run: ``python benchmarks/hostile_input.py [--inputs N] [--folders N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import memtheory as mt
from memtheory.cli import main
from memtheory.errors import MemtheoryError
from memtheory.exercises import find_variant, grade_variant
from memtheory.exercises.kinds import Choice, Expression, Integer, Number, Quantity
from memtheory.symbols import B, H

GUARD = 30.0
ISSUE_TEXTS = [
    "((((9**64)**64)**64)**64)",
    "(((((9**64)**64)**64)**64)**64)",
    "1014080*B + ((B+1)**64)**64 - ((B**2+2*B+1)**32)**64",
    "1e99999999 GB",
    "9" * 5000 + " B",
    "524k",
    "3 x 10^6",
    "4096*128+128",
    "896.",
    "~14741 MiB",
    "99.68 percent",
    "14741.48 MB",
    "0.9968",
    '=HYPERLINK("http://example.invalid")',
    "ada\x1b[2J\n",
]
ATOMS = [
    "0",
    "1",
    "7",
    "1,048,576",
    "1 048 576",
    ".5",
    "1e100",
    "1e-100",
    "9" * 90,
    "B",
    "H",
    "x",
    "B",
    "H",
    "2",
    "3",
]
OPERATORS = ["+", "-", "*", "/", "**", "^", " x ", "×", "", ",", "//"]
WELL_FORMED = ["+", "-", "*", "/", " "]
FUNCTIONS = ["floor", "ceil", "Min", "Max", "exec", "__import__"]
UNITS = ["", " B", " MiB", " MB", " GiB", " k", " %", " percent", " parsecs"]


def random_formula(rng: random.Random, depth: int = 0) -> str:
    """A random formula, more often nested deeper, with towers of powers."""
    if depth > 6 or rng.random() < 0.25:
        return rng.choice(ATOMS)
    choice = rng.random()
    if choice < 0.4:
        operator = rng.choice(WELL_FORMED if rng.random() < 0.7 else OPERATORS)
        return random_formula(rng, depth + 1) + operator + random_formula(rng, depth + 1)
    if choice < 0.6:
        return f"({random_formula(rng, depth + 1)})**{rng.choice([2, 64, 65, 4096, -3])}"
    if choice < 0.8:
        return f"{rng.choice(FUNCTIONS)}({random_formula(rng, depth + 1)})"
    return "(" * rng.randint(1, 60) + random_formula(rng, depth + 1) + ")" * rng.randint(1, 60)


def random_text(rng: random.Random) -> str:
    """One hostile text: an issue case, a random formula with a unit, or random characters."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(ISSUE_TEXTS)
    if roll < 0.8:
        return random_formula(rng) + rng.choice(UNITS)
    alphabet = "0123456789.,e+-*/^() xBHM%~\x1b\n\u202e"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))


class Tally:
    """Counts and times per kind of input, and every bad outcome."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self.hung: list[str] = []
        self.raw: list[str] = []
        self.changed: list[str] = []

    def run(self, what: str, call):
        """Run ``call`` under the hang guard and classify what came out."""
        box: dict[str, object] = {}

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as error:  # noqa: BLE001 - classified below
                box["value"] = error

        start = time.perf_counter()
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(GUARD)
        self.times[what].append(time.perf_counter() - start)
        if thread.is_alive():
            self.hung.append(what)
            return None
        value = box["value"]
        if isinstance(value, BaseException) and not isinstance(value, MemtheoryError):
            self.raw.append(f"{what}: {type(value).__name__}: {value}")
        return value


def fingerprint(folder: Path) -> list[tuple[str, str]]:
    """Name and content hash (or link target) of every entry of a folder."""
    entries = []
    for path in sorted(folder.iterdir()):
        if path.is_symlink():
            entries.append((path.name, os.readlink(path)))
        elif path.is_file():
            entries.append((path.name, hashlib.sha256(path.read_bytes()).hexdigest()))
        else:
            entries.append((path.name, "other"))
    return entries


def random_folder(rng: random.Random, folder: Path, outside: Path) -> None:
    """Fill a folder with a few hostile submissions."""
    for index in range(rng.randint(1, 6)):
        stem = rng.choice(["a", "=b", "c\x1b", "d"])
        name = f"{stem}{index}.toml"
        roll = rng.random()
        path = folder / name
        if roll < 0.08:
            os.mkfifo(path)
        elif roll < 0.14:
            path.symlink_to("/dev/zero")
        elif roll < 0.2:
            path.symlink_to(outside)
        elif roll < 0.25:
            path.write_bytes(b"#" * ((1 << 20) + 1))
        elif roll < 0.3:
            path.write_bytes(rng.randbytes(200))
        else:
            learner = rng.choice(["ada", "ADA", '=HYPERLINK("x")', "-x", "eve\x1b[2J\n"])
            sets = rng.choice(["", 'sets = ["ch02", "ch99"]\n', 'sets = ["ch03"]\n'])
            answers = "".join(
                f"{json.dumps(rng.choice(['ch02.q1', 'ch02.q9', 'ch03.q6', 'ch01.q1']))} = "
                f"{json.dumps(random_text(rng))}\n"
                for _ in range(rng.randint(0, 3))
            )
            path.write_text(f"learner = {json.dumps(learner)}\n{sets}[answers]\n{answers}")


def campaign(inputs: int, folders: int, seed: int) -> Tally:
    """Run the whole campaign and return the tally."""
    rng = random.Random(seed)
    tally = Tally()
    kinds = [
        Integer(),
        Number(),
        Number(percent=True),
        Quantity("MiB"),
        Expression((B, H)),
        Choice(("SGD", "Adam")),
    ]
    variants = [find_variant(i) for i in ("ch02.q1", "ch01.q1", "ch02.q9", "ch04.q5", "ch06.q7")]
    texts = ISSUE_TEXTS + [random_text(rng) for _ in range(inputs)]
    for text in texts:
        tally.run("parse_bytes", lambda text=text: mt.parse_bytes(text))
        for kind in kinds:
            tally.run("answer parsed", lambda kind=kind, text=text: kind.parse(text))
        variant = rng.choice(variants)
        tally.run("answer graded", lambda variant=variant, text=text: grade_variant(variant, text))
    for _ in range(folders):
        with tempfile.TemporaryDirectory() as root:
            base = Path(root)
            folder = base / "submissions"
            folder.mkdir()
            outside = base / "secret.toml"
            outside.write_text('learner = "secret"\n')
            random_folder(rng, folder, outside)
            before = fingerprint(folder)
            quiet = (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            )
            with quiet[0], quiet[1]:
                code = tally.run("folder graded", lambda f=folder: main(["grade", str(f)]))
            if fingerprint(folder) != before or outside.read_text() != 'learner = "secret"\n':
                tally.changed.append(str(folder))
            outcome = folder_outcome(code, base / "submissions.grades.json")
            if outcome is not None:
                tally.raw.append(f"folder graded: {outcome}")
    return tally


def folder_outcome(code: object, results: Path) -> str | None:
    """What is wrong with a folder's grading, or None where it kept the grader's promise.

    ``memtheory grade FOLDER`` exits 0 when every file was graded and 1 when some
    could not be, each of those a row of the results with its reason (the
    command's documented exit status); either way the results are written.
    """
    if not results.exists():
        return f"exit {code}, results missing"
    rows = json.loads(results.read_text(encoding="utf-8"))["files"]
    refused = [row["file"] for row in rows if row["error"] is not None]
    if any(row["reason"] is None for row in rows if row["error"] is not None):
        return f"exit {code}, a file refused without a reason"
    if code != (1 if refused else 0):
        return f"exit {code} with {len(refused)} file(s) refused"
    return None


def report(tally: Tally) -> str:
    """The tally as text."""
    lines = []
    total = sum(len(v) for v in tally.times.values())
    for what, times in tally.times.items():
        lines.append(
            f"{what:15} {len(times):6} inputs   median {statistics.median(times) * 1e3:7.2f} ms   "
            f"slowest {max(times) * 1e3:8.1f} ms"
        )
    lines.append(
        f"{total} hostile inputs tried: {len(tally.hung)} hung, {len(tally.raw)} raised a raw "
        f"error, {len(tally.changed)} changed a learner's file."
    )
    lines += [f"  raw: {r}" for r in tally.raw[:10]]
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> int:
    """Run the campaign and print the report; the exit status says whether all went well."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=400, help="random texts (default 400)")
    parser.add_argument("--folders", type=int, default=20, help="random folders (default 20)")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    tally = campaign(args.inputs, args.folders, args.seed)
    print(report(tally))
    return 0 if not (tally.hung or tally.raw or tally.changed) else 1


if __name__ == "__main__":
    sys.exit(run())
