"""measure() against the CPU allocator's own count (PyTorch's profiler, no dispatch mode).

The profiler records each allocation and free of the CPU allocator: a count of
the same step made by a different mechanism. Where no kernel keeps a buffer of
its own at the peak, the two must agree; nowhere may measure() count more than
the allocator handed out.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

from memtheory.torch import (  # noqa: E402
    check_against_allocator,
    trace_allocator,
)
from memtheory.validation import PAIRS  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_the_allocator_trace_of_known_allocations():
    """Adding x to itself allocates one 4,000-byte result; three kept results peak at 12,000."""
    x = torch.ones(1000)
    assert trace_allocator(lambda: x + x).peak == x.nbytes
    kept: list[torch.Tensor] = []
    trace = trace_allocator(lambda: kept.extend([x + x, x + x, x + x]))
    assert (trace.peak, trace.end, trace.allocations) == (3 * x.nbytes, 3 * x.nbytes, 3)


def test_a_freed_result_leaves_nothing_at_the_end():
    """Made and freed inside the run: counted at the peak, gone at the end."""
    x = torch.ones(256, 256)

    def run() -> None:
        product = x * x
        square = product * product
        del product, square

    trace = trace_allocator(run)
    assert (trace.peak, trace.end, trace.allocations) == (2 * x.nbytes, 0, 2)


@pytest.mark.parametrize("name", ["GPT-2-style", "BERT-MLM-style"])
def test_fp32_transformer_steps_agree_with_the_allocator_to_the_byte(name):
    """No kernel keeps a buffer of its own at these steps' peaks: both counts are equal."""
    pair = PAIRS[name]
    module = pair.build_module()
    x, y = pair.batch()
    check = check_against_allocator(
        module, x, pair.loss, torch.optim.Adam(module.parameters()), target=y
    )
    assert check.storages > 0
    assert check.allocator == check.storages


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["ResNet-18-style", "ViT-style", "GPT-2-style"])
def test_measure_never_counts_more_than_the_allocator_handed_out(name, dtype):
    """The storages measure() sees are allocations; the allocator may add kernels' buffers."""
    pair = PAIRS[name]
    module = pair.build_module(dtype)
    x, y = pair.batch(dtype)
    check = check_against_allocator(
        module, x, pair.loss, torch.optim.SGD(module.parameters(), lr=0.1), target=y
    )
    assert check.unseen >= 0
    assert (
        check.storages
        == max(
            live
            for phase, _, live in check.measurement.timeline
            if phase not in ("step start", "zero_grad")
        )
        - [live for phase, _, live in check.measurement.timeline if phase == "zero_grad"][-1]
    )


def test_a_step_under_autocast_is_run_under_autocast_both_times():
    """Autocast applies to the profiled step too: its count differs from the plain step's."""

    def check(autocast):
        torch.manual_seed(0)
        module = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5))
        x, y = torch.randn(8, 32), torch.randint(0, 5, (8,))
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return check_against_allocator(
            module, x, nn.CrossEntropyLoss(), optimizer, target=y, autocast=autocast
        )

    plain, mixed = check(None), check(torch.bfloat16)
    assert mixed.measurement.weight_copies > 0 == plain.measurement.weight_copies
    assert mixed.unseen >= 0 and plain.unseen >= 0
    assert mixed.allocator != plain.allocator


def test_the_profilers_log_lines_are_dropped_and_nothing_else(capfd):
    """The profiler's start/stop lines on standard error are dropped; other lines pass on."""
    import os

    def run() -> None:
        os.write(2, b"a line of the user's own\n")
        torch.ones(10).add_(1)

    trace_allocator(run)
    err = capfd.readouterr().err
    assert "a line of the user's own" in err
    assert "ActivityProfiler" not in err
