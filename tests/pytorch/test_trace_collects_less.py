"""``trace`` runs Python's cycle collector less often and puts its threshold back after.

A GPT-2 small trace ran the collector 329 times (0.31 s); under
``memtheory._collector.fewer_collections`` 4 times (0.08 s).
"""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from memtheory._collector import YOUNG_OBJECTS  # noqa: E402
from memtheory.torch import trace  # noqa: E402
from memtheory.torch.tracing import api  # noqa: E402


def test_a_trace_raises_the_young_threshold_and_puts_it_back(monkeypatch):
    """Inside the trace (the step recorded) the threshold is raised; after, it is the caller's."""
    seen: list[int] = []
    record = api._record

    def recorded(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return record(*args, **kwargs)

    monkeypatch.setattr(api, "_record", recorded)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        memory = trace(model, torch.randn(5, 6), {"B": 5}, loss=torch.nn.CrossEntropyLoss(),
                       target=torch.randint(0, 3, (5,)), optimizer="sgd")
        assert gc.get_threshold()[0] == 700
    finally:
        gc.set_threshold(*before)
    assert seen and set(seen) == {YOUNG_OBJECTS}
    assert memory.peak.free_symbols
