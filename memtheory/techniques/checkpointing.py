r"""Gradient checkpointing: keep every :math:`k`-th layer's output, recompute the rest.

Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016,
arXiv:1604.06174), Section 4.1: split a chain of :math:`n` layers into
segments of :math:`k` layers, keep only each segment's input through the
forward pass, and in the backward pass rerun one segment at a time from its
kept input. The checkpoint interval :math:`k` (:data:`INTERVAL`) is the
number of layers per segment: a checkpoint every :math:`k` layers. With
every layer keeping the same activation memory :math:`m`,
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
>>> relaxed_optimal_interval()
sqrt(n)
>>> minimal_memory()
2*sqrt(n) - 1
>>> uniform_memory(100, 10), uniform_recompute(100, 10)
(19, 90)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.constraints import check_sizes
from memtheory.conventions.base import row_activation_elements, row_mask_bytes
from memtheory.counts import ModelCounts
from memtheory.errors import InvalidSizeError, UnsupportedError
from memtheory.evaluation import substitution
from memtheory.layers.base import elements
from memtheory.layers.rotary import RotaryTable
from memtheory.network import LayerRow, Network
from memtheory.symbols import size_symbol

__all__ = [
    "INTERVAL",
    "LAYERS",
    "CheckpointPlan",
    "EveryLayer",
    "Unit",
    "best_network_interval",
    "best_uniform_interval",
    "checkpoint_units",
    "checkpointed_activations",
    "checkpointed_counts",
    "every_layer",
    "repeated_layers",
    "minimal_memory",
    "relaxed_optimal_interval",
    "tradeoff",
    "uniform_memory",
    "uniform_recompute",
]

LAYERS = size_symbol("n")
""":math:`n`: layers in the chain."""

INTERVAL = size_symbol("k")
""":math:`k`: the checkpoint interval, layers per segment (a checkpoint every k layers)."""


def uniform_memory(layers: SizeLike = LAYERS, interval: SizeLike = INTERVAL) -> sp.Expr:
    """Peak activations, in layers' worth, with a checkpoint every ``interval`` of ``layers``.

    Examples
    --------
    >>> uniform_memory(12, 1), uniform_memory(12, 12), uniform_memory(12, 4)
    (12, 12, 6)
    """
    n, k = sp.sympify(layers), sp.sympify(interval)
    return sp.ceiling(n / k) - 1 + sp.Min(k, n)


def uniform_recompute(layers: SizeLike = LAYERS, interval: SizeLike = INTERVAL) -> sp.Expr:
    """Layers rerun in the backward pass: all but the last (unchecked) segment's.

    Examples
    --------
    >>> uniform_recompute(12, 4), uniform_recompute(12, 12)
    (8, 0)
    """
    n, k = sp.sympify(layers), sp.sympify(interval)
    return sp.Min(k * (sp.ceiling(n / k) - 1), n)


def _relaxed_memory(n: sp.Expr, k: sp.Expr) -> sp.Expr:
    r"""Return :func:`uniform_memory` without the rounding, for :math:`k \le n`."""
    return n / k - 1 + k


def relaxed_optimal_interval(layers: SizeLike = LAYERS) -> sp.Expr:
    """Return the interval that minimises the relaxed memory of equal layers, by sympy: sqrt(n).

    The rounding is relaxed away, so the answer need not be whole; the whole
    interval with the least exact memory is :func:`best_uniform_interval`.

    Examples
    --------
    >>> relaxed_optimal_interval(64)
    8
    """
    k = sp.Symbol("k", positive=True)
    n = sp.sympify(layers)
    (root,) = sp.solve(sp.diff(_relaxed_memory(n, k), k), k)
    return root


def minimal_memory(layers: SizeLike = LAYERS) -> sp.Expr:
    """Return the relaxed memory at the optimal interval: ``2*sqrt(n) - 1`` layers' worth.

    Examples
    --------
    >>> minimal_memory(64)
    15
    """
    n = sp.sympify(layers)
    return sp.simplify(_relaxed_memory(n, relaxed_optimal_interval(n)))


def best_uniform_interval(layers: int) -> int:
    """Return the whole interval with the least exact memory for a chain of ``layers`` equal layers.

    ``isqrt(n)`` or ``isqrt(n) + 1`` always reaches the least memory, but other
    intervals may tie; among those, the one that recomputes least wins. For a
    network's own, unequal units see :func:`best_network_interval`.

    Examples
    --------
    >>> best_uniform_interval(100), best_uniform_interval(12)
    (10, 4)
    """
    n = int(as_size(layers, "layers", "best_uniform_interval"))
    memory = _exact_in_interval(uniform_memory(n, INTERVAL))
    recompute = _exact_in_interval(uniform_recompute(n, INTERVAL))
    return min(range(1, n + 1), key=lambda k: (memory(k), recompute(k), k))


def _exact_in_interval(expression: sp.Expr) -> Callable[[int], Fraction]:
    """Compile a function of the interval that computes with exact fractions."""
    functions = {"ceiling": math.ceil, "floor": math.floor, "Min": min, "Max": max}
    compiled = sp.lambdify([INTERVAL], expression, modules=[functions])
    return lambda k: compiled(Fraction(k))


@dataclass(frozen=True)
class CheckpointPlan:
    """One point of the memory/recompute trade-off.

    Attributes
    ----------
    interval : int
        The checkpoint interval :math:`k`.
    memory : int
        Peak activations, in layers' worth.
    recompute : int
        Layers rerun in the backward pass.

    Examples
    --------
    >>> plan = tradeoff(4)[1]
    >>> plan
    CheckpointPlan(interval=2, memory=3, recompute=2)
    >>> lowest = min(plan.memory for plan in tradeoff(12))  # 12 layers: the least memory
    >>> [(plan.interval, plan.recompute) for plan in tradeoff(12) if plan.memory == lowest]
    [(3, 9), (4, 8)]
    """

    interval: int
    memory: int
    recompute: int


def tradeoff(layers: int) -> tuple[CheckpointPlan, ...]:
    """Return the memory and recompute of every interval from 1 to ``layers``.

    Examples
    --------
    >>> [(p.interval, p.memory, p.recompute) for p in tradeoff(4)]
    [(1, 4, 3), (2, 3, 2), (3, 4, 3), (4, 4, 0)]
    """
    n = int(as_size(layers, "layers", "tradeoff"))
    memory = _exact_in_interval(uniform_memory(n, INTERVAL))
    recompute = _exact_in_interval(uniform_recompute(n, INTERVAL))
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

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> unit = checkpoint_units(gpt2("small"))[3]
    >>> unit.layers
    ('h.0.ln_1', 'h.0.attn', 'h.0.attn_dropout', 'h.0.add_1')
    >>> unit.output  # the residual stream: 768 values per position
    768*B*S
    """

    layers: tuple[str, ...]
    activations: sp.Expr
    output: sp.Expr


def checkpoint_units(network: Network) -> tuple[Unit, ...]:
    """Split ``network`` (after its input) into units that end where a checkpoint can go.

    A layer is a cut point when no connection jumps over it: every later
    layer reads only it or layers after it. A rotary table
    (:class:`~memtheory.layers.RotaryTable`) is no jump: Hugging Face
    computes the cosines and sines once and hands them to every decoder
    layer as an argument, so each checkpointed layer receives them as it
    receives its input.

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
    shared = {row.name for row in rows if isinstance(row.layer, RotaryTable)}
    for row in rows:
        for name in row.inputs:
            if name in shared:
                continue
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


def checkpointed_activations(network: Network, interval: int) -> sp.Expr:
    """Peak activation elements with a checkpoint after every ``interval``-th unit.

    The kept segment inputs plus the largest segment's activations.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> net = Network([Input((10,)), *[Dense(10) for _ in range(9)]])
    >>> net.activation_count, checkpointed_activations(net, 3)
    (90*B, 50*B)
    """
    units = checkpoint_units(network)
    k = int(as_size(interval, "interval", "checkpointed_activations"))
    segments = [units[i : i + k] for i in range(0, len(units), k)]
    kept = sp.Add(*(segment[-1].output for segment in segments[:-1]))
    largest = sp.Max(*(sp.Add(*(u.activations for u in segment)) for segment in segments))
    return kept + largest


def best_network_interval(network: Network, **values: object) -> int:
    r"""Return the checkpoint interval with the least peak activations for this network, exactly.

    :func:`best_uniform_interval` is the textbook optimum for a chain of equal
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
    >>> best_network_interval(net), best_uniform_interval(9)
    (3, 3)
    """
    units = checkpoint_units(network)
    batch = network.batch
    given = substitution(sorted(network.free_symbols, key=str), values)  # sizes, checked
    check_sizes(network.size_checks(), given)  # and sizes every layer takes
    by_name = {symbol.name: value for symbol, value in given.items()}

    def peak(interval: int) -> sp.Expr:
        expression = checkpointed_activations(network, interval)
        names = {s.name for s in expression.free_symbols}
        expression = expression.xreplace(
            {s: by_name[s.name] for s in expression.free_symbols if s.name in by_name}
        )
        if batch.free_symbols:
            expression = expression.xreplace({b: 1 for b in batch.free_symbols})
        if not expression.is_number:
            missing = sorted(names - set(values) - {b.name for b in batch.free_symbols})
            raise InvalidSizeError(
                f"best_network_interval: give values for {', '.join(missing)} to compare intervals."
            )
        return expression

    return min(range(1, len(units) + 1), key=lambda interval: (peak(interval), -interval))


def checkpointed_counts(network: Network, interval: int | None) -> ModelCounts:
    """Return the network's counts with checkpointed activations, for any memory convention.

    ``interval=None`` means no checkpointing.

    Examples
    --------
    >>> from memtheory import training_memory
    >>> from memtheory.layers import Dense, Input
    >>> net = Network([Input((10,)), *[Dense(10) for _ in range(9)]])
    >>> training_memory(checkpointed_counts(net, 3), optimizer="sgd").total
    440*B + 7920
    """
    counts = network.counts()
    if interval is None:
        return counts
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise InvalidSizeError(f"interval must be a whole number of units >= 1, got {interval!r}.")
    return ModelCounts(
        parameters=counts.parameters,
        activations=checkpointed_activations(network, interval),
        input_elements=counts.input_elements,
        buffers=counts.buffers,
        batch=counts.batch,
        constraints=counts.constraints,
    )


# -- Hugging Face's gradient_checkpointing_enable(): every decoder layer ---------------------
_REPEATED = re.compile(r"^((?:.*\.)?(?:layers|layer|h))\.(\d+)\.")
"""A row of a repeated layer: ``model.layers.3.``, ``h.3.``, ``encoder.layer.3.``."""


def repeated_layers(network: Network) -> tuple[tuple[LayerRow, ...], ...]:
    """Return the rows of each repeated layer (a decoder or transformer layer), in order.

    Hugging Face names them ``model.layers.{i}`` (Llama and its family),
    ``h.{i}`` (GPT-2) and ``encoder.layer.{i}`` (BERT), as memtheory's builders do.

    Raises
    ------
    UnsupportedError
        When no row is named as a repeated layer.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> layers = repeated_layers(gpt2("small"))
    >>> len(layers), layers[0][0].name, layers[0][-1].name
    (12, 'h.0.ln_1', 'h.0.add_2')
    """
    groups: dict[tuple[str, int], list[LayerRow]] = {}
    for row in network.rows:
        match = _REPEATED.match(row.name)
        if match:
            groups.setdefault((match.group(1), int(match.group(2))), []).append(row)
    if not groups:
        raise UnsupportedError(
            f"{network.name or 'the network'} has no repeated layers named as Hugging Face "
            "names them (model.layers.0., h.0., encoder.layer.0.): every-layer checkpointing "
            "checkpoints those. Use checkpointing='best-interval' for other networks."
        )
    return tuple(tuple(rows) for _, rows in sorted(groups.items(), key=lambda item: item[0]))


@dataclass(frozen=True)
class EveryLayer:
    """What a training step keeps with every repeated layer checkpointed (breakdown convention).

    Attributes
    ----------
    kept : sympy expression
        Activation elements kept through the step: the rows outside the
        repeated layers (embeddings, final norm, output projection, loss),
        each repeated layer's input, and one layer's own activations,
        recomputed in the backward pass.
    masks : sympy expression
        Bytes of masks in their own dtype (attention dropout's ``bool``
        masks): those outside the repeated layers and one layer's.
    """

    kept: sp.Expr
    masks: sp.Expr


def every_layer(network: Network) -> EveryLayer:
    r"""Return the activations kept with every repeated layer checkpointed.

    Hugging Face's ``model.gradient_checkpointing_enable()`` (transformers 5:
    ``activation_checkpointing_enable(every_n_layers=1)``, ``use_reentrant=False``)
    wraps every decoder layer's forward in ``torch.utils.checkpoint``: the
    forward pass keeps each layer's input (the hidden states, :math:`BSh`)
    and none of its saved tensors; the backward pass reruns one layer at a
    time from its input, so one layer's saved tensors are alive at once.
    The embeddings, the final norm, the output projection and the loss are
    not checkpointed and keep what they keep. Counted as the breakdown
    convention counts (:func:`~memtheory.conventions.base.row_activation_elements`:
    every kept tensor, attention's scores included).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> from memtheory.symbols import B, S
    >>> net = gpt2("small", batch=B, sequence=S, flash=True)
    >>> plain, kept = net.activation_count, every_layer(net).kept
    >>> (kept / plain).subs({B: 1, S: 1024}) < sp.Rational(1, 3)
    True
    """
    layers = repeated_layers(network)
    inside = {row.name for rows in layers for row in rows}
    outside = [row for row in network.rows[1:] if row.name not in inside]
    kept_outside = sp.Add(*(row_activation_elements(row) for row in outside))
    # each layer's output: the next layer's input, or the final norm's (the first
    # layer's input is the embeddings' output, counted with them)
    inputs = sp.Add(*(elements(rows[-1].output_shape) for rows in layers))
    own = [
        sp.Add(*(row_activation_elements(row) for row in rows)) - elements(rows[-1].output_shape)
        for rows in layers
    ]
    masks_outside = sp.Add(*(row_mask_bytes(row) for row in outside))
    masks = [sp.Add(*(row_mask_bytes(row) for row in rows)) for rows in layers]
    return EveryLayer(
        sp.expand(kept_outside + inputs + sp.Max(*own)),
        sp.expand(masks_outside + sp.Max(*masks)),
    )
