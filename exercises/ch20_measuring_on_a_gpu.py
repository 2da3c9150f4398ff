"""Chapter 20, measuring on a GPU: the caching allocator's blocks, pools and segments."""

import sympy as sp

from memtheory.cuda_allocator import pool
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Number, Quantity
from memtheory.exercises.derivation import shown
from memtheory.exercises.step_log import took
from memtheory.exercises.steps_gpu import allocated_block, reserved_segment, small_segments

_POOLS = ("the small pool (2 MiB segments)", "the large pool")


def _which_pool(p, how):
    took("allocator_pool")
    chosen = shown(
        f"{p.rows} x {p.columns} fp32 values take 4 x {p.rows} x {p.columns} = "
        f"{4 * p.rows * p.columns:,} bytes; the small pool serves up to 1 MiB "
        "(1,048,576 bytes), so the pool is",
        pool(4 * p.rows * p.columns),
    )
    return _POOLS[chosen == "large"]


SET = ExerciseSet(
    id="ch20",
    title="Measuring memory on a GPU",
    intro="PyTorch's CUDA caching allocator rounds every request up to a multiple of 512 bytes "
    "(memory_allocated counts these blocks), serves requests of at most 1 MiB from 2 MiB "
    "segments and larger ones from 20 MiB segments (under 10 MiB) or from segments rounded up "
    "to 2 MiB (memory_reserved counts the segments). The CUDA context comes on top of both.",
    exercises=(
        Exercise(
            id="q1",
            title="one tensor's block",
            question="A fp32 tensor of {elements:,} elements is created on a GPU. By how many "
            "bytes does torch.cuda.memory_allocated() grow?",
            params={"elements": (1000, 10, 129, 3000, 100000)},
            answer=Integer(unit="B"),
            solve=lambda p, how: allocated_block(how, 4 * p.elements),
            misconceptions=("no_block_rounding",),
        ),
        Exercise(
            id="q2",
            title="the padding of a small tensor",
            question="How many bytes of padding does the caching allocator add to a fp16 tensor "
            "of {elements:,} elements (its block less its data)?",
            params={"elements": (1000, 10, 300, 2500, 77)},
            answer=Integer(unit="B"),
            solve=lambda p, how: shown(
                f"Padding: the block less the {2 * p.elements:,} bytes asked for",
                allocated_block(how, 2 * p.elements) - 2 * p.elements,
            ),
            misconceptions=("no_block_rounding",),
        ),
        Exercise(
            id="q3",
            title="which pool",
            question="From which pool does the caching allocator serve a fp32 tensor of shape "
            "({rows}, {columns})?",
            params={"rows": (512, 256, 1024, 64), "columns": (512, 1024, 768, 2048)},
            answer=Choice(_POOLS),
            solve=_which_pool,
        ),
        Exercise(
            id="q4",
            title="what the first tensor reserves",
            question="On a fresh process, the first tensor created on the GPU is fp32 with "
            "{elements:,} elements. How much does torch.cuda.memory_reserved() show? Answer in "
            "MiB.",
            params={"elements": (1_000_000, 1000, 3_000_000, 50_000_000, 200_000)},
            answer=Quantity("MiB"),
            solve=lambda p, how: reserved_segment(how, 4 * p.elements),
            misconceptions=("reserved_is_allocated",),
        ),
        Exercise(
            id="q5",
            title="many small tensors",
            question="A model creates {count:,} fp32 tensors of {elements:,} elements each on a "
            "GPU and keeps them all. What is torch.cuda.memory_allocated() then, in bytes?",
            params={"count": (1000, 200, 5000), "elements": (1000, 10, 129, 3000)},
            answer=Integer(unit="B"),
            solve=lambda p, how: shown(
                f"{p.count:,} blocks", p.count * allocated_block(how, 4 * p.elements)
            ),
            misconceptions=("no_block_rounding",),
        ),
        Exercise(
            id="q6",
            title="small segments",
            question="{count:,} fp32 tensors of {elements:,} elements each are created and kept "
            "(no other tensors). If their blocks pack the small pool's 2 MiB segments without "
            "gaps, how many segments does the allocator reserve?",
            params={"count": (5000, 1000, 200), "elements": (129, 1000, 10, 3000)},
            answer=Integer(),
            solve=lambda p, how: small_segments(how, p.count, 4 * p.elements),
            misconceptions=("no_block_rounding",),
        ),
        Exercise(
            id="q7",
            title="rounding's share",
            question="What percentage of torch.cuda.memory_allocated() is padding when every "
            "tensor is fp32 with {elements:,} elements?",
            params={"elements": (10, 129, 1000, 3000)},
            answer=Number(what="a percentage", percent=True),
            solve=lambda p, how: shown(
                f"Padding's share: 100 x (block - {4 * p.elements:,}) / block, in percent",
                100
                * sp.Rational(
                    allocated_block(how, 4 * p.elements) - 4 * p.elements,
                    allocated_block(how, 4 * p.elements),
                ),
            ),
        ),
    ),
)
