"""Evaluate many: a step's memory compiled once into integer arithmetic, exact at every size.

A derived step (:class:`~memtheory.memory_breakdown.MemoryBreakdown`, or
:class:`~memtheory.techniques.parallel.ParallelMemory` per device) holds one
polynomial per component and per moment of its timeline, thousands for a
large model. Substituting sizes into each with sympy costs a second; but the
polynomials share a handful of terms (``B*S``, ``S``, ``1``). :class:`CompiledFootprint`
writes every expression once as integer coefficients of those terms, computes
the terms at the sizes asked for, and adds: plain Python integers, so the
numbers are exactly what :meth:`~memtheory.footprint.Footprint.evaluate` gives.
Its :meth:`~CompiledFootprint.peak` is the peak compiled on its own, for the
solvers that try many sizes. A result with size constraints (a layer whose
output could drop below 1) is evaluated the ordinary way, which checks them.

Examples
--------
>>> from memtheory import ModelCounts, training_memory
>>> counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=50)
>>> memory = training_memory(counts, optimizer="sgd")
>>> compiled = CompiledFootprint(memory)
>>> compiled.evaluate(B=10) == memory.evaluate(B=10), compiled.peak(B=10)
(True, 26000)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from copy import copy
from dataclasses import replace
from fractions import Fraction
from keyword import iskeyword
from operator import mul
from typing import Any

import sympy as sp

from memtheory.constraints import SizeConstraint, candidates
from memtheory.errors import EvaluationError, InvalidArgumentError
from memtheory.estimate.fitting import SEARCH_CEILING, largest_fitting
from memtheory.evaluation.integer_code import ExactPythonPrinter, polynomial_code
from memtheory.footprint import Footprint
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.number_timeline import NumberTimeline, as_sympy_number

__all__ = ["SEARCH_CEILING", "UNSORTED", "CompiledFootprint", "largest_fitting", "position_limit"]

class _Table:
    """One breakdown's components and timeline as integer coefficients of shared terms."""

    def __init__(self, memory: MemoryBreakdown) -> None:
        self.memory = memory
        found = [sp.sympify(e).as_coefficients_dict() for e in memory.components.values()]
        found += _moment_coefficients(memory.timeline)
        # Equal terms come as different objects (a component's B*S, the timeline's): each
        # object is matched to its column once, by value; every row then by identity.
        objects = {id(term): term for row in found for term in row}
        self.terms = sorted(dict.fromkeys(objects.values()), key=sp.default_sort_key)
        column = {term: place for place, term in enumerate(self.terms)}
        place_of = {key: column[term] for key, term in objects.items()}
        numbers: dict[int, tuple[object, int | Fraction]] = {}
        width = len(self.terms)
        self.rows = []
        for row in found:
            values: list[int | Fraction] = [0] * width
            for term, coefficient in row.items():
                known = numbers.get(id(coefficient))
                if known is None:
                    known = numbers[id(coefficient)] = (coefficient, _number(coefficient))
                values[place_of[id(term)]] = known[1]
            self.rows.append(tuple(values))
        self.split = len(memory.components)

    def evaluate(self, at: list[int]) -> MemoryBreakdown:
        """Return the breakdown at sizes whose terms are ``at`` (:attr:`terms` order)."""
        plain = [sum(map(mul, row, at)) for row in self.rows]
        components = map(as_sympy_number, plain[: self.split])
        evaluated = copy(self.memory)  # the fields replace() would set, without re-checking them
        fields = {
            "components": dict(zip(self.memory.components, components, strict=True)),
            "timeline": NumberTimeline(self.memory.timeline, plain[self.split :]),
            "constraints": {},
        }
        for name, value in fields.items():
            object.__setattr__(evaluated, name, value)
        evaluated.__dict__.pop("peak", None)
        if len(plain) > self.split:  # the maximum of numbers is the largest, as maximum() finds
            evaluated.__dict__["peak"] = as_sympy_number(max(plain[self.split :]))
        return evaluated


def _moment_coefficients(timeline: Mapping[str, object]) -> list[Mapping[sp.Expr, sp.Expr]]:
    """Each moment's ``as_coefficients_dict()``; of a running sum, read from its changes.

    A moment kept as a place in a running sum's log (:class:`~memtheory.conventions.
    autograd.live_bytes.Moments`) is a sum of two or more terms, each its coefficient
    times its term: its coefficients are the log's as it stood there, the constant as
    the term 1, without building the moment.
    """
    running = getattr(timeline, "running_sum", None)
    if not callable(running):
        return [sp.sympify(e).as_coefficients_dict() for e in timeline.values()]
    sums = running()
    rows: list[Mapping[sp.Expr, sp.Expr]] = []
    now: dict[sp.Expr, sp.Expr] = {}
    at = 0
    for place, value in sums.places:
        for term, coefficient in dict(sums.log[at:place]).items():  # each term's last change
            key = sp.S.One if term is None else term
            if coefficient:
                now[key] = coefficient
            else:
                now.pop(key, None)
        at = place
        rows.append(dict(now) if value is None else sp.sympify(value).as_coefficients_dict())
    return rows


class CompiledFootprint:
    """A step's memory, compiled once, evaluated exactly at many sizes.

    Kept whole in a pickle (the compiled functions are compiled again on loading).

    Parameters
    ----------
    footprint : MemoryBreakdown or ParallelMemory
        A derived step; any other result (or one with size constraints) is
        evaluated by its own :meth:`~memtheory.footprint.Footprint.evaluate`.
    checked : callable, optional
        Says which size constraints the caller checks itself before it
        evaluates (a model's position limit, say): those do not keep the
        tables from being used, and :meth:`evaluate` does not check them.
    """

    def __init__(
        self, footprint: Footprint, *, checked: Callable[[SizeConstraint], bool] | None = None
    ) -> None:
        self.footprint = footprint
        parts = _breakdowns(footprint)
        fast = parts is not None and all(_unconstrained(part, checked) for part in parts)
        self._tables = [_Table(part) for part in parts] if fast and parts else None
        if self._tables is None:
            free = footprint.free_symbols
        else:
            free = set().union(*(t.free_symbols for table in self._tables for t in table.terms))
        self.names = sorted(s.name for s in free)
        self._sources: dict[str, str] = {}
        self._functions: dict[str, Callable[..., Any]] = {}
        try:
            self._sources["peak"] = _source(footprint.peak, self.names)
            for number, table in enumerate(self._tables or ()):
                for index, term in enumerate(table.terms):
                    self._sources[f"{number} {index}"] = _source(term, self.names)
        except (EvaluationError, ValueError):  # a fraction, or a size without a plain name
            self._tables = None
            self._sources = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_functions": {}}

    @property
    def fast(self) -> bool:
        """Whether :meth:`evaluate` computes from the tables (no size constraint to check)."""
        return self._tables is not None

    @property
    def coefficient_tables(
        self,
    ) -> list[tuple[list[sp.Expr], list[str], list[tuple[int | Fraction, ...]], MemoryBreakdown]]:
        """Each breakdown's shared terms, their sources, coefficient rows, and the breakdown.

        Empty where :attr:`fast` is False. A term's source is a Python function of
        the sizes :attr:`names` (integer arithmetic); a row (the components, then the
        moments) at some sizes is the sum of its coefficients times the terms there.

        Examples
        --------
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
        >>> memory = training_memory(counts, optimizer="sgd")
        >>> ((terms, sources, rows, _),) = CompiledFootprint(memory).coefficient_tables
        >>> terms, sources[1], rows[0]
        ([1, B], 'lambda B: (B)', (40, 0))
        """
        return [
            (t.terms, [self._sources[f"{n} {i}"] for i in range(len(t.terms))], t.rows, t.memory)
            for n, t in enumerate(self._tables or ())
        ]

    @property
    def peak_source(self) -> str | None:
        """Python source of the compiled peak, a function of the sizes :attr:`names` in order."""
        return self._sources.get("peak")

    def _function(self, name: str) -> Callable[..., Any] | None:
        found = self._functions.get(name)
        if found is None and name in self._sources:
            code = self._sources[name]  # printed by _source: integer arithmetic in the sizes
            found = self._functions[name] = eval(code, {"math": math})  # noqa: S307
        return found

    def _values(self, values: Mapping[str, object]) -> list[int] | None:
        """Return the sizes in :attr:`names` order, or None if the fast path cannot take them."""
        if set(self.names) != set(values):
            return None
        given = [values[name] for name in self.names]
        if not all(type(v) is int and v >= 1 for v in given):
            return None
        return given  # type: ignore[return-value]

    def evaluate(self, **values: object) -> Footprint:
        """Return what ``footprint.evaluate(**values)`` returns, computed from the tables."""
        given = self._values(values)
        if self._tables is None or given is None:
            return self.footprint.evaluate(**values)
        evaluated = []
        for number, table in enumerate(self._tables):
            at = [
                self._function(f"{number} {index}")(*given)  # type: ignore[misc]
                for index in range(len(table.terms))
            ]
            evaluated.append(table.evaluate(at))
        if isinstance(self.footprint, MemoryBreakdown):
            return evaluated[0]
        stages = tuple(evaluated[: len(self.footprint.stages)])  # type: ignore[attr-defined]
        host = evaluated[len(stages)] if len(evaluated) > len(stages) else None
        return replace(self.footprint, stages=stages, host=host)  # type: ignore[type-var]

    def peak(self, **values: int) -> int | sp.Expr:
        """Return the peak (the total without a timeline) at ``values``, in bytes."""
        given = self._values(values)
        peak = self._function("peak")
        if given is None or peak is None:
            return self.footprint.evaluate(**values).peak
        return int(peak(*given))


def _breakdowns(footprint: Footprint) -> list[MemoryBreakdown] | None:
    """Return the breakdowns a footprint is made of (stages, then host); None for another kind."""
    from memtheory.techniques.parallel import ParallelMemory

    if isinstance(footprint, MemoryBreakdown):
        return [footprint]
    if isinstance(footprint, ParallelMemory) and all(
        isinstance(s, MemoryBreakdown) for s in footprint.stages
    ):
        return [*footprint.stages, *([footprint.host] if footprint.host is not None else [])]
    return None


def position_limit(positions: int) -> Callable[[SizeConstraint], bool]:
    """Return a ``checked`` test for :class:`CompiledFootprint`: the sequence at most ``positions``.

    A model's position limit (GPT-2's 1,024, BERT's 512) is the one size
    constraint :func:`~memtheory.estimate.estimate` and its replay check
    themselves before evaluating (a longer ``--seq`` is refused, a search for
    the largest sequence stops there), so it need not keep a step off the
    fast tables or out of the disk cache.

    Examples
    --------
    >>> from memtheory.constraints import SizeConstraint
    >>> from memtheory.symbols import S
    >>> at_most = position_limit(1024)
    >>> at_most(SizeConstraint(1025 - S, "GPT-2's positions")), at_most(SizeConstraint(
    ...     513 - S, "BERT's positions"))
    (True, False)
    """

    def checked(constraint: SizeConstraint) -> bool:
        size = constraint.size
        if len(size.free_symbols) != 1:
            return False
        (sequence,) = size.free_symbols
        named_s = getattr(sequence, "name", None) == "S"
        return named_s and sp.expand(size + sequence) == positions + 1

    return checked


def _unconstrained(
    memory: MemoryBreakdown, checked: Callable[[SizeConstraint], bool] | None = None
) -> bool:
    """Whether evaluating ``memory`` checks no size constraint but those ``checked`` (the caller's).

    Without ``checked``, whether it checks none (so none can be skipped).
    """
    if memory.size_checks() and checked is None:
        return False
    found = [*memory.size_checks(), *candidates(list(memory.components.values())).every]
    return all(checked is not None and checked(constraint) for constraint in found)


def _number(coefficient: sp.Expr | int) -> int | Fraction:
    """Return the coefficient as a Python integer, or a fraction (each row has one per term)."""
    if type(coefficient) is int:
        return coefficient
    if getattr(coefficient, "is_Integer", False):  # sympy's: its value is its numerator
        return int(coefficient.p)  # type: ignore[union-attr]
    rational = sp.Rational(coefficient)
    return int(rational) if rational.q == 1 else Fraction(int(rational.p), int(rational.q))


UNSORTED = {"order": "none"}
"""Printer settings for code no one reads: terms and factors in the order the expression holds
them (sympy's canonical one, the same in every process), not sorted again for display. Integer
sums and products do not depend on the order, and sorting every sum of a step's peak
(``as_ordered_terms``) was most of the printing: GPT-2 xl's exact peak 0.22 s sorted, 0.04 s not;
a Llama-3-8B ZeRO-3 question printed four peaks."""


def _source(expression: sp.Expr, names: list[str]) -> str:
    """Return Python source of a function of the sizes ``names`` that computes ``expression``.

    Integer arithmetic throughout (floors and ceilings as floor division), as
    :func:`~memtheory.evaluation.compile_exact` prints it, but with the terms and
    factors in the order the expression holds them (:data:`UNSORTED`).
    """
    if not all(name.isidentifier() and not iskeyword(name) for name in names):
        raise InvalidArgumentError(f"sizes {names} are not all plain names")
    expression = sp.sympify(expression)
    code = polynomial_code(expression)
    if code is None:
        code = ExactPythonPrinter(UNSORTED).doprint(expression)
    return f"lambda {', '.join(names)}: ({code})"
