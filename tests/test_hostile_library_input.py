"""Fuzz: the library's constructors and entry points under hostile and careless input.

Every call must end in a result or in a memtheory error (a subclass of
:class:`memtheory.MemtheoryError`): never a raw Python error or a silently wrong
number. NumPy integers are integers and must be accepted as such. No test asserts
how long a call takes (issue 22); the last test reports how many hostile calls were
made and the slowest of each entry point.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memtheory as mt
import memtheory.layers as layers
from memtheory.constraints import SizeConstraint
from memtheory.symbols import B, H
from tests.strategies import hostile_values

TRIED: Counter[str] = Counter()
"""Hostile calls made, by entry point."""

SLOWEST: dict[str, float] = {}
"""The slowest call of each entry point, in seconds (reported, never asserted)."""

FUZZ = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def outcome(entry: str, call: Callable[[], object]) -> object:
    """Run ``call``: a result or a memtheory error; None for an error. Its time is recorded."""
    start = time.perf_counter()
    try:
        result = call()
    except mt.MemtheoryError:
        result = None
    except Exception as error:  # noqa: BLE001 - the point: no raw error may escape
        pytest.fail(f"{entry}: raw {type(error).__name__}: {error}")
    SLOWEST[entry] = max(SLOWEST.get(entry, 0.0), time.perf_counter() - start)
    TRIED[entry] += 1
    return result


LAYER_CLASSES = sorted(
    (
        cls
        for name in layers.__all__
        if isinstance(cls := getattr(layers, name), type)
        and issubclass(cls, mt.layers.Layer)
        and dataclasses.is_dataclass(cls)
    ),
    key=lambda cls: cls.__name__,
)

HOSTILE = hostile_values()
SCALARS = hostile_values(containers=False)


def small_cnn() -> mt.Network:
    """A symbolic CNN whose 5x5 kernel needs H >= 5."""
    return mt.Network([mt.Input((3, H, H)), mt.Conv2d(4, 5), mt.Flatten(), mt.Dense(3)])


NET = small_cnn()
MEMORY = mt.training_memory(NET, optimizer="sgd")


def test_every_public_layer_is_fuzzed():
    """The fuzz covers every public layer class, Input included."""
    names = {cls.__name__ for cls in LAYER_CLASSES}
    assert {"Conv2d", "Dense", "Input", "MaxPool2d", "MultiHeadAttention", "LSTM"} <= names
    assert len(names) >= 30


def required(cls: type) -> list[str]:
    """The constructor's required arguments (fields without a default), in order."""
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


@FUZZ
@given(cls=st.sampled_from(LAYER_CLASSES), data=st.data())
def test_layer_constructors(cls, data):
    """A layer built from hostile values, then placed in a network, is a result or an error.

    The required arguments get hostile values (or a plausible one), and up to two
    optional ones too: every argument the constructor takes, with the right arity.
    """
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    needed = required(cls)
    args = [data.draw(HOSTILE | st.sampled_from([1, 3, 8, (3, 3)])) for _ in needed]
    optional = [name for name in names if name not in needed]
    chosen = (
        data.draw(st.lists(st.sampled_from(optional), max_size=2, unique=True)) if optional else []
    )
    kwargs = {name: data.draw(HOSTILE) for name in chosen}
    layer = outcome(f"{cls.__name__}()", lambda: cls(*args, **kwargs))
    if isinstance(layer, mt.layers.Layer) and not isinstance(layer, mt.Input):
        for shape in ((3, 8, 8), (16,), (6, 4)):
            net = outcome(
                "Network", lambda shape=shape: mt.Network([mt.Input(shape, batch=2), layer])
            )
            if isinstance(net, mt.Network):
                memory = outcome(
                    "training_memory", lambda net=net: mt.training_memory(net, optimizer="sgd")
                )
                if memory is not None:
                    outcome("format", lambda memory=memory: memory.format("MiB"))


@FUZZ
@given(items=HOSTILE, name=HOSTILE)
def test_network(items, name):
    """Network() with anything for its layers or its name."""
    outcome("Network", lambda: mt.Network(items, name=name))
    outcome("Network", lambda: mt.Network([mt.Input((4,)), items]))


@FUZZ
@given(model=HOSTILE, optimizer=SCALARS, precision=SCALARS, convention=SCALARS)
def test_training_memory(model, optimizer, precision, convention):
    """training_memory with a hostile model, or hostile options for a real one."""
    outcome("training_memory", lambda: mt.training_memory(model, optimizer="sgd"))
    outcome(
        "training_memory",
        lambda: mt.training_memory(
            NET, optimizer=optimizer, precision=precision, convention=convention
        ),
    )


@FUZZ
@given(expression=HOSTILE, b=HOSTILE, h=HOSTILE, name=st.text(max_size=3))
def test_evaluate(expression, b, h, name):
    """evaluate: a hostile expression, hostile values, unknown names; results are exact."""
    outcome("evaluate", lambda: mt.evaluate(expression, B=3))
    value = outcome("evaluate", lambda: mt.evaluate(MEMORY.total, B=b, H=h))
    if value is not None and value.is_number:  # accepted: then a valid size, checked exactly
        assert int(h) >= 5 and value == MEMORY.evaluate(B=int(b), H=int(h)).total
    outcome("evaluate", lambda: mt.evaluate(MEMORY.total, **{name: 3}))


WITHIN = (
    HOSTILE
    | st.dictionaries(st.text(max_size=3) | SCALARS, SCALARS, min_size=1, max_size=2)
    | st.lists(st.builds(SizeConstraint, SCALARS, SCALARS), min_size=1, max_size=2)
)
"""What within= may get: anything, mappings of junk, and constraints built from junk."""


@FUZZ
@given(within=st.data(), b=SCALARS, name=SCALARS, unit=SCALARS)
def test_within_and_memory_results(within, b, name, unit):
    """within= with anything; a memory result's evaluate, grid, format and table too."""
    within = outcome("SizeConstraint", lambda: within.draw(WITHIN))
    outcome("evaluate", lambda: mt.evaluate(MEMORY.total, within=within, B=2, H=9))
    outcome("evaluate_grid", lambda: mt.evaluate_grid(B * H, within=within, B=2, H=9))
    outcome("compile_exact", lambda: mt.compile_exact(B * H, within=within))
    evaluated = outcome("Footprint.evaluate", lambda: MEMORY.evaluate(B=b, H=b))
    outcome("Footprint.grid", lambda: MEMORY.grid(name, B=np.array([1, 2]), H=9))
    outcome("Footprint.grid", lambda: MEMORY.grid("total", B=b, H=9))
    outcome("Footprint.format", lambda: MEMORY.evaluate(B=2, H=9).format(unit, "total"))
    outcome("Footprint.format", lambda: MEMORY.evaluate(B=2, H=9).format("MiB", name))
    if isinstance(evaluated, mt.MemoryBreakdown):
        outcome("Footprint.table", lambda: str(evaluated.table()))


@FUZZ
@given(b=HOSTILE, h=HOSTILE, dtype=SCALARS | st.just(object), shape=st.integers(0, 3))
def test_evaluate_grid(b, h, dtype, shape):
    """evaluate_grid with hostile values, arrays of odd shapes and dtypes."""
    sides = np.arange(1, 1 + shape)
    outcome("evaluate_grid", lambda: mt.evaluate_grid(MEMORY.total, B=b, H=h))
    outcome("evaluate_grid", lambda: mt.evaluate_grid(MEMORY.total, B=b, H=sides, dtype=dtype))
    grid = outcome("evaluate_grid", lambda: mt.evaluate_grid(4 * B * H, B=sides, H=h))
    if grid is not None:
        assert np.all(np.asarray(grid) > 0)  # sizes were positive, so is every product


@FUZZ
@given(expression=HOSTILE, names=HOSTILE, first=HOSTILE, second=HOSTILE)
def test_compile_exact(expression, names, first, second):
    """compile_exact with hostile expressions and names; its function with hostile values."""
    outcome("compile_exact", lambda: mt.compile_exact(expression, names))
    f = outcome("compile_exact", lambda: mt.compile_exact(MEMORY.total, ["B", "H"]))
    assert f is not None
    value = outcome("compile_exact()", lambda: f(first, second))
    if value is not None:
        assert value == MEMORY.evaluate(B=int(first), H=int(second)).total


@FUZZ
@given(limit=HOSTILE, h=SCALARS, symbol=SCALARS, start=SCALARS)
def test_max_batch_and_max_value(limit, h, symbol, start):
    """The what-if solvers with hostile limits, sizes, symbols and starting points."""
    outcome("max_batch", lambda: mt.max_batch(NET, limit, optimizer="sgd", H=50))
    outcome("max_batch", lambda: mt.max_batch(NET, "1 GiB", optimizer="sgd", H=h))
    outcome("max_value", lambda: mt.max_value(MEMORY, symbol, "1 GiB", B=2))
    outcome("max_value", lambda: mt.max_value(MEMORY, "H", "1 GiB", start=start, B=2))


@FUZZ
@given(nbytes=HOSTILE, unit=SCALARS, digits=SCALARS)
def test_format_bytes(nbytes, unit, digits):
    """format_bytes with hostile byte counts, units and digits."""
    outcome("format_bytes", lambda: mt.format_bytes(nbytes))
    outcome("format_bytes", lambda: mt.format_bytes(2**20, unit))
    outcome("format_bytes", lambda: mt.format_bytes(2**20, "MiB", digits))


@FUZZ
@given(first=HOSTILE, second=HOSTILE, third=SCALARS)
def test_more_entry_points(first, second, third):
    """inference_memory, sensitivity, convert, summaries and ModelCounts with hostile values."""
    outcome("inference_memory", lambda: mt.inference_memory(NET, precision=first))
    outcome("inference_memory", lambda: mt.inference_memory(first, convention=third))
    outcome("sensitivity", lambda: mt.sensitivity(MEMORY, B=first, H=second))
    outcome("convert", lambda: mt.convert(first, third))
    outcome("Network.summary", lambda: NET.summary(B=first, H=second))
    outcome(
        "ModelCounts",
        lambda: mt.ModelCounts(parameters=first, activations=second, input_elements=third),
    )


@pytest.mark.parametrize("value", [np.int64(7), np.int32(7), np.uint16(7)])
def test_numpy_integers_are_accepted_everywhere(value):
    """NumPy integers are integers: layers, inputs, evaluation and solvers take them."""
    assert mt.Conv2d(value, 3).out_channels == 7
    net = mt.Network([mt.Input((3, value + 1, value + 1)), mt.Conv2d(value, 5)])
    assert net.output_shape == (B, 7, 4, 4)
    assert mt.evaluate(MEMORY.total, B=value, H=value) == MEMORY.evaluate(B=7, H=7).total
    assert mt.compile_exact(MEMORY.total, ["B", "H"])(value, value) == mt.evaluate(
        MEMORY.total, B=7, H=7
    )
    assert mt.max_batch(NET, 2**30, optimizer="sgd", H=value) == mt.max_batch(
        NET, 2**30, optimizer="sgd", H=7
    )
    assert mt.format_bytes(value, "B", 0) == "7 B"


def test_zz_report(capsys):
    """Report how many hostile calls were made and the slowest; none raised a raw error."""
    total = sum(TRIED.values())
    if total:
        with capsys.disabled():  # printed in every run, not only when something fails
            slowest = max(SLOWEST, key=SLOWEST.__getitem__)
            print(
                f"\nhostile library input: {total} calls over {len(TRIED)} entry points, none "
                f"raised a raw Python error; slowest call: {slowest} {SLOWEST[slowest]:.2f} s."
            )
    entries = {"Network", "evaluate", "evaluate_grid", "compile_exact", "max_value", "format_bytes"}
    for entry in entries & set(TRIED):  # those whose fuzz ran: each really was exercised
        assert TRIED[entry] >= 100, f"{entry}: only {TRIED[entry]} calls"
