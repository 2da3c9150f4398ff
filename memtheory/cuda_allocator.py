"""PyTorch's CUDA caching allocator's documented sizes: block rounding, pools and segments.

A model of the rules, not a measurement. PyTorch's caching allocator
(``c10/cuda/CUDACachingAllocator.cpp``; described in the PyTorch
documentation, "CUDA semantics: memory management") serves every tensor from
*segments* it reserves from the driver with ``cudaMalloc`` and keeps them for
reuse after the tensors are freed. With the default settings:

* a request is rounded up to a multiple of 512 bytes (``kMinBlockSize``),
  and to 512 bytes at least;
* requests of at most 1 MiB (``kSmallSize``) come from the *small* pool,
  whose segments are 2 MiB (``kSmallBuffer``);
* larger requests come from the *large* pool: under 10 MiB
  (``kMinLargeAlloc``) from a 20 MiB segment (``kLargeBuffer``), from 10 MiB
  on from a segment of the request rounded up to 2 MiB (``kRoundLarge``).

``torch.cuda.memory_allocated`` counts the rounded blocks, and
``torch.cuda.memory_reserved`` the segments; neither counts the CUDA context.
Options such as ``expandable_segments`` or ``roundup_power2_divisions``
(``PYTORCH_CUDA_ALLOC_CONF``) change these rules and are not modelled.

Examples
--------
>>> block_size(4), block_size(512), block_size(1000)
(512, 512, 1024)
>>> pool(2**20), pool(2**20 + 1)
('small', 'large')
>>> [segment_size(n) // 2**20 for n in (100, 5 * 2**20, 11 * 2**20 + 1)]
[2, 20, 12]
"""

from __future__ import annotations

from typing import Literal

from memtheory.errors import InvalidArgumentError

__all__ = [
    "LARGE_SEGMENT",
    "MIN_BLOCK",
    "MIN_LARGE_ALLOC",
    "ROUND_LARGE",
    "SMALL_SEGMENT",
    "SMALL_SIZE",
    "block_size",
    "pool",
    "segment_size",
]

MIN_BLOCK = 512
"""Every block is a multiple of 512 bytes (``kMinBlockSize``)."""
SMALL_SIZE = 2**20
"""The largest request served by the small pool: 1 MiB (``kSmallSize``)."""
SMALL_SEGMENT = 2 * 2**20
"""A small-pool segment: 2 MiB (``kSmallBuffer``)."""
MIN_LARGE_ALLOC = 10 * 2**20
"""Large requests below 10 MiB share a 20 MiB segment (``kMinLargeAlloc``)."""
LARGE_SEGMENT = 20 * 2**20
"""The segment for large requests below :data:`MIN_LARGE_ALLOC`: 20 MiB (``kLargeBuffer``)."""
ROUND_LARGE = 2 * 2**20
"""Larger segments are rounded up to a multiple of 2 MiB (``kRoundLarge``)."""


def _bytes(nbytes: object) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise InvalidArgumentError(
            f"a request is a whole number of bytes, 0 or more, got {nbytes!r}."
        )
    return nbytes


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def block_size(nbytes: int) -> int:
    """Return the bytes the allocator hands out for a request of ``nbytes``.

    Rounded up to a multiple of :data:`MIN_BLOCK`, and at least one block
    (a 0-byte tensor takes no block in PyTorch; here it gets 512, the rule's
    floor, so ask only about tensors with storage).

    Examples
    --------
    >>> block_size(1), block_size(513), block_size(4 * 1000)
    (512, 1024, 4096)
    """
    return max(MIN_BLOCK, _round_up(_bytes(nbytes), MIN_BLOCK))


def pool(nbytes: int) -> Literal["small", "large"]:
    """Return the pool a request of ``nbytes`` is served from: ``"small"`` up to 1 MiB.

    Examples
    --------
    >>> pool(4096), pool(4 * 2**20)
    ('small', 'large')
    """
    return "small" if block_size(nbytes) <= SMALL_SIZE else "large"


def segment_size(nbytes: int) -> int:
    """Return the bytes reserved from the driver when ``nbytes`` needs a new segment.

    2 MiB for a small request, 20 MiB for a large one under 10 MiB, and the
    rounded request rounded up to 2 MiB from 10 MiB on. Later requests fill
    the rest of a segment before another is reserved.

    Examples
    --------
    >>> segment_size(3 * 2**20) == LARGE_SEGMENT, segment_size(50 * 2**20 + 1) // 2**20
    (True, 52)
    """
    size = block_size(nbytes)
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return _round_up(size, ROUND_LARGE)
