"""measure()'s device path: allocator counters read around each phase, blocks, device checks.

This machine has no GPU, so the CUDA counters themselves are not run here; the
wiring that reads them is, with stand-in counters that log every call and
return values the test can trace back, and the 512-byte block accounting is
checked against :func:`memtheory.cuda_allocator.block_size`.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

from memtheory.cuda_allocator import block_size  # noqa: E402
from memtheory.errors import InvalidArgumentError  # noqa: E402
from memtheory.torch import (  # noqa: E402
    AllocatorCounters,
    AllocatorReport,
    CudaCounters,
    StorageTracker,
    measure,
)
from memtheory.validation import compare_with_measurement  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
STEP_PHASES = ["zero_grad", "forward", "loss", "backward", "optimizer step"]


class LoggingCounters:
    """Counters that log each call and answer each read with a new, distinct number."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.numbers = itertools.count(1000, 1000)
        self.answers: list[tuple[str, int]] = []

    def _answer(self, name: str) -> int:
        self.calls.append(name)
        value = next(self.numbers)
        self.answers.append((name, value))
        return value

    def synchronize(self) -> None:
        """Log the call."""
        self.calls.append("synchronize")

    def reset_peak(self) -> None:
        """Log the call."""
        self.calls.append("reset_peak")

    def allocated(self) -> int:
        """Answer the next number."""
        return self._answer("allocated")

    def peak_allocated(self) -> int:
        """Answer the next number."""
        return self._answer("peak_allocated")

    def reserved(self) -> int:
        """Answer the next number."""
        return self._answer("reserved")

    def peak_reserved(self) -> int:
        """Answer the next number."""
        return self._answer("peak_reserved")

    def device_in_use(self) -> int | None:
        """Log the call; 7 bytes."""
        self.calls.append("device_in_use")
        return 7


def small_step(counters=None, **options):
    """Measure a seeded two-layer MLP with Adam, reading ``counters``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    optimizer = torch.optim.Adam(model.parameters())
    return measure(
        model, x, nn.CrossEntropyLoss(), optimizer, target=y, counters=counters, **options
    )


def test_counters_are_read_around_every_phase_in_order():
    """Each phase: synchronize, read allocated, reset the peak, run, synchronize, read four."""
    counters = LoggingCounters()
    m = small_step(counters, warmup_steps=1)
    per_phase = ["synchronize", "allocated", "reset_peak"] + [
        "synchronize",
        "allocated",
        "peak_allocated",
        "reserved",
        "peak_reserved",
    ]
    step, inference = per_phase * 5 + ["device_in_use"], per_phase
    assert counters.calls == step + inference
    assert [p.phase for p in m.allocator.phases] == [*STEP_PHASES, "inference"]


def test_each_reading_lands_in_its_own_field():
    """Five readings per phase, in the order they were taken, each in the field it names."""
    counters = LoggingCounters()
    m = small_step(counters, warmup_steps=0)
    readings = counters.answers
    assert len(readings) == 5 * len(m.allocator.phases)
    for index, phase in enumerate(m.allocator.phases):
        chunk = readings[5 * index : 5 * index + 5]
        assert [name for name, _ in chunk] == [
            "allocated",
            "allocated",
            "peak_allocated",
            "reserved",
            "peak_reserved",
        ]
        values = [value for _, value in chunk]
        assert values == [
            phase.allocated_before,
            phase.allocated_after,
            phase.peak_allocated,
            phase.reserved_after,
            phase.peak_reserved,
        ]
    report = m.allocator
    step = [p for p in report.phases if p.phase != "inference"]
    assert report.peak_allocated == max(p.peak_allocated for p in step)
    assert report.peak_reserved == max(p.peak_reserved for p in step)
    assert report.peak_phase == "optimizer step"  # the readings only ever grow
    assert report.inference_peak_allocated == report.phases[-1].peak_allocated
    assert report.device_in_use == 7


def test_the_storages_are_counted_the_same_with_counters_or_without():
    """Reading the counters changes nothing that the storages show."""
    plain, counted = small_step(), small_step(LoggingCounters())
    assert plain.allocator is None and plain.device == "cpu"
    for name in ("peak", "saved_activations", "inference_peak", "step_start", "gradients"):
        assert getattr(plain, name) == getattr(counted, name)


def test_block_peak_rounds_each_live_storage_to_512_bytes():
    """Sizes 4,000, 4,000 and 4 bytes take 4,096, 4,096 and 512 bytes in blocks."""
    x = torch.ones(1000)
    with StorageTracker(blocks_on=torch.device("cpu")) as tracker:
        tracker.track(x)
        tracker.start()
        doubled = x * 2
        total = doubled.sum()
        del doubled
        small = x[:3] + 1  # 12 bytes, one block, while x * 2 is gone
    sizes = [x.nbytes, x.nbytes, total.nbytes]
    assert tracker.peak == sum(sizes)
    assert tracker.block_peak == sum(block_size(n) for n in sizes)
    assert small.nbytes == 12


def test_block_peak_leaves_out_storages_on_other_devices():
    """On a GPU run Adam's step counts stay on the CPU: they take no device block."""
    x = torch.ones(1000)
    with StorageTracker(blocks_on=torch.device("cuda", 0)) as tracker:
        tracker.track(x)
        tracker.start()
        (x * 2).sum()
    assert tracker.peak > 0
    assert tracker.block_peak == 0


def test_measured_block_peak_lies_within_the_rounding_of_the_peak():
    """Blocks round up by less than 512 bytes per live storage."""
    m = small_step(LoggingCounters())
    live_storages = 40  # more than this tiny step ever holds at once
    assert m.peak <= m.block_peak <= m.peak + (block_size(1) - 1) * live_storages
    assert m.block_peak % block_size(1) == 0
    assert m.allocator.block_peak == m.block_peak == small_step().block_peak
    assert m.allocator.beyond_blocks == m.allocator.peak_allocated - m.block_peak


def test_block_peak_of_large_storages_is_the_peak():
    """Storages that are whole numbers of blocks take no padding: blocks and bytes agree.

    Linear(128, 128, bias=False) with a 128 x 128 fp32 batch and MSE: every tensor of the
    step is 64 KiB except the scalar loss, so SGD without momentum (no state) peaks at the
    same moment in bytes and blocks, apart from that scalar's padding.
    """
    torch.manual_seed(0)
    model = nn.Linear(128, 128, bias=False)
    x, y = torch.randn(128, 128), torch.randn(128, 128)
    m = measure(model, x, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), target=y)
    assert all(n % block_size(1) == 0 for n in (m.parameters, m.input, m.targets))
    assert 0 <= m.block_peak - m.peak < block_size(1)


def test_report_table_lists_each_phase():
    """The table has a row per phase, and the note on the device's memory."""
    m = small_step(LoggingCounters())
    text = str(m.allocator.table("KiB"))
    for phase in [*STEP_PHASES, "inference"]:
        assert phase in text
    assert "in use at the end" in text


def test_cuda_counters_satisfy_the_protocol():
    """CudaCounters has every method measure() reads; an empty report peaks at 0."""
    assert isinstance(CudaCounters(torch.device("cuda", 0)), AllocatorCounters)
    assert AllocatorReport("cuda:0", (), 0, None).peak_allocated == 0


def test_counters_without_the_methods_are_refused():
    """An object that is not AllocatorCounters is refused before anything runs."""
    with pytest.raises(InvalidArgumentError, match="AllocatorCounters"):
        small_step(object())


def test_module_and_input_on_different_devices_are_refused_with_both_named():
    """The error names each tensor's device, so the user knows what to move."""
    model = nn.Linear(4, 2)
    x = torch.ones(3, 4, device="meta")
    optimizer = torch.optim.SGD(model.parameters())
    with pytest.raises(InvalidArgumentError, match=r"parameter 'weight' on cpu.*input on meta"):
        measure(model, x, nn.MSELoss(), optimizer, target=torch.ones(3, 2))


def test_meta_tensors_point_to_trace():
    """Meta tensors cannot run: the error points to trace()."""
    with torch.device("meta"):
        model = nn.Linear(4, 2)
        x, y = torch.ones(3, 4), torch.ones(3, 2)
    optimizer = torch.optim.SGD(model.parameters())
    with pytest.raises(InvalidArgumentError, match=r"trace\(\)"):
        measure(model, x, nn.MSELoss(), optimizer, target=y)


def test_an_input_that_is_not_a_tensor_is_refused():
    """A list is not a batch."""
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters())
    with pytest.raises(InvalidArgumentError, match="input batch as a tensor"):
        measure(model, [[1.0] * 4], nn.MSELoss(), optimizer)


def test_comparison_on_a_device_this_machine_lacks_says_so():
    """compare_with_measurement(device='cuda') without a GPU names what is missing."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(InvalidArgumentError, match="needs a CUDA GPU"):
        compare_with_measurement("MLP", device="cuda")
    with pytest.raises(InvalidArgumentError, match="not a device PyTorch knows"):
        compare_with_measurement("MLP", device="gpu")


def test_comparison_on_the_cpu_device_is_the_default_comparison():
    """Naming the CPU changes nothing: same measurement, no allocator report."""
    named = compare_with_measurement("MLP", device=torch.device("cpu"), conventions=("autograd",))
    plain = compare_with_measurement("MLP", conventions=("autograd",))
    assert named.measurement.peak == plain.measurement.peak == named.predicted("autograd", "peak")
    assert named.measurement.allocator is None
