r"""Solvers: the largest value of one size whose memory fits a limit.

* :func:`max_value` (and :func:`max_batch`, :func:`max_sequence_length`):
  the largest whole value of one size for which the memory fits a limit. A
  total that is a polynomial in that size (affine in the batch, quadratic in
  the sequence length) is solved with sympy; any other (floors of image
  sizes, the maximum of a timeline) is bisected. Either way the answer
  :math:`v` is then checked exactly: :math:`f(v) \le` limit :math:`< f(v+1)`.
* :func:`max_value_formula`: the same largest value as a formula in the
  memory size, :math:`\lfloor (M - b)/a \rfloor` for a total :math:`aB + b`.

Memory is assumed never to shrink as a size grows. Which bytes are compared
with the limit (``by="peak"`` or ``"total"``) is explained in
:mod:`memtheory.whatif.limits`. Used in the book's chapter "Batch size".

Examples
--------
>>> from memtheory import Dense, Input, Network
>>> net = Network([Input((784,)), Dense(100), Dense(10)])
>>> max_batch(net, "1 MiB", optimizer="sgd")
102
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from typing import Any, Literal

import sympy as sp
from sympy.core.evalf import PrecisionExhausted

from memtheory._shown import shown
from memtheory.bisection import BeyondCeilingError, largest_holding
from memtheory.constraints import SizeConstraint, candidates, largest_valid, smallest_valid
from memtheory.constraints.carried import warn_lost
from memtheory.conventions import ConventionLike
from memtheory.counts import ModelCounts
from memtheory.errors import DoesNotFitError, EvaluationError, SizeWarning, UnsupportedError
from memtheory.evaluation import (
    compile_exact,
    evaluate,
    substitute,
    substitution,
    symbols_by_name,
)
from memtheory.footprint import Footprint
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.recipes import Setup
from memtheory.techniques.kv_cache import GenerationMemory, positions_limit
from memtheory.units import format_bytes
from memtheory.whatif.limits import By, LimitLike, Quantity, memory_limit, total_bytes

__all__ = ["max_batch", "max_sequence_length", "max_value", "max_value_formula"]


def _exact(
    expression: sp.Expr, symbol: sp.Symbol, constraints: tuple[SizeConstraint, ...]
) -> Callable[[int], sp.Expr | int]:
    """Return the bytes as a function of one size; both ways check ``constraints``."""
    try:
        compiled = compile_exact(expression, [symbol.name], within=constraints)
    except (EvaluationError, TypeError):
        return lambda value: evaluate(expression, within=constraints, **{symbol.name: value})
    return compiled


def _roots(expression: sp.Expr, symbol: sp.Symbol, target: sp.Expr) -> list[sp.Expr] | None:
    """Solve ``expression == target`` for ``symbol``; None unless a polynomial of degree <= 2."""
    pieces = expression.atoms(sp.floor, sp.ceiling, sp.Min, sp.Max, sp.Piecewise)
    if any(piece.has(symbol) for piece in pieces):
        return None
    try:
        degree = sp.Poly(expression, symbol).degree()
    except sp.PolynomialError:
        return None
    if degree > 2:
        return None
    plain = sp.Symbol("x", real=True)
    return list(sp.solve(sp.Eq(expression.xreplace({symbol: plain}), target), plain))


def _solved(expression: sp.Expr, symbol: sp.Symbol, limit: sp.Rational) -> int | None:
    """Floor of the largest real solution of ``expression == limit``, for polynomials only."""
    roots = _roots(expression, symbol, limit)
    real = [r for r in roots or () if r.is_real]
    try:
        return int(sp.floor(max(real))) if real else None
    except PrecisionExhausted:  # a root too large to floor exactly (a limit of 1e300): search
        return None


def _total_in(
    expression: Quantity, symbol: str | sp.Symbol, values: dict[str, object], by: By
) -> tuple[sp.Expr, sp.Symbol, dict[str, sp.Symbol], tuple[SizeConstraint, ...]]:
    """Return the bytes with ``values`` in, the size symbol, the free symbols, the constraints.

    The constraints are those still open. A memory result, a network or counts
    brings its own (never those another network registered for an equal
    expression); a bare expression, those of the network it is known to
    (:func:`~memtheory.constraints.candidates`).
    """
    total = total_bytes(expression, by=by)
    own = isinstance(expression, Footprint | Network | ModelCounts)
    found = candidates(total, within=expression if own else None)
    if values:
        mapping = substitution([total], values)
        found = found.check(mapping, stacklevel=4)
        total = substitute(total, mapping)  # checked above, with its own constraints
    if found.ambiguous:
        warnings.warn(
            SizeWarning(
                "this expression is handed out by several networks (or memory results) with "
                "different size constraints, so which apply to it is unknown: the search "
                "keeps to sizes every one of them takes. Pass the memory result itself "
                "(max_value(memory, ...)) to use its own."
            ),
            stacklevel=3,
        )
    constraints = found.every  # whichever network it is, these sizes are in its range
    if isinstance(symbol, str):
        name = symbol
    elif isinstance(symbol, sp.Symbol):
        name = symbol.name
    else:
        raise EvaluationError(
            f"the size to solve for is a symbol or its name (such as 'B'), got {shown(symbol)}."
        )
    free = symbols_by_name([total])
    if name not in free:
        raise EvaluationError(
            f"the memory does not depend on {name}; it depends on "
            f"{', '.join(sorted(free)) or 'nothing'}."
        )
    return total, free[name], free, constraints


def max_value(
    expression: Quantity,
    symbol: str | sp.Symbol,
    limit: LimitLike,
    *,
    start: int = 1,
    stop: int | None = None,
    by: By = "peak",
    **values: object,
) -> int:
    r"""Return the largest whole value of ``symbol`` whose memory fits ``limit``, checked exactly.

    Parameters
    ----------
    expression : expression, Footprint (a memory result), Network or ModelCounts
        Bytes, nondecreasing in ``symbol``.
    symbol : str or sympy.Symbol
        The size to maximise (``"B"``, ``"S"``, ``"H"``).
    limit : bytes or str
        ``"24 GiB"``, ``"80 GB"``, or a number of bytes.
    start : int, default 1
        The smallest value worth trying; raised to the smallest value every
        layer of the network takes (a 5x5 kernel needs a side of at least 5).
    stop : int, optional
        The largest value allowed (a model's longest sequence, say): the
        answer is at most ``stop`` even when memory would allow more.
    by : {"peak", "total"}, default "peak"
        For a memory result: its peak (the most bytes alive at once) or its
        total (see :mod:`memtheory.whatif.limits`).
    **values
        Values for every other free symbol, by name.

    Returns
    -------
    int
        :math:`v` with :math:`f(v) \le` limit :math:`< f(v + 1)`, or ``stop``.

    Raises
    ------
    DoesNotFitError
        If even ``start`` does not fit.
    KernelTooLargeError
        If ``values`` are too small for a layer of the network.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> max_value(1000 * B + 24, "B", 10**6)
    999
    >>> max_value(B * sp.floor(H / 2) ** 2, "H", 4096, B=4)
    65
    """
    total, size, free, found = _total_in(expression, symbol, values, by)
    name = size.name
    others = sorted(set(free) - {name})
    if others:
        raise EvaluationError(
            f"give values for {', '.join(others)} (e.g. {others[0]}=...) to solve for {name}."
        )
    answer = _largest(total, size, found, limit, start, stop)
    if not isinstance(expression, Footprint | Network | ModelCounts):
        bare = total_bytes(expression, by=by)
        if not candidates(bare).known:  # no network hands it out: it may have lost conditions
            given = {s: values[n] for n, s in symbols_by_name([bare]).items() if n in values}
            warn_lost(bare, {**given, size: answer})
    return answer


def _largest(
    total: sp.Expr,
    size: sp.Symbol,
    found: tuple[SizeConstraint, ...],
    limit: LimitLike,
    start: int,
    stop: int | None,
) -> int:
    """Return the largest ``size`` at which ``total`` fits in ``limit`` (see :func:`max_value`)."""
    name = size.name
    cap = memory_limit(limit)
    start = _first(start, "start")
    if stop is not None:
        stop = _first(stop, "stop")
    start = smallest_valid(found, size, start)  # the smallest size that fits
    largest = largest_valid([c for c in found if c.is_limit], size)  # the model's limit
    if largest is not None and (stop is None or stop > largest):
        stop = largest
    guards = [c for c in found if not c.is_limit]
    ceiling = largest_valid(guards, size)  # where a formula stops holding (a traced guard)
    if ceiling is not None and (stop is None or stop > ceiling):
        stop = ceiling
        beyond = True
    else:
        beyond = False
    f = _exact(total, size, found)
    if f(start) > cap:
        raise DoesNotFitError(
            f"even {name}={start} needs {format_bytes(f(start), 'GiB')} "
            f"({format_bytes(f(start), 'GB')}), more than the limit of "
            f"{format_bytes(cap, 'GiB')} ({format_bytes(cap, 'GB')}). Reduce the model's "
            "memory (precision, checkpointing, sharding) or use a larger device."
        )
    if stop is not None and f(stop) <= cap:
        if beyond:
            raise EvaluationError(
                f"the memory still fits at {name}={stop}, the largest {name} where the formula "
                f"holds ({'; '.join(c.where for c in guards)}): the largest {name} that fits is "
                f"beyond it. Derive the formula again (trace at a larger {name}) to find it."
            )
        return stop
    if stop is not None:
        top = stop

        def f_capped(value: int, _f: Callable[[int], sp.Expr | int] = f) -> sp.Expr | int:
            return _f(value) if value <= top else cap + 1

        f = f_capped
    guess = _solved(total, size, cap)
    value = _refined(f, cap, guess, start) if guess is not None else None
    if value is None:
        value = _bisected(f, cap, start, name)
    if not (f(value) <= cap < f(value + 1)):  # pragma: no cover - a non-monotone total
        raise EvaluationError(
            f"could not find the largest {name}: the memory is not nondecreasing in {name}."
        )
    return value


def _first(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise EvaluationError(f"{what} must be a positive whole number, got {shown(value)}.")
    return int(value)


def max_value_formula(
    expression: Quantity,
    symbol: str | sp.Symbol,
    memory_symbol: sp.Symbol,
    *,
    by: By = "peak",
    **values: object,
) -> sp.Expr:
    r"""Return the largest whole value of ``symbol`` that fits ``memory_symbol`` bytes: a formula.

    The floor of the largest root of :math:`f(v) = M`: for training memory
    :math:`aB + b`, affine in the batch, the largest batch is
    :math:`\lfloor (M - b)/a \rfloor`. At a number of bytes it is what
    :func:`max_value` returns, wherever :func:`max_value` finds one value that
    fits (a formula cannot say "nothing fits": below :math:`f(1)` it gives 0 or less).

    Parameters
    ----------
    expression : expression, Footprint (a memory result), Network or ModelCounts
        Bytes, a polynomial of degree 1 or 2 in ``symbol`` (affine in the
        batch, quadratic in the sequence length) that grows with it; no floor
        of ``symbol`` in it.
    symbol : str or sympy.Symbol
        The size to maximise (``"B"``, ``"S"``).
    memory_symbol : sympy.Symbol
        The memory in bytes (make it with
        :func:`~memtheory.symbols.size_symbol`, so that it is a positive integer).
    by : {"peak", "total"}, default "peak"
        As for :func:`max_value`.
    **values
        Values for other free symbols, by name; those left stay in the formula
        (a degree-2 total needs them all).

    Returns
    -------
    sympy expression
        ``floor(...)``, in ``memory_symbol`` (and any symbol left).

    Raises
    ------
    EvaluationError
        If the memory does not depend on ``symbol``, or does not grow with it.
    UnsupportedError
        If the memory is not a polynomial of degree 1 or 2 in ``symbol``.

    Examples
    --------
    >>> from memtheory.symbols import B, S, size_symbol
    >>> M = size_symbol("M")
    >>> largest = max_value_formula(100 * B + 50, "B", M)
    >>> largest
    floor(M/100 - 1/2)
    >>> largest.subs(M, 10**6), max_value(100 * B + 50, "B", 10**6)
    (9999, 9999)
    >>> max_value_formula(2 * S**2 + 4 * S, S, M)
    floor(sqrt(2*M + 4)/2) - 1
    """
    total, size, free, _ = _total_in(expression, symbol, values, by)
    name = size.name
    roots = _roots(total, size, memory_symbol)
    if not roots:
        raise UnsupportedError(
            f"the memory {total} is not a polynomial of degree 1 or 2 in {name}: there is no "
            f"formula to solve; use max_value() with a number of bytes."
        )
    poly = sp.Poly(total, size)
    leading = poly.LC()
    if leading.is_positive is False:
        raise EvaluationError(f"the memory {total} does not grow with {name}.")
    if len(roots) == 1:
        return sp.floor(roots[0])
    if free.keys() - {name}:
        raise EvaluationError(
            f"give values for {', '.join(sorted(free.keys() - {name}))} to solve the quadratic "
            f"in {name}."
        )
    # Both roots are real where the memory is reached at a large value; keep the larger branch.
    probe = {memory_symbol: poly.eval(10**6)}
    return sp.floor(max(roots, key=lambda root: root.xreplace(probe)))


def _refined(
    f: Callable[[int], sp.Expr | int], cap: sp.Rational, guess: int, start: int
) -> int | None:
    value = max(guess, start)
    for _ in range(64):
        if f(value) > cap:
            value -= 1
        elif f(value + 1) <= cap:
            value += 1
        else:
            return value
        if value < start:
            return None
    return None


def _bisected(f: Callable[[int], sp.Expr | int], cap: sp.Rational, start: int, name: str) -> int:
    try:
        return largest_holding(lambda value: bool(f(value) <= cap), start)
    except BeyondCeilingError as beyond:
        raise EvaluationError(
            f"the memory stays within the limit up to {name}={beyond.reached}: it hardly grows "
            f"with {name}."
        ) from None


def max_batch(
    model: Quantity,
    limit: LimitLike,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike | None = None,
    convention: ConventionLike | None = None,
    mode: Literal["training", "inference"] = "training",
    by: By = "peak",
    setup: Setup | str | None = None,
    symbol: str = "B",
    stop: int | None = None,
    **values: object,
) -> int:
    """Return the largest batch whose training (or inference) memory fits ``limit``.

    Parameters
    ----------
    model : Network, ModelCounts, Footprint (a memory result) or expression
    limit : bytes or str
        ``"24 GiB"``, ``"80 GB"``, or a number of bytes.
    optimizer, precision, convention, setup
        As for :func:`~memtheory.memory.training_memory`: a setup
        (:mod:`memtheory.recipes`) gives all three.
    mode : {"training", "inference"}, default "training"
    by : {"peak", "total"}, default "peak"
        The most bytes alive at once, or the sum of the components (see
        :mod:`memtheory.whatif.limits`).
    symbol : str, default "B"
        Name of the batch symbol.
    stop : int, optional
        The largest batch worth considering.
    **values
        Values of every other size (``S=1024``, ``H=224``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> max_batch(gpt2("small"), "80 GB", optimizer="adam", precision="mixed-fp16", S=1024)
    33

    Under the step a plain PyTorch loop runs with ``torch.autocast`` (a recipe):

    >>> max_batch(gpt2("small", flash=True), "80 GB", setup="pytorch-amp", S=1024) > 33
    True
    """
    if isinstance(model, Footprint):  # its own constraints, not those registered for its peak
        return max_value(model, symbol, limit, stop=stop, by=by, **_sizes(values))
    total = total_bytes(
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode, by=by,
        setup=setup,
    )
    return max_value(total, symbol, limit, stop=stop, **_sizes(values))


def max_sequence_length(
    model: Quantity,
    limit: LimitLike,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike | None = None,
    convention: ConventionLike | None = None,
    mode: Literal["training", "inference"] = "training",
    by: By = "peak",
    setup: Setup | str | None = None,
    symbol: str = "S",
    **values: object,
) -> int:
    """Return the longest sequence whose memory fits ``limit`` (see :func:`max_batch`).

    ``symbol`` names the sequence-length symbol (default ``"S"``); the other
    arguments are those of :func:`max_batch`.

    A model with learned position embeddings cannot go beyond its table:
    the answer is capped there.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> from memtheory.techniques import generation_memory
    >>> memory = generation_memory(gpt2("xl"))
    >>> max_sequence_length(memory, "24 GiB", B=128), max_sequence_length(memory, "24 GiB", B=32)
    (576, 1024)

    The second is GPT-2's limit of 1,024 positions: the memory would allow 2,304.
    """
    total = total_bytes(
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode, by=by,
        setup=setup,
    )
    cap = _positions(model)
    return max_value(total, symbol, limit, stop=cap, **_sizes(values))


def _positions(model: Quantity) -> int | None:
    if isinstance(model, GenerationMemory):
        return model.positions
    if isinstance(model, Network):
        return positions_limit(model)
    return None


def _sizes(values: dict[str, object]) -> dict[str, Any]:
    """Pass sizes on by name; ``total`` is already bytes, so they cannot mean ``stop`` or ``by``."""
    return values
