"""Benchmark the symbolic core: deriving VGG-16's training memory, and a million-point grid.

Prints, for this machine:

* the time to build VGG-16 with symbolic batch ``B`` and image size ``H`` and
  derive its training total (breakdown convention, Adam, fp32);
* the time to compile that total and evaluate it over a 1000 x 1000 grid of
  (batch, image size), in checked int64, and the same grid's agreement with
  exact evaluation at a few points.

Targets: under 1 s each. Run with ``make bench`` or ``python benchmarks/symbolic_core.py``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from memtheory import evaluate, training_memory
from memtheory.evaluation import _NUMPY_CACHE, evaluate_grid
from memtheory.models import vgg16
from memtheory.symbols import H

REPEATS = 5
TARGET_SECONDS = 1.0


def derive_total():
    """Build VGG-16 over (B, H) and derive its Adam training total."""
    return training_memory(vgg16(image_size=H), optimizer="adam").total


def grid_total(total, batch, size):
    """Compile (fresh, no cache) and evaluate the total over the grid."""
    _NUMPY_CACHE.clear()
    return evaluate_grid(total, B=batch, H=size)


def timed(function, *args):
    """Wall time of the first (cold: sympy's caches empty) call, median of the rest, last result."""
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = function(*args)
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[1:]), result


def main() -> None:
    """Run both measurements and print them with their targets."""
    derive_cold, derive_warm, total = timed(derive_total)
    batch = np.arange(1, 1001).reshape(-1, 1)
    size = np.arange(32, 1032).reshape(1, -1)
    grid_cold, grid_warm, grid = timed(grid_total, total, batch, size)
    for b, h in ((1, 32), (64, 224), (1000, 1031)):
        assert grid[b - 1, h - 32] == evaluate(total, B=b, H=h)
    print(
        f"VGG-16 symbolic training total (Adam, fp32, symbols B and H): "
        f"{derive_cold:.3f} s cold, {derive_warm:.3f} s warm (target < {TARGET_SECONDS} s)"
    )
    print(
        f"compile + evaluate over {grid.size:,} (batch, image size) points, int64 checked: "
        f"{grid_cold:.3f} s cold, {grid_warm:.3f} s warm (target < {TARGET_SECONDS} s)"
    )
    print(
        f"largest total on the grid: {grid.max() / 2**30:,.1f} GiB (batch 1000, 1031x1031 images)"
    )


if __name__ == "__main__":
    main()
