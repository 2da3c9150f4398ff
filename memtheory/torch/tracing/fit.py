"""Exact formulas when the model's code fixes a size: fit traces at several sizes, then confirm.

Some code turns a symbolic size into a number (``int(x.size(0))`` inside a
kernel wrapper, ``torch.nn.functional.pad`` on the CPU, mask builders): the
symbolic trace then comes out as numbers, not formulas. The bytes are still
polynomials in the sizes wherever the step runs the same operations, so they
can be recovered exactly another way:

1. trace the step on fake tensors with every size fixed, at the sizes of a
   lattice around the example (``B0 + i``, ``S0 + j`` with ``i + j <= d``),
   keeping one moment per operation;
2. check that every trace ran the same operations in the same order (else
   there is no single formula to find, and the first difference is named);
3. solve, exactly (integer arithmetic), for the polynomial of total degree at
   most ``d`` through each quantity: every component, every moment of the step
   and of the inference pass, every module's saved bytes and output sizes;
4. trace at two further sizes not used in the fit, and require every quantity
   to equal its polynomial there, to the byte; otherwise raise the degree
   (up to :data:`MAX_DEGREE`) and try again.

5. check below the fit: where each moment was fitted, trace each size at 1
   (then 2) with the others at the example's, and refuse the sizes below the
   first that gives the formulas' components and peaks (a size of 1 often
   runs other code); where only totals were fitted (a loop), a phase's peak
   may be another moment below the lattice, so claim only the boxes whose
   corners traced to the byte (:mod:`~memtheory.torch.tracing.region`).

The result says which sizes it was fitted and confirmed at, and the sizes
below them it checked; what it claims above them is what any formula claims:
the same code runs there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from fractions import Fraction
from itertools import product

import numpy as np
import sympy as sp

from memtheory.errors import MemtheoryError, UnsupportedError
from memtheory.footprint import COMPONENT_TITLES
from memtheory.torch.tracing.guards import Specialisation
from memtheory.torch.tracing.layout import MomentLayout, OperationsDifferError, record_number
from memtheory.torch.tracing.region import region_constraints, verified_corners
from memtheory.torch.tracing.result import TracedMemory
from memtheory.torch.tracing.step import StepRecord
from memtheory.torch.tracing.totals import TotalsLayout

__all__ = ["MAX_DEGREE", "STEPS", "FitFailedError", "OperationsDifferError", "fitted_trace"]

MIN_DEGREE = 2
"""Total degree tried first (attention makes bytes quadratic in the sequence length)."""

MAX_DEGREE = 4
"""Highest total degree tried before giving up."""

Point = tuple[int, ...]


class FitFailedError(UnsupportedError):
    """The model refused the sizes a fit needs, or no polynomial matched its traces."""


def fitted_trace(
    run: Callable[[dict[sp.Symbol, int]], StepRecord],
    sizes: dict[int, sp.Symbol],
    fixed: Sequence[Specialisation | str],
) -> TracedMemory:
    """Recover the exact formulas of a step whose code fixed a size, from concrete traces.

    The lattice is taken in steps of 1 first; where the model refuses one of
    its sizes (a skip connection that needs even sizes), in steps of 2, 4,
    ..., up to the largest of :data:`STEPS`: sizes it accepts.

    Parameters
    ----------
    run : callable
        ``run({B: 5, S: 12})``: the step traced on fake tensors of those fixed
        sizes, one moment per operation.
    sizes : dict
        Example size to symbol, as :func:`~memtheory.torch.tracing.sizes.dimension_symbols` gives.
    fixed : sequence of Specialisation or str
        Why the formulas are fitted (what the symbolic trace found fixed, or
        where it failed), said in the result's conditions.

    Raises
    ------
    FitFailedError
        If the model refuses the sizes near the example, or no polynomial of
        degree up to :data:`MAX_DEGREE` matches at the confirming sizes.
    Exception
        What the step raised at the example sizes themselves (nothing to fit).
    """
    symbols = list(sizes.values())
    base = tuple(sizes)
    cache: dict[Point, StepRecord] = {}

    def traced(point: Point) -> StepRecord:
        if point not in cache:
            try:
                cache[point] = run(dict(zip(symbols, point, strict=True)))
            except MemtheoryError:
                raise
            except Exception as error:  # noqa: BLE001 (a size the model refuses: try others)
                if point == base:
                    raise
                raise _RefusedError(point, error) from error
        return cache[point]

    reference = traced(base)
    try:
        return _over_steps(traced, MomentLayout(reference), base, symbols, fixed)
    except OperationsDifferError:
        why = (
            "the step runs other operations at other sizes (a loop over a size, as in a "
            "recurrent layer), so its totals and peaks were fitted, not each moment"
        )
        return _over_steps(traced, TotalsLayout(reference), base, symbols, [*fixed, why])


def _over_steps(
    traced: Callable[[Point], StepRecord],
    layout: MomentLayout,
    base: Point,
    symbols: list[sp.Symbol],
    fixed: Sequence[Specialisation | str],
) -> TracedMemory:
    """Fit on lattices in steps of 1, 2, 4, ... until the model takes every size and one fits."""
    refused: _RefusedError | None = None
    missed = ""
    for step in STEPS:
        try:
            fitted = _fit(traced, layout, base, symbols, step, fixed)
        except _RefusedError as error:
            refused = error
            continue
        if isinstance(fitted, TracedMemory):
            return fitted
        missed = missed or fitted
    if refused is None or missed:
        raise FitFailedError(
            "the model's code fixed a size ("
            + "; ".join(map(str, fixed))
            + f"), and its bytes are no polynomial of degree up to {MAX_DEGREE} in "
            f"{', '.join(s.name for s in symbols)} ({missed}, not what the fit predicts). "
            "Measure it at the sizes you need with memtheory.torch.measure."
        )
    shown = ", ".join(f"{s.name}={v}" for s, v in zip(symbols, refused.point, strict=True))
    raise FitFailedError(
        "the formulas must be fitted from traces at several sizes ("
        + "; ".join(map(str, fixed))
        + f"), but the model refused sizes near the example in steps up to {STEPS[-1]} (at "
        f"{shown}: {type(refused.error).__name__}: {str(refused.error).splitlines()[0][:200]}). "
        "Trace at example sizes that leave room on both sides, or measure it at the sizes you "
        "need with memtheory.torch.measure."
    )


STEPS = (1, 2, 4, 8, 16, 32)
"""Distances between the sizes a fit traces at, tried in turn until the model takes them all."""


class _RefusedError(Exception):
    """The model refused a size of the fit's lattice (not the example's own)."""

    def __init__(self, point: Point, error: Exception) -> None:
        super().__init__(point, error)
        self.point = point
        self.error = error


def _fit(
    traced: Callable[[Point], StepRecord],
    layout: MomentLayout,
    base: Point,
    symbols: list[sp.Symbol],
    step: int,
    fixed: Sequence[Specialisation | str],
) -> TracedMemory | str:
    """Fit on the lattice ``base + step * offsets``, raising the degree until it is confirmed.

    Returns the result, or what the highest degree missed.
    """
    last_error = ""
    for degree in range(MIN_DEGREE, MAX_DEGREE + 1):
        exponents = [
            e for e in product(range(degree + 1), repeat=len(symbols)) if sum(e) <= degree
        ]
        offsets = exponents + _confirming(len(symbols), degree)
        points = [tuple(b + step * o for b, o in zip(base, e, strict=True)) for e in offsets]
        vectors = [layout.vector(traced(p)) for p in points]
        matrix = [[_monomial_value(p, m) for m in exponents] for p in points[: len(exponents)]]
        inverse = sp.Matrix(matrix).inv()
        denominator = int(sp.ilcm(*[sp.fraction(v)[1] for v in inverse]))
        adjugate = np.array(
            [[int(v * denominator) for v in inverse.row(i)] for i in range(inverse.rows)],
            dtype=object,
        )
        values = np.array(vectors[: len(exponents)], dtype=object)
        scaled = adjugate.dot(values)  # coefficients times the denominator
        wrong = _first_mismatch(scaled, denominator, exponents, points[len(exponents) :],
                                vectors[len(exponents) :])
        if wrong is None:
            coefficients = [
                [Fraction(int(c), denominator) for c in column] for column in scaled.T
            ]
            monomials = [
                sp.Mul(*(s**e for s, e in zip(symbols, m, strict=True))) for m in exponents
            ]
            words = _conditions(fixed, symbols, points, len(exponents), degree)
            if step > 1:
                words += (
                    f"sizes taken in steps of {step} (the model refused, or its bytes are no "
                    f"polynomial over, sizes in steps of {step // 2}): the formulas are confirmed "
                    f"only where each size differs from the example's by a multiple of {step}",
                )
            result = layout.result(coefficients, monomials, words)
            if not isinstance(layout, TotalsLayout):
                return _ones_checked(result, symbols, base, traced)
            return _limited(result, symbols, base, _agreeing(traced, layout, scaled, denominator,
                                                             exponents))
        last_error = f"degree {degree}: {layout.name(wrong[0])} is {wrong[1]} at {wrong[2]}"
    return last_error


def _agreeing(
    traced: Callable[[Point], StepRecord],
    layout: MomentLayout,
    scaled: np.ndarray,
    denominator: int,
    exponents: list[Point],
) -> Callable[[Point], bool]:
    """Whether a trace at a point gives every quantity its fitted polynomial's value there."""

    def agrees(point: Point) -> bool:
        try:
            vector = layout.vector(traced(point))
        except (_RefusedError, UnsupportedError):
            return False
        return _first_mismatch(scaled, denominator, exponents, [point], [vector]) is None

    return agrees


def _limited(
    result: TracedMemory, symbols: list[sp.Symbol], base: Point, agrees: Callable[[Point], bool]
) -> TracedMemory:
    """Limit a fitted loop's formulas to the sizes where traces below the fit agree with them."""
    corners = verified_corners(agrees, base)
    limits = region_constraints(symbols, corners)
    if not limits:
        return result
    shown = "; ".join(", ".join(f"{s.name}={v}" for s, v in zip(symbols, c, strict=True))
                      for c in corners)
    words = (
        f"{next(iter(limits)) if len(limits) == 1 else ' and '.join(limits)}: traced at fixed "
        "sizes below the fit, a loop's peak moment (or the code a size of 1 runs) changes, so "
        f"the formulas are claimed only at sizes at least those of a corner that traced to the "
        f"byte ({shown}); smaller sizes are refused: trace with example sizes there, or measure"
    )
    return replace(result, constraints={**result.constraints, **limits},
                   conditions=(*result.conditions, words))


def _ones_checked(
    result: TracedMemory,
    symbols: list[sp.Symbol],
    base: Point,
    traced: Callable[[Point], StepRecord],
) -> TracedMemory:
    """Trace each size at 1 (then 2), the others at the example's: limit it where bytes differ.

    Each moment was fitted where the step runs the same operations; a size of
    1 often runs other code (no copy of a transposed input whose other size is
    1: an LSTM classifier's fitted trace was 56 bytes per token high at B = 1),
    so it is checked, not assumed.
    """
    limits: dict[str, sp.Expr] = {}
    for index, symbol in enumerate(symbols):
        low = next(
            (v for v in range(1, min(3, base[index]))
             if _totals_agree(result, symbols, _moved(base, index, v), traced)),
            base[index],
        )
        if low > 1:
            limits[f"{symbol.name} >= {low}"] = symbol - low + 1
    if not limits:
        return result
    words = (
        f"{' and '.join(limits)}: traced at a fixed size of 1 (and 2) with the other sizes at "
        "the example's, the step's components or peaks differ from the formulas (other code "
        "runs there), so smaller sizes are refused: trace with example sizes there, or measure"
    )
    return replace(result, constraints={**result.constraints, **limits},
                   conditions=(*result.conditions, words))


def _moved(point: Point, index: int, value: int) -> Point:
    return tuple(value if i == index else v for i, v in enumerate(point))


def _totals_agree(
    result: TracedMemory,
    symbols: list[sp.Symbol],
    point: Point,
    traced: Callable[[Point], StepRecord],
) -> bool:
    """Whether a trace at ``point`` has the formulas' components, peak and inference peak."""
    try:
        record = traced(point)
    except _RefusedError:
        return False
    values = dict(zip(symbols, point, strict=True))
    found = [
        *(record_number(record.components.get(c, {})) for c in COMPONENT_TITLES),
        max(record_number(m) for _, m in record.moments),
        max((record_number(m) for _, m in record.inference), default=0),
    ]
    formulas = [
        *(result.components.get(c, sp.S.Zero) for c in COMPONENT_TITLES),
        sp.Max(*result.timeline.values()),
        result.inference_peak,
    ]
    return all(sp.sympify(f).subs(values) == v for f, v in zip(formulas, found, strict=True))


def _confirming(count: int, degree: int) -> list[Point]:
    """Two offsets outside the lattice of total degree ``degree``."""
    if count == 1:
        return [(degree + 1,), (degree + 3,)]
    first = (degree + 1,) + (1,) * (count - 1)
    second = (1,) * (count - 1) + (degree + 2,)
    return [first, second]


def _monomial_value(point: Point, exponents: Point) -> int:
    value = 1
    for size, exponent in zip(point, exponents, strict=True):
        value *= size**exponent
    return value


def _first_mismatch(
    scaled: np.ndarray,
    denominator: int,
    exponents: list[Point],
    points: list[Point],
    vectors: list[list[int]],
) -> tuple[int, int, Point] | None:
    """Return the first quantity a fit misses at a confirming trace: (index, value, point)."""
    for point, vector in zip(points, vectors, strict=True):
        row = np.array([_monomial_value(point, m) for m in exponents], dtype=object)
        predicted = row.dot(scaled)
        for index, (guess, actual) in enumerate(zip(predicted, vector, strict=True)):
            if guess != actual * denominator:
                return index, actual, point
    return None


def _conditions(
    fixed: Sequence[Specialisation | str],
    symbols: list[sp.Symbol],
    points: list[Point],
    fitted: int,
    degree: int,
) -> tuple[str, ...]:
    names = ", ".join(s.name for s in symbols)
    ranges = ", ".join(
        f"{s.name} in {min(p[i] for p in points[:fitted])}..{max(p[i] for p in points[:fitted])}"
        for i, s in enumerate(symbols)
    )
    confirmed = "; ".join(
        ", ".join(f"{s.name}={v}" for s, v in zip(symbols, p, strict=True))
        for p in points[fitted:]
    )
    return (
        *(f"{f} (so the formulas were fitted rather than traced)" for f in fixed),
        f"fitted exactly as polynomials of total degree <= {degree} in {names} to {fitted} "
        f"traces ({ranges}) and confirmed to the byte at sizes not used to fit ({confirmed}); "
        "they hold wherever the step runs the same operations",
    )


