"""The answer of :func:`~memtheory.estimate.estimate`: what was assumed, the memory, what fits.

:class:`Estimate` holds the answer and prints it: the component table, the
card's verdict, the largest batch and sequence, the formula, the assumptions
(``report()``, the text ``memtheory estimate`` prints) and ``to_dict()``
(``--json``).

Examples
--------
>>> from memtheory.estimate import estimate
>>> answer = estimate("gpt2", batch=2, sequence=128, gpu="T4")
>>> isinstance(answer, Estimate), answer.fits
(True, True)
>>> print(answer.report().splitlines()[0])
GPT-2 small: 124,439,808 parameters, 124,439,808 trainable
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

import sympy as sp

from memtheory.estimate.devices import DeviceSearch
from memtheory.estimate.resolve import ResolvedModel
from memtheory.evaluation.formula_text import formula_text
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.gpus import Budget
from memtheory.tables import Table
from memtheory.units import format_bytes

__all__ = ["Estimate"]


@dataclass(frozen=True)
class Estimate:
    """The answer of :func:`estimate`: what was assumed, the memory per device, and what fits.

    Attributes
    ----------
    model : ResolvedModel
    settings : dict
        Batch, sequence, optimizer, precision, LoRA, devices, ... as used.
    symbolic : Footprint
        Per device, in ``B`` and ``S``.
    memory : Footprint
        Per device, at the sizes asked for.
    budget : Budget or None
        The card (or limit) less the reserve.
    max_batch, max_sequence : int or None
        Largest batch (at the sequence asked for) and sequence (at the batch
        asked for) that fit the budget; 0 when even 1 does not; None without a budget.
    convention : str
        Title of the accounting convention.
    notes : tuple of str
        What was assumed, in words.
    host : sympy expression or None
        Host RAM per node for CPU offload, in bytes.
    compiled : CompiledFootprint or None
        :attr:`symbolic` compiled (:mod:`~memtheory.estimate.compiled`), as
        :func:`estimate` evaluated it; a replay entry is written from it
        (:mod:`~memtheory.estimate.replay_entry`).

    Examples
    --------
    >>> from memtheory.estimate import estimate
    >>> answer = estimate("gpt2", batch=2, sequence=128, gpu="T4")
    >>> answer.fits, answer.max_batch, answer.max_sequence
    (True, 91, 1024)
    >>> answer.peak <= answer.budget.usable, answer.settings["precision"]
    (True, 'autocast-bf16')
    >>> answer.formula_at_peak  # bytes at the moment that peaks at B=2, S=128
    16*B*S + 2299816556
    >>> answer.symbolic.evaluate(B=2, S=128).peak == answer.peak
    True
    """

    model: ResolvedModel
    settings: dict[str, Any]
    symbolic: Footprint
    memory: Footprint
    budget: Budget | None
    max_batch: int | None
    max_sequence: int | None
    convention: str
    notes: tuple[str, ...] = field(default=())
    host: sp.Expr | None = None
    convention_name: str = "breakdown"
    why: str = ""
    assumptions: tuple[str, ...] = field(default=())
    search: DeviceSearch | None = None
    compiled: Any = field(default=None, repr=False, compare=False)

    @property
    def peak(self) -> sp.Expr:
        """Bytes per device at its peak (the total, where the convention follows no timeline)."""
        return self.memory.peak

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the usable memory; None without a budget."""
        return None if self.budget is None else bool(self.peak <= self.budget.usable)

    @property
    def formula(self) -> sp.Expr:
        """The peak per device in bytes, in the symbols still free (``B``, ``S``)."""
        return self.symbolic.peak

    @cached_property
    def formula_at_peak(self) -> sp.Expr:
        """The formula of the moment that peaks at the sizes asked for (each ``Max`` resolved).

        Worked out once (the text and ``--json`` both print it).
        """
        values = {x: self.settings[_SIZES[x.name]] for x in self.formula.free_symbols
                  if x.name in _SIZES}
        return _branch(self.formula, values)

    @cached_property
    def printed_formulas(self) -> tuple[str, str]:
        """:attr:`formula` and :attr:`formula_at_peak` as printed, each printed once.

        The text, ``--json`` and the replay entry all print them, as sympy's ``str``
        prints them (:func:`~memtheory.evaluation.formula_text.formula_text`: sympy's
        printer took tens of milliseconds on a large step's maximum of hundreds of moments).

        Examples
        --------
        >>> from memtheory.estimate import estimate
        >>> estimate("gpt2", batch=2, sequence=128, gpu="T4").printed_formulas[1]
        '16*B*S + 2299816556'
        """
        return formula_text(self.formula), formula_text(self.formula_at_peak)

    @cached_property
    def symbol_names(self) -> tuple[str, ...]:
        """The sizes :attr:`symbolic` is still a function of, by name, sorted (``B``, ``S``).

        Examples
        --------
        >>> from memtheory.estimate import estimate
        >>> estimate("gpt2", batch=2, sequence=128, gpu="T4").symbol_names
        ('B', 'S')
        """
        return tuple(sorted(x.name for x in self.symbolic.free_symbols))

    @property
    def unit(self) -> str:
        """GiB from 1 GiB of peak up, MiB below."""
        return "GiB" if self.peak >= 2**30 else "MiB"

    def table(self, unit: str | None = None) -> Table:
        """Return the per-component table of one device (text, Markdown or HTML)."""
        return self.memory.table(unit or self.unit)

    def report(self, unit: str | None = None) -> str:
        """Return everything as text: settings, table, total and peak, budget, limits, formula."""
        unit = unit or self.unit
        s = self.settings
        sizes = f"batch {s['batch']}" + (
            f", sequence {s['sequence']}"
            if self.model.kind == "sequence"
            else f", image {s['image']}"
        )
        lines = [
            f"{self.model.name}: {s['parameters']:,} parameters, {s['trainable']:,} trainable",
            f"training step per device: {sizes}, {s['optimizer']}, {s['precision']}"
            + (f", {s['method']}" if s["method"] else "")
            + (f", {s['parallel']}" if s["parallel"] else ""),
            "",
            str(self.table(unit)),
            "",
            f"total {format_bytes(self.memory.total, unit)} "
            f"({format_bytes(self.memory.total, 'GB')}), "
            f"peak {format_bytes(self.peak, unit)} ({format_bytes(self.peak, 'GB')})",
        ]
        if self.host is not None:
            lines.append(
                f"host RAM per node for offload: {format_bytes(self.host, 'GiB')} "
                f"({format_bytes(self.host, 'GB')})"
            )
        if self.budget is not None:
            verdict = "fits" if self.fits else "does NOT fit"
            share = 100 * float(self.peak / self.budget.usable)
            lines.append(f"{self.budget.describe()}: {verdict} ({share:.0f}% of usable)")
            where = f"sequence {s['sequence']}" if self.model.kind == "sequence" else (
                f"image {s['image']}"
            )
            lines.append(f"largest batch at {where}: {_limit(self.max_batch)}")
            if self.model.kind == "sequence":
                cap = f" (model limit {self.model.positions})" if self.model.positions else ""
                lines.append(
                    f"largest sequence at batch {s['batch']}: {_limit(self.max_sequence)}{cap}"
                )
        if self.search is not None:
            lines.append(self.search_line())
        symbols = ", ".join(self.symbol_names)
        branch = self.formula_at_peak
        lines += [
            "",
            f"peak per device in bytes ({symbols or 'no symbols'}; B = batch, S = sequence):",
            f"  {self.printed_formulas[1]}",
        ]
        if branch != self.formula:
            lines.append(
                "  (the moment of the step that peaks at these sizes; the peak is the largest of "
                "several moments, all in --json's formula)"
            )
        lines += [
            f"convention: {self.why or self.convention}",
        ]
        lines += [f"assumed: {line}" for line in self.assumptions]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def search_line(self) -> str:
        """Return the answer of ``gpus="auto"`` in words: the fewest GPUs, each count tried."""
        found = self.search
        if found is None:
            return ""
        s = self.settings
        where = f"batch {s['batch']} per GPU" + (
            f", sequence {s['sequence']}" if self.model.kind == "sequence" else ""
        )
        shown = [(n, peak) for n, peak in found.tried
                 if found.gpus is None or n <= 2 * found.gpus]
        tried = "; ".join(f"{n}: {format_bytes(peak, 'GiB')}" for n, peak in shown)
        answer = (
            str(found.gpus) if found.gpus is not None
            else f"none up to {found.tried[-1][0] if found.tried else 1}"
        )
        return (
            f"fewest GPUs ({found.counts}, ZeRO-{s['zero']}, {where}): {answer} "
            f"(peak per GPU at each count tried: {tried})"
        )

    def _repr_html_(self) -> str:
        """Show the table in a notebook, with the verdict and the limits under it."""
        from html import escape

        lines = [f"total {format_bytes(self.memory.total, 'GiB')}, "
                 f"peak {format_bytes(self.peak, 'GiB')}"]
        if self.budget is not None:
            lines.append(f"{self.budget.describe()}: {'fits' if self.fits else 'does NOT fit'}")
            lines.append(f"largest batch {_limit(self.max_batch)}"
                         + (f", largest sequence {_limit(self.max_sequence)}"
                            if self.max_sequence is not None else ""))
        notes = "".join(f"<br>{escape(line)}" for line in lines)
        return f"{self.table().html()}<p>{escape(self.model.name)}{notes}</p>"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary: bytes as integers, sizes, limits, formula, convention."""
        memory = self.memory
        return {
            "model": self.model.name,
            "source": self.model.source,
            "settings": self.settings,
            "components": {name: int(value) for name, value in memory.components.items()},
            "component_titles": {n: COMPONENT_TITLES.get(n, n) for n in memory.components},
            "total_bytes": int(memory.total),
            "peak_bytes": int(self.peak),
            "host_ram_per_node_bytes": None if self.host is None else int(self.host),
            "budget": None
            if self.budget is None
            else {
                "device": self.budget.device,
                "memory_bytes": int(self.budget.memory),
                "reserve_bytes": int(self.budget.reserve),
                "usable_bytes": int(self.budget.usable),
            },
            "fits": self.fits,
            "max_batch": self.max_batch,
            "max_sequence": self.max_sequence,
            "formula": self.printed_formulas[0],
            "formula_at_peak": self.printed_formulas[1],
            "convention": self.convention_name,
            "convention_title": self.convention,
            "convention_why": self.why,
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
            "unit": self.unit,
            "component_shares": {
                name: float(value / memory.total) if memory.total else 0.0
                for name, value in memory.components.items()
            },
            "usable_share": None if self.budget is None else float(self.peak / self.budget.usable),
            "gpu_search": None
            if self.search is None
            else {
                "gpus": self.search.gpus,
                "counts": self.search.counts,
                "tried": [
                    {"gpus": n, "peak_bytes": int(peak)} for n, peak in self.search.tried
                ],
            },
        }


_SIZES = {"B": "batch", "S": "sequence", "H": "image"}


def _branch(expression: sp.Expr, values: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Replace each ``Max`` by its argument that is largest at ``values``."""
    if isinstance(expression, sp.Max):
        best = max(expression.args, key=lambda arg: _value_at(arg, values))
        return _branch(best, values)
    if not expression.has(sp.Max):  # kept as it is: rebuilt, a sum is flattened and sorted again
        return expression
    return expression.func(*(_branch(arg, values) for arg in expression.args))


def _value_at(expression: sp.Expr, values: Mapping[sp.Symbol, int]) -> Fraction | sp.Expr:
    """Return ``expression`` at ``values``: in plain fractions where it can, else by sympy.

    Sums, products, whole powers, floors, ceilings, maxima and minima of
    rational numbers and the sizes are computed exactly with :class:`~fractions.Fraction`
    (sympy's substitution would ask its assumptions system about every floor);
    anything else is left to sympy's ``xreplace``.
    """
    exact = _exact(sp.sympify(expression), values)
    if exact is not None:
        return exact
    number = sp.sympify(expression).xreplace(values)
    return Fraction(int(number.p), int(number.q)) if number.is_Rational else number


def _exact(expression: sp.Basic, values: Mapping[sp.Symbol, int]) -> Fraction | None:
    """Return ``expression`` at ``values`` as a fraction, or None for a node not handled here."""
    if expression.is_Rational:
        return Fraction(int(expression.p), int(expression.q))
    if expression.is_Symbol:
        value = values.get(expression)
        return None if value is None else Fraction(value)
    if isinstance(expression, sp.Pow):
        base, power = expression.args
        found = _exact(base, values)
        if found is None or not power.is_Integer or (found == 0 and power < 0):
            return None
        return found ** int(power)
    parts = [_exact(arg, values) for arg in expression.args]
    if not parts or any(part is None for part in parts):
        return None
    known = [part for part in parts if part is not None]
    return _combine(expression, known)


def _combine(expression: sp.Basic, parts: list[Fraction]) -> Fraction | None:
    """Return the value of ``expression``'s node over its arguments' values, or None."""
    if isinstance(expression, sp.Add):
        return sum(parts, Fraction(0))
    if isinstance(expression, sp.Mul):
        product = Fraction(1)
        for part in parts:
            product *= part
        return product
    if isinstance(expression, sp.floor):
        return Fraction(math.floor(parts[0]))
    if isinstance(expression, sp.ceiling):
        return Fraction(math.ceil(parts[0]))
    if isinstance(expression, sp.Max):
        return max(parts)
    if isinstance(expression, sp.Min):
        return min(parts)
    return None


def _limit(value: int | None) -> str:
    if value is None:  # a TRL recipe's answer: each size is a derivation of its own
        return "not searched (see the note)"
    return "none fits" if value == 0 else str(value)
