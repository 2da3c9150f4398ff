"""The peak the calculator page compiles: one flat candidate per moment that can be the largest.

Examples
--------
>>> labels = [label for _, label in peak_candidates("stackexchange-cnn", "sgd", "pytorch-fp32")]
>>> labels[0]
'backward dense_2'
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from memtheory.calculator.choice_steps import footprint
from memtheory.footprint import Footprint
from memtheory.max_pruning import undominated
from memtheory.symbols import B

__all__ = ["nondecreasing_in_batch", "peak_candidates"]


def _flat(expr: sp.Expr) -> list[sp.Expr]:
    """``expr`` as the candidates of one ``Max`` with none inside (sums and products distribute)."""
    if isinstance(expr, sp.Max):
        return [part for arg in expr.args for part in _flat(arg)]
    if isinstance(expr, sp.Add | sp.Mul) and expr.has(sp.Max):
        combine = sp.Add if isinstance(expr, sp.Add) else sp.Mul
        if combine is sp.Mul and any(
            arg.has(sp.Max) and not arg.is_nonnegative for arg in expr.args
        ):
            return [expr]
        parts: list[sp.Expr] = [sp.Integer(0 if combine is sp.Add else 1)]
        for arg in expr.args:
            parts = [combine(done, piece) for done in parts for piece in _flat(arg)]
        return parts
    return [expr]


def _candidates(memory: Footprint) -> list[tuple[sp.Expr, str]]:
    """Return the peak's candidates (the undominated moments), each with its moment's label.

    The same pruning as :attr:`Footprint.peak <memtheory.footprint.Footprint.peak>`
    (:func:`memtheory.max_pruning.undominated`), kept flat: one polynomial per moment.
    """
    if not memory.timeline:
        return [(memory.total, "")]
    labels: list[str] = []
    values: list[sp.Expr] = []
    for label, value in memory.timeline.items():
        for piece in _flat(value):
            labels.append(label)
            values.append(piece)
    return [(values[i], labels[i]) for i in undominated(values)]


def nondecreasing_in_batch(candidate: sp.Expr) -> bool:
    """Return whether every term with the batch B has a positive coefficient (atoms are >= 0)."""
    for term in sp.Add.make_args(candidate):
        if not term.has(B):
            continue
        for part in sp.Add.make_args(sp.expand(term) if term.has(sp.Add) else term):
            if part.as_coeff_Mul()[0] <= 0:
                return False
    return True


@cache
def peak_candidates(
    model: str,
    optimizer: str = "adamw",
    recipe: str = "hf-trainer",
    attention: str | None = None,
    convention: str = "exact",
) -> tuple[tuple[sp.Expr, str], ...]:
    """Return the peak's candidates the page compiles, each with its moment's label.

    The peak of :func:`footprint` is the largest of them at any sizes (the
    candidates that can never be the largest are dropped, as
    :attr:`Footprint.peak <memtheory.footprint.Footprint.peak>` drops them).

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> found = peak_candidates("stackexchange-cnn", "sgd", "pytorch-fp32")
    >>> max(c.subs({B: 64, H: 50}) for c, _ in found) == footprint(
    ...     "stackexchange-cnn", "sgd", "pytorch-fp32").evaluate(B=64, H=50).peak
    True
    """
    return tuple(_candidates(footprint(model, optimizer, recipe, attention, convention)))
