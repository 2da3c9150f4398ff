"""Measure the zoo and the reference pairs on a GPU, beside memtheory's exact prediction.

For every model of :data:`memtheory.validation.ZOO` and :data:`memtheory.validation.PAIRS`
at fp32, bf16 and autocast-bf16 with Adam, one steady-state training step runs
on the GPU under :func:`memtheory.torch.measure`, which counts the live tensor
storages and reads the CUDA caching allocator's counters around each phase.
It prints, per step: the autograd convention's predicted peak, the measured
live peak, the same storages in 512-byte blocks, and the allocator's allocated
and reserved peaks (MiB). The zoo's predictions are converted from the modules
on the GPU, with the CUDA kernels' choices memtheory knows (a one-byte dropout
mask); the reference pairs' builders follow the CPU kernels. Where a CUDA
kernel keeps other tensors (fused attention, cuDNN) the live peak differs, and
the output lists by how much.

It then runs each recipe that fits one device (``memtheory.torch.recipe_steps``:
plain PyTorch in fp32 and under autocast, transformers' ``Trainer`` defaults,
Lightning's ``bf16-mixed``) on a tiny and a mid-size Llama-style decoder, with
eager and SDPA attention and, for the plain autocast loop, each AdamW
implementation: prediction, live peak, blocks and allocator peaks per step
(``--no-recipes`` skips them).

``--write [FOLDER]`` saves the results (default ``book/data/gpu``) as a JSON
file named after the GPU, the PyTorch version and the UTC time, with the driver, CUDA and
cuDNN versions; the book's chapter "Measuring memory on a GPU" reads it. An
existing file is kept unless ``--force``. ``--device cpu`` runs the same
recording on the CPU (no allocator columns), ``--quick`` only the MLP and the
GPT-2-style pair at fp32. Needs the torch extra and, for a GPU, a CUDA build of
PyTorch; without a GPU it says so and records nothing.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str]) -> int:
    """Record, print, and write when asked; 2 when asked to write without the device."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--write", nargs="?", const="book/data/gpu", default=None)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-recipes", action="store_true")
    options = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("skipped: benchmarks/cuda_zoo.py needs PyTorch (pip install 'memtheory[torch]').")
        return 0
    from memtheory.validation.gpu_measurements import (
        measurements_table,
        record_measurements,
        write_measurements,
    )

    if options.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"no CUDA GPU here (torch {torch.__version__}, CUDA build: "
            f"{torch.version.cuda or 'no'}): nothing measured, nothing written."
        )
        return 2 if options.write else 0
    start = time.perf_counter()
    if options.quick:
        data = record_measurements(
            options.device, models=["MLP", "GPT-2-style"], precisions=["fp32"]
        )
    else:
        data = record_measurements(options.device)
    if not options.no_recipes:
        from memtheory.torch.recipe_steps import TINY_LLAMA, record_recipe_steps

        sizes = {"tiny": (TINY_LLAMA, 2, 64)} if options.quick else None
        data["recipes"] = (
            record_recipe_steps(options.device, sizes=sizes) if sizes
            else record_recipe_steps(options.device)
        )
    print(measurements_table(data))
    print(f"{len(data['steps'])} steps measured in {time.perf_counter() - start:.1f} s")
    off = [
        (step["model"], step["precision"], step["measured"]["peak"] - step["predicted"]["peak"])
        for step in data["steps"]
        if "peak" in step["predicted"] and step["measured"]["peak"] != step["predicted"]["peak"]
    ]
    equal = len(data["steps"]) - len(off)
    print(f"live peak equal to the prediction in {equal} steps, different in {len(off)}")
    for model, precision, difference in off:
        print(f"  {model}, {precision}: measured - predicted = {difference:+,} bytes")
    for record in data.get("recipes", []):
        allocator = record["allocator"] or {}
        peak = allocator.get("peak_allocated")
        print(
            f"  recipe {record['recipe']}, {record['size']}: predicted "
            f"{record['predicted_peak']:,} B, live {record['measured_peak']:,} B"
            + (f", allocator peak {peak:,} B" if isinstance(peak, int) else "")
        )
    if options.write:
        print(f"written: {write_measurements(data, options.write, force=options.force)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
