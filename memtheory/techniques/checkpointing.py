r"""Gradient checkpointing: keep every :math:`k`-th layer's output, recompute the rest.

Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016,
arXiv:1604.06174), Section 4.1: split a chain of :math:`n` layers into
segments of :math:`k` layers, keep only each segment's input through the
forward pass, and in the backward pass rerun one segment at a time from its
kept input. With every layer keeping the same activation memory :math:`m`,
the peak is the kept segment inputs plus one segment's activations,

.. math:: \left(\left\lceil n/k \right\rceil - 1\right) m + \min(k, n)\, m,

whose continuous relaxation :math:`n/k - 1 + k` is smallest at
:math:`k = \sqrt{n}`, where it is :math:`2\sqrt{n} - 1`: memory
:math:`O(\sqrt{n})` for the price of rerunning :math:`n - \sqrt{n}` layers
(one more forward pass, roughly). The last segment is not checkpointed (as
in PyTorch's ``checkpoint_sequential``), so :math:`k = n` is plain training.

For a real :class:`~memtheory.network.Network` the "layers" are its units:
the stretches between cut points, layers whose output is the only tensor
that later layers read (every layer of a sequential network; a residual
block, or half a transformer block, in a graph). Derived in the book's
chapter "Checkpointing, sharding and offload".

Examples
--------
>>> optimal_segment_length()
sqrt(n)
>>> minimal_memory()
2*sqrt(n) - 1
>>> uniform_memory(100, 10), uniform_recompute(100, 10)
(19, 90)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.counts import ModelCounts
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import elements
from memtheory.network import Network
from memtheory.symbols import size_symbol

__all__ = [
    "LAYERS",
    "SEGMENT",
    "CheckpointPlan",
    "Unit",
    "best_checkpoint_interval",
    "best_segment_length",
    "checkpoint_units",
    "checkpointed_activations",
    "checkpointed_counts",
    "minimal_memory",
    "optimal_segment_length",
    "tradeoff",
    "uniform_memory",
    "uniform_recompute",
]

LAYERS = size_symbol("n")
""":math:`n`: layers in the chain."""

SEGMENT = size_symbol("k")
""":math:`k`: layers per segment (a checkpoint every :math:`k` layers)."""


def uniform_memory(layers: SizeLike = LAYERS, every: SizeLike = SEGMENT) -> sp.Expr:
    """Peak activations, in layers' worth, with a checkpoint every ``every`` of ``layers`` layers.

    Examples
    --------
    >>> uniform_memory(12, 1), uniform_memory(12, 12), uniform_memory(12, 4)
    (12, 12, 6)
    """
    n, k = sp.sympify(layers), sp.sympify(every)
    return sp.ceiling(n / k) - 1 + sp.Min(k, n)


def uniform_recompute(layers: SizeLike = LAYERS, every: SizeLike = SEGMENT) -> sp.Expr:
    """Layers rerun in the backward pass: all but the last (unchecked) segment's.

    Examples
    --------
    >>> uniform_recompute(12, 4), uniform_recompute(12, 12)
    (8, 0)
    """
    n, k = sp.sympify(layers), sp.sympify(every)
    return sp.Min(k * (sp.ceiling(n / k) - 1), n)


def _relaxed_memory(n: sp.Expr, k: sp.Expr) -> sp.Expr:
    r"""Return :func:`uniform_memory` without the rounding, for :math:`k \le n`."""
    return n / k - 1 + k


def optimal_segment_length(layers: SizeLike = LAYERS) -> sp.Expr:
    """Return the segment length that minimises the relaxed memory, solved with sympy: sqrt(n).

    Examples
    --------
    >>> optimal_segment_length(64)
    8
    """
    k = sp.Symbol("k", positive=True)
    n = sp.sympify(layers)
    (root,) = sp.solve(sp.diff(_relaxed_memory(n, k), k), k)
    return root


def minimal_memory(layers: SizeLike = LAYERS) -> sp.Expr:
    """Return the relaxed memory at the optimal segment length: ``2*sqrt(n) - 1`` layers' worth.

    Examples
    --------
    >>> minimal_memory(64)
    15
    """
    n = sp.sympify(layers)
    return sp.simplify(_relaxed_memory(n, optimal_segment_length(n)))


def best_segment_length(layers: int) -> int:
    """Return the whole segment length with the least exact memory for ``layers`` layers.

    ``isqrt(n)`` or ``isqrt(n) + 1`` always reaches the least memory, but other
    lengths may tie; among those, the one that recomputes least wins.

    Examples
    --------
    >>> best_segment_length(100), best_segment_length(12)
    (10, 4)
    """
    n = int(as_size(layers, "layers", "best_segment_length"))
    memory = _exact_in_segment(uniform_memory(n, SEGMENT))
    recompute = _exact_in_segment(uniform_recompute(n, SEGMENT))
    return min(range(1, n + 1), key=lambda k: (memory(k), recompute(k), k))


def _exact_in_segment(expression: sp.Expr) -> Callable[[int], Fraction]:
    """Compile a function of the segment length that computes with exact fractions."""
    functions = {"ceiling": math.ceil, "floor": math.floor, "Min": min, "Max": max}
    compiled = sp.lambdify([SEGMENT], expression, modules=[functions])
    return lambda k: compiled(Fraction(k))


@dataclass(frozen=True)
class CheckpointPlan:
    """One point of the memory/recompute trade-off.

    Attributes
    ----------
    every : int
        Segment length :math:`k`.
    memory : int
        Peak activations, in layers' worth.
    recompute : int
        Layers rerun in the backward pass.
    """

    every: int
    memory: int
    recompute: int


def tradeoff(layers: int) -> tuple[CheckpointPlan, ...]:
    """Return the memory and recompute of every segment length from 1 to ``layers``.

    Examples
    --------
    >>> [(p.every, p.memory, p.recompute) for p in tradeoff(4)]
    [(1, 4, 3), (2, 3, 2), (3, 4, 3), (4, 4, 0)]
    """
    n = int(as_size(layers, "layers", "tradeoff"))
    memory = _exact_in_segment(uniform_memory(n, SEGMENT))
    recompute = _exact_in_segment(uniform_recompute(n, SEGMENT))
    return tuple(CheckpointPlan(k, int(memory(k)), int(recompute(k))) for k in range(1, n + 1))


# -- real networks -----------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """A stretch of a network that ends at a cut point: the "layer" of checkpointing.

    Attributes
    ----------
    layers : tuple of str
        Names of its layers, in order.
    activations : sympy expression
        Activation elements its layers keep.
    output : sympy expression
        Elements of its last layer's output: what a checkpoint after it keeps.
    """

    layers: tuple[str, ...]
    activations: sp.Expr
    output: sp.Expr


def checkpoint_units(network: Network) -> tuple[Unit, ...]:
    """Split ``network`` (after its input) into units that end where a checkpoint can go.

    A layer is a cut point when no connection jumps over it: every later
    layer reads only it or layers after it.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> units = checkpoint_units(gpt2("small"))
    >>> len(units), units[3].layers
    (29, ('h.0.ln_1', 'h.0.attn', 'h.0.attn_dropout', 'h.0.add_1'))
    """
    rows = network.rows
    position = {row.name: row.index for row in rows}
    jumped = [0] * (len(rows) + 1)
    for row in rows:
        for name in row.inputs:
            start, end = position[name] + 1, row.index
            if start < end:
                jumped[start] += 1
                jumped[end] -= 1
    units: list[Unit] = []
    current: list[int] = []
    open_jumps = 0
    for index in range(1, len(rows)):
        open_jumps += jumped[index]
        current.append(index)
        if open_jumps == 0 or index == len(rows) - 1:
            chosen = [rows[i] for i in current]
            units.append(
                Unit(
                    tuple(r.name for r in chosen),
                    sp.Add(*(r.activations for r in chosen)),
                    elements(chosen[-1].output_shape),
                )
            )
            current = []
    return tuple(units)


def checkpointed_activations(network: Network, every: int) -> sp.Expr:
    """Peak activation elements with a checkpoint after every ``every``-th unit.

    The kept segment inputs plus the largest segment's activations.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> net = Network([Input((10,)), *[Dense(10) for _ in range(9)]])
    >>> net.activation_count, checkpointed_activations(net, 3)
    (90*B, 50*B)
    """
    units = checkpoint_units(network)
    k = int(as_size(every, "every", "checkpointed_activations"))
    segments = [units[i : i + k] for i in range(0, len(units), k)]
    kept = sp.Add(*(segment[-1].output for segment in segments[:-1]))
    largest = sp.Max(*(sp.Add(*(u.activations for u in segment)) for segment in segments))
    return kept + largest


def best_checkpoint_interval(network: Network, **values: object) -> int:
    r"""Return the checkpoint interval with the least peak activations for this network, exactly.

    :func:`best_segment_length` is the textbook optimum for a chain of equal
    layers (about :math:`\sqrt{n}`). Real networks are made of unequal units:
    in a transformer a checkpoint keeps one block's input while a block keeps
    many times that inside, so a short interval can win by far. This tries
    every interval on the network's own units and keeps the smallest peak
    (ties go to the longer interval, which keeps fewer checkpoints).

    Parameters
    ----------
    network : Network
    **values
        Values for the symbols the activations depend on besides the batch
        (``S=1024``); the batch scales every unit alike and may stay symbolic.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> net = Network([Input((10,)), *[Dense(10) for _ in range(9)]])
    >>> best_checkpoint_interval(net), best_segment_length(9)
    (3, 3)
    """
    units = checkpoint_units(network)
    batch = network.batch

    def peak(every: int) -> sp.Expr:
        expression = checkpointed_activations(network, every)
        names = {s.name for s in expression.free_symbols}
        expression = expression.xreplace(
            {s: sp.sympify(values[s.name]) for s in expression.free_symbols if s.name in values}
        )
        if batch.free_symbols:
            expression = expression.xreplace({b: 1 for b in batch.free_symbols})
        if not expression.is_number:
            missing = sorted(names - set(values) - {b.name for b in batch.free_symbols})
            raise InvalidSizeError(
                f"best_checkpoint_interval: give values for {', '.join(missing)} "
                "to compare intervals."
            )
        return expression

    return min(range(1, len(units) + 1), key=lambda every: (peak(every), -every))


def checkpointed_counts(network: Network, every: int | None) -> ModelCounts:
    """Return the network's counts with checkpointed activations, for any memory convention.

    ``every=None`` means no checkpointing.

    Examples
    --------
    >>> from memtheory import training_memory
    >>> from memtheory.layers import Dense, Input
    >>> net = Network([Input((10,)), *[Dense(10) for _ in range(9)]])
    >>> training_memory(checkpointed_counts(net, 3), optimizer="sgd").total
    440*B + 7920
    """
    counts = network.counts()
    if every is None:
        return counts
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise InvalidSizeError(f"every must be a whole number of units >= 1, got {every!r}.")
    return ModelCounts(
        parameters=counts.parameters,
        activations=checkpointed_activations(network, every),
        input_elements=counts.input_elements,
        buffers=counts.buffers,
        batch=counts.batch,
    )
