"""Fixed-size traces of one ``trace`` call share fake parameters and a warmed optimizer.

``_ConcreteSteps`` makes the fake parameters and runs the optimizer's warm-up step once
for all the fixed-size traces of a ``trace`` call (checks of conditions, points of a fit).
Each of its traces must give, to the byte, what a trace made afresh gives at the same sizes,
whatever ran before it in the session: a whole trace, or one that stopped early.
"""

from __future__ import annotations

import pytest
import sympy as sp

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from memtheory.torch.tracing import api  # noqa: E402
from memtheory.torch.tracing import step as step_module  # noqa: E402
from memtheory.torch.tracing.sizes import SymbolMap  # noqa: E402
from memtheory.torch.tracing.step import Departed, Expected  # noqa: E402

B, H = sp.symbols("B H", integer=True, positive=True)


class _Net(nn.Module):
    """Convolution, batch norm (buffers), a pooled classifier, and a parameter never used."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)
        self.unused = nn.Linear(4, 4)  # no gradient after backward: allocated again each time

    def forward(self, x):
        x = torch.relu(self.norm(self.conv(x)))
        return self.head(nn.functional.max_pool2d(x, 2).mean((2, 3)))


def _setup(optimizer):
    torch.manual_seed(0)
    images, labels = torch.randn(4, 3, 12, 12), torch.randint(0, 5, (4,))
    step = api._StepChoices(loss=nn.CrossEntropyLoss(), target=labels, optimizer=optimizer,
                            dtype=None, autocast=None, keeps_outputs=True)
    return _Net().train(), images, {4: B, 12: H}, step


def _bytes(record):
    memory = api._result(record, SymbolMap({}), (), {})
    return (memory.components, memory.timeline, memory.peak, memory.inference_peak,
            memory.step_start)


POINTS = [{B: 4, H: 12}, {B: 1, H: 12}, {B: 3, H: 7}, {B: 4, H: 2}, {B: 17, H: 12}]


@pytest.mark.parametrize("optimizer", ["adam", "nesterov", "adagrad"])
def test_each_shared_trace_is_a_fresh_trace(optimizer):
    """At every point, after whole traces and after one that stopped early: the same bytes."""
    model, images, sizes, step = _setup(optimizer)
    fresh = []
    for point in POINTS:
        with api._ConcreteSteps(model, step) as alone:
            fresh.append(_bytes(alone(images, sizes, point)))
    with api._ConcreteSteps(model, step) as shared:
        with pytest.raises(Departed):  # stops after the forward: no gradient left behind
            shared(images, sizes, POINTS[0], keep_all=False, expected=Expected(1, 1))
        for point, expected in zip(POINTS, fresh, strict=True):
            assert _bytes(shared(images, sizes, point)) == expected
            with pytest.raises(Departed):
                shared(images, sizes, point, keep_all=False, expected=Expected(1, 1))
    assert len({str(f) for f in fresh}) > 1  # the points differ: the comparison can fail


def _counted_warm_ups(monkeypatch):
    calls = []
    original = step_module._warm_up

    def counted(parameters, optimizer):
        calls.append(optimizer)
        return original(parameters, optimizer)

    monkeypatch.setattr(step_module, "_warm_up", counted)
    return calls


def test_a_named_optimizer_is_warmed_once(monkeypatch):
    """One warm-up step for five traces; the model's own parameters are back afterwards."""
    calls = _counted_warm_ups(monkeypatch)
    model, images, sizes, step = _setup("adamw")
    own = [id(p) for p in model.parameters()]
    with api._ConcreteSteps(model, step) as shared:
        for point in POINTS:
            shared(images, sizes, point)
    assert len(calls) == 1
    assert [id(p) for p in model.parameters()] == own


def test_an_optimizer_passed_in_is_built_and_warmed_every_time(monkeypatch):
    """A factory (or an instance) may keep anything between steps: nothing is shared."""
    calls = _counted_warm_ups(monkeypatch)
    model, images, sizes, step = _setup(lambda parameters: torch.optim.SGD(parameters, lr=0.1,
                                                                           momentum=0.9))
    with api._ConcreteSteps(model, step) as alone:
        records = [_bytes(alone(images, sizes, point)) for point in POINTS[:3]]
    assert len(calls) == 3 and len({id(o) for o in calls}) == 3
    named = _setup("momentum")
    with api._ConcreteSteps(*named[::3]) as shared:
        assert [_bytes(shared(named[1], named[2], p)) for p in POINTS[:3]] == records


def test_a_warm_up_that_fails_is_run_again(monkeypatch):
    """An error before the optimizer is warm: the next trace builds and warms a new one."""
    model, images, sizes, step = _setup("adam")
    calls = []
    original = step_module._warm_up

    def failing_once(parameters, optimizer):
        calls.append(optimizer)
        if len(calls) == 1:
            raise RuntimeError("the warm-up failed")
        return original(parameters, optimizer)

    monkeypatch.setattr(step_module, "_warm_up", failing_once)
    with api._ConcreteSteps(model, step) as shared:
        with pytest.raises(RuntimeError, match="warm-up failed"):
            shared(images, sizes, POINTS[0])
        after = _bytes(shared(images, sizes, POINTS[0]))
    assert len(calls) == 2 and calls[0] is not calls[1]
    with api._ConcreteSteps(model, step) as alone:
        assert after == _bytes(alone(images, sizes, POINTS[0]))


class _Branching(nn.Module):
    """A copy B = 1 skips, and a branch on the length that changes no byte.

    The transpose made contiguous is copied unless B = 1; the branch gives the trace at
    B = 1 a condition of its own to check.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
        x = x * 2 if x.shape[1] > 3 else x * 3  # the same bytes on either side
        return self.fc(x).mean(1)


def test_one_session_serves_the_whole_trace_call(monkeypatch):
    """The checks of the trace at B = 1 share the first checks' fakes and warm-up.

    One ``_ConcreteSteps`` per ``trace`` call: its fixed-size traces are warmed once,
    the symbolic traces (at every size, and at B = 1) warm their own; and the result is
    what ``measure`` counts, at B = 1 and above.
    """
    from memtheory.torch import measure, torch_optimizer, trace

    sessions = []
    original_init = api._ConcreteSteps.__init__

    def counted_init(self, *args):
        sessions.append(self)
        original_init(self, *args)

    monkeypatch.setattr(api._ConcreteSteps, "__init__", counted_init)
    calls = _counted_warm_ups(monkeypatch)
    torch.manual_seed(0)
    model = _Branching().train()

    def step(batch, length):
        torch.manual_seed(batch * length)
        return dict(loss=nn.CrossEntropyLoss(), target=torch.randint(0, 3, (batch,)))

    memory = trace(model, torch.randn(4, 7, 6), {"B": 4, "S": 7}, optimizer="adam",
                   **step(4, 7))
    assert sp.Symbol("B", integer=True, positive=True) in memory.at_one
    assert len(sessions) == 1
    fixed = [c for c in calls if c.param_groups[0]["params"][0].fake_mode.shape_env is None]
    assert len(fixed) == 1 and len(calls) - len(fixed) >= 2  # checks: one; symbolic: each
    for batch, length in ((1, 7), (1, 2), (4, 2), (5, 9)):
        real = measure(model, torch.randn(batch, length, 6),
                       optimizer=torch_optimizer("adam", model.parameters()),
                       **step(batch, length))
        at = memory.evaluate(B=batch, S=length)
        assert {k: int(v) for k, v in at.components.items()} == real.components
        assert (at.peak, at.inference_peak) == (real.peak, real.inference_peak)
