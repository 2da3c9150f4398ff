"""The result of a trace: a Footprint with the step's moments, where it holds, its modules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

import sympy as sp

from memtheory.errors import EvaluationError, UnknownNameError
from memtheory.evaluation import replaced, substitution
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.recipes import Setup
from memtheory.tables import Column, Table
from memtheory.torch.loop import Loop
from memtheory.torch.tracing.kept_conditions import keeping
from memtheory.torch.tracing.ones import (
    ANSWERED_AT_ONE,
    one_asked,
    pieces_evaluated,
    piecewise,
)
from memtheory.units import convert, round_half_up

__all__ = ["ModuleRow", "TracedMemory"]


@dataclass(frozen=True)
class ModuleRow:
    """One module of a traced model: what torchinfo shows, exact and symbolic.

    Attributes
    ----------
    path : str
        Its name in ``named_modules()`` (the model's class name for the model
        itself, ``"loss"`` for what the loss function computes).
    kind : str
        Its class name.
    depth : int
        Nesting depth (0 for the model).
    output_shape : tuple of sympy expressions, or None
        Shape of its first output tensor, in the user's symbols.
    parameters : int
        Parameters it owns itself (not its children's; a shared tensor counts once).
    saved : sympy expression
        Bytes autograd saved for backward while it was the innermost running
        module, storages counted once, parameters, buffers and the data excluded.
    """

    path: str
    kind: str
    depth: int
    output_shape: tuple[sp.Expr, ...] | None
    parameters: int
    saved: sp.Expr


@dataclass(frozen=True)
class TracedMemory(Footprint):
    """Memory of a PyTorch training step traced on fake tensors: exact, in the user's symbols.

    The components are those of :class:`memtheory.torch.Measurement`, counted
    the same way; :attr:`timeline` holds the moments of the step where the
    live total may be largest (each labelled with phase, module and operator),
    so :attr:`peak` is the step's peak and :attr:`peak_moment` says where it
    happens.

    Attributes
    ----------
    components : mapping of str to sympy expression
        Bytes per component, in :data:`~memtheory.footprint.COMPONENT_TITLES` order.
    timeline : mapping of str to sympy expression
        Live bytes at each candidate peak moment, in step order.
    inference_peak : sympy expression
        Most bytes alive during a forward pass in eval mode under ``no_grad``.
    step_start : sympy expression
        Live bytes when the step starts.
    constraints : mapping of str to sympy expression
        Where the formulas hold, from the guards PyTorch recorded: each
        labelled expression must stay at least 1 (``"S <= 1024"`` is ``1025 - S``).
    conditions : tuple of str
        Every condition in words, those of :attr:`constraints` included.
    modules : tuple of ModuleRow
        One row per module, in ``named_modules()`` order.
    method : {"symbolic", "fitted"}
        ``"symbolic"``: sizes stayed symbols through the step. ``"fitted"``:
        the model's code fixed a size, so the step was traced at several
        concrete sizes and each moment's bytes fitted exactly by a polynomial,
        confirmed at sizes not used to fit it.
    notes : tuple of str
        What was assumed or found, in words.
    loop : Loop or None
        The training loop traced (:class:`memtheory.torch.loop.Loop`): whether
        it keeps the model's outputs through backward, and whether the loss is
        the model's own.
    setup : Setup or None
        The :class:`~memtheory.recipes.Setup` traced (``trace(..., setup=)``).
    assumed : tuple of str
        The Setup's ``assumed:`` lines for this model, as ``memtheory
        estimate`` prints them, then what the trace could not check.
    at_one : mapping of sympy Symbol to TracedMemory
        Where the formulas do not hold at a size of 1 (``B >= 2``: PyTorch
        runs other code there), the step traced again with that size at 1, the
        other sizes still symbols, by the size's symbol. :meth:`evaluate` at that
        size answers from it, and :attr:`peak` and :attr:`total` are
        piecewise: the recorded bytes at 1, the formulas above
        (:mod:`memtheory.torch.tracing.ones`).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from memtheory.torch import measure, trace
    >>> model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> memory = trace(model, torch.randn(16, 8), {"B": 16}, loss=nn.CrossEntropyLoss(),
    ...                target=torch.randint(0, 2, (16,)), optimizer="sgd")
    >>> memory.method, memory.components["saved_activations"]  # ReLU output, log-probs, weight
    ('symbolic', 24*B + 4)
    >>> memory.peak  # the largest of the step's candidate moments
    Max(64*B + 376, 96*B + 232)
    >>> at_64 = memory.evaluate(B=64)
    >>> at_64.peak, at_64.peak_moment
    (6376, 'backward Sequential.1: aten.threshold_backward.default')
    >>> at_64.peak == measure(model, torch.randn(64, 8), loss=nn.CrossEntropyLoss(),
    ...                       target=torch.randint(0, 2, (64,)), optimizer="sgd").peak
    True
    """

    components: Mapping[str, sp.Expr]
    timeline: Mapping[str, sp.Expr] = field(default_factory=dict)
    inference_peak: sp.Expr = sp.S.Zero
    step_start: sp.Expr = sp.S.Zero
    constraints: Mapping[str, sp.Expr] = field(default_factory=dict)
    conditions: tuple[str, ...] = ()
    modules: tuple[ModuleRow, ...] = ()
    method: Literal["symbolic", "fitted"] = "symbolic"
    notes: tuple[str, ...] = ()
    loop: Loop | None = None
    setup: Setup | None = None
    assumed: tuple[str, ...] = ()
    at_one: Mapping[sp.Symbol, TracedMemory] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.components) - set(COMPONENT_TITLES)
        if unknown:
            raise UnknownNameError(f"unknown memory components {sorted(unknown)}")

    def evaluate(self, **values: object) -> TracedMemory:
        """Substitute values by symbol name (``B=8, S=128``) into every expression, exactly.

        A size of 1 that the formulas do not cover but :attr:`at_one` does is
        answered from the trace taken there.

        Raises
        ------
        EvaluationError
            For a name that is not a symbol of the result, or values outside
            where the traced formulas hold (see :attr:`conditions`).
        """
        piece = one_asked(self.at_one, values)
        if piece is not None:
            name, recorded = piece
            rest = {k: v for k, v in values.items() if k != name}
            return recorded.evaluate(**rest) if rest else recorded
        general = self._evaluated(**values)
        return replace(general, at_one={}) if not self.at_one else pieces_evaluated(
            self, general, values)

    def _evaluated(self, **values: object) -> TracedMemory:
        """Substitute into the general formulas (those that hold above a size of 1)."""
        expressions = [
            *self.components.values(),
            *self.timeline.values(),
            *self.constraints.values(),
            self.inference_peak,
            self.step_start,
            *(row.saved for row in self.modules),
            *(size for row in self.modules for size in row.output_shape or ()),
        ]
        mapping = substitution(expressions, values)
        done = iter(replaced(expressions, mapping))
        components = {k: next(done) for k in self.components}
        timeline = {k: next(done) for k in self.timeline}
        constraints = {k: next(done) for k in self.constraints}
        inference_peak, step_start = next(done), next(done)
        saved = [next(done) for _ in self.modules]
        shapes = [
            None if row.output_shape is None else tuple(next(done) for _ in row.output_shape)
            for row in self.modules
        ]
        for label, value in constraints.items():
            if value.is_number and value < 1:
                shown = ", ".join(f"{k}={v}" for k, v in values.items())
                raise EvaluationError(
                    f"the traced formulas hold where {label}; {shown} is outside that. Trace "
                    "again with example sizes in that range, or measure at this size."
                )
        modules = tuple(
            replace(row, saved=s, output_shape=shape)
            for row, s, shape in zip(self.modules, saved, shapes, strict=True)
        )
        return replace(
            self,
            components=components,
            timeline=timeline,
            constraints={k: v for k, v in constraints.items() if not v.is_number},
            inference_peak=inference_peak,
            step_start=step_start,
            modules=modules,
        )

    @cached_property
    def peak(self) -> sp.Expr:
        """The step's peak: sympy's ``Max`` of the timeline, keeping the conditions.

        It equals, prints and hashes as the plain expression. What is derived
        from it (``peak + reserve``, ``peak - x``, ``2 * peak``,
        ``peak.subs(H, 32)``, ``expand``), pickled, loaded in another process
        and evaluated (or given to ``max_batch``), still refuses sizes outside
        :attr:`constraints` (:mod:`memtheory.torch.tracing.kept_conditions`).
        """
        plain: sp.Expr = vars(Footprint)["peak"].func(self)
        return piecewise(self, keeping(plain, self.size_checks()), "peak")

    @property
    def total(self) -> sp.Expr:
        """Sum of all components, in bytes: it keeps the conditions as :attr:`peak` does."""
        plain: sp.Expr = vars(Footprint)["total"].fget(self)
        return piecewise(self, keeping(plain, self.size_checks()), "total")

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        """Symbols the result still depends on."""
        found = super().free_symbols
        for piece in self.at_one.values():
            found |= piece.free_symbols
        return found.union(sp.sympify(self.inference_peak).free_symbols)

    def module_table(self, unit: str = "bytes", *, depth: int | None = None) -> Table:
        """Tabulate the modules: path, type, output shape, parameters, saved bytes.

        Parameters
        ----------
        unit : str, default "bytes"
            Unit of the saved column once the result is evaluated (``"MiB"``);
            symbolic results show exact byte formulas.
        depth : int, optional
            Show modules nested at most this deep (0: the model alone). A row
            at that depth counts its hidden submodules' parameters and saved
            bytes with its own (marked ``+``), so the rows always add up to
            the total, which is the saved activations.

        Examples
        --------
        >>> import sympy as sp
        >>> rows = (ModuleRow("Net", "Net", 0, None, 0, sp.S(0)),
        ...         ModuleRow("block", "Block", 1, None, 10, sp.S(100)),
        ...         ModuleRow("block.fc", "Linear", 2, None, 20, sp.S(400)),
        ...         ModuleRow("loss", "loss function", 0, None, 0, sp.S(8)))
        >>> memory = TracedMemory({"saved_activations": sp.S(508)}, modules=rows)
        >>> print(memory.module_table(depth=1))
        module    type           output shape  parameters  saved (bytes)
        --------  -------------  ------------  ----------  -------------
        Net       Net                                   0              0
          block+  Block                                30            500
        loss      loss function                         0              8
        --------  -------------  ------------  ----------  -------------
        total                                          30            508
        """
        rows = []
        symbolic = any(not sp.sympify(r.saved).is_number for r in self.modules)
        for row, parameters, saved, folded in _folded(self.modules, depth):
            shape = "" if row.output_shape is None else f"({', '.join(map(str, row.output_shape))})"
            name = "  " * row.depth + row.path + ("+" if folded else "")
            rows.append((name, row.kind, shape, str(parameters), _size(saved, unit, symbolic)))
        total_saved = sp.Add(*(row.saved for row in self.modules))
        footer = [
            (
                "total",
                "",
                "",
                str(sum(row.parameters for row in self.modules)),
                _size(total_saved, unit, symbolic),
            )
        ]
        title = "saved (bytes)" if symbolic or unit == "bytes" else f"saved ({unit})"
        columns = [
            Column("module"),
            Column("type"),
            Column("output shape"),
            Column("parameters", align="right"),
            Column(title, align="right"),
        ]
        return Table(columns, rows, footer=footer)

    def __str__(self) -> str:
        lines = [f"training step traced ({self.method}), in bytes:"]
        if self.loop is not None:
            lines.append(f"  loop: {self.loop}")
        lines += [f"  assumed: {line}" for line in self.assumed]
        lines += [f"  {name}: {value}" for name, value in self.components.items()]
        lines.append(f"  total: {self.total}")
        lines.append(f"  peak: {self.peak}")
        lines.append(f"  inference peak: {self.inference_peak}")
        return "\n".join(lines + self.condition_lines())

    def condition_lines(self) -> list[str]:
        """Return the conditions as a short list: the limits, then those checked harmless.

        Examples
        --------
        >>> import sympy as sp
        >>> memory = TracedMemory({"input": sp.S(4)}, conditions=(
        ...     "B >= 2: harmless (traced at B=1: the same bytes as the formulas)",
        ...     "S <= 64", "attention_mask all ones (no padding), as in the example batch"))
        >>> for line in memory.condition_lines():
        ...     print(line)
          holds for S <= 64
          holds for attention_mask all ones (no padding), as in the example batch
          checked harmless (traced beyond them, the same bytes): B >= 2
        """
        harmless = [c.split(": harmless", 1)[0] for c in self.conditions if ": harmless" in c]
        answered = [f"{s.name} = 1" for s in self.at_one]
        lines = [f"  holds for {c}" for c in self.conditions
                 if ": harmless" not in c and not c.endswith(ANSWERED_AT_ONE)]
        if harmless:
            lines.append(
                f"  checked harmless (traced beyond them, the same bytes): {', '.join(harmless)}"
            )
        if answered:
            lines.append(
                f"  traced at a size of 1 too (other bytes there), answered from it: "
                f"{', '.join(answered)}"
            )
        return lines


def _folded(
    modules: tuple[ModuleRow, ...], depth: int | None
) -> list[tuple[ModuleRow, int, sp.Expr, bool]]:
    """Rows down to ``depth``, each deepest one with its hidden submodules' sums folded in.

    Returns (row, parameters, saved bytes, whether anything was folded in).
    """
    if depth is None:
        return [(row, row.parameters, row.saved, False) for row in modules]
    shown = [row for row in modules if row.depth <= depth]
    root = next((row.path for row in modules if row.depth == 0 and row.path != "loss"), None)
    parameters = {row.path: row.parameters for row in shown}
    saved = {row.path: sp.sympify(row.saved) for row in shown}
    folded: set[str] = set()
    for row in modules:
        parent = _ancestor(row.path, depth, root) if row.depth > depth else None
        if parent is not None and parent in saved:
            parameters[parent] += row.parameters
            saved[parent] += row.saved
            folded.add(parent)
    return [(row, parameters[row.path], saved[row.path], row.path in folded) for row in shown]


def _ancestor(path: str, depth: int, root: str | None) -> str | None:
    """Return the path of the module at ``depth`` that contains the module at ``path``."""
    if depth == 0:
        return root
    return ".".join(path.split(".")[:depth])


def _size(value: sp.Expr, unit: str, symbolic: bool) -> str:
    value = sp.sympify(value)
    if symbolic or unit == "bytes" or not value.is_number:
        return str(value)
    return str(round_half_up(convert(value, unit), 2))
