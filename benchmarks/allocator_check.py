"""measure() beside the CPU allocator's own count, for every zoo model and reference pair.

For each model at fp32, bf16 and autocast-bf16 with Adam, one steady-state
training step is counted twice on the CPU: by :func:`memtheory.torch.measure`
(live tensor storages, followed through a dispatch mode) and by PyTorch's
memory profiler (every allocation and free of the CPU allocator, with no
dispatch mode), through :func:`memtheory.torch.check_against_allocator`. It
prints both peaks above what is allocated after ``zero_grad``, and the bytes
the allocator counted beyond the storages (kernels' own buffers, Python
numbers wrapped as tensors). The bar, checked at the end: no step where
``measure`` counts more than the allocator handed out. Needs the torch extra.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    """Count every step both ways, print the table, and return 1 if measure over-counts."""
    try:
        import torch
    except ImportError:
        print(
            "skipped: benchmarks/allocator_check.py needs PyTorch (pip install 'memtheory[torch]')."
        )
        return 0
    from memtheory.tables import Column, Table
    from memtheory.torch import check_against_allocator
    from memtheory.validation import PAIRS, ZOO

    settings = {
        "fp32": (torch.float32, None),
        "bf16": (torch.bfloat16, None),
        "autocast-bf16": (torch.float32, torch.bfloat16),
    }
    rows, over = [], []
    start = time.perf_counter()
    for name, entry in [*ZOO.items(), *PAIRS.items()]:
        for label, (dtype, autocast) in settings.items():
            if name in ZOO:
                module, (x, y) = entry.module(dtype), entry.batch(dtype)
                loss = torch.nn.CrossEntropyLoss()
            else:
                module, (x, y), loss = entry.build_module(dtype), entry.batch(dtype), entry.loss
            check = check_against_allocator(
                module,
                x,
                loss,
                torch.optim.Adam(module.parameters()),
                target=y,
                autocast=autocast,
            )
            share = 100 * check.unseen / check.allocator if check.allocator else 0.0
            rows.append(
                (
                    name,
                    label,
                    f"{check.storages:,}",
                    f"{check.allocator:,}",
                    f"{check.unseen:,}",
                    f"{share:.2f}",
                )
            )
            if check.unseen < 0:
                over.append((name, label, check.unseen))
    print(f"torch {torch.__version__}, CPU, Adam; bytes above what is allocated after zero_grad")
    print(
        Table(
            [
                "model",
                "precision",
                Column("measure", "right"),
                Column("CPU allocator", "right"),
                Column("unseen", "right"),
                Column("unseen (%)", "right"),
            ],
            rows,
        )
    )
    print(f"{len(rows)} steps counted twice in {time.perf_counter() - start:.1f} s")
    print(f"steps where measure counts more than the allocator: {len(over)} (bar: 0)")
    for name, label, unseen in over:
        print(f"  {name}, {label}: {unseen:+,} bytes")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
