"""What every benchmark prints the same way: CPU and wall time, the target, and a verdict.

* :func:`timed` runs one call several times and keeps each run's CPU and wall seconds;
  :func:`alternated` runs two calls A B A B ... so that a drift in the machine's speed
  falls on both alike.
* :func:`verdict` compares a figure with its target: ``met`` or ``missed by x%``.
* :func:`report` prints a figure's line with its target and verdict and, when
  ``MEMTHEORY_BENCH_SUMMARY`` names a file, appends the row to it as one JSON line;
  ``python benchmarks/_verdict.py FILE`` prints those rows as the summary table
  ``make bench`` ends with.
* :func:`skipped` says that a benchmark cannot run here (an optional package missing)
  and records that too.

CPU time (``time.process_time``: this process's user and system time) is what the
targets are for; wall time is printed beside it, since the machines are shared.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUMMARY = "MEMTHEORY_BENCH_SUMMARY"


@dataclass
class Timing:
    """CPU and wall seconds of each run of one call."""

    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def add(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` once, keep its times, return what it returned."""
        cpu, wall = time.process_time(), time.perf_counter()
        result = call()
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)
        return result

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall)

    def shown(self) -> str:
        """``0.412 s CPU, 0.950 s wall`` (medians), with the number of runs."""
        return (
            f"{seconds(self.median_cpu)} CPU, {seconds(self.median_wall)} wall "
            f"(median of {len(self.cpu)})"
        )


def timed(call: Callable[[], Any], repeat: int = 3, warmup: int = 1) -> Timing:
    """Time ``repeat`` runs of ``call`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    timing = Timing()
    for _ in range(repeat):
        timing.add(call)
    return timing


def alternated(
    first: Callable[[], Any], second: Callable[[], Any], repeat: int = 3
) -> tuple[Timing, Timing]:
    """Time two calls in turn, A B A B ..., ``repeat`` runs each (after one warm-up each)."""
    first()
    second()
    a, b = Timing(), Timing()
    for _ in range(repeat):
        a.add(first)
        b.add(second)
    return a, b


def seconds(value: float) -> str:
    """A duration in s, or in ms below 0.1 s."""
    return f"{value:.3f} s" if value >= 0.1 else f"{value * 1e3:.1f} ms"


def verdict(value: float, target: float, *, at_least: bool = False) -> str:
    """``met``, or ``missed by x%`` (how far past the target ``value`` is).

    ``at_least``: the target is a floor (a speed-up of at least 10x), not a ceiling.
    """
    if (value >= target) if at_least else (value <= target):
        return "met"
    missed = (target - value) / target if at_least else (value - target) / target
    return f"missed by {100 * missed:.0f}%"


def report(
    benchmark: str,
    what: str,
    value: float,
    target: float,
    *,
    unit: str = "s",
    at_least: bool = False,
    detail: str = "",
) -> str:
    """Print one figure beside its target with the verdict; record it for the summary."""
    said = verdict(value, target, at_least=at_least)
    shown = seconds(value) if unit == "s" else f"{value:.3g}{unit}"
    wanted = seconds(target) if unit == "s" else f"{target:.3g}{unit}"
    bound = ">=" if at_least else "<="
    print(f"{what}: {shown} (target {bound} {wanted}): {said}" + (f"; {detail}" if detail else ""))
    _record({"benchmark": benchmark, "what": what, "value": shown, "target": f"{bound} {wanted}",
             "verdict": said})
    return said


def option(argv: list[str], name: str, default: str) -> str:
    """Return the value after ``name`` in ``argv`` (``--repeat 3``), or ``default``."""
    return argv[argv.index(name) + 1] if name in argv[:-1] else default


def helped(argv: list[str], doc: str | None) -> bool:
    """Print the benchmark's docstring and return True where ``argv`` asks for help."""
    if "--help" in argv or "-h" in argv:
        print(doc)
        return True
    return False


def skipped(benchmark: str, why: str) -> None:
    """Say that ``benchmark`` cannot run here, and why; record it for the summary."""
    print(f"skipped: {why}")
    _record({"benchmark": benchmark, "what": "(all)", "value": "-", "target": "-",
             "verdict": f"skipped: {why}"})


def _record(row: dict[str, str]) -> None:
    path = os.environ.get(SUMMARY)
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")


def summary(path: Path) -> str:
    """The rows recorded in ``path`` as one table."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from memtheory.tables import Column, Table

    columns = [Column("benchmark"), Column("what"), Column("measured", align="right"),
               Column("target", align="right"), Column("verdict")]
    cells = [(r["benchmark"], r["what"], r["value"], r["target"], r["verdict"]) for r in rows]
    met = sum(r["verdict"] == "met" for r in rows)
    notes = [f"{met} of {len(rows)} targets met on this machine (CPU seconds unless said)."]
    return str(Table(columns, cells, title="make bench: every target", notes=notes))


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
