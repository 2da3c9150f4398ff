"""memtheory's derivations run Python's cycle collector less often (``memtheory._collector``).

A deep network's exact peak grew faster than its depth only through the collector's
full collections (issue 26); the threshold is raised for a derivation and put back.
"""

from __future__ import annotations

import gc

import pytest

import memtheory.conventions.autograd.convention as autograd
import memtheory.estimate.plan as plan
from memtheory import Dense, Input, Network, inference_memory, training_memory
from memtheory._collector import YOUNG_OBJECTS, fewer_collections
from memtheory.estimate import estimate
from memtheory.max_pruning import maximum
from memtheory.symbols import B


def test_a_derivation_collects_cycles_less_often_and_puts_the_threshold_back(monkeypatch):
    """``training_memory``, ``inference_memory``, ``maximum`` and ``estimate`` raise the threshold.

    The caller's thresholds come back after, after an error too; a caller's own higher
    threshold is left as it is.
    """
    network = Network([Input((8,)), Dense(4)])
    seen: list[int] = []
    real = autograd.AutogradConvention.training

    def training(self, *args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return real(self, *args, **kwargs)

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        monkeypatch.setattr(autograd.AutogradConvention, "training", training)
        training_memory(network, optimizer="sgd", convention="autograd")
        assert seen == [YOUNG_OBJECTS] and gc.get_threshold()[0] == 700
        with pytest.raises(Exception, match="optimizer"):
            training_memory(network, optimizer="no such optimizer", convention="autograd")
        assert gc.get_threshold()[0] == 700
        inference_memory(network, convention="autograd")
        maximum([2 * B + 8, 3 * B])
        assert gc.get_threshold()[0] == 700
        techniques = plan._techniques
        during: list[int] = []

        def recorded(*args, **kwargs):
            during.append(gc.get_threshold()[0])
            return techniques(*args, **kwargs)

        monkeypatch.setattr(plan, "_techniques", recorded)  # outside any derivation
        estimate("gpt2", batch=1, sequence=16)
        assert during == [YOUNG_OBJECTS] and gc.get_threshold()[0] == 700
        gc.set_threshold(10 * YOUNG_OBJECTS, *before[1:])
        training_memory(network, optimizer="sgd", convention="autograd")
        assert seen[-1] == 10 * YOUNG_OBJECTS
    finally:
        gc.set_threshold(*before)


def test_blocks_nest_and_an_error_puts_the_threshold_back():
    """An inner block under an outer one changes nothing; an error still restores."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        with fewer_collections():
            with fewer_collections():
                assert gc.get_threshold()[0] == YOUNG_OBJECTS
            assert gc.get_threshold()[0] == YOUNG_OBJECTS
        assert gc.get_threshold()[0] == 700
        with pytest.raises(ZeroDivisionError), fewer_collections():
            1 / 0  # noqa: B018
        assert gc.get_threshold() == (700, *before[1:])
    finally:
        gc.set_threshold(*before)
