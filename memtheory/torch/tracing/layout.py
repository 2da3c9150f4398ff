"""How a fit lays out one traced step as numbers, and reads the fitted formulas back.

:class:`MomentLayout` flattens a step's record (its components, every moment
of training and inference, each module's saved bytes) into one row of
integers per traced size, so that :mod:`~memtheory.torch.tracing.fit` can
solve each column for the polynomial through it; :func:`fitted_expression`
turns the solved coefficients back into a sympy expression.
:mod:`~memtheory.torch.tracing.totals` lays out only the totals and peaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.max_pruning import maximum, undominated
from memtheory.torch.tracing.kernels_onednn import (
    Workspace,
    is_workspace_marker,
    workspace_condition,
)
from memtheory.torch.tracing.modules import LOSS
from memtheory.torch.tracing.result import ModuleRow, TracedMemory
from memtheory.torch.tracing.step import StepRecord

__all__ = [
    "MomentLayout",
    "OperationsDifferError",
    "fitted_expression",
    "kept_candidates",
    "record_number",
]


class OperationsDifferError(UnsupportedError):
    """At another size the step runs other operations: its moments do not line up."""


class MomentLayout:
    """Every number a concrete trace yields, in one fixed order, and how to rebuild the result."""

    def __init__(self, reference: StepRecord) -> None:
        self.components = list(reference.components)
        self.moments = [label for label, _ in reference.moments]
        self.inference = [label for label, _ in reference.inference]
        self.modules = [
            r
            for r in reference.watch.records.values()
            if r.calls or r.saved or r.path == LOSS
        ]
        self.shapes = [
            len(r.output_shape) if r.output_shape is not None else 0 for r in self.modules
        ]
        self.workspaces = dict(reference.workspaces)
        self.live = _live_workspaces(reference, self.components, self.modules)

    def names(self) -> list[str]:
        """Name what each position of a vector holds."""
        return [
            *(f"component {c}" for c in self.components),
            *(f"moment '{m}'" for m in self.moments),
            *(f"inference moment '{m}'" for m in self.inference),
            *(f"saved bytes of {r.path}" for r in self.modules),
            *(
                f"output size {i} of {r.path}"
                for r, n in zip(self.modules, self.shapes, strict=True)
                for i in range(n)
            ),
            *(
                f"{what} of oneDNN workspace {i}"
                for i in range(len(self.workspaces))
                for what in ("the steps", "the batch")
            ),
        ]

    def name(self, index: int) -> str:
        """Return what the ``index``-th number of a record's row is."""
        return self.names()[index]

    def vector(self, record: StepRecord) -> list[int]:
        """Return one traced size's record as a row of integers, in :meth:`names` order."""
        labels = [label for label, _ in record.moments]
        if labels != self.moments or [lb for lb, _ in record.inference] != self.inference:
            ours, theirs = (self.moments + self.inference), labels + [
                lb for lb, _ in record.inference
            ]
            first = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                min(len(ours), len(theirs)),
            )
            shown = theirs[first] if first < len(theirs) else "the end of the step"
            expected = ours[first] if first < len(ours) else "the end of the step"
            raise OperationsDifferError(
                "the model's code fixed a size, and at another size the step runs other "
                f"operations (operation {first}: {shown!r} instead of {expected!r}), so no single "
                "formula describes it. Measure it at the sizes you need with "
                "memtheory.torch.measure."
            )
        records = {r.path: r for r in record.watch.records.values()}
        _check_workspaces(self, record)
        excluded = record.not_activations
        return [
            *(_polynomial_part(record.components.get(c, {})) for c in self.components),
            *(_polynomial_part(m) for _, m in record.moments),
            *(_polynomial_part(m) for _, m in record.inference),
            *(_polynomial_part(records[r.path].saved_bytes(excluded)) for r in self.modules),
            *(
                int(size)
                for r in self.modules
                for size in (records[r.path].output_shape or ())
            ),
            *(size for w in record.workspaces.values() for size in (w.steps, w.batch)),
        ]

    def result(
        self, coefficients: list[list[Fraction]], monomials: list[sp.Expr], words: tuple[str, ...]
    ) -> TracedMemory:
        """Build the traced result from the fitted coefficients of every position."""
        expressions = iter(coefficients)

        def take(count: int) -> list[list[Fraction]]:
            return [next(expressions) for _ in range(count)]

        components = take(len(self.components))
        moments = take(len(self.moments))
        inference = take(len(self.inference))
        saved = take(len(self.modules))
        shapes = [take(n) for n in self.shapes]
        build = lambda c: fitted_expression(c, monomials)  # noqa: E731
        sizes = {
            marker: Workspace(build(next(expressions)), build(next(expressions)), w.input_size,
                              w.hidden).nbytes
            for marker, w in self.workspaces.items()
        }
        live = iter(self.live)

        def with_workspaces(fitted: list[list[Fraction]]) -> list[sp.Expr]:
            return [build(c) + sum((sizes[m] for m in next(live)), start=sp.S.Zero)
                    for c in fitted]

        component_values = with_workspaces(components)
        moment_values = with_workspaces(moments)
        inference_values = with_workspaces(inference)
        saved_values = with_workspaces(saved)
        moment_live = self.live[len(components) : len(components) + len(moments)]
        inference_live = self.live[len(components) + len(moments) :][: len(inference)]
        kept = kept_candidates(moments, moment_live)
        values = [moment_values[i] for i in kept]
        timeline: dict[str, sp.Expr] = {}
        for position in undominated(values):
            label = self.moments[kept[position]]
            while label in timeline:
                label += "'"
            timeline[label] = values[position]
        inference_values = [
            inference_values[i] for i in kept_candidates(inference, inference_live)
        ]
        rows = tuple(
            ModuleRow(
                r.path,
                r.kind,
                r.depth,
                tuple(build(c) for c in shape) if r.output_shape is not None else None,
                r.parameters,
                s,
            )
            for r, s, shape in zip(self.modules, saved_values, shapes, strict=True)
        )
        if self.workspaces:
            words = (*words, workspace_condition(len(self.workspaces)))
        return TracedMemory(
            components={
                name: value
                for name, value in zip(self.components, component_values, strict=True)
                if value != 0
            },
            timeline=timeline,
            inference_peak=maximum(inference_values),
            step_start=moment_values[0],
            conditions=words,
            modules=rows,
            method="fitted",
        )


def record_number(terms: dict[Any, int]) -> int:
    """Return the bytes a record's terms add up to."""
    return int(sum(terms.values()))


def fitted_expression(coefficients: list[Fraction], monomials: list[sp.Expr]) -> sp.Expr:
    """Return the polynomial with these coefficients of these monomials."""
    return sp.Add(
        *(
            sp.Rational(c.numerator, c.denominator) * m
            for c, m in zip(coefficients, monomials, strict=True)
            if c
        )
    )


def kept_candidates(
    moments: list[list[Fraction]], live: Sequence[frozenset[sp.Symbol]] | None = None
) -> list[int]:
    """Moments no later one provably exceeds (every coefficient at least as large).

    With ``live`` (the oneDNN workspaces alive at each moment, added to its
    polynomial), a later moment exceeds an earlier one only if it holds every
    workspace the earlier one holds.
    """
    held = list(live) if live is not None else [frozenset()] * len(moments)
    kept: list[int] = []
    for index, coefficients in enumerate(moments):
        while kept and held[index] >= held[kept[-1]] and all(
            a >= b for a, b in zip(coefficients, moments[kept[-1]], strict=True)
        ):
            if coefficients == moments[kept[-1]] and held[index] == held[kept[-1]]:
                break
            kept.pop()
        else:
            kept.append(index)
    return kept


def _polynomial_part(terms: dict[Any, int]) -> int:
    """Bytes of a record's terms, less the oneDNN workspaces (whose formula a fit adds back)."""
    return int(sum(v for m, v in terms.items() if not is_workspace_marker(m)))


def _markers(terms: dict[Any, int]) -> frozenset[sp.Symbol]:
    return frozenset(m for m in terms if is_workspace_marker(m))


def _live_workspaces(
    record: StepRecord, components: list[str], modules: list[Any]
) -> list[frozenset[sp.Symbol]]:
    """Return the workspaces in each component, moment, inference moment, module's saved bytes."""
    records = {r.path: r for r in record.watch.records.values()}
    return [
        *(_markers(record.components.get(c, {})) for c in components),
        *(_markers(m) for _, m in record.moments),
        *(_markers(m) for _, m in record.inference),
        *(_markers(records[r.path].saved_bytes(record.not_activations)) for r in modules),
    ]


def _check_workspaces(layout: MomentLayout, record: StepRecord) -> None:
    """Require the same oneDNN workspaces, alive at the same moments, as the reference."""
    same = [(m, w.input_size, w.hidden) for m, w in record.workspaces.items()] == [
        (m, w.input_size, w.hidden) for m, w in layout.workspaces.items()
    ]
    live = _live_workspaces(record, layout.components, layout.modules)
    if not same or live != layout.live:
        raise OperationsDifferError(
            "the model's code fixed a size, and at another size the step keeps oneDNN's LSTM "
            "workspaces at other moments, so no single formula describes it. Measure it at the "
            "sizes you need with memtheory.torch.measure."
        )
