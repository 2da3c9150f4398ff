"""Values derived from a traced peak keep its conditions in every evaluation path (issue 28).

A small CNN traced at B=5, H=20 with ``check_conditions=False`` keeps the guard
PyTorch 2.13's CPU convolution records when it picks a kernel by batch (``B < 16``).
The issue's values lost it: ``memory.peak + parse_bytes("1.5 GiB")`` on a peak of one
polynomial, ``peak - x``, ``peak.subs(H, 32)``, a pickled peak then shifted, and
``max_batch`` answered for batches the formula does not hold at. Each derived value here
is refused at B=20 by ``evaluate``, ``evaluate_grid``, ``compile_exact``, ``max_value``
and ``max_batch``, and equals ``measure`` at B=8, H=32 (a size not traced), with the
same arithmetic done on the measured peak.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
from small_cnn import small_cnn, small_cnn_data  # noqa: E402
from torch import nn  # noqa: E402

from memtheory.errors import EvaluationError, KernelTooLargeError  # noqa: E402
from memtheory.evaluation import compile_exact, evaluate, evaluate_grid  # noqa: E402
from memtheory.symbols import B, H  # noqa: E402
from memtheory.torch import measure, trace  # noqa: E402
from memtheory.units import parse_bytes  # noqa: E402
from memtheory.whatif import max_batch, max_value  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_RESERVE = int(parse_bytes("1.5 GiB"))  # the reserve
_PER_SAMPLE = 4096  # bytes per sample taken off: ``peak - x`` with x an expression in B
_AT, _SIDE, _OUTSIDE = 8, 32, 20  # inside the conditions and not traced; beyond B < 16


_model, _data = small_cnn, small_cnn_data


@pytest.fixture(scope="module")
def traced():
    """The traced result (its B < 16 kept) and the peak ``measure`` gives at B=8, H=32."""
    model = _model()
    x, y = _data(5, 20)
    memory = trace(model, x, {"B": 5, "H": 20}, loss=nn.CrossEntropyLoss(), target=y,
                   optimizer="adam", check_conditions=False)
    assert "B < 16" in memory.constraints  # the real condition these tests are about
    x, y = _data(_AT, _SIDE)
    measured = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
    return memory, measured.peak


_DERIVED = {  # name: (the value from the traced result, the same arithmetic on a number)
    "peak + 1.5 GiB": (lambda m: m.peak + _RESERVE, lambda p: p + _RESERVE),
    "1.5 GiB + peak": (lambda m: _RESERVE + m.peak, lambda p: p + _RESERVE),
    "peak - x": (lambda m: m.peak - _PER_SAMPLE * B, lambda p: p - _PER_SAMPLE * _AT),
    "2 * peak": (lambda m: 2 * m.peak, lambda p: 2 * p),
    "peak.subs(H, 32)": (lambda m: m.peak.subs(H, _SIDE), lambda p: p),
    "peak.subs(H, 32) + 1.5 GiB": (  # one polynomial plus a reserve: sympy merges the sum
        lambda m: m.peak.subs(H, _SIDE) + _RESERVE, lambda p: p + _RESERVE),
    "pickled peak + 1.5 GiB": (
        lambda m: pickle.loads(pickle.dumps(m.peak)) + _RESERVE, lambda p: p + _RESERVE),
    "pickled result's peak + 1.5 GiB": (
        lambda m: pickle.loads(pickle.dumps(m)).peak + _RESERVE, lambda p: p + _RESERVE),
    "expand(peak - x)": (
        lambda m: (m.peak - _PER_SAMPLE * B).expand(), lambda p: p - _PER_SAMPLE * _AT),
}


def _sizes(value):
    """The side to pass when the value still depends on it."""
    return {"H": _SIDE} if H in value.free_symbols else {}


@pytest.mark.parametrize("name", list(_DERIVED))
def test_exact_inside_the_conditions(traced, name):
    """At B=8, H=32 every evaluation path gives the measured peak, with the arithmetic."""
    memory, measured = traced
    derive, same = _DERIVED[name]
    value, expected = derive(memory), same(measured)
    sizes = _sizes(value)
    assert value == derive(memory)  # and it equals itself rebuilt: no state changes it
    assert evaluate(value, B=_AT, **sizes) == expected
    assert evaluate_grid(value, B=np.array([_AT]), **sizes)[0] == expected
    assert compile_exact(value, ["B", *sizes])(_AT, *sizes.values()) == expected
    # the bytes grow with the batch: ``expected`` is the limit at which B=8 is the largest
    assert max_value(value, "B", expected, **sizes) == _AT
    assert max_batch(value, expected, **sizes) == _AT


@pytest.mark.parametrize("name", list(_DERIVED))
def test_refused_outside_the_conditions(traced, name):
    """At B=20 (beyond B < 16) every evaluation path refuses, naming the condition."""
    memory, _ = traced
    value = _DERIVED[name][0](memory)
    sizes = _sizes(value)
    with pytest.raises(KernelTooLargeError, match="B < 16"):
        evaluate(value, B=_OUTSIDE, **sizes)
    with pytest.raises(KernelTooLargeError, match="B < 16"):
        evaluate_grid(value, B=np.array([_AT, _OUTSIDE]), **sizes)
    with pytest.raises(KernelTooLargeError, match="B < 16"):
        compile_exact(value, ["B", *sizes])(_OUTSIDE, *sizes.values())
    with pytest.raises(EvaluationError, match="B < 16"):
        max_value(value, "B", "1 TiB", **sizes)
    with pytest.raises(EvaluationError, match="B < 16"):
        max_batch(value, "1 TiB", **sizes)


def test_substituting_a_batch_outside_is_refused(traced):
    """peak.subs(B, 20) is refused like evaluate; peak.subs(B, 8) is the measured bytes."""
    memory, measured = traced
    with pytest.raises(KernelTooLargeError, match="B=20 is outside B < 16"):
        memory.peak.subs(B, _OUTSIDE)
    assert memory.peak.subs({B: _AT, H: _SIDE}) == measured


_FRESH_PROCESS = """
import pickle, sys
from memtheory.errors import MemtheoryError
from memtheory.evaluation import evaluate
from memtheory.symbols import H
from memtheory.whatif import max_batch
for value in pickle.loads(sys.stdin.buffer.read()):
    sizes = {"H": 32} if H in value.free_symbols else {}
    answers = [str(evaluate(value, B=8, **sizes))]
    calls = (lambda: evaluate(value, B=20, **sizes), lambda: max_batch(value, "1 TiB", **sizes))
    for call in calls:
        try:
            answers.append("answered " + str(call()))
        except MemtheoryError as error:
            answers.append("refused " + ("B < 16" if "B < 16" in str(error) else str(error)))
    print(" | ".join(answers))
"""


def test_derived_values_pickled_keep_the_conditions_in_a_fresh_process(traced):
    """Every derived value, pickled and loaded in a new process, is exact at B=8 and refused at 20.

    The new process has no registry entry: only the pickles carry the conditions.
    """
    memory, measured = traced
    names = list(_DERIVED)
    payload = pickle.dumps([_DERIVED[name][0](memory) for name in names])
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], input=payload,
                         capture_output=True, check=True, env=environment, timeout=300)
    lines = run.stdout.decode().splitlines()
    expected = [f"{_DERIVED[name][1](measured)} | refused B < 16 | refused B < 16"
                for name in names]
    assert dict(zip(names, lines, strict=True)) == dict(zip(names, expected, strict=True))


def test_a_checked_result_keeps_its_own_conditions_in_max_batch(traced):
    """max_batch on a result uses its own conditions, not those of an equal peak traced unchecked.

    The same model traced with ``check_conditions=True`` drops B >= 2 as harmless, so its
    peak equals the unchecked trace's, which is registered with B >= 2. max_batch on the
    checked result answered "even B=2 needs ..." where only B = 1 fits; it answers 1.
    """
    unchecked, _ = traced
    assert "B >= 2" in unchecked.constraints and unchecked.peak is not None  # registered
    x, y = _data(5, 20)
    checked = trace(_model(), x, {"B": 5, "H": 20}, loss=nn.CrossEntropyLoss(), target=y,
                    optimizer="adam")
    assert "B >= 2" not in checked.constraints and checked.peak == unchecked.peak
    one, two = (checked.evaluate(B=b, H=12).peak for b in (1, 2))
    assert max_batch(checked, (one + two) // 2, H=12) == 1
