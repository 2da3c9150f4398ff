"""Every memory result is a Footprint: the same totals, peak, units and tables everywhere."""

import ast
import dataclasses
import importlib
import importlib.util
import pkgutil
import re
from decimal import Decimal
from pathlib import Path

import pytest
import sympy as sp

import memtheory
from memtheory import (
    Conv2d,
    Dense,
    Flatten,
    Footprint,
    Input,
    MaxPool2d,
    ModelCounts,
    Network,
    ReLU,
    inference_memory,
    training_memory,
)
from memtheory.errors import EvaluationError, UnknownNameError
from memtheory.models import gpt2
from memtheory.techniques import (
    cpu_offload,
    generation_memory,
    gradient_accumulation,
    zero_model_states,
    zero_partition,
)

PACKAGE = Path(memtheory.__file__).parent


def small_net() -> Network:
    """A small CNN with a pooling floor, so the results keep symbols B and nothing else."""
    return Network([Input((3, 9, 9)), Conv2d(4, 3), ReLU(), MaxPool2d(2), Flatten(), Dense(5)])


def results() -> dict[str, Footprint]:
    """One of each public memory result, built the way a user would build it."""
    net = small_net()
    adam = training_memory(net, optimizer="adam")
    counts = ModelCounts.per_sample(parameters=10**6, activations=10**4, input_elements=100)
    return {
        "training, breakdown": adam,
        "training, rule of thumb": training_memory(
            net, optimizer="sgd", convention="rule_of_thumb"
        ),
        "training, autograd": training_memory(net, optimizer="sgd", convention="autograd"),
        "inference": inference_memory(net),
        "inference, autograd": inference_memory(net, convention="autograd"),
        "generation (KV cache)": generation_memory(gpt2("small")),
        "ZeRO partition": zero_partition(training_memory(counts, optimizer="adam"), 4, stage=2),
        "ZeRO model states": zero_model_states(10**9, 8, 3),
        "CPU offload (GPU part)": cpu_offload(adam).gpu,
        "CPU offload (CPU part)": cpu_offload(adam).cpu,
        "gradient accumulation": gradient_accumulation(net, 4, 8, optimizer="sgd").memory,
    }


RESULTS = results()
VALUES = {"B": 3, "S": 17}


def values_for(result: Footprint) -> dict[str, int]:
    """The sizes this result still depends on, with values."""
    return {s.name: VALUES[s.name] for s in result.free_symbols}


@pytest.mark.parametrize("name", RESULTS)
def test_every_result_is_a_footprint(name):
    """Each public memory result implements the one interface."""
    assert isinstance(RESULTS[name], Footprint)


def test_every_public_result_class_is_a_footprint():
    """A public dataclass that carries bytes by component derives from Footprint.

    Scanned over every module's ``__all__``: any dataclass with a ``components``
    field or property, or with both a ``total`` and an ``evaluate``, must be a
    Footprint. New result types cannot slip past the interface. The
    ``memtheory.torch`` modules (measurements, traces) are scanned too where
    PyTorch is installed; without it they cannot be imported.
    """
    offenders, found = [], set()
    have_torch = importlib.util.find_spec("torch") is not None
    for module in pkgutil.walk_packages([str(PACKAGE)], "memtheory."):
        if module.name.startswith("memtheory.torch.") and not have_torch:
            continue
        loaded = importlib.import_module(module.name)
        for export in getattr(loaded, "__all__", ()):
            obj = getattr(loaded, export, None)
            if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
                continue
            carries_bytes = hasattr(obj, "components") or (
                hasattr(obj, "total") and hasattr(obj, "evaluate")
            )
            if carries_bytes:
                found.add(obj.__name__)
                if not issubclass(obj, Footprint):
                    offenders.append(f"{module.name}.{export}")
    assert {"MemoryBreakdown", "GenerationMemory"} <= found
    if have_torch:
        assert {"Measurement", "TracedMemory", "TrackedMemory"} <= found
    assert offenders == []


@pytest.mark.parametrize("name", RESULTS)
def test_total_is_the_sum_and_peak_is_the_timeline_maximum(name):
    """Total adds the components; peak is the timeline's maximum, or the total without one."""
    result = RESULTS[name].evaluate(**values_for(RESULTS[name]))
    assert result.total == sum(result.components.values())
    if result.timeline:
        assert result.peak == max(result.timeline.values())
        assert result.timeline[result.peak_moment] == result.peak
    else:
        assert result.peak == result.total and result.peak_moment is None
    assert result["total"] == result.total and result["peak"] == result.peak


@pytest.mark.parametrize("name", RESULTS)
def test_evaluate_keeps_the_type_and_every_name(name):
    """evaluate() returns the same kind of result with the same components, now numbers."""
    result = RESULTS[name]
    evaluated = result.evaluate(**values_for(result))
    assert type(evaluated) is type(result)
    assert list(evaluated) == list(result)
    assert not evaluated.free_symbols
    assert all(v.is_number for v in evaluated.components.values())


@pytest.mark.parametrize("name", RESULTS)
def test_table_columns_add_up_to_the_total(name):
    """In bytes with no rounding, the component cells sum to the total cell, in every format."""
    result = RESULTS[name].evaluate(**values_for(RESULTS[name]))
    table = result.table("B", 0)
    cells = [int(c) for c in table.column("B")]
    total_row = table.footer[0]
    assert total_row[0] == "total"
    assert sum(cells) == int(total_row[1]) == result.total
    for rendering in (table.text(), table.markdown(), table.html()):
        assert str(result.total) in rendering
    if result.timeline:
        assert table.footer[1][1] == str(result.peak)


@pytest.mark.parametrize("name", RESULTS)
def test_symbolic_tables_show_byte_formulas(name):
    """Before evaluate(), table() shows exact byte expressions and says what to fill in."""
    result = RESULTS[name]
    table = result.table()
    if result.free_symbols:
        assert table.titles == ("component", "bytes")
        assert table.footer[0] == ("total", str(result.total))
        assert "evaluate(" in table.notes[0]
    assert result._repr_html_() == table.html()
    assert result._repr_markdown_() == table.markdown()


def test_format_takes_the_unit_first_and_names_the_slip():
    """format('MiB', name=...) works; the old order gets an error that shows the new one."""
    memory = training_memory(small_net(), optimizer="adam").evaluate(B=2)
    assert memory.format("KiB", name="parameters") == memtheory.format_bytes(
        memory["parameters"], "KiB"
    )
    with pytest.raises(UnknownNameError, match=r"format\('MiB', name='total'\)"):
        memory.format("total", "MiB")
    with pytest.raises(EvaluationError, match=r"evaluate\(B=\.\.\.\) first"):
        training_memory(small_net(), optimizer="adam").format("MiB")


def test_in_unit_gives_floats_unless_asked_for_exact_fractions():
    """in_unit() returns plain floats for numbers, exact sympy fractions on request."""
    memory = training_memory(small_net(), optimizer="adam").evaluate(B=2)
    shown = memory.in_unit("MiB")
    exact = memory.in_unit("MiB", exact=True)
    assert isinstance(shown["total"], float)
    assert exact["total"] == sp.Rational(memory.total, 2**20)
    assert shown["total"] == pytest.approx(float(exact["total"]))
    assert set(shown) == {*memory.components, "total", "peak"}


def test_unknown_component_names_what_there_is():
    """Asking for a component that is not there lists the ones that are."""
    with pytest.raises(UnknownNameError, match="it has parameters"):
        RESULTS["training, breakdown"]["kv_cache"]


def test_percent_shares_add_up_to_about_100():
    """The share column is each component over the total, rounded to 0.1%."""
    memory = RESULTS["training, breakdown"].evaluate(B=64)
    shares = [Decimal(c.rstrip("%")) for c in memory.table().column("share")]
    assert abs(sum(shares) - 100) <= Decimal("0.05") * len(shares)


_TABLE_BUILDING = re.compile(r"\.(ljust|rjust|center)\(|[\"']\|\s*-{3}|[\"']-[\"']\s*\*")


def test_no_module_but_the_table_module_draws_tables():
    """Only memtheory/tables.py pads columns, draws rules or writes pipe-table syntax."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "tables.py" and path.parent == PACKAGE:
            continue
        source = path.read_text(encoding="utf-8")
        code = "\n".join(
            line
            for line in source.splitlines()
            if not line.lstrip().startswith((">>>", "...", "#"))
        )
        for match in _TABLE_BUILDING.finditer(code):
            offenders.append(f"{path.relative_to(PACKAGE)}: {match.group(0)}")
        ast.parse(source)  # the scan reads real modules
    assert offenders == []
