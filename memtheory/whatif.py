r"""What-if questions: the largest batch that fits, what the total is most sensitive to, scenarios.

* :func:`max_value` (and :func:`max_batch`, :func:`max_sequence_length`):
  the largest whole value of one size for which the memory fits a limit. A
  total that is a polynomial in that size (affine in the batch, quadratic in
  the sequence length) is solved with sympy; any other (floors of image
  sizes, the maximum of a timeline) is bisected. Either way the answer
  :math:`v` is then checked exactly: :math:`f(v) \le` limit :math:`< f(v+1)`.
* :func:`max_value_formula`: the same largest value as a formula in the
  memory size, :math:`\lfloor (M - b)/a \rfloor` for a total :math:`aB + b`.
* :func:`sensitivity`: derivatives and elasticities of the total with respect
  to each size at a point, and the exact change for one more of each.
* :func:`compare`: a table of scenarios (optimizer x precision x
  checkpointing x ZeRO stage).

Limits are bytes or labelled sizes (``"24 GiB"``, ``"80 GB"``). Memory is
assumed never to shrink as a size grows. Used in the book's chapters "Batch size" and
"Checkpointing, sharding and offload".

Examples
--------
>>> from memtheory import Dense, Input, Network
>>> net = Network([Input((784,)), Dense(100), Dense(10)])
>>> max_batch(net, "1 MiB", optimizer="sgd")
102
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import sympy as sp

from memtheory.breakdown import MemoryBreakdown
from memtheory.conventions import ConventionLike, Model
from memtheory.counts import ModelCounts
from memtheory.errors import DoesNotFitError, EvaluationError, UnsupportedError
from memtheory.evaluation import compile_exact, evaluate, symbols_by_name
from memtheory.memory import inference_memory, training_memory
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.techniques.checkpointing import (
    best_checkpoint_interval,
    best_segment_length,
    checkpoint_units,
    checkpointed_counts,
)
from memtheory.techniques.kv_cache import GenerationMemory, positions_limit
from memtheory.techniques.zero import zero_partition
from memtheory.units import convert, format_bytes, parse_bytes, round_half_up

__all__ = [
    "Comparison",
    "DoesNotFitError",
    "Scenario",
    "Sensitivity",
    "SymbolSensitivity",
    "compare",
    "max_batch",
    "max_sequence_length",
    "max_value",
    "max_value_formula",
    "memory_limit",
    "sensitivity",
    "total_bytes",
]

LimitLike = str | int | sp.Expr
Quantity = Model | MemoryBreakdown | GenerationMemory | sp.Expr | int

SEARCH_CEILING = 2**80
"""Bisection gives up beyond this value: the total hardly grows with the size."""


def memory_limit(limit: LimitLike) -> sp.Rational:
    """Return a memory limit in bytes: a number of bytes, or text such as ``"24 GiB"``.

    Examples
    --------
    >>> memory_limit("80 GB"), memory_limit("24 GiB"), memory_limit(1000)
    (80000000000, 25769803776, 1000)
    """
    value = parse_bytes(limit) if isinstance(limit, str) else sp.sympify(limit)
    if not value.is_number or not value.is_positive:
        raise EvaluationError(
            f"a memory limit must be a positive number of bytes or a size such as '24 GiB', "
            f"got {limit!r}."
        )
    return sp.Rational(value)


def total_bytes(
    model: Quantity,
    optimizer: OptimizerLike | None = None,
    *,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
    mode: Literal["training", "inference"] = "training",
) -> sp.Expr:
    """Return the bytes to compare with a limit: a traced peak if there is one, else the total.

    ``model`` may be a network or counts (its training or inference memory is
    derived), a memory breakdown, a :class:`~memtheory.techniques.GenerationMemory`,
    or an expression in bytes.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> total_bytes(ModelCounts.per_sample(parameters=10, activations=2, input_elements=1), optimizer="sgd")
    20*B + 80
    """
    if isinstance(model, Network | ModelCounts):
        if mode == "inference":
            memory = inference_memory(model, precision=precision, convention=convention)
        else:
            memory = training_memory(
                model, optimizer=optimizer, precision=precision, convention=convention
            )
        return total_bytes(memory)
    if isinstance(model, MemoryBreakdown):
        peak = getattr(model, "peak", None)
        return peak if peak is not None else model.total
    if isinstance(model, GenerationMemory):
        return model.total
    if isinstance(model, sp.Basic | int):
        return sp.sympify(model)
    raise UnsupportedError(
        f"cannot take the memory of {type(model).__name__}: pass a Network, ModelCounts, "
        "MemoryBreakdown, GenerationMemory or an expression in bytes."
    )


def _exact(expression: sp.Expr, symbol: sp.Symbol) -> Callable[[int], sp.Expr | int]:
    try:
        compiled = compile_exact(expression, [symbol.name])
    except (EvaluationError, TypeError):
        return lambda value: expression.xreplace({symbol: sp.Integer(value)})
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
    return int(sp.floor(max(real))) if real else None


def _total_in(
    expression: Quantity, symbol: str | sp.Symbol, values: dict[str, object]
) -> tuple[sp.Expr, sp.Symbol, dict[str, sp.Symbol]]:
    """Return the total bytes with ``values`` substituted, the size symbol, and the free symbols."""
    total = total_bytes(expression)
    if values:
        total = evaluate(total, **values)
    name = symbol if isinstance(symbol, str) else symbol.name
    free = symbols_by_name([total])
    if name not in free:
        raise EvaluationError(
            f"the memory does not depend on {name}; it depends on "
            f"{', '.join(sorted(free)) or 'nothing'}."
        )
    return total, free[name], free


def max_value(
    expression: Quantity,
    symbol: str | sp.Symbol,
    limit: LimitLike,
    *,
    start: int = 1,
    stop: int | None = None,
    **values: object,
) -> int:
    r"""Return the largest whole value of ``symbol`` whose memory fits ``limit``, checked exactly.

    Parameters
    ----------
    expression : expression, MemoryBreakdown, GenerationMemory, Network or ModelCounts
        Bytes, nondecreasing in ``symbol``.
    symbol : str or sympy.Symbol
        The size to maximise (``"B"``, ``"S"``, ``"H"``).
    limit : bytes or str
        ``"24 GiB"``, ``"80 GB"``, or a number of bytes.
    start : int, default 1
        The smallest value worth trying.
    stop : int, optional
        The largest value allowed (a model's longest sequence, say): the
        answer is at most ``stop`` even when memory would allow more.
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

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> max_value(1000 * B + 24, "B", 10**6)
    999
    >>> max_value(B * sp.floor(H / 2) ** 2, "H", 4096, B=4)
    65
    """
    total, size, free = _total_in(expression, symbol, values)
    name = size.name
    others = sorted(set(free) - {name})
    if others:
        raise EvaluationError(
            f"give values for {', '.join(others)} (e.g. {others[0]}=...) to solve for {name}."
        )
    cap = memory_limit(limit)
    f = _exact(total, size)
    if f(start) > cap:
        raise DoesNotFitError(
            f"even {name}={start} needs {format_bytes(f(start), 'GiB')} "
            f"({format_bytes(f(start), 'GB')}), more than the limit of "
            f"{format_bytes(cap, 'GiB')} ({format_bytes(cap, 'GB')}). Reduce the model's "
            "memory (precision, checkpointing, sharding) or use a larger device."
        )
    if stop is not None and f(stop) <= cap:
        return stop
    guess = _solved(total, size, cap)
    value = _refined(f, cap, guess, start) if guess is not None else None
    if value is None:
        value = _bisected(f, cap, start, name)
    if not (f(value) <= cap < f(value + 1)):  # pragma: no cover - a non-monotone total
        raise EvaluationError(
            f"could not find the largest {name}: the memory is not nondecreasing in {name}."
        )
    return value


def max_value_formula(
    expression: Quantity,
    symbol: str | sp.Symbol,
    memory_symbol: sp.Symbol,
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
    expression : expression, MemoryBreakdown, GenerationMemory, Network or ModelCounts
        Bytes, a polynomial of degree 1 or 2 in ``symbol`` (affine in the
        batch, quadratic in the sequence length) that grows with it; no floor
        of ``symbol`` in it.
    symbol : str or sympy.Symbol
        The size to maximise (``"B"``, ``"S"``).
    memory_symbol : sympy.Symbol
        The memory in bytes (make it with
        :func:`~memtheory.symbols.size_symbol`, so that it is a positive integer).
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
    total, size, free = _total_in(expression, symbol, values)
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
    low, high = start, max(2 * start, 2)
    while f(high) <= cap:
        low, high = high, 2 * high
        if high > SEARCH_CEILING:
            raise EvaluationError(
                f"the memory stays within the limit up to {name}={low}: it hardly grows with "
                f"{name}."
            )
    while high - low > 1:
        middle = (low + high) // 2
        if f(middle) <= cap:
            low = middle
        else:
            high = middle
    return low


def max_batch(
    model: Quantity,
    limit: LimitLike,
    optimizer: OptimizerLike | None = None,
    *,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
    mode: Literal["training", "inference"] = "training",
    batch: str = "B",
    stop: int | None = None,
    **values: object,
) -> int:
    """Return the largest batch whose training (or inference) memory fits ``limit``.

    Parameters
    ----------
    model : Network, ModelCounts, MemoryBreakdown, GenerationMemory or expression
    limit : bytes or str
        ``"24 GiB"``, ``"80 GB"``, or a number of bytes.
    optimizer, precision, convention
        As for :func:`~memtheory.memory.training_memory`.
    mode : {"training", "inference"}, default "training"
    batch : str, default "B"
        Name of the batch symbol.
    stop : int, optional
        The largest batch worth considering.
    **values
        Values of every other size (``S=1024``, ``H=224``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> max_batch(gpt2("small"), "80 GB", optimizer="adam", precision="mixed-fp16", S=1024)
    35
    """
    total = total_bytes(
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode
    )
    return max_value(total, batch, limit, stop=stop, **values)


def max_sequence_length(
    model: Quantity,
    limit: LimitLike,
    optimizer: OptimizerLike | None = None,
    *,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
    mode: Literal["training", "inference"] = "training",
    sequence: str = "S",
    **values: object,
) -> int:
    """Return the longest sequence whose memory fits ``limit`` (see :func:`max_batch`).

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
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode
    )
    cap = _positions(model)
    return max_value(total, sequence, limit, stop=cap, **values)


def _positions(model: Quantity) -> int | None:
    if isinstance(model, GenerationMemory):
        return model.positions
    if isinstance(model, Network):
        return positions_limit(model)
    return None


# -- sensitivity -------------------------------------------------------------------------
@dataclass(frozen=True)
class SymbolSensitivity:
    r"""How the total responds to one size at a point.

    Attributes
    ----------
    symbol : str
    value : sympy number
        The size's value at the point.
    derivative : sympy expression
        :math:`\partial T / \partial x` of the total with floors and ceilings
        relaxed to their arguments, at the point (bytes per unit of the size).
    elasticity : sympy expression
        :math:`(\partial \tilde T / \partial x)\, x / \tilde T`, with
        :math:`\tilde T` the total with floors relaxed (both the derivative and
        the total, so that it is the elasticity of one smooth function): the
        percent change of the total for one percent more of the size. It never
        exceeds the total's degree in the size.
    step : sympy number
        :math:`T(x + 1) - T(x)`, exactly: the bytes one more costs.
    """

    symbol: str
    value: sp.Expr
    derivative: sp.Expr
    elasticity: sp.Expr
    step: sp.Expr


@dataclass(frozen=True)
class Sensitivity:
    """Sensitivities of a total to each of its sizes, most sensitive first.

    Attributes
    ----------
    total : sympy number
        The total at the point, in bytes.
    rows : tuple of SymbolSensitivity
    """

    total: sp.Expr
    rows: tuple[SymbolSensitivity, ...]

    @property
    def most_sensitive(self) -> str:
        """The size with the largest elasticity."""
        return self.rows[0].symbol

    def __getitem__(self, symbol: str) -> SymbolSensitivity:
        for row in self.rows:
            if row.symbol == symbol:
                return row
        raise KeyError(f"no size named {symbol!r}; sizes: {', '.join(r.symbol for r in self.rows)}")

    def table(self, unit: str = "MiB", digits: int = 3) -> str:
        """Render one line per size: value, elasticity, and what one more costs."""
        header = ("size", "value", "elasticity", f"+1 costs ({unit})")
        body = [
            (
                r.symbol,
                str(r.value),
                str(round_half_up(r.elasticity, digits)),
                str(round_half_up(convert(r.step, unit), digits)),
            )
            for r in self.rows
        ]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(4)]
        lines = [
            "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(line)
            )
            for line in [header, tuple("-" * w for w in widths), *body]
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _relaxed(expression: sp.Expr) -> sp.Expr:
    return expression.replace(sp.floor, lambda arg: arg).replace(sp.ceiling, lambda arg: arg)


def sensitivity(
    model: Quantity,
    optimizer: OptimizerLike | None = None,
    *,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
    mode: Literal["training", "inference"] = "training",
    **values: object,
) -> Sensitivity:
    """Which size the memory is most sensitive to, at the point ``values``.

    Parameters
    ----------
    model : Network, ModelCounts, MemoryBreakdown, GenerationMemory or expression
    optimizer, precision, convention, mode
        As for :func:`max_batch`.
    **values
        A value for every free symbol (``B=32, S=1024``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> result = sensitivity(gpt2("small"), optimizer="adam", B=8, S=1024)
    >>> result.most_sensitive, float(result["S"].elasticity) > float(result["B"].elasticity)
    ('S', True)
    """
    total = total_bytes(
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode
    )
    free = symbols_by_name([total])
    missing = sorted(set(free) - set(values))
    if missing:
        raise EvaluationError(f"sensitivity needs a value for {', '.join(missing)}.")
    point = {free[name]: sp.sympify(value) for name, value in values.items() if name in free}
    at_point = evaluate(total, **{k: v for k, v in values.items() if k in free})
    relaxed = _relaxed(total)
    relaxed_at_point = sp.nsimplify(relaxed.xreplace(point))
    rows = []
    for name, symbol in free.items():
        derivative = sp.nsimplify(sp.diff(relaxed, symbol).xreplace(point))
        value = point[symbol]
        shifted = {**point, symbol: value + 1}
        rows.append(
            SymbolSensitivity(
                name,
                value,
                derivative,
                sp.nsimplify(derivative * value / relaxed_at_point),
                total.xreplace(shifted) - at_point,
            )
        )
    rows.sort(key=lambda r: (-abs(float(r.elasticity)), r.symbol))
    return Sensitivity(at_point, tuple(rows))


# -- scenarios ---------------------------------------------------------------------------
CheckpointLike = int | Literal["sqrt", "best"] | None


@dataclass(frozen=True)
class Scenario:
    """One combination of techniques and its memory.

    Attributes
    ----------
    optimizer : str
    precision : str
    checkpointing : int or None
        Units per checkpointed segment, or None.
    zero_stage : int
    memory : MemoryBreakdown
        Per-device memory, evaluated at the comparison's values.
    """

    optimizer: str
    precision: str
    checkpointing: int | None
    zero_stage: int
    memory: MemoryBreakdown

    @property
    def total(self) -> sp.Expr:
        """Bytes per device (the peak where the convention traces one)."""
        return total_bytes(self.memory)


@dataclass(frozen=True)
class Comparison:
    """Scenarios side by side; ``str()`` prints the table.

    Attributes
    ----------
    scenarios : tuple of Scenario
    limit : sympy number or None
        The device memory, when given.
    """

    scenarios: tuple[Scenario, ...]
    limit: sp.Expr | None = None

    def table(self, unit: str = "GiB", digits: int = 2) -> str:
        """Render the scenarios, with whether each fits the limit.

        Examples
        --------
        >>> from memtheory import ModelCounts
        >>> counts = ModelCounts(parameters=10**9, activations=0, input_elements=0)
        >>> print(compare(counts, optimizers=("sgd", "adam"), precisions=("fp32",)).table("GB"))
        optimizer  precision  checkpointing  ZeRO  total (GB)
        ---------  ---------  -------------  ----  ----------
        sgd        fp32       -              -           8.00
        adam       fp32       -              -          16.00
        """
        header = ["optimizer", "precision", "checkpointing", "ZeRO", f"total ({unit})"]
        if self.limit is not None:
            header.append(f"fits {format_bytes(self.limit, unit, digits)}")
        body = []
        for s in self.scenarios:
            total = s.total
            if not total.is_number:
                names = ", ".join(sorted(x.name for x in total.free_symbols))
                raise ValueError(f"table() needs numbers: pass {names}=... to compare().")
            line = [
                s.optimizer,
                s.precision,
                "-" if s.checkpointing is None else f"every {s.checkpointing}",
                "-" if s.zero_stage == 0 else f"stage {s.zero_stage}",
                str(round_half_up(convert(total, unit), digits)),
            ]
            if self.limit is not None:
                line.append("yes" if total <= self.limit else "no")
            body.append(line)
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        numeric = {4}

        def render(row: list[str]) -> str:
            return "  ".join(
                c.rjust(widths[i]) if i in numeric else c.ljust(widths[i])
                for i, c in enumerate(row)
            ).rstrip()

        return "\n".join([render(header), render(["-" * w for w in widths]), *map(render, body)])

    def __str__(self) -> str:
        return self.table()


def compare(
    model: Model,
    *,
    optimizers: Iterable[OptimizerLike] = ("sgd", "adam"),
    precisions: Iterable[PrecisionLike] = ("fp32", "mixed-fp16"),
    checkpointing: Iterable[CheckpointLike] = (None,),
    zero_stages: Iterable[int] = (0,),
    devices: int = 1,
    limit: LimitLike | None = None,
    convention: ConventionLike = "breakdown",
    **values: object,
) -> Comparison:
    """Tabulate the memory of every combination of optimizer, precision, checkpointing and ZeRO.

    Parameters
    ----------
    model : Network or ModelCounts
        Checkpointing needs a Network.
    optimizers, precisions : iterables
    checkpointing : iterable of int, "sqrt", "best" or None
        Units per checkpointed segment. ``"sqrt"`` is the textbook choice for
        a chain of equal units (about the square root of their number);
        ``"best"`` tries every interval on the network's own, unequal units and
        keeps the least memory; None means no checkpointing.
    zero_stages : iterable of {0, 1, 2, 3}
    devices : int, default 1
        Data-parallel devices the ZeRO stages partition over.
    limit : bytes or str, optional
        Device memory, for a "fits" column.
    convention : str or Convention, default "breakdown"
    **values
        Sizes to evaluate at (``B=32, S=1024``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> table = compare(gpt2("small"), optimizers=("adam",), precisions=("fp32", "mixed-fp16"),
    ...                 checkpointing=(None, "sqrt"), limit="24 GiB", B=8, S=1024)
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
    for opt, prec, every, stage in itertools.product(
        tuple(optimizers), tuple(precisions), tuple(checkpointing), tuple(zero_stages)
    ):
        segment = _segment_length(model, every, values)
        counts = (
            checkpointed_counts(model, segment)
            if isinstance(model, Network)
            else _plain_counts(model, segment)
        )
        memory = training_memory(counts, optimizer=opt, precision=prec, convention=convention)
        if stage:
            memory = zero_partition(memory, devices, stage)
        if values:
            memory = memory.evaluate(**{k: v for k, v in values.items() if _has(memory, k)})
        scenarios.append(Scenario(_label(opt), _label(prec), segment, stage, memory))
    return Comparison(tuple(scenarios), cap)


def _has(memory: MemoryBreakdown, name: str) -> bool:
    return any(s.name == name for s in memory.free_symbols)


def _label(spec: object) -> str:
    return spec if isinstance(spec, str) else str(getattr(spec, "name", spec))


def _segment_length(model: Model, every: CheckpointLike, values: dict[str, object]) -> int | None:
    if every is None:
        return None
    if not isinstance(model, Network):
        raise UnsupportedError(
            "checkpointing needs the network's layers: pass a Network, not ModelCounts."
        )
    if every == "sqrt":
        return best_segment_length(len(checkpoint_units(model)))
    if every == "best":
        return best_checkpoint_interval(model, **values)
    return every  # type: ignore[return-value]


def _plain_counts(model: Model, segment: int | None) -> Model:
    if segment is not None:  # pragma: no cover - refused by _segment_length
        raise UnsupportedError("checkpointing needs a Network.")
    return model
