"""Scenarios: the memory of every combination of optimizer, precision, checkpointing and ZeRO.

:func:`compare_scenarios` evaluates each combination and returns a
:class:`ScenarioComparison`, which prints as a table with whether each fits a
device. Used in the book's chapter "Checkpointing, sharding and offload".

Examples
--------
>>> from memtheory import ModelCounts
>>> counts = ModelCounts(parameters=10**9, activations=0, input_elements=0)
>>> [s.optimizer for s in compare_scenarios(counts, precisions=("fp32",)).scenarios]
['sgd', 'adam']
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

import sympy as sp

from memtheory.conventions import ConventionLike, Model
from memtheory.errors import EvaluationError, UnsupportedError
from memtheory.memory import training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.tables import Column, Table
from memtheory.techniques.checkpointing import (
    best_network_interval,
    best_uniform_interval,
    checkpoint_units,
    checkpointed_counts,
)
from memtheory.techniques.zero import zero_partition
from memtheory.units import convert, format_bytes, round_half_up
from memtheory.whatif.limits import By, LimitLike, memory_limit, total_bytes

_T = TypeVar("_T")

__all__ = ["Scenario", "ScenarioComparison", "compare_scenarios"]

IntervalLike = int | Literal["sqrt", "best"] | None
"""A checkpoint interval: a number of units, ``"sqrt"``, ``"best"``, or None for none."""


@dataclass(frozen=True)
class Scenario:
    """One combination of techniques and its memory.

    Attributes
    ----------
    optimizer : str
    precision : str
    interval : int or None
        The checkpoint interval (units per checkpointed segment), or None.
    zero_stage : int
    memory : MemoryBreakdown
        Per-device memory, evaluated at the comparison's values.
    by : {"peak", "total"}, default "peak"
        Which bytes :attr:`total` reports (see :mod:`memtheory.whatif.limits`).

    Examples
    --------
    Adam in fp32 for 10^9 parameters, sharded by ZeRO stage 3 over 8 devices:

    >>> from memtheory import ModelCounts
    >>> counts = ModelCounts(parameters=10**9, activations=0, input_elements=0)
    >>> comparison = compare_scenarios(counts, optimizers=("adam",), precisions=("fp32",),
    ...                                zero_stages=(3,), devices=8)
    >>> [scenario] = comparison.scenarios
    >>> scenario.optimizer, scenario.precision, scenario.interval, scenario.zero_stage
    ('adam', 'fp32', None, 3)
    >>> scenario.total  # 16 bytes per parameter / 8 devices
    2000000000
    """

    optimizer: str
    precision: str
    interval: int | None
    zero_stage: int
    memory: MemoryBreakdown
    by: By = "peak"

    @property
    def total(self) -> sp.Expr:
        """Bytes per device compared with the limit: the memory's peak or total, as ``by`` says."""
        return total_bytes(self.memory, by=self.by)


@dataclass(frozen=True)
class ScenarioComparison:
    """Scenarios side by side; ``str()`` prints the table.

    Attributes
    ----------
    scenarios : tuple of Scenario
    limit : sympy number or None
        The device memory, when given.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> counts = ModelCounts(parameters=10**9, activations=0, input_elements=0)
    >>> comparison = compare_scenarios(counts, optimizers=("adam",), precisions=("fp32",),
    ...                                zero_stages=(0, 3), devices=8, limit="12 GB")
    >>> comparison.limit
    12000000000
    >>> print(comparison)
    optimizer  precision  checkpointing  ZeRO     total (GiB)  fits 11.18 GiB
    ---------  ---------  -------------  -------  -----------  --------------
    adam       fp32       -              -              14.90  no
    adam       fp32       -              stage 3         1.86  yes
    """

    scenarios: tuple[Scenario, ...]
    limit: sp.Expr | None = None

    def table(self, unit: str = "GiB", digits: int = 2) -> Table:
        """Tabulate the scenarios, with whether each fits the limit.

        Examples
        --------
        >>> from memtheory import ModelCounts
        >>> counts = ModelCounts(parameters=10**9, activations=0, input_elements=0)
        >>> comparison = compare_scenarios(counts, optimizers=("sgd", "adam"), precisions=("fp32",))
        >>> print(comparison.table("GB"))
        optimizer  precision  checkpointing  ZeRO  total (GB)
        ---------  ---------  -------------  ----  ----------
        sgd        fp32       -              -           8.00
        adam       fp32       -              -          16.00
        """
        columns = [
            Column("optimizer"),
            Column("precision"),
            Column("checkpointing"),
            Column("ZeRO"),
            Column(f"total ({unit})", align="right"),
        ]
        if self.limit is not None:
            columns.append(Column(f"fits {format_bytes(self.limit, unit, digits)}"))
        body = []
        for s in self.scenarios:
            total = s.total
            if not total.is_number:
                names = ", ".join(sorted(x.name for x in total.free_symbols))
                raise EvaluationError(
                    f"table() needs numbers: pass {names}=... to compare_scenarios()."
                )
            line = [
                s.optimizer,
                s.precision,
                "-" if s.interval is None else f"every {s.interval}",
                "-" if s.zero_stage == 0 else f"stage {s.zero_stage}",
                str(round_half_up(convert(total, unit), digits)),
            ]
            if self.limit is not None:
                line.append("yes" if total <= self.limit else "no")
            body.append(line)
        return Table(columns, body)

    def __str__(self) -> str:
        return self.table().text()

    def _repr_html_(self) -> str:
        return self.table().html()


def compare_scenarios(
    model: Model,
    *,
    optimizers: Iterable[OptimizerLike] = ("sgd", "adam"),
    precisions: Iterable[PrecisionLike] = ("fp32", "mixed-fp16"),
    intervals: Iterable[IntervalLike] = (None,),
    zero_stages: Iterable[int] = (0,),
    devices: int = 1,
    limit: LimitLike | None = None,
    convention: ConventionLike = "breakdown",
    by: By = "peak",
    **values: object,
) -> ScenarioComparison:
    """Tabulate the memory of every combination of optimizer, precision, checkpointing and ZeRO.

    Parameters
    ----------
    model : Network or ModelCounts
        Checkpointing needs a Network.
    optimizers, precisions : iterables
    intervals : iterable of int, "sqrt", "best" or None
        Checkpoint intervals (units per checkpointed segment). ``"sqrt"`` is
        the textbook choice for a chain of equal units (about the square root
        of their number, :func:`~memtheory.techniques.best_uniform_interval`);
        ``"best"`` tries every interval on the network's own, unequal units and
        keeps the least memory
        (:func:`~memtheory.techniques.best_network_interval`); None means no
        checkpointing.
    zero_stages : iterable of {0, 1, 2, 3}
    devices : int, default 1
        Data-parallel devices the ZeRO stages partition over.
    limit : bytes or str, optional
        Device memory, for a "fits" column.
    convention : str or Convention, default "breakdown"
    by : {"peak", "total"}, default "peak"
        Which bytes each scenario's total is (see :mod:`memtheory.whatif.limits`).
    **values
        Sizes to evaluate at (``B=32, S=1024``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> table = compare_scenarios(gpt2("small"), optimizers=("adam",),
    ...                           precisions=("fp32", "mixed-fp16"), intervals=(None, "sqrt"),
    ...                           limit="24 GiB", B=8, S=1024)
    >>> print(table)
    optimizer  precision   checkpointing  ZeRO  total (GiB)  fits 24.00 GiB
    ---------  ----------  -------------  ----  -----------  --------------
    adam       fp32        -              -           34.36  no
    adam       fp32        every 6        -            9.35  yes
    adam       mixed-fp16  -              -           18.11  yes
    adam       mixed-fp16  every 6        -            5.60  yes
    """
    cap = None if limit is None else memory_limit(limit)
    scenarios = []
    for opt, prec, choice, stage in itertools.product(
        _choices(optimizers, "optimizers"), _choices(precisions, "precisions"),
        _choices(intervals, "intervals"), _choices(zero_stages, "zero_stages"),
    ):
        interval = _interval(model, choice, values)
        counts = (
            checkpointed_counts(model, interval)
            if isinstance(model, Network)
            else _plain_counts(model, interval)
        )
        memory = training_memory(counts, optimizer=opt, precision=prec, convention=convention)
        if stage:
            memory = zero_partition(memory, devices, stage)
        if values:
            memory = memory.evaluate(**{k: v for k, v in values.items() if _has(memory, k)})
        scenarios.append(Scenario(_label(opt), _label(prec), interval, stage, memory, by))
    return ScenarioComparison(tuple(scenarios), cap)


def _has(memory: MemoryBreakdown, name: str) -> bool:
    return any(s.name == name for s in memory.free_symbols)


def _label(spec: object) -> str:
    return spec if isinstance(spec, str) else str(getattr(spec, "name", spec))


def _interval(model: Model, choice: IntervalLike, values: dict[str, object]) -> int | None:
    if choice is None:
        return None
    if not isinstance(model, Network):
        raise UnsupportedError(
            "checkpointing needs the network's layers: pass a Network, not ModelCounts."
        )
    if choice == "sqrt":
        return best_uniform_interval(len(checkpoint_units(model)))
    if choice == "best":
        return best_network_interval(model, **values)
    return choice


def _plain_counts(model: Model, interval: int | None) -> Model:
    if interval is not None:  # pragma: no cover - refused by _interval
        raise UnsupportedError("checkpointing needs a Network.")
    return model


def _choices(values: Iterable[_T], name: str) -> tuple[_T, ...]:
    """Return the choices to compare, or refuse one value where a list of them belongs."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise UnsupportedError(
            f"{name} is a list of choices to compare, got {type(values).__name__} "
            f"{values!r:.60}: pass e.g. {name}=({values!r:.30},)."
        )
    return tuple(values)
