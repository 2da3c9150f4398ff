"""Plots: memory against one size with the device's limit, and the checkpointing trade-off.

matplotlib is imported inside each function: it is not a dependency of
memtheory itself (it comes with the ``book`` extra). Every point is computed
exactly and converted to the unit only for drawing.

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> from memtheory.models import gpt2
>>> ax = plot_memory(gpt2("small"), "B", range(1, 65), optimizer="adam",
...                  precision="mixed-fp16", limit="80 GB", S=1024)
>>> ax.get_xlabel(), ax.get_ylabel()
('B', 'memory (GiB)')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

import sympy as sp

from memtheory.conventions import ConventionLike
from memtheory.errors import EvaluationError
from memtheory.evaluation import compile_exact, evaluate, symbols_by_name
from memtheory.footprint import COMPONENT_TITLES
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.techniques.checkpointing import best_uniform_interval, tradeoff
from memtheory.units import convert, format_bytes
from memtheory.whatif import (
    By,
    DoesNotFitError,
    LimitLike,
    Quantity,
    max_value,
    memory_limit,
    total_bytes,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

__all__ = ["component_colour", "plot_checkpointing_tradeoff", "plot_memory"]

# matplotlib's "tab20", written out so that no component shares a colour with another (the
# ten-colour default cycle repeats after ten components, and a Footprint names fourteen).
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5", "#393b79", "#637939", "#8c6d31", "#843c39",
)


def component_colour(name: str) -> str:
    """Return the colour of a memory component in every figure: one colour per component.

    Examples
    --------
    >>> component_colour("parameters") != component_colour("input")
    True
    >>> from memtheory.footprint import COMPONENT_TITLES
    >>> len({component_colour(n) for n in COMPONENT_TITLES}) == len(COMPONENT_TITLES)
    True
    """
    names = list(COMPONENT_TITLES)
    index = names.index(name) if name in names else len(names) + sum(map(ord, name))
    return _PALETTE[index % len(_PALETTE)]


def _axes(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plotting needs matplotlib: pip install 'memtheory[book]' (or matplotlib)."
        ) from error
    _, created = plt.subplots()
    return created


def plot_memory(
    model: Quantity,
    symbol: str = "B",
    values: Iterable[int] = range(1, 65),
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike = "fp32",
    convention: ConventionLike = "breakdown",
    mode: Literal["training", "inference"] = "training",
    by: By = "peak",
    limit: LimitLike | None = None,
    unit: str = "GiB",
    ax: Axes | None = None,
    label: str | None = None,
    **fixed: object,
) -> Axes:
    """Plot memory against one size, with a horizontal line at the device's limit.

    Parameters
    ----------
    model : Network, ModelCounts, MemoryBreakdown, GenerationMemory or expression
    symbol : str, default "B"
        Name of the size on the horizontal axis.
    values : iterable of int, default 1..64
    optimizer, precision, convention, mode, by
        As for :func:`memtheory.whatif.max_batch`.
    limit : bytes or str, optional
        Device memory (``"24 GiB"``): drawn as a horizontal line, with a
        vertical line at the largest value that fits.
    unit : str, default "GiB"
    ax : matplotlib Axes, optional
        Draw into it (several models on one plot); a new figure otherwise.
    label : str, optional
        Legend entry of the curve.
    **fixed
        Values of the other sizes (``S=1024``).

    Returns
    -------
    matplotlib Axes
    """
    total = total_bytes(
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode, by=by
    )
    if fixed:
        total = evaluate(total, **{k: v for k, v in fixed.items() if k in _names(total)})
    names = _names(total)
    if symbol not in names:
        raise EvaluationError(
            f"the memory does not depend on {symbol}; it depends on {', '.join(names) or '-'}."
        )
    others = sorted(set(names) - {symbol})
    if others:
        raise EvaluationError(f"give values for {', '.join(others)} to plot against {symbol}.")
    xs = list(values)
    ys = [float(convert(value, unit)) for value in _exact_values(total, symbol, xs)]
    axes = _axes(ax)
    axes.plot(xs, ys, label=label or "memory")
    if limit is not None:
        cap = memory_limit(limit)
        axes.axhline(
            float(convert(cap, unit)),
            color="red",
            linestyle="--",
            label=f"limit {format_bytes(cap, unit)}",
        )
        try:
            best = max_value(total, symbol, cap)
        except DoesNotFitError:
            best = None
        if best is not None and xs and min(xs) <= best <= max(xs):
            axes.axvline(best, color="gray", linestyle=":", label=f"largest {symbol} = {best}")
    axes.set_xlabel(symbol)
    axes.set_ylabel(f"memory ({unit})")
    axes.legend()
    return axes


def _exact_values(total: sp.Expr, variable: str, xs: list[int]) -> list[sp.Expr | int]:
    try:
        function = compile_exact(total, [variable])
    except EvaluationError:  # not integer code: evaluate checks the sizes the same way
        return [evaluate(total, **{variable: x}) for x in xs]
    return [function(x) for x in xs]


def _names(expression: sp.Expr) -> list[str]:
    return sorted(symbols_by_name([expression]))


def plot_checkpointing_tradeoff(layers: int, *, ax: Axes | None = None) -> Axes:
    """Plot peak memory against recomputation for every checkpoint interval of ``layers`` layers.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> ax = plot_checkpointing_tradeoff(16)
    >>> ax.get_xlabel()
    'layers recomputed'
    """
    plans = tradeoff(layers)
    axes = _axes(ax)
    axes.plot(
        [p.recompute for p in plans],
        [p.memory for p in plans],
        "o",
        alpha=0.35,
        label="every interval k",
    )
    # Intervals in order of k zigzag; the frontier (no other k needs less memory for
    # no more recomputation) is the curve a reader chooses from.
    frontier, least = [], None
    for plan in sorted(plans, key=lambda p: (p.recompute, p.memory)):
        if least is None or plan.memory < least:
            frontier.append(plan)
            least = plan.memory
    axes.plot(
        [p.recompute for p in frontier],
        [p.memory for p in frontier],
        "-",
        color="C0",
        label="best trade-offs",
    )
    best = plans[best_uniform_interval(layers) - 1]
    axes.annotate(
        f"least memory: k = {best.interval}",
        (best.recompute, best.memory),
        textcoords="offset points",
        xytext=(-140, 30),
        arrowprops={"arrowstyle": "->"},
    )
    axes.legend(loc="lower left")
    axes.set_xlabel("layers recomputed")
    axes.set_ylabel("peak activations (layers' worth)")
    axes.set_title(f"checkpointing {layers} layers every k")
    return axes
