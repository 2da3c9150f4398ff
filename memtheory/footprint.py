r"""The one interface of every memory result: components, total, peak, and how to show them.

A training step's memory (:class:`~memtheory.memory_breakdown.MemoryBreakdown`),
a language model generating text
(:class:`~memtheory.techniques.kv_cache.GenerationMemory`) and every other
memory result are :class:`Footprint`\ s. They answer the same questions the
same way:

``components``
    Bytes per named component (``parameters``, ``gradients``, ``kv_cache``,
    ...), each an exact sympy expression that may keep symbols (batch ``B``,
    sequence ``S``, ...) until :meth:`~Footprint.evaluate` fills them in.
``total``
    The sum of the components: every listed tensor counted once, as if all
    were alive together.
``peak``
    The most bytes alive at one moment, where the result follows the step
    moment by moment (a ``timeline``, as the ``autograd`` convention does);
    :attr:`~Footprint.peak_moment` names that moment. A peak can exceed the
    total: it includes transient tensors that no component lists (the
    gradient of an activation while backward passes through it, an optimizer's
    temporaries). Without a timeline the peak *is* the total.

The what-if solvers (:func:`memtheory.whatif.max_batch` and friends) compare
the **peak** with the device's memory unless they are told ``by="total"``.

Examples
--------
>>> from memtheory import Conv2d, Input, Network, training_memory
>>> net = Network([Input((3, 8, 8), batch=2), Conv2d(4, 3)])
>>> memory = training_memory(net, optimizer="sgd", convention="autograd")
>>> isinstance(memory, Footprint)
True
>>> memory.total, memory.peak, memory.peak_moment
(2432, 3592, 'backward conv2d_1')
>>> memory.format("KiB", name="peak")
'3.51 KiB'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Self

import sympy as sp

from memtheory._replace import replaced
from memtheory.constraints import (
    SizeConstraint,
    as_constraints,
    candidates,
    carry,
    check_sizes,
)
from memtheory.errors import EvaluationError, UnknownNameError
from memtheory.evaluation import substitution
from memtheory.max_pruning import maximum as _maximum
from memtheory.number_timeline import NumberTimeline, as_sympy_number
from memtheory.tables import Column, Table
from memtheory.units import UNITS, convert, format_bytes, round_half_up

if TYPE_CHECKING:
    import numpy as np

__all__ = ["COMPONENT_TITLES", "Footprint"]

COMPONENT_TITLES: dict[str, str] = {
    "weights": "weights",
    "parameters": "parameters (weights and biases)",
    "frozen_parameters": "frozen base weights (no gradient)",
    "quantization_constants": "quantization constants (4-bit blocks)",
    "dequantized_copy": "dequantized compute copy (largest layer)",
    "buffers": "buffers (running statistics)",
    "gradients": "parameter gradients",
    "optimizer_state": "optimizer state",
    "optimizer_step_counters": "optimizer step counters",
    "master_weights": "master weights (full-precision copy)",
    "master_gradients": "fp32 gradient of the master copy (optimizer step)",
    "weight_copies": "low-precision weight copies (autocast)",
    "activations": "forward activations",
    "saved_activations": "activations saved for backward",
    "activation_gradients": "activation gradients",
    "gradient_buckets": "gradient buckets (all-reduce / reduce-scatter)",
    "gathered_parameters": "parameters gathered for one layer (ZeRO-3 / FSDP)",
    "ring_attention_buffers": "ring attention's keys, values and fp32 sums (context parallel)",
    "kv_cache": "key/value cache",
    "input": "input batch",
    "targets": "targets (class labels)",
    "loop_scalars": "training loop's scalars (Trainer bookkeeping)",
}
"""Every component name, in display order, with a title for tables."""


class Footprint(ABC):
    """Base class of every memory result: bytes per component, their total, and the peak.

    Subclasses provide :attr:`components` and :meth:`evaluate`; a subclass
    that follows a step moment by moment also provides :attr:`timeline`.
    Everything else (totals, peak, units, tables, notebook display) is
    defined here once.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> memory = training_memory(Network([Input((784,)), Dense(10)]), optimizer="sgd")
    >>> isinstance(memory, Footprint)
    True
    >>> memory.evaluate(B=32).format("KiB")
    '161.83 KiB'
    """

    if TYPE_CHECKING:  # a subclass provides it, as a field or a property: read-only here

        @property
        def components(self) -> Mapping[str, sp.Expr]:
            """Bytes per component, in :data:`COMPONENT_TITLES` order."""

    timeline: Mapping[str, sp.Expr] = MappingProxyType({})
    """Live bytes at the labelled moments of a step, in order; empty when not followed."""

    constraints: Mapping[str, sp.Expr] = MappingProxyType({})
    """Symbolic sizes, labelled, that must stay at least 1 for the result to hold.

    Every way of putting numbers in checks them (:meth:`evaluate`, :meth:`grid`,
    and :func:`~memtheory.evaluation.evaluate` of :attr:`total` or :attr:`peak`):
    see :mod:`memtheory.constraints`.
    """

    @abstractmethod
    def evaluate(self, **values: object) -> Self:
        """Substitute values by symbol name (``B=64``), exactly, into every expression."""

    # -- totals ----------------------------------------------------------------------
    def __getitem__(self, name: str) -> sp.Expr:
        if name == "total":
            return self.total
        if name == "peak":
            return self.peak
        try:
            return self.components[name]
        except KeyError:
            raise UnknownNameError(
                f"no component {name!r} in this result; it has "
                f"{', '.join([*self.components, 'total', 'peak'])}."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.components)

    @property
    def total(self) -> sp.Expr:
        """Sum of all components, in bytes."""
        values = list(self.components.values())
        if all(isinstance(value, sp.Rational) for value in values):  # no Add to flatten
            return sum(values, sp.Integer(0))
        return carry(sp.Add(*values), self.size_checks())

    @cached_property
    def peak(self) -> sp.Expr:
        """Most bytes alive at once: the timeline's maximum, or the total without a timeline."""
        if not self.timeline:
            return self.total
        if isinstance(self.timeline, NumberTimeline):  # an evaluated step: the largest number
            return as_sympy_number(max(self.timeline.numbers()))
        return carry(_maximum(self.timeline.values()), self.size_checks())

    def size_checks(self) -> tuple[SizeConstraint, ...]:
        """Return :attr:`constraints` as :class:`~memtheory.constraints.SizeConstraint` objects."""
        return as_constraints(self.constraints)

    def substituted(
        self, values: Mapping[str, object], expressions: Sequence[sp.Expr]
    ) -> tuple[list[sp.Expr], tuple[SizeConstraint, ...]]:
        """Substitute ``values`` into ``expressions`` for :meth:`evaluate`, checking them first.

        Returns the substituted expressions and the size constraints still
        symbolic. Raises what :func:`~memtheory.evaluation.evaluate` raises: an
        unknown name, a value that is not a size, or values too small for a layer.
        """
        # A result's own constraints are authoritative: never those another network registered
        # for an expression that happens to equal one of these.
        found = self.size_checks()
        every = [*self.components.values(), *self.timeline.values()]
        if not found:  # kept none: those its components carry, one set per network
            carried = candidates(list(self.components.values()))
            if carried.known:
                mapping = substitution([*every, *(c.size for c in carried.every)], values)
                if not mapping:
                    return list(expressions), carried.every
                passed = carried.check(mapping, stacklevel=4)
                return replaced(list(expressions), mapping), passed.every
        mapping = substitution([*every, *(c.size for c in found)], values)
        if not mapping:
            return list(expressions), found
        done = replaced([*(c.size for c in found), *expressions], mapping)
        remaining = check_sizes(found, mapping, done[: len(found)])
        return done[len(found) :], remaining

    @property
    def peak_moment(self) -> str | None:
        """Label of the timeline moment where the peak is reached; None without a timeline.

        The first such moment when several tie. Needs numbers: evaluate first.
        """
        if not self.timeline:
            return None
        peak = self.peak
        if not peak.is_number:
            raise EvaluationError(
                f"peak_moment needs numbers: evaluate({_names(self.free_symbols)}=...) first."
            )
        return next(label for label, value in self.timeline.items() if value == peak)

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        """Symbols the result still depends on."""
        symbols = set().union(*(sp.sympify(e).free_symbols for e in self.components.values()))
        if isinstance(self.timeline, NumberTimeline):
            return symbols
        read = getattr(self.timeline, "moment_symbols", None)  # a running sum's, unbuilt
        if callable(read):
            return symbols | read()
        return symbols.union(*(sp.sympify(e).free_symbols for e in self.timeline.values()))

    # -- units -----------------------------------------------------------------------
    def in_unit(self, unit: str, *, exact: bool = False) -> dict[str, sp.Expr | float]:
        """Every component, the total and the peak in ``unit``.

        Parameters
        ----------
        unit : str
            ``"MiB"`` (2^20 bytes), ``"MB"`` (10^6 bytes), ...
        exact : bool, default False
            Keep exact fractions (sympy) instead of floats.

        Examples
        --------
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=50)
        >>> training_memory(counts, optimizer="sgd").evaluate(B=10).in_unit("KiB")["total"]
        25.390625
        """
        named = {**self.components, "total": self.total, "peak": self.peak}
        converted = {name: convert(value, unit) for name, value in named.items()}
        if exact:
            return converted
        return {
            name: float(value) if value.is_number else sp.N(value)
            for name, value in converted.items()
        }

    def format(self, unit: str = "MiB", name: str = "total", digits: int = 2) -> str:
        """One component, the total or the peak as labelled text, e.g. ``'218.27 MiB'``.

        Examples
        --------
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=50)
        >>> memory = training_memory(counts, optimizer="sgd").evaluate(B=10)
        >>> memory.format("kB"), memory.format("kB", name="parameters")
        ('26.00 kB', '4.00 kB')
        """
        if unit not in UNITS and (unit in self.components or unit in ("total", "peak")):
            raise UnknownNameError(
                f"format() takes the unit first: format({unit!r}, {name!r}) reads {unit!r} as "
                f"the unit. Write format({name!r}, name={unit!r})."
            )
        value = self[name]
        if not sp.sympify(value).is_number:
            raise EvaluationError(
                f"format() needs numbers: evaluate({_names(self.free_symbols)}=...) first."
            )
        return format_bytes(value, unit, digits)

    def grid(
        self, name: str = "total", *, dtype: type | str = "int64", **arrays: object
    ) -> np.ndarray:
        """Evaluate a component, the total or the peak over NumPy arrays of symbol values.

        See :func:`memtheory.evaluation.evaluate_grid` for ``dtype``.

        Examples
        --------
        >>> import numpy as np
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
        >>> training_memory(counts, optimizer="sgd").grid(B=np.array([1, 2, 4]))
        array([108, 136, 192])
        """
        from memtheory.evaluation import evaluate_grid  # NumPy, on first use

        return evaluate_grid(self[name], dtype=dtype, within=self, **arrays)

    # -- tables ----------------------------------------------------------------------
    def table(self, unit: str = "MiB", digits: int = 2) -> Table:
        """Tabulate the components, their share of the total, the total and (with a timeline) peak.

        Sizes are in ``unit``; while symbols remain, the table shows exact byte
        expressions instead, and says which values would turn them into sizes.

        Examples
        --------
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=50)
        >>> memory = training_memory(counts, optimizer="sgd")
        >>> print(memory.table())
        component                                bytes
        -------------------------------  -------------
        parameters (weights and biases)           4000
        parameter gradients                       4000
        optimizer state                              0
        forward activations                      800*B
        activation gradients                     800*B
        input batch                              200*B
        -------------------------------  -------------
        total                            1800*B + 8000
        evaluate(B=...) to see sizes in MiB.
        """
        if self.free_symbols:
            return self._symbolic_table(unit)
        total = self.total
        rows = [
            (
                COMPONENT_TITLES.get(name, name),
                str(round_half_up(convert(value, unit), digits)),
                f"{round_half_up(100 * value / total, 1)}%" if total else "-",
            )
            for name, value in self.components.items()
        ]
        footer = [("total", str(round_half_up(convert(total, unit), digits)), "100%")]
        if self.timeline:
            footer.append(
                (
                    f"peak live ({self.peak_moment})",
                    str(round_half_up(convert(self.peak, unit), digits)),
                    "",
                )
            )
        columns = [Column("component"), Column(unit, align="right"), Column("share", "right")]
        return Table(columns, rows, footer=footer)

    def _symbolic_table(self, unit: str) -> Table:
        rows = [(COMPONENT_TITLES.get(n, n), str(v)) for n, v in self.components.items()]
        footer = [("total", str(self.total))]
        if self.timeline:
            footer.append(("peak live", str(self.peak)))
        note = f"evaluate({_names(self.free_symbols)}=...) to see sizes in {unit}."
        columns = [Column("component"), Column("bytes", align="right")]
        return Table(columns, rows, footer=footer, notes=[note])

    def _repr_html_(self) -> str:
        return self.table().html()

    def _repr_markdown_(self) -> str:
        return self.table().markdown()


def _names(symbols: set[sp.Symbol]) -> str:
    return ", ".join(sorted(s.name for s in symbols))
