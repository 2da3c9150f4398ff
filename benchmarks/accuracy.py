"""How accurate is each convention? Predicted vs measured bytes of real PyTorch training steps.

For every zoo model (:data:`memtheory.torch.ZOO`: the StackExchange CNN, an MLP, a
VGG-style stack, the forum thread's net scaled down), every precision (fp32; bf16 as
``model.to(torch.bfloat16)``, which every convention can express; fp32 weights
under ``torch.autocast(bfloat16)``, which the rule of thumb and the breakdown
can only write as ``mixed-bf16``) and SGD, SGD with momentum and Adam
(PyTorch's default for-loop implementation on CPU), it measures one
steady-state training step on CPU (:func:`memtheory.torch.measure`) and prints,
per convention (rule of thumb, breakdown, autograd), predicted and measured
saved activations and peak live bytes in MiB (2^20 bytes) with the relative
error, and the error on weights, gradients and optimizer state together.

The issue's bar for the autograd convention, checked at the end: saved
activations within 1% and the training-step peak within 5% on every zoo model.
Run with ``make bench`` or ``python benchmarks/accuracy.py``; needs the torch
extra (``pip install "memtheory[torch]"``).
"""

from __future__ import annotations

import itertools
import sys
import time


def main() -> int:
    """Measure, predict, print the table and whether the autograd convention meets the bar."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: benchmarks/accuracy.py needs PyTorch (pip install 'memtheory[torch]').")
        return 0
    from memtheory.torch import ZOO, accuracy_table, compare_with_measurement
    from memtheory.torch.accuracy import OPTIMIZERS, PRECISIONS

    start = time.perf_counter()
    comparisons = [
        compare_with_measurement(model, precision=precision, optimizer=optimizer)
        for model, precision, optimizer in itertools.product(ZOO, PRECISIONS, OPTIMIZERS)
    ]
    elapsed = time.perf_counter() - start
    print(
        f"torch {torch.__version__}, CPU; sizes in MiB (2^20 bytes); error = (pred - meas) / meas"
    )
    print(accuracy_table(comparisons))
    worst_saved = max(abs(c.error("autograd", "saved activations")) for c in comparisons)
    worst_peak = max(abs(c.error("autograd", "peak")) for c in comparisons)
    ok = worst_saved <= 0.01 and worst_peak <= 0.05
    print(
        f"\nautograd convention, worst |error| over {len(comparisons)} steps: saved activations "
        f"{worst_saved:.4%} (bar 1%), peak {worst_peak:.4%} (bar 5%): {'met' if ok else 'MISSED'}"
    )
    print(f"{len(comparisons)} measured steps in {elapsed:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
