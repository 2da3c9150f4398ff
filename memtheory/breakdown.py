"""A memory estimate split into its components, each an exact expression in bytes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

import numpy as np
import sympy as sp

from memtheory.errors import KernelTooLargeError
from memtheory.evaluation import evaluate_grid, substitution
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision
from memtheory.units import convert, format_bytes, round_half_up

__all__ = ["COMPONENT_TITLES", "MemoryBreakdown"]

COMPONENT_TITLES: dict[str, str] = {
    "parameters": "parameters (weights and biases)",
    "buffers": "buffers (running statistics)",
    "gradients": "parameter gradients",
    "optimizer_state": "optimizer state",
    "optimizer_step_counters": "optimizer step counters",
    "master_weights": "master weights (full-precision copy)",
    "weight_copies": "low-precision weight copies (autocast)",
    "activations": "forward activations",
    "saved_activations": "activations saved for backward",
    "activation_gradients": "activation gradients",
    "input": "input batch",
    "targets": "targets (class labels)",
}
"""Every component name, in display order, with a title for tables."""


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per component of a training step (or an inference pass), and their total.

    Attributes
    ----------
    components : mapping of str to sympy expression
        Bytes per component, in :data:`COMPONENT_TITLES` order. Symbols (batch
        ``B``, image size ``H``, ...) stay until :meth:`evaluate` fills them in.
    mode : {"training", "inference"}
    convention : str
        Name of the accounting convention that produced it.
    optimizer : Optimizer or None
    precision : Precision
    notes : tuple of str
        What the convention assumed, in words.
    timeline : mapping of str to sympy expression
        Live bytes at the moments of the step where the peak can occur, in the
        order they happen (``"forward conv2d_1"``, ``"backward maxpool2d_2"``,
        ``"optimizer step"``), for conventions that follow the step tensor by
        tensor; empty otherwise. :attr:`peak` is their maximum: unlike
        :attr:`total`, it is not a sum of components, because not every tensor
        is alive at the same time.
    constraints : mapping of str to sympy expression
        Symbolic output sizes of the network, labelled, that must stay at least
        1; :meth:`evaluate` raises :class:`~memtheory.errors.KernelTooLargeError`
        for values that break one (set by :func:`~memtheory.memory.training_memory`).

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=50)
    >>> memory = training_memory(counts, optimizer="sgd+momentum")
    >>> memory["optimizer_state"], memory.total
    (4000, 1800*B + 12000)
    >>> print(memory.evaluate(B=10).table("kB"))
    component                           kB  share
    -------------------------------  -----  -----
    parameters (weights and biases)   4.00  13.3%
    parameter gradients               4.00  13.3%
    optimizer state                   4.00  13.3%
    forward activations               8.00  26.7%
    activation gradients              8.00  26.7%
    input batch                       2.00   6.7%
    -------------------------------  -----  -----
    total                            30.00   100%
    """

    components: Mapping[str, sp.Expr]
    mode: Literal["training", "inference"]
    convention: str
    precision: Precision
    optimizer: Optimizer | None = None
    notes: tuple[str, ...] = field(default=())
    timeline: Mapping[str, sp.Expr] = field(default_factory=dict)
    constraints: Mapping[str, sp.Expr] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.components) - set(COMPONENT_TITLES)
        if unknown:
            raise ValueError(
                f"unknown memory components {sorted(unknown)}; known: {list(COMPONENT_TITLES)}"
            )
        ordered = {
            name: sp.sympify(self.components[name])
            for name in COMPONENT_TITLES
            if name in self.components
        }
        object.__setattr__(self, "components", ordered)
        object.__setattr__(
            self, "timeline", {label: sp.sympify(v) for label, v in self.timeline.items()}
        )

    # -- access ------------------------------------------------------------------------
    def __getitem__(self, name: str) -> sp.Expr:
        if name == "total":
            return self.total
        if name == "peak" and self.timeline:
            return self.peak  # type: ignore[return-value]
        try:
            return self.components[name]
        except KeyError:
            extra = " and total" + (", peak" if self.timeline else "")
            raise KeyError(
                f"no component {name!r} in this breakdown; it has {', '.join(self.components)}"
                f"{extra}."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.components)

    @property
    def total(self) -> sp.Expr:
        """Sum of all components, in bytes."""
        return sp.Add(*self.components.values())

    @cached_property
    def peak(self) -> sp.Expr | None:
        """Peak live bytes: the largest value of :attr:`timeline` (None without a timeline).

        Examples
        --------
        >>> from memtheory import Conv2d, Input, Network, training_memory
        >>> net = Network([Input((3, 8, 8), batch=2), Conv2d(4, 3)])
        >>> memory = training_memory(net, optimizer="sgd", convention="autograd")
        >>> memory.peak, memory.peak_moment
        (3592, 'backward conv2d_1')
        >>> training_memory(net, optimizer="sgd").peak is None
        True
        """
        if not self.timeline:
            return None
        return _maximum(self.timeline.values())

    @property
    def peak_moment(self) -> str | None:
        """Label of the timeline moment where the peak is reached (needs numbers).

        The first such moment when several tie; None without a timeline.
        """
        if not self.timeline:
            return None
        peak = self.peak
        if not peak.is_number:  # type: ignore[union-attr]
            names = ", ".join(sorted(s.name for s in self.free_symbols))
            raise ValueError(f"peak_moment needs numbers: evaluate({names}=...) first.")
        return next(label for label, value in self.timeline.items() if value == peak)

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        """Symbols the estimate still depends on."""
        expressions = [*self.components.values(), *self.timeline.values()]
        return set().union(*(e.free_symbols for e in expressions))

    # -- numbers -----------------------------------------------------------------------
    def evaluate(self, **values: object) -> MemoryBreakdown:
        """Substitute values by symbol name (``B=64``) into every component, exactly.

        Examples
        --------
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
        >>> memory = training_memory(counts, optimizer="sgd")
        >>> memory.evaluate(B=2).total
        136
        """
        mapping = substitution(
            [*self.components.values(), *self.timeline.values(), *self.constraints.values()],
            values,
        )
        constraints = {k: v.xreplace(mapping) for k, v in self.constraints.items()}
        for label, size in constraints.items():
            if size.is_number and size < 1:
                shown = ", ".join(f"{k}={v}" for k, v in values.items())
                raise KernelTooLargeError(
                    f"{label} would be {size} for {shown}: the input is too small for a "
                    "window of this network. Use a larger input, more padding, or a smaller kernel."
                )
        return replace(
            self,
            components={k: v.xreplace(mapping) for k, v in self.components.items()},
            timeline={k: v.xreplace(mapping) for k, v in self.timeline.items()},
            constraints={k: v for k, v in constraints.items() if not v.is_number},
        )

    def in_unit(self, unit: str) -> dict[str, sp.Expr]:
        """Every component and the total, converted exactly to ``unit``."""
        result = {name: convert(value, unit) for name, value in self.components.items()}
        result["total"] = convert(self.total, unit)
        return result

    def format(self, name: str = "total", unit: str = "MiB", digits: int = 2) -> str:
        """One component (or the total) as labelled text, e.g. ``'218.27 MiB'``."""
        return format_bytes(self[name], unit, digits)

    def grid(
        self, name: str = "total", *, dtype: type | str = "int64", **arrays: object
    ) -> np.ndarray:
        """Evaluate a component (or the total) over NumPy arrays of symbol values.

        See :func:`memtheory.evaluation.evaluate_grid` for ``dtype``.

        Examples
        --------
        >>> import numpy as np
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
        >>> memory = training_memory(counts, optimizer="sgd")
        >>> memory.grid(B=np.array([1, 2, 4]))
        array([108, 136, 192])
        """
        return evaluate_grid(self[name], dtype=dtype, **arrays)

    def table(self, unit: str = "MiB", digits: int = 2) -> str:
        """Render the components, their share of the total, and the total."""
        if self.free_symbols:
            names = ", ".join(sorted(s.name for s in self.free_symbols))
            raise ValueError(f"table() needs numbers: evaluate({names}=...) first.")
        total = self.total
        rows = [
            (
                COMPONENT_TITLES[name],
                str(round_half_up(convert(value, unit), digits)),
                f"{round_half_up(100 * value / total, 1)}%" if total else "-",
            )
            for name, value in self.components.items()
        ]
        header = ("component", unit, "share")
        footer = ("total", str(round_half_up(convert(total, unit), digits)), "100%")
        footers = [footer]
        if self.timeline:
            peak_row = (
                f"peak live ({self.peak_moment})",
                str(round_half_up(convert(self.peak, unit), digits)),  # type: ignore[arg-type]
                "",
            )
            footers.append(peak_row)
        widths = [max(len(r[i]) for r in [header, *rows, *footers]) for i in range(3)]

        def render(row: tuple[str, str, str]) -> str:
            return (
                f"{row[0].ljust(widths[0])}  {row[1].rjust(widths[1])}  {row[2].rjust(widths[2])}"
            ).rstrip()

        rule = render(tuple("-" * w for w in widths))  # type: ignore[arg-type]
        return "\n".join([render(header), rule, *map(render, rows), rule, *map(render, footers)])

    def __str__(self) -> str:
        lines = [f"{self.mode} memory ({self.convention} convention), in bytes:"]
        lines += [f"  {name}: {value}" for name, value in self.components.items()]
        lines.append(f"  total: {self.total}")
        if self.timeline:
            lines.append(f"  peak: {self.peak}")
        return "\n".join(lines)


def _maximum(values: Iterable[sp.Expr]) -> sp.Expr:
    """Return the maximum of byte counts, keeping only the candidates no other one dominates.

    Numbers give a number. Symbolic candidates are compared term by term: ``a``
    dominates ``b`` when, expanded, each coefficient of ``a`` is at least the
    same coefficient of ``b`` and every term with a difference is nonnegative
    (a product of sizes). The survivors form a ``Max`` left unevaluated, since
    sympy's pairwise comparison of many floor-laden candidates is slow; it
    evaluates as soon as the symbols get values.
    """
    expanded = [sp.expand(v) for v in values]
    if all(v.is_number for v in expanded):
        return max(expanded)
    kept: list[dict[sp.Expr, sp.Expr]] = []
    survivors: list[sp.Expr] = []
    for value in expanded:
        terms = value.as_coefficients_dict()
        if any(_dominates(other, terms) for other in kept):
            continue
        keep = [i for i, other in enumerate(kept) if not _dominates(terms, other)]
        kept = [kept[i] for i in keep] + [terms]
        survivors = [survivors[i] for i in keep] + [value]
    if len(survivors) == 1:
        return survivors[0]
    return sp.Max(*survivors, evaluate=False)


def _dominates(a: Mapping[sp.Expr, sp.Expr], b: Mapping[sp.Expr, sp.Expr]) -> bool:
    for term in set(a) | set(b):
        difference = a.get(term, 0) - b.get(term, 0)
        if difference < 0 or (difference > 0 and not _nonnegative(term)):
            return False
    return True


def _nonnegative(term: sp.Expr) -> bool:
    return bool(term.is_number or term.is_nonnegative)
