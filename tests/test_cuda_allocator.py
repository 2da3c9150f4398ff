"""memtheory.cuda_allocator: the caching allocator's documented rules, case by case.

The rules are PyTorch's, stated in c10/cuda/CUDACachingAllocator.cpp (kMinBlockSize = 512,
kSmallSize = 1 MiB, kSmallBuffer = 2 MiB, kLargeBuffer = 20 MiB, kMinLargeAlloc = 10 MiB,
kRoundLarge = 2 MiB) and in the PyTorch documentation's "CUDA semantics: memory management".
Each expected value below is derived from those rules in the test, not read from the module.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memtheory as mt
from memtheory.cuda_allocator import block_size, pool, segment_size

MIB = 2**20


@pytest.mark.parametrize(
    ("request_bytes", "block"),
    [(1, 512), (511, 512), (512, 512), (513, 1024), (4 * 1000, 4096), (MIB + 1, MIB + 512)],
)
def test_blocks_are_multiples_of_512(request_bytes, block):
    """A request is rounded up to the next multiple of 512, 512 at least."""
    assert block_size(request_bytes) == block


@given(st.integers(min_value=1, max_value=2**40))
def test_block_is_the_smallest_multiple_of_512_not_below_the_request(n):
    """For any size: a multiple of 512, at least the request, less than 512 more."""
    size = block_size(n)
    assert size % 512 == 0 and n <= size < n + 512


@pytest.mark.parametrize(
    ("request_bytes", "expected_pool", "segment"),
    [
        (100, "small", 2 * MIB),
        (MIB, "small", 2 * MIB),  # 1 MiB is still small
        (MIB + 1, "large", 20 * MIB),
        (10 * MIB - 512, "large", 20 * MIB),
        (10 * MIB, "large", 10 * MIB),  # from 10 MiB: rounded to 2 MiB
        (11 * MIB, "large", 12 * MIB),
        (100 * 10**6, "large", 96 * MIB),  # 100 MB = 95.37 MiB -> 96 MiB
    ],
)
def test_pools_and_segments(request_bytes, expected_pool, segment):
    """The pool and the new segment on both sides of the 1 MiB and 10 MiB limits."""
    assert pool(request_bytes) == expected_pool
    assert segment_size(request_bytes) == segment


@pytest.mark.parametrize("bad", [-1, 1.5, "512", True])
def test_bad_requests_are_refused(bad):
    """A negative, fractional, text or bool size is a memtheory error."""
    with pytest.raises(mt.InvalidArgumentError, match="whole number of bytes"):
        block_size(bad)
