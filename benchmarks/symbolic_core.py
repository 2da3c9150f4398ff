"""Benchmark the symbolic core: deriving VGG-16's training memory, and million-point grids.

Prints, for this machine, CPU and wall time, each figure's target and verdict:

* building VGG-16 with symbolic batch ``B`` and image size ``H`` and deriving its
  training total (breakdown convention, Adam, fp32): the first call (sympy's caches
  empty) and the median of the rest; target < 1 s each;
* compiling that total and evaluating it over a 1000 x 1000 grid of (batch, image size)
  in checked int64, cold (compiled afresh) and warm; target < 1 s each;
* ``evaluate_grid`` of Llama-3-8B's exact peak (LoRA 16, the autograd convention: a
  maximum of many moments) over 10^6 (batch, sequence) points, compiled once, beside
  sympy's own ``lambdify`` of the same expression, run alternately; target < 0.1 s
  (issue 26).

Every grid is checked against exact evaluation at a few points. Run with ``make bench``
or ``python benchmarks/symbolic_core.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp

from memtheory import evaluate, training_memory
from memtheory.estimate import estimate
from memtheory.evaluation import evaluate_grid
from memtheory.evaluation.integer_code import IntegerNumPyPrinter
from memtheory.evaluation.numpy_code import numpy_function
from memtheory.models import vgg16
from memtheory.symbols import H

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _verdict import Timing, alternated, report  # noqa: E402

NAME = "symbolic_core"
REPEATS = 5


def derive_total() -> sp.Expr:
    """Build VGG-16 over (B, H) and derive its Adam training total."""
    return training_memory(vgg16(image_size=H), optimizer="adam").total


def first_and_rest(call) -> tuple[Timing, Timing, object]:
    """Time the first call apart from the following ones; return both and the last result."""
    first, rest = Timing(), Timing()
    result = first.add(call)
    for _ in range(REPEATS - 1):
        result = rest.add(call)
    return first, rest, result


def main() -> None:
    """Run every measurement and print it beside its target."""
    cold, warm, total = first_and_rest(derive_total)
    print(f"VGG-16 symbolic total, first call: {cold.shown()}; then {warm.shown()}")
    report(NAME, "VGG-16 symbolic total, first call", cold.median_cpu, 1.0)
    report(NAME, "VGG-16 symbolic total, warm", warm.median_cpu, 1.0)

    batch = np.arange(1, 1001).reshape(-1, 1)
    size = np.arange(32, 1032).reshape(1, -1)

    def afresh():
        numpy_function.cache_clear()
        return evaluate_grid(total, B=batch, H=size)

    compiled, _, grid = first_and_rest(afresh)
    reused = Timing()
    for _ in range(REPEATS):
        grid = reused.add(lambda: evaluate_grid(total, B=batch, H=size))
    for b, h in ((1, 32), (64, 224), (1000, 1031)):
        assert grid[b - 1, h - 32] == evaluate(total, B=b, H=h)
    print(f"VGG-16 total over 10^6 points, compiled afresh: {compiled.shown()}; "
          f"compiled once: {reused.shown()}")
    report(NAME, "VGG-16 total grid 10^6, compiled afresh", compiled.median_cpu, 1.0)
    report(NAME, "VGG-16 total grid 10^6, compiled once", reused.median_cpu, 1.0)

    peak = estimate("llama-3-8b", sequence=4096, lora=16).symbolic.peak
    symbols = sorted(peak.free_symbols, key=lambda s: s.name)
    sequence = np.arange(1, 1001).reshape(1, -1)
    plain = sp.lambdify(symbols, peak, modules="numpy", printer=IntegerNumPyPrinter)
    ours, theirs = alternated(
        lambda: evaluate_grid(peak, B=batch, S=sequence), lambda: plain(batch, sequence),
        repeat=REPEATS,
    )
    assert np.array_equal(evaluate_grid(peak, B=batch, S=sequence), plain(batch, sequence))
    for b, s in ((1, 1), (4, 96), (1000, 1000)):
        assert evaluate_grid(peak, B=b, S=s) == evaluate(peak, B=b, S=s)
    print("Llama-3-8B exact peak (a maximum of the moments of its step) over 10^6 points: "
          f"evaluate_grid {ours.shown()}; sympy's lambdify {theirs.shown()}")
    report(NAME, "evaluate_grid 10^6 points, exact peak", ours.median_cpu, 0.1,
           detail=f"{theirs.median_cpu / ours.median_cpu:.2f}x sympy's lambdify, same integers")


if __name__ == "__main__":
    main()
