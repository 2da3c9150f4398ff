"""Steps of chapter 19 (tracing your own model), and the misconceptions that do one of them wrong.

Chapter 19 reads what :func:`memtheory.torch.trace` returns: a module's saved
bytes, a block's parameters, the largest batch for a card and where the
traced formulas hold. These steps compute each with memtheory's layers,
:func:`memtheory.whatif.max_batch` and :func:`memtheory.gpus.usable_memory`,
without PyTorch, so the set grades where torch is not installed. As in
:mod:`memtheory.exercises.technique_steps`, a misconception overrides one
step; importing this module registers them in
:data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`.

Examples
--------
>>> from memtheory.exercises.reasoning import CORRECT
>>> batchnorm_saved(CORRECT, batch=8, channels=16, side=32)
524416
>>> way = MISCONCEPTIONS["batchnorm_input_only"].ways[0]
>>> batchnorm_saved(way, batch=8, channels=16, side=32)
524288
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from memtheory.dtypes import dtype
from memtheory.exercises.derivation import note, note_tensors, quantity_text, shown
from memtheory.exercises.errors import ExerciseDefinitionError
from memtheory.exercises.misconceptions import (  # noqa: F401 (MISCONCEPTIONS: the doctests)
    MISCONCEPTIONS,
    Misconception,
    register,
)
from memtheory.exercises.reasoning import Reasoning, own_step
from memtheory.exercises.step_log import took
from memtheory.gpus import usable_memory
from memtheory.layers import BatchNorm2d, Conv2d
from memtheory.symbols import B
from memtheory.whatif import max_batch

__all__ = [
    "UNTRACEABLE",
    "batchnorm_saved",
    "block_parameters",
    "card_batch",
    "card_usable_bytes",
    "quadratic_takes_over",
    "traced_batch",
    "untraceable_option",
]

UNTRACEABLE = (
    "boolean-mask indexing (x[x > 0])",
    "torch.nonzero(x)",
    "torch.unique(x)",
    "an if on a value (if x.sum() > 0:)",
    "x.item()",
)
"""Operations a trace cannot follow: their output shapes or the branch taken depend on values,
which fake tensors do not have (see :mod:`memtheory.torch.tracing.errors`)."""


def batchnorm_saved(how: Reasoning, *, batch: int, channels: int, side: int) -> sp.Expr:
    """Bytes a training BatchNorm2d keeps for backward on a fp32 ``(batch, channels, side, side)``.

    Its input and two per-channel statistics (the batch mean and inverse
    standard deviation), as :meth:`memtheory.layers.BatchNorm2d.saved_for_backward`
    lists them.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> batchnorm_saved(CORRECT, batch=2, channels=4, side=3)
    320
    """
    specs = BatchNorm2d().saved_for_backward((batch, channels, side, side))
    own = own_step(how, "saved_specs")
    if own:
        specs = own(specs)
    note_tensors(
        f"A training BatchNorm2d on a fp32 ({batch}, {channels}, {side}, {side}) input keeps",
        specs,
        "fp32",
    )
    return sp.Add(*(spec.nbytes(dtype("fp32")) for spec in specs))


def block_parameters(how: Reasoning, channels: int) -> sp.Expr:
    """Parameters of a residual block: two bias-free 3x3 convolutions, each followed by BatchNorm.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> block_parameters(CORRECT, 16)
    4672
    """
    shape = (B, channels, 8, 8)
    conv = Conv2d(channels, 3, padding=1, bias=False)
    norm = BatchNorm2d()
    own = own_step(how, "norm_count")
    per_norm = own(norm, shape) if own else norm.parameter_count(shape)
    weights = conv.parameter_count(shape)
    note(
        f"Each bias-free 3x3 convolution: {channels} x {channels} x 3 x 3 weights",
        weights,
    )
    note(f"Each BatchNorm2d: a weight and a bias per channel, 2 x {channels}", per_norm)
    return shown(
        f"The block: 2 x {quantity_text(weights)} + 2 x {quantity_text(per_norm)}",
        2 * weights + 2 * per_norm,
    )


def card_batch(how: Reasoning, *, per: Any, fixed: Any, unit: str, card: str) -> int:
    """Return the largest batch whose traced peak ``per * B + fixed`` (in ``unit``) fits ``card``.

    The card's usable memory is :func:`memtheory.gpus.usable_memory` (the
    vendor's figure read as GiB, less the 1.5 GiB reserve).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> card_batch(CORRECT, per=100, fixed=500, unit="MiB", card="RTX 4090")
    225
    """
    peak = how.to_bytes(per, unit) * B + how.to_bytes(fixed, unit)
    budget = usable_memory(card)
    own = own_step(how, "card_bytes")
    limit = own(budget) if own else budget.usable
    note(
        f"The {card}: {quantity_text(budget.memory)} bytes, less the "
        f"{quantity_text(budget.reserve)}-byte reserve, leaves (bytes)",
        limit,
    )
    batch = max_batch(peak, limit)
    if per != 1 or fixed != 0:
        note(f"The traced peak, in bytes: {quantity_text(peak)}")
        note(
            f"Largest B with {quantity_text(peak)} <= {quantity_text(limit)}: "
            f"floor(({quantity_text(limit)} - {quantity_text(peak.subs(B, 0))}) / "
            f"{quantity_text(peak.coeff(B))})",
            batch,
        )
    return batch


def card_usable_bytes(how: Reasoning, sold: Any) -> sp.Expr:
    """Return the bytes a card sold as ``sold`` GB leaves for the step: the book's one budget.

    The vendor's "GB" read as GiB, as :mod:`memtheory.gpus` reads every card,
    less :data:`memtheory.gpus.DEFAULT_RESERVE` (1.5 GiB) for the CUDA context,
    the driver and the allocator: :func:`memtheory.gpus.usable_memory`, the
    rule of chapter 6 that every chapter, the CLI and the calculator use. The
    misconceptions of :func:`card_batch` (the whole card, the "GB" read as
    10^9 bytes) apply here too.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> card_usable_bytes(CORRECT, 24) / 2**30
    45/2
    >>> card_usable_bytes(MISCONCEPTIONS["no_card_reserve"].ways[0], 24) / 2**30
    24
    """
    took("usable_bytes")  # taught where chapter 6 budgets a card
    budget = usable_memory(limit=how.to_bytes(sold, "GiB"))
    own = own_step(how, "card_bytes")  # a misconception's reading of the card
    limit = own(budget) if own else budget.usable
    note(
        f"A card sold as {sold} GB: {sold} GiB = {quantity_text(budget.memory)} bytes, less "
        f"the {quantity_text(budget.reserve)}-byte (1.5 GiB) reserve, leaves (bytes)",
        limit,
    )
    return limit


def traced_batch(how: Reasoning, *, per: Any, fixed: Any, unit: str, card: str, below: int) -> int:
    """Return the largest batch the trace vouches for: it fits ``card`` and keeps ``B < below``.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> traced_batch(CORRECT, per=100, fixed=500, unit="MiB", card="RTX 4090", below=16)
    15
    """
    fits = card_batch(how, per=per, fixed=fixed, unit=unit, card=card)
    own = own_step(how, "within_trace")
    if own:
        return int(own(fits, below))
    return shown(
        f"The trace holds only while B < {below}: min({fits}, {below} - 1)", min(fits, below - 1)
    )


def quadratic_takes_over(how: Reasoning, quadratic: int, linear: int) -> int:
    """Return the smallest whole S at which ``quadratic*B*S**2`` is at least ``linear*B*S``.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> quadratic_takes_over(CORRECT, 96, 20176)
    211
    """
    took("quadratic_takes_over")
    s = sp.Symbol("S", positive=True)
    (crossing,) = sp.solve(sp.Eq(quadratic * s**2, linear * s), s)
    note(
        f"{quadratic}*B*S**2 >= {linear}*B*S: divide by B*S, S >= {linear}/{quadratic}",
        crossing,
    )
    return shown("The smallest whole S: the ceiling", int(sp.ceiling(crossing)))


def untraceable_option(options: tuple[str, ...]) -> str:
    """Return the one option of ``options`` that :data:`UNTRACEABLE` lists.

    Examples
    --------
    >>> untraceable_option(("x.mean((2, 3))", "torch.nonzero(x)"))
    'torch.nonzero(x)'
    """
    found = [o for o in options if o in UNTRACEABLE]
    if len(found) != 1:
        raise ExerciseDefinitionError(f"expected one untraceable option among {options}.")
    took("untraceable")
    note(
        f"{found[0]}: what it gives (an output shape, a branch or a Python number) depends on "
        "the tensor's values, which fake "
        "tensors do not have; every other option's output shape follows from the input's shape"
    )
    return found[0]


# -- the mistakes ------------------------------------------------------------------------------
class _InputOnly(Reasoning):
    detail = "only BatchNorm's input counted, not its per-channel mean and inverse std"

    def saved_specs(self, specs: tuple[Any, ...]) -> tuple[Any, ...]:
        return specs[:1]


class _BuffersAsParameters(Reasoning):
    detail = "the running mean and variance counted as parameters"

    def norm_count(self, norm: BatchNorm2d, shape: tuple[Any, ...]) -> sp.Expr:
        return norm.parameter_count(shape) + 2 * shape[1]


class _WholeCard(Reasoning):
    detail = "the whole card used, nothing kept for the CUDA context and allocator"

    def card_bytes(self, budget: Any) -> sp.Expr:
        return budget.memory


class _CardInGB(Reasoning):
    detail = "the card's 'GB' read as 10^9 bytes"

    def card_bytes(self, budget: Any) -> sp.Expr:
        return budget.memory * sp.Rational(10**9, 2**30) - budget.reserve


class _IgnoresConditions(Reasoning):
    detail = "the formula used beyond the sizes where PyTorch's guards say it holds"

    def within_trace(self, fits: int, below: int) -> int:
        return fits


TRACE_MISCONCEPTIONS = (
    Misconception(
        "batchnorm_input_only",
        "counted BatchNorm's saved input but not its statistics",
        "In training, BatchNorm keeps its input and, per channel, the batch mean and inverse "
        "standard deviation (2 x C values) for the backward pass.",
        (_InputOnly(),),
    ),
    Misconception(
        "buffers_as_parameters",
        "counted BatchNorm's running statistics as parameters",
        "The running mean and variance are buffers: state that is saved with the model but "
        "not trained, so they have no gradient and no optimizer state.",
        (_BuffersAsParameters(),),
    ),
    Misconception(
        "no_card_reserve",
        "used the card's whole memory",
        "The CUDA context, the driver and the allocator take memory before any tensor: keep a "
        "reserve (memtheory sets aside 1.5 GiB) and fit the step in what is left.",
        (_WholeCard(),),
    ),
    Misconception(
        "card_gb_as_decimal",
        "read the card's 'GB' as 10^9 bytes",
        "GPU memory is built from binary-sized chips: a card sold as 24 GB holds 24 GiB.",
        (_CardInGB(),),
    ),
    Misconception(
        "ignored_trace_conditions",
        "used the traced formula outside where it holds",
        "A trace is exact only where the guards PyTorch recorded hold (e.g. B < 16, where the "
        "CPU convolution keeps its kernel): trace again at a size in the range you need.",
        (_IgnoresConditions(),),
    ),
)


register(TRACE_MISCONCEPTIONS)
