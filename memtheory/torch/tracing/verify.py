"""Conditions that do not change the memory: checked by tracing on their other side, then dropped.

PyTorch records a guard wherever code branches on a size, and most branches
change nothing a trace counts: the CPU convolution picks its kernel by batch
(``B < 16``), a size of 1 is treated apart (``B >= 2``), and shape checks
give CNNs many floor-expression conditions. Each such condition would block
the formulas where they are exact. For a condition on one size,
:func:`drop_harmless` traces the step at fixed sizes just beyond it (the
other sizes at their example values) and compares every component, the peak
and the inference peak with the formulas there. Where all agree at every
point tried, the condition no longer limits evaluation; it stays in the words,
marked harmless with the points that showed it. A condition that does change
the bytes stays a limit.

This is evidence at the points tried, not a proof: the words say where.

Each check is handed what the formulas give at its point, so a trace that
cannot match stops early (:class:`~memtheory.torch.tracing.step.Departed`):
after the forward when the saved activations differ, at the first moment
above the expected peak, before the inference pass when the peak falls short.
The answer is the same as a whole trace's, sooner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import sympy as sp

from memtheory.errors import MemtheoryError
from memtheory.evaluation.integer_code import ExactPythonPrinter
from memtheory.torch.tracing.quiet import quiet_fake_tensor_errors
from memtheory.torch.tracing.result import TracedMemory
from memtheory.torch.tracing.step import Departed, Expected

__all__ = ["MAX_CHECKS", "drop_harmless"]

MAX_CHECKS = 10
"""Most fixed-size traces spent on checking conditions (each costs one trace)."""

_SCAN = 256
"""How far beyond its example value a size is searched for a point outside a condition."""


def drop_harmless(
    memory: TracedMemory,
    run: Callable[[dict[sp.Symbol, int], Expected], TracedMemory],
    example: Mapping[sp.Symbol, int],
    checks: int = MAX_CHECKS,
) -> TracedMemory:
    """Drop the constraints whose other side gives the same bytes as the formulas.

    Parameters
    ----------
    memory : TracedMemory
        The symbolic trace.
    run : callable
        ``run({B: 16, H: 20}, expected)``: the step traced at those fixed
        sizes; it may raise :class:`~memtheory.torch.tracing.step.Departed`
        once it cannot give the ``expected`` bytes.
    example : mapping
        Each symbol's example value.
    checks : int, default MAX_CHECKS
        Most fixed-size traces to run; conditions whose points would need more are kept.
    """
    done: dict[tuple[int, ...], TracedMemory | Expected | None] = {}
    formulas: dict[tuple[int, ...], _Bytes | None] = {}
    constraints = dict(memory.constraints)
    words = list(memory.conditions)
    for label, margin in memory.constraints.items():
        points = _outside(margin, example)
        if not points or len(done.keys() | {_key(p) for p in points}) > checks:
            continue
        if all(_agrees(_formulas_at(memory, point, formulas), point, run, done)
               for point in points):
            del constraints[label]
            shown = " and ".join(", ".join(f"{s.name}={v}" for s, v in p.items()) for p in points)
            words = [_harmless(word, label, shown) for word in words]
    return replace(memory, constraints=constraints, conditions=tuple(words))


def _harmless(word: str, label: str, shown: str) -> str:
    if word != label and not word.startswith(f"{label} ("):
        return word
    return f"{label}: harmless (traced at {shown}: the same bytes as the formulas)"


def _key(point: Mapping[sp.Symbol, int]) -> tuple[int, ...]:
    return tuple(v for _, v in sorted(point.items(), key=lambda kv: kv[0].name))


def _outside(margin: sp.Expr, example: Mapping[sp.Symbol, int]) -> list[dict[sp.Symbol, int]]:
    """Points just beyond the condition ``margin >= 1``, along its one size.

    Two above an upper bound (``B = 16, 17`` for ``B < 16``); one below a
    lower bound, the largest size it excludes (``H = 32`` for a final feature
    map of 1 x 1), which is the nearest a user is likely to ask for.
    """
    if len(margin.free_symbols) != 1:
        return []
    (symbol,) = margin.free_symbols
    if symbol not in example:
        return []
    start = example[symbol]
    below_one = _below_one(margin, symbol)
    found: list[int] = []
    for step, wanted in ((1, 2), (-1, 1)):
        value = start + step
        while 1 <= value <= start + _SCAN and len(found) < wanted:
            if below_one(value):
                found.append(value)
            elif found:
                break
            value += step
        if found:
            break
    return [{**example, symbol: value} for value in found]


def _below_one(margin: sp.Expr, symbol: sp.Symbol) -> Callable[[int], bool]:
    """``value -> margin < 1`` at ``symbol = value``, exactly, for the scan of :func:`_outside`.

    A margin that is a whole number for whole sizes (floors, products, powers, maxima:
    PyTorch's guards on a CNN's sizes) is compiled once into integer arithmetic, floors
    as floor division: the scan puts up to 512 values into it, and DenseNet-121's
    thirteen floor-chain conditions took 2.7% of its trace with ``xreplace`` walking the
    chain at every value. Any other margin is evaluated by ``xreplace``, as before.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> below = _below_one(sp.floor(sp.floor(H / 4 - sp.Rational(1, 4)) / 2) ** 2, H)
    >>> [value for value in range(1, 14) if below(value)]
    [1, 2, 3, 4, 5, 6, 7, 8]
    """
    if margin.is_integer:
        compiled = sp.lambdify([symbol], margin, modules=[{}, "math"], printer=ExactPythonPrinter)
        return lambda value: bool(compiled(value) < 1)
    # xreplace, not subs: the same number (a size put in and evaluated), without subs'
    # sympify and pattern work on a floor chain at every value scanned
    return lambda value: bool(margin.xreplace({symbol: sp.Integer(value)}) < 1)


@dataclass(frozen=True)
class _Bytes:
    """What a check compares: each component, the step's peak and the inference peak."""

    components: dict[str, int]
    peak: int
    inference_peak: int


def _formulas_at(
    memory: TracedMemory, point: dict[sp.Symbol, int], known: dict[tuple[int, ...], _Bytes | None]
) -> _Bytes | None:
    """Return the formulas' bytes at ``point``, once per point; None where they cannot be had.

    A point beyond one condition is often beyond its twins (``X != 1`` and ``X**2 != 1``),
    and the same point is then asked for each. The bytes do not depend on which condition
    asks: the formulas are evaluated without the conditions (a trace at the point decides
    them), as they were evaluated with only those the point keeps. DenseNet-121's 18
    questions were 8 points, each an evaluation of its 739 moments.
    """
    key = _key(point)
    if key not in known:
        try:
            formula = replace(memory, constraints={}).evaluate(
                **{s.name: v for s, v in point.items()}
            )
        except MemtheoryError:
            known[key] = None
        else:
            known[key] = _Bytes({k: int(v) for k, v in formula.components.items()},
                                int(formula.peak), int(formula.inference_peak))
    return known[key]


def _agrees(
    formula: _Bytes | None,
    point: dict[sp.Symbol, int],
    run: Callable[[dict[sp.Symbol, int], Expected], TracedMemory],
    done: dict[tuple[int, ...], TracedMemory | Expected | None],
) -> bool:
    """Whether the step traced at ``point`` gives the formulas' bytes there (``formula``).

    ``done`` keeps each point's trace (None where the step cannot run), or
    the :class:`Expected` bytes a trace stopped early against.
    """
    if formula is None:
        return False
    expected = Expected(formula.components.get("saved_activations", 0), formula.peak)
    key = _key(point)
    if key not in done or (isinstance(done[key], Expected) and done[key] != expected):
        try:
            with quiet_fake_tensor_errors():
                done[key] = run(point, expected)
        except Departed:  # it cannot give these bytes: found before the whole step ran
            done[key] = expected
        except Exception:  # noqa: BLE001 (the step cannot run there: the condition is real)
            done[key] = None
    traced = done[key]
    if not isinstance(traced, TracedMemory):
        return False
    return (
        formula.components == {k: int(v) for k, v in traced.components.items()}
        and formula.peak == traced.peak
        and formula.inference_peak == traced.inference_peak
    )
