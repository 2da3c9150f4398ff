"""The time budget stops a trace with TraceTimeoutError, never where PyTorch's C++ cannot throw.

Autograd asks a fake tensor its device (a dispatch to Python) while it records an
operation's result, in C++ that ends the process if an exception comes through
(``terminate called after throwing an instance of 'python_error'``): a GRU traced
with a budget of a second or two hit it, a few times in thirty.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from memtheory.errors import TraceTimeoutError  # noqa: E402
from memtheory.torch.tracing import budget  # noqa: E402
from memtheory.torch.tracing.sizes import SymbolMap  # noqa: E402
from memtheory.torch.tracing.storages import SymbolicStorageTracker  # noqa: E402


@contextmanager
def _past_the_deadline():
    """A budget that ran out a second ago (no timer armed)."""
    budget._deadline.append((time.monotonic() - 1.0, 0.5))
    try:
        yield
    finally:
        budget._deadline.pop()


def test_a_device_query_past_the_deadline_answers_and_an_operation_stops():
    """The tracker reads the clock on operations, not on the device query autograd makes."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    x = mode.from_tensor(torch.ones(3, 4))
    tracker = SymbolicStorageTracker(SymbolMap({}), lambda name: name)
    with mode, tracker, _past_the_deadline():
        assert torch.ops.prim.device.default(x) == torch.device("cpu")
        with pytest.raises(TraceTimeoutError, match="time budget of 0.5 s"):
            torch.add(x, 1)


def _frame_in_dispatch():
    def __torch_dispatch__():  # noqa: N807 (the name the alarm looks for)
        return sys._getframe()
    return __torch_dispatch__()


def test_the_timer_waits_out_a_callback_and_stops_plain_python():
    """Fired inside a dispatch, the timer is set again; fired in plain Python, it stops."""
    with _past_the_deadline():
        previous = signal.getitimer(signal.ITIMER_REAL)
        try:
            budget._alarm(signal.SIGALRM, _frame_in_dispatch())  # no exception
            again, _ = signal.getitimer(signal.ITIMER_REAL)
            assert 0 < again <= budget._RETRY
        finally:
            signal.setitimer(signal.ITIMER_REAL, *previous)
        with pytest.raises(TraceTimeoutError):
            budget._alarm(signal.SIGALRM, sys._getframe())


def test_the_timer_leaves_pytorchs_code_alone(monkeypatch):
    """PyTorch's SymNode methods (which C++ calls for a symbolic size) are not interrupted."""
    from torch.fx.experimental.sym_node import SymNode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    seen = []
    multiply = SymNode.__dict__["_mul"]

    def spied(self, other):
        seen.append(budget._may_stop(sys._getframe(1)))  # in PyTorch's SymNode.mul
        return multiply(self, other)

    monkeypatch.setattr(SymNode, "_mul", spied)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.ones(3, 4), symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC] * 2))
    x.shape[0] * x.shape[1]
    assert seen and not any(seen)  # every product of the two sizes
    assert budget._may_stop(sys._getframe())  # this test's own code


class _SlowThenDivides(torch.nn.Module):
    """Sleeps past the budget (no timer to stop it), then divides with a tensor operator."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):  # noqa: D102
        time.sleep(1.2)
        return x / 2.0 * self.scale


def test_a_budget_spent_in_a_tensor_operator_still_says_so(monkeypatch):
    """``x / 2.0`` turns the budget's error (a TypeError) into NotImplemented; trace says why.

    Without the timer (as in a thread other than the main one), the clock is read at the
    division's dispatch, inside PyTorch's operator, which answers "unsupported operand".
    """
    from memtheory.torch import trace

    monkeypatch.setattr(budget, "_start_alarm", lambda seconds: (lambda: None))
    with pytest.raises(TraceTimeoutError, match="time budget of 1 s"):
        trace(_SlowThenDivides(), torch.ones(2, 3), {"B": 2}, loss=lambda y: y.sum(),
              time_limit=1)


_SWEEP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from memtheory.torch import trace
    from memtheory.errors import TraceTimeoutError

    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.rnn = nn.Embedding(50, 8), nn.GRU(8, 16, batch_first=True)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.rnn(self.emb(x))[0][:, -1])

    x = torch.randint(0, 50, (3, 8))
    for limit in map(float, sys.argv[1:]):
        try:
            trace(Recurrent(), x, {"B": 3, "S": 8}, loss=lambda o: o.sum(), time_limit=limit)
            print(limit, "traced", flush=True)
        except TraceTimeoutError:
            print(limit, "stopped", flush=True)
""")


@pytest.mark.slow
def test_a_gru_stopped_anywhere_in_its_step_ends_in_the_error():
    """Budgets from 0.1 s to past the whole trace: each ends traced or stopped, never aborted.

    Nor is the budget's error raised in a weak reference's callback, where Python prints it
    and drops it with the callback's work.
    """
    limits = [f"{0.1 * k:.1f}" for k in range(1, 31)]
    run = subprocess.run([sys.executable, "-c", _SWEEP, *limits], capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Exception ignored" not in run.stderr, run.stderr[-2000:]  # none lost in a finalizer
    outcomes = [line.split()[1] for line in run.stdout.splitlines()]
    assert len(outcomes) == len(limits) and set(outcomes) <= {"traced", "stopped"}
    assert outcomes[0] == "stopped"
