"""trace on unusual and hostile models: it fails where the real step fails, never with a raw error.

Every expected number is measured with :func:`memtheory.torch.measure` on the
same module at sizes the trace never used; every refusal is checked against
what a real step does with the same inputs.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import time  # noqa: E402

import torch.nn.functional as F  # noqa: E402, N812 (PyTorch's convention)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from memtheory.errors import (  # noqa: E402
    InvalidArgumentError,
    MemtheoryError,
    TraceTimeoutError,
    UntraceableError,
)
from memtheory.torch import TracedMemory, measure, trace  # noqa: E402
from memtheory.torch.tracing.verify import MAX_CHECKS  # noqa: E402


def _sum(output):
    return output.float().sum()


def assert_agrees(memory: TracedMemory, module, x, y=None, loss=_sum, **values):
    """The traced result at ``values`` equals a real step's measurement there."""
    torch.manual_seed(0)
    measured = measure(module, x, loss, torch.optim.AdamW(module.parameters()), target=y)
    at = memory.evaluate(**values)
    assert {k: int(v) for k, v in at.components.items() if v} == measured.components
    assert at.peak == measured.peak
    assert at.inference_peak == measured.inference_peak


class Recurrent(nn.Module):
    """Embedding, a recurrent layer, a classifier on the last step."""

    def __init__(self, kind=nn.GRU):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.rnn = kind(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):  # noqa: D102
        out, _ = self.rnn(self.emb(x))
        return self.head(out[:, -1])


class SkipNeedsEven(nn.Module):
    """A UNet step: pool, upsample, concatenate with the skip (needs an even size)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2)

    def forward(self, x):  # noqa: D102
        a = self.conv(x)
        return torch.cat([a, self.up(F.max_pool2d(a, 2))], 1).sum()


class Interpolated(nn.Module):
    """``F.interpolate(size=...)`` back to the input's size, which the symbolic path cannot."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):  # noqa: D102
        return F.interpolate(self.conv(x), size=(x.shape[-2] * 2, x.shape[-1] * 2)).sum()


class Einsum(nn.Module):
    """Attention written with einsum."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):  # noqa: D102
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        weights = torch.einsum("bsd,btd->bst", q, k).softmax(-1)
        return torch.einsum("bst,btd->bsd", weights, v).sum()


class ToNumpy(nn.Module):
    """Round-trips through NumPy."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):  # noqa: D102
        return torch.from_numpy(self.fc(x).detach().numpy()).sum() + self.fc(x).sum()


class ToCuda(nn.Module):
    """Moves its input to a GPU."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):  # noqa: D102
        return self.fc(x.to("cuda")).sum()


class Recursing(nn.Module):
    """Calls itself without end."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):  # noqa: D102
        return self(x)


class DataDependent(nn.Module):
    """Boolean-mask indexing: the output's shape depends on values."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):  # noqa: D102
        y = self.fc(x)
        return y[y > 0].sum()


class Sleepy(nn.Module):
    """Sleeps in forward."""

    def __init__(self, seconds=30.0):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.seconds = seconds

    def forward(self, x):  # noqa: D102
        time.sleep(self.seconds)
        return self.fc(x).sum()


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_a_wrong_input_dtype_fails_as_the_real_step_fails(dtype):
    """An int64 or float64 input to a float32 Linear: the real step raises, and so does trace."""
    model = nn.Sequential(nn.Linear(4, 4))
    x = torch.ones(8, 4, dtype=dtype)
    with pytest.raises(RuntimeError, match="dtype|scalar type"):
        model(x)
    with pytest.raises(InvalidArgumentError, match=r"aten\.addmm.* in forward Sequential\.0"):
        trace(model, x, {"B": 8}, loss=_sum)


def test_autocast_by_name_is_autocast_by_dtype():
    """autocast='bf16' is torch.bfloat16; an unknown name is refused with the fix."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(8, 4)
    by_name = trace(model, x, {"B": 8}, loss=_sum, autocast="bf16")
    by_dtype = trace(model, x, {"B": 8}, loss=_sum, autocast=torch.bfloat16)
    assert by_name.total == by_dtype.total and by_name.peak == by_dtype.peak
    with pytest.raises(InvalidArgumentError, match="autocast=torch.bfloat16"):
        trace(model, x, {"B": 8}, loss=_sum, autocast="int8")


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (ToNumpy(), r"forward ToNumpy.*\.numpy\(\)"),
        (ToCuda(), r"forward ToCuda.*x\.to\(self\.weight\.device\)"),
        (Recursing(), r"forward Recursing.*recursion limit"),
        (DataDependent(), r"aten\.index.* in forward DataDependent.*data-dependent"),
    ],
)
def test_hostile_forwards_get_memtheory_errors_naming_the_module(model, named):
    """.numpy() round trips, moves to cuda, runaway recursion, data-dependent shapes."""
    with pytest.raises(UntraceableError, match=named):
        trace(model, torch.ones(8, 4), {"B": 8})


def test_a_forward_that_sleeps_stops_at_the_time_budget():
    """A forward sleeping 30 s ends in TraceTimeoutError once the 1 s budget is spent."""
    with pytest.raises(TraceTimeoutError, match="time budget of 1 s"):
        trace(Sleepy(), torch.ones(8, 4), {"B": 8}, time_limit=1)
    with pytest.raises(InvalidArgumentError, match="time_limit"):
        trace(Sleepy(0), torch.ones(8, 4), {"B": 8}, time_limit=float("nan"))


def test_a_symbolic_trace_runs_forward_twice():
    """The docs' count: the training step and the inference pass, then two per condition checked."""
    calls = []
    model = nn.Linear(4, 4)
    model.register_forward_hook(lambda *_: calls.append(1))
    trace(model, torch.ones(8, 4), {"B": 8}, loss=_sum, check_conditions=False)
    assert len(calls) == 2
    calls.clear()
    trace(model, torch.ones(8, 4), {"B": 8}, loss=_sum)
    assert len(calls) % 2 == 0 and 2 <= len(calls) <= 2 + 2 * MAX_CHECKS


@pytest.mark.slow
def test_a_skip_connection_that_needs_even_sizes_is_fitted_at_even_sizes():
    """The fit takes sizes in steps of 2 and is exact at even sizes it never used."""
    model = SkipNeedsEven()
    memory = trace(model, torch.randn(2, 3, 16, 16), {"B": 2, "H": 16}, loss=_sum)
    assert memory.method == "fitted"
    assert any("steps of 2" in c for c in memory.conditions)
    assert_agrees(memory, model, torch.randn(3, 3, 30, 30), B=3, H=30)


@pytest.mark.slow
def test_interpolate_to_a_size_falls_back_to_an_exact_fit():
    """F.interpolate(size=...) fails symbolically; the fit is exact at sizes never traced."""
    model = Interpolated()
    memory = trace(model, torch.randn(2, 3, 8, 8), {"B": 2, "H": 8}, loss=_sum)
    assert memory.method == "fitted"
    assert any("symbolic trace failed" in c for c in memory.conditions)
    assert_agrees(memory, model, torch.randn(5, 3, 13, 13), B=5, H=13)


@pytest.mark.slow
def test_gru_classifier_traces_exactly():
    """GRU: 0 B off measure (components, both peaks) at sizes the fit never used."""
    torch.manual_seed(0)
    model = Recurrent(nn.GRU)
    loss = nn.CrossEntropyLoss()
    memory = trace(model, torch.randint(0, 50, (4, 10)), {"B": 4, "S": 10}, loss=loss,
                   target=torch.randint(0, 3, (4,)), optimizer="adamw")
    for b, s in ((3, 7), (9, 23)):
        assert_agrees(memory, model, torch.randint(0, 50, (b, s)), torch.randint(0, 3, (b,)),
                      loss, B=b, S=s)


@pytest.mark.slow
def test_lstm_classifier_traces_exactly_with_and_without_onednn():
    """LSTM: with oneDNN (its workspace sized by formula) and without, 0 B off at new sizes."""
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM)
    loss = nn.CrossEntropyLoss()
    x, y = torch.randint(0, 50, (4, 10)), torch.randint(0, 3, (4,))
    memory = trace(model, x, {"B": 4, "S": 10}, loss=loss, target=y, optimizer="adamw")
    for b, s in ((3, 7), (9, 23)):
        assert_agrees(memory, model, torch.randint(0, 50, (b, s)), torch.randint(0, 3, (b,)),
                      loss, B=b, S=s)
    with torch.backends.mkldnn.flags(enabled=False):
        memory = trace(model, x, {"B": 4, "S": 10}, loss=loss, target=y, optimizer="adamw")
        for b, s in ((3, 7), (9, 23)):
            assert_agrees(memory, model, torch.randint(0, 50, (b, s)),
                          torch.randint(0, 3, (b,)), loss, B=b, S=s)


# -- a bounded fuzz over a zoo of unusual modules ----------------------------------------------

ZOO = {
    "einsum attention": (Einsum, lambda b, n: torch.randn(b, n, 8), {"B", "S"}),
    "int64 into Linear": (lambda: nn.Linear(4, 4),
                          lambda b, n: torch.ones(b, 4, dtype=torch.int64), {"B"}),
    "float64 into Linear": (lambda: nn.Linear(4, 4),
                            lambda b, n: torch.ones(b, 4, dtype=torch.float64), {"B"}),
    ".numpy()": (ToNumpy, lambda b, n: torch.ones(b, 4), {"B"}),
    "to cuda": (ToCuda, lambda b, n: torch.ones(b, 4), {"B"}),
    "recursion": (Recursing, lambda b, n: torch.ones(b, 4), {"B"}),
    "data-dependent": (DataDependent, lambda b, n: torch.ones(b, 4), {"B"}),
    "slow forward": (lambda: Sleepy(5.0), lambda b, n: torch.ones(b, 4), {"B"}),
}
HEAVY = {
    "GRU": (Recurrent, lambda b, n: torch.randint(0, 50, (b, n)), {"B", "S"}),
    "skip needs even": (SkipNeedsEven, lambda b, n: torch.randn(b, 3, 2 * n, 2 * n), {"B", "H"}),
    "interpolate": (Interpolated, lambda b, n: torch.randn(b, 3, n, n), {"B", "H"}),
}
TRIED: dict[str, int] = {}


def _attack(zoo, name, b, n):
    build, example, names = zoo[name]
    x = example(b, n)
    sizes = {"B": b, "S": n, "H": x.shape[-1]}
    dims = {k: v for k, v in sizes.items() if k in names}
    TRIED[name] = TRIED.get(name, 0) + 1
    try:
        result = trace(build(), x, dims, loss=_sum, time_limit=3)
    except MemtheoryError:
        return
    assert isinstance(result, TracedMemory)


@settings(max_examples=16, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(ZOO)), st.integers(2, 6), st.integers(7, 11))
def test_zoo_gives_a_result_or_a_memtheory_error(name, b, n):
    """Never a raw exception, never past the time budget, on the light zoo."""
    _attack(ZOO, name, b, n)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(HEAVY)), st.integers(2, 4), st.integers(6, 9))
def test_heavy_zoo_gives_a_result_or_a_memtheory_error(name, b, n):
    """The same on the models that need a fit (recurrent, interpolate, even skip sizes)."""
    _attack(HEAVY, name, b, n)


def test_zz_report(capsys):
    """Say how many models were given to trace, per kind; none raised a raw error."""
    if TRIED:
        with capsys.disabled():  # printed in every run, not only when something fails
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(TRIED.items()))
            print(f"\ntrace zoo: {sum(TRIED.values())} traces ({counts}), no raw error, no hang.")
