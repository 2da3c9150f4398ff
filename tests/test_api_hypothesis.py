"""The whole public API under hostile arguments: a result or a memtheory error, never a raw one.

Every callable in ``memtheory.__all__`` (and :func:`memtheory.estimate.estimate`)
has a valid call here; hypothesis replaces one or two of its arguments with what
a careless or hostile caller passes (negative, zero, huge, float, NaN, None,
text, wrong types, NumPy arrays, unknown precision, optimizer and GPU names,
nonsense limits). Each call must return or raise a
:class:`memtheory.errors.MemtheoryError`; a raw ``TypeError``, ``ValueError``,
``ZeroDivisionError``, ``RecursionError`` or ``KeyError`` fails the test, and so
does a call still running after :data:`HANG_SECONDS` (a hang). The examples
kept with ``@example`` are the falsifying inputs this suite found, each fixed at
its source. The last test prints how many calls each entry point got.
"""

from __future__ import annotations

import inspect
import math
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.estimate import estimate
from memtheory.symbols import B, H, S
from tests.strategies import hostile_values

HANG_SECONDS = 30
"""A call running longer than this is a hang (generous: the machine may be loaded)."""

TRIED: Counter[str] = Counter()
"""Calls made, by entry point (printed by the last test)."""

FUZZ = settings(
    max_examples=20,
    deadline=timedelta(seconds=HANG_SECONDS),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

NET = mt.Network([mt.Input((3, H, H)), mt.Conv2d(4, 3), mt.Flatten(), mt.Dense(5)], "fuzzed")
COUNTS = mt.ModelCounts(parameters=1000, activations=64 * B * S, input_elements=B * S)
MEMORY = mt.training_memory(NET, optimizer="sgd")

NAMES = st.sampled_from(
    ["", " ", "adam ", "ADAMW", "sgd+momentum", "adam8bit", "fp32", "fp8", "bf16", "mixed-fp16",
     "int8", "bool", "fp64", "A100", "H100-80GB", "h100", "rtx 4090", "T4", "unknown", "MiB",
     "1 GiB", "8 Gb", "0x10 B", "-1 GB", "nan GB", "1e400 B", "autograd", "for-loop", "x" * 300]
)
"""Names a user types: some valid, some near misses, some nonsense."""

HOSTILE = st.one_of(hostile_values(), NAMES, st.integers(-(10**30), 10**30),
                    st.sampled_from([math.nan, math.inf, -0.0, 10**400, [[[]]], {"B": -1}]))


# -- the valid calls: one per public name, keyword arguments to vary ----------------------
def _valid_calls() -> dict[str, tuple[Callable[..., object], dict[str, object]]]:
    """Each public callable, with keyword arguments that make a valid call."""
    layer = {
        "Add": {}, "AvgPool2d": {"kernel_size": 2}, "BatchNorm2d": {}, "Concat": {},
        "Conv2d": {"out_channels": 4, "kernel_size": 3}, "CrossEntropyLoss": {},
        "Dense": {"units": 4}, "Dropout": {"p": 0.1},
        "Embedding": {"num_embeddings": 10, "embedding_dim": 4}, "Flatten": {},
        "Input": {"shape": (3, 8, 8)}, "LayerNorm": {}, "MaxPool2d": {"kernel_size": 2},
        "MultiHeadAttention": {"heads": 2}, "ReLU": {}, "Sigmoid": {}, "Softmax": {},
    }
    calls: dict[str, tuple[Callable[..., object], dict[str, object]]] = {
        name: (getattr(mt, name), kwargs) for name, kwargs in layer.items()
    }
    calls.update({
        "ModelCounts": (mt.ModelCounts, {"parameters": 100, "activations": 4 * B,
                                         "input_elements": 3 * B}),
        "Network": (mt.Network, {"layers": [mt.Input((4,)), mt.Dense(2)], "name": "n"}),
        "Node": (mt.Node, {"layer": mt.Dense(2), "inputs": ("input",)}),
        "convert": (mt.convert, {"nbytes": 2**20, "unit": "MiB"}),
        "evaluate": (lambda **k: mt.evaluate(MEMORY.total, **k), {"B": 2, "H": 9}),
        "format_bytes": (mt.format_bytes, {"nbytes": 1024, "unit": "KiB", "digits": 2}),
        "inference_memory": (mt.inference_memory, {"model": NET, "precision": "fp16"}),
        "parse_bytes": (mt.parse_bytes, {"text": "1.5 GiB", "default_unit": "B"}),
        "training_memory": (mt.training_memory, {"model": NET, "optimizer": "adam",
                                                 "precision": "mixed-fp16"}),
        "Column": (mt.Column, {"title": "size", "align": "right", "wrap": 10}),
        "Table": (mt.Table, {"columns": ["a", "b"], "rows": [[1, 2]], "title": "t"}),
        "MemoryBreakdown": (lambda **k: mt.MemoryBreakdown(**{**_fields(MEMORY), **k}),
                            {"mode": "training"}),
        "compare_scenarios": (mt.compare_scenarios, {"model": NET, "optimizers": ("sgd",),
                                                     "precisions": ("fp32",)}),
        "compile_exact": (mt.compile_exact, {"expression": MEMORY.total, "names": ["B", "H"]}),
        "convention": (mt.convention, {"spec": "autograd"}),
        "dtype": (mt.dtype, {"spec": "fp32"}),
        "evaluate_grid": (lambda **k: mt.evaluate_grid(MEMORY.total, **k),
                          {"B": np.arange(1, 4), "H": 9}),
        "max_batch": (mt.max_batch, {"model": NET, "limit": "1 GiB", "optimizer": "sgd",
                                     "H": 32}),
        "max_sequence_length": (mt.max_sequence_length, {"model": COUNTS, "limit": "1 GiB",
                                                         "optimizer": "adam", "B": 2}),
        "max_value": (mt.max_value, {"expression": MEMORY, "symbol": "H", "limit": "1 GiB",
                                     "B": 2}),
        "optimizer": (mt.optimizer, {"spec": "adam", "weight_decay": 0.1}),
        "precision": (mt.precision, {"spec": "mixed-bf16"}),
        "sensitivity": (mt.sensitivity, {"model": NET, "optimizer": "adam", "B": 8, "H": 32}),
        "AutogradConvention": (mt.AutogradConvention, {"implementation": "for-loop",
                                                       "keeps_logits": True}),
        "estimate": (estimate, {"model": "gpt2", "batch": 2, "sequence": 64,
                                "optimizer": "adamw", "precision": "bf16",
                                "gpu": "H100-80GB"}),
    })
    return calls


def _fields(memory: mt.MemoryBreakdown) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(memory, f.name) for f in dataclasses.fields(memory) if f.init}


CALLS = _valid_calls()

NOT_CALLED = {
    "Footprint": "an abstract base class: its subclasses (MemoryBreakdown) are fuzzed",
    "__version__": "a string",
}


def _is_error_class(name: str) -> bool:
    value = getattr(mt, name)
    return isinstance(value, type) and issubclass(value, BaseException)


def test_every_public_name_is_fuzzed():
    """Each callable in memtheory.__all__ has a valid call here (errors and ABCs aside)."""
    public = {n for n in mt.__all__ if not _is_error_class(n)} - set(NOT_CALLED)
    assert public <= set(CALLS), sorted(public - set(CALLS))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_valid_calls_are_valid(name):
    """The starting point of each fuzz is a call that returns a result."""
    function, kwargs = CALLS[name]
    with _bounded(name):
        assert function(**kwargs) is not None


# -- the fuzz --------------------------------------------------------------------------------
@contextmanager
def _bounded(entry: str) -> Iterator[None]:
    """Fail a call still running after HANG_SECONDS (a hang), where SIGALRM exists."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hung(*_: object) -> None:
        raise _Hang(f"{entry}: still running after {HANG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class _Hang(BaseException):
    """Raised in a call that runs past HANG_SECONDS (a BaseException: no except catches it)."""


def outcome(entry: str, call: Callable[[], object]) -> object:
    """Run ``call``: its result, or None for a memtheory error; any other error fails the test."""
    TRIED[entry] += 1
    try:
        with _bounded(entry):
            return call()
    except mt.MemtheoryError:
        return None
    except _Hang as hang:
        pytest.fail(str(hang))
    except Exception as error:  # noqa: BLE001 - the point: no raw error may escape
        pytest.fail(f"{entry}: raw {type(error).__name__}: {str(error)[:300]}")


def _keys(name: str) -> list[str]:
    """The keywords fuzzed for ``name``: its valid call's and every other one it takes."""
    function, kwargs = CALLS[name]
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        parameters = []
    named = [p.name for p in parameters
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return sorted(set(kwargs) | set(named))


def _changes(keys: list[str]) -> st.SearchStrategy[dict[str, object]]:
    return st.dictionaries(st.sampled_from(keys), HOSTILE, min_size=1, max_size=2)


LIBRARY = sorted(set(CALLS) - {"estimate"})

HOSTILE_CALLS = st.sampled_from(LIBRARY).flatmap(
    lambda name: st.tuples(st.just(name), _changes(_keys(name)))
)
"""A public name, and one or two of its arguments replaced by hostile values."""


_PAIR = np.array([1, 2])


@settings(FUZZ, max_examples=400)
@given(call=HOSTILE_CALLS)
# the falsifying examples this suite found, each fixed where the value is first read:
@example(call=("Network", {"calls": None}))  # network.py: 'NoneType' object is not iterable
@example(call=("Network", {"calls": (np.int64(0), False)}))  # "has no len()"
@example(call=("Node", {"inputs": None}))  # graph.py: 'NoneType' object is not iterable
@example(call=("Node", {"inputs": np.uint8(4)}))
@example(call=("Column", {"wrap": "B*H"}))  # tables.py: '<' between 'str' and 'int'
@example(call=("Column", {"align": _PAIR}))  # the truth value of an array is ambiguous
@example(call=("Table", {"rows": np.float32(math.nan)}))  # 'float32' object is not iterable
@example(call=("Table", {"columns": 6.4e184}))
@example(call=("Table", {"notes": np.uint8(4)}))
@example(call=("Table", {"footer": (B * H, -5.8e16)}))  # 'Mul' object is not iterable
@example(call=("compare_scenarios", {"precisions": 123284151849455386624}))  # not iterable
@example(call=("AutogradConvention", {"implementation": _PAIR}))  # unhashable ndarray
@example(call=("inference_memory", {"setup": {"": None}}))  # Setup() got an unexpected keyword
@example(call=("max_value", {"limit": 1e300}))  # sympy's PrecisionExhausted flooring a root
@example(call=("max_sequence_length", {"mode": _PAIR}))  # ambiguous truth value
@example(call=("optimizer", {"centered": _PAIR}))  # ambiguous truth value
def test_the_library_takes_hostile_arguments(call):
    """Each public function or class: a result or a memtheory error for hostile arguments."""
    name, changes = call
    function, kwargs = CALLS[name]
    outcome(name, lambda: function(**{**kwargs, **changes}))


ESTIMATE_OPTIONS = [k for k in _keys("estimate") if k not in CALLS["estimate"][1]] + [
    "model", "batch", "sequence", "optimizer", "precision", "gpu"]


@settings(FUZZ, max_examples=20)
@given(changes=_changes(sorted(set(ESTIMATE_OPTIONS))))
@example(changes={"gpus": np.array([1, 2])})  # issue 27: "truth value of an array ..."
@example(changes={"batch": None})  # accumulation.py: None * int
@example(changes={"gpu": np.array([1, 2])})  # arrays: "truth value ... ambiguous"
@example(changes={"optimizer": np.array([1, 2])})
@example(changes={"zero": np.array([1, 2])})
@example(changes={"offload": np.array([1, 2])})
@example(changes={"setup": np.array([1, 2])})
@example(changes={"reserve": sp.zoo, "qlora": True})  # setup.py: comparing zoo with 0
@example(changes={"lora": 10**165})  # lora.py: float(alpha) overflowed
@example(changes={"context_parallel": None})  # plan.py: None > 1
def test_estimate_takes_hostile_arguments(changes):
    """estimate(): a result or a memtheory error for hostile values of one or two options."""
    kwargs = {"model": "gpt2", "batch": 2, "sequence": 64, **changes}
    outcome("estimate", lambda: estimate(**kwargs))


def print_tried(capsys: pytest.CaptureFixture[str], tried: Counter[str], what: str) -> None:
    """Print how many inputs each entry point got (skip when the fuzz tests did not run)."""
    if not tried:
        pytest.skip("the fuzz tests did not run in this session")
    with capsys.disabled():
        shown = ", ".join(f"{name} {count}" for name, count in sorted(tried.items()))
        print(f"\n{what}: {sum(tried.values())} in all; {shown}")


def test_zz_report(capsys):
    """Print how many hostile calls each entry point got; every one of them was exercised."""
    print_tried(capsys, TRIED, "API hypothesis suite, calls per entry point")
