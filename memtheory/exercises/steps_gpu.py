"""Steps of chapter 20 (measuring on a GPU), and the misconceptions that do one of them wrong.

The steps apply the caching allocator's documented rules
(:mod:`memtheory.cuda_allocator`); a misconception overrides one step, as in
:mod:`memtheory.exercises.technique_steps`. Importing this module registers
them in :data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`.

Examples
--------
>>> from memtheory.exercises.reasoning import CORRECT
>>> allocated_block(CORRECT, 4000), reserved_segment(CORRECT, 4000)
(4096, 2097152)
>>> allocated_block(MISCONCEPTIONS["no_block_rounding"].ways[0], 4000)
4000
"""

from __future__ import annotations

import sympy as sp

from memtheory.cuda_allocator import SMALL_SEGMENT, block_size, segment_size
from memtheory.exercises.derivation import shown
from memtheory.exercises.misconceptions import (  # noqa: F401 (MISCONCEPTIONS: the doctests)
    MISCONCEPTIONS,
    Misconception,
    register,
)
from memtheory.exercises.reasoning import Reasoning, own_step

__all__ = ["allocated_block", "reserved_segment", "small_segments"]

_SEGMENT_RULE = "2 MiB up to 1 MiB, 20 MiB up to 10 MiB, else rounded up to 2 MiB"


def allocated_block(how: Reasoning, nbytes: int) -> int:
    """Return the bytes ``torch.cuda.memory_allocated`` counts for a request (its block)."""
    own = own_step(how, "block_bytes")
    if own:
        return int(own(nbytes))
    return shown(
        f"The allocator's block for {nbytes:,} bytes: rounded up to a multiple of 512, "
        f"512 x ceil({nbytes:,} / 512) bytes",
        block_size(nbytes),
    )


def reserved_segment(how: Reasoning, nbytes: int) -> int:
    """Return the bytes reserved from the driver when the request opens a segment."""
    own = own_step(how, "segment_bytes")
    if own:
        return int(own(nbytes))
    return shown(
        f"A request of {nbytes:,} bytes opens a segment of ({_SEGMENT_RULE}), in bytes",
        segment_size(nbytes),
    )


def small_segments(how: Reasoning, count: int, nbytes: int) -> int:
    """Return the 2 MiB segments ``count`` small requests of ``nbytes`` fill, packed without gaps.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> small_segments(CORRECT, 1000, 4000)
    2
    """
    block = allocated_block(how, nbytes)
    return shown(
        f"{count:,} blocks of {block:,} bytes packed into 2 MiB segments: "
        f"ceil({count:,} x {block:,} / {SMALL_SEGMENT:,})",
        int(sp.ceiling(sp.Rational(count * block, SMALL_SEGMENT))),
    )


class _Unrounded(Reasoning):
    detail = "the request's own bytes counted, not the 512-byte blocks"

    def block_bytes(self, nbytes: int) -> int:
        return nbytes


class _SegmentIsBlock(Reasoning):
    detail = "the reserved memory taken to be the block itself"

    def segment_bytes(self, nbytes: int) -> int:
        return allocated_block(self, nbytes)


GPU_MISCONCEPTIONS = (
    Misconception(
        "no_block_rounding",
        "forgot the allocator's 512-byte rounding",
        "PyTorch's CUDA caching allocator hands out blocks in multiples of 512 bytes: round every "
        "request up to the next multiple of 512.",
        (_Unrounded(),),
    ),
    Misconception(
        "reserved_is_allocated",
        "took the reserved memory to be the allocated block",
        "The allocator reserves whole segments from the driver (2 MiB for requests up to 1 MiB, "
        "20 MiB up to 10 MiB, the request rounded to 2 MiB beyond) and keeps them cached.",
        (_SegmentIsBlock(),),
    ),
)


register(GPU_MISCONCEPTIONS)
