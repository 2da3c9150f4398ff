r"""Drop the candidates of a maximum that are never the largest, for sizes of at least 1.

A peak is the ``Max`` of the moments of a step, and many of them are lines in the
same product of sizes: ``8240*B*S + 16169575176``, ``16464*B*S + 16169444104``,
... Over ``x = B*S >= 1`` the largest of lines is their upper envelope (the
convex-hull trick): a line that is the largest at no whole ``x >= 1`` (under the
others, or level with one of them only at a single point, or on top only between
two whole numbers) never decides the maximum, and the code compiled for a grid
need not compute it. On Llama-3-8B's exact peak (LoRA, the autograd convention)
30 lines become 5.

:func:`pruned` rewrites an expression so, each step exact wherever every size
symbol is a positive integer:

* nested maxima are flattened: ``Max(Max(a, b), c) = Max(a, b, c)``;
* candidates that add the same term to a maximum share it:
  ``Max(X + Max(a, b), X + Max(c, d)) = X + Max(a, b, c, d)``;
* of the candidates ``a*m + k`` in one product ``m`` of positive integer symbols
  (numbers ``a`` and ``k``), only those on the upper envelope at some whole
  ``m >= 1`` are kept; a number is such a line, of slope 0, where all the lines
  are in one product, and of several numbers only the largest is kept.

:mod:`memtheory.max_pruning` drops, as a peak is derived, the candidates one other
candidate dominates; this drops those that only several others cover together,
and only in compiled code: the symbolic peak is left as it was derived.

Examples
--------
>>> import sympy as sp
>>> from memtheory.symbols import B, S
>>> lines = [8 * B * S + 100, 9 * B * S + 90, 10 * B * S + 80, 3 * B * S + 95]
>>> pruned(sp.Max(*lines))  # the second is the largest only where all three are level
Max(8*B*S + 100, 10*B*S + 80)
>>> pruned(sp.Max(S + sp.Max(B + 5, 2 * B), S + sp.Max(3, B)))  # 3 and B: under B + 5
S + Max(2*B, B + 5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import sympy as sp

__all__ = ["pruned"]

_Line = tuple[Fraction, Fraction, int]
"""A candidate ``a*m + k`` as (slope ``a``, intercept ``k``, its index among the candidates)."""


def pruned(expression: sp.Expr) -> sp.Expr:
    """Return ``expression`` with every ``Max`` pruned as the module docstring says.

    The result equals ``expression`` wherever every size symbol is a positive
    integer; a subexpression shared by several candidates is pruned once.

    Examples
    --------
    >>> import sympy as sp
    >>> from memtheory.symbols import B
    >>> pruned(2 * sp.Max(B + 4, 2 * B + 1, 3 * B))
    2*Max(3*B, B + 4)
    """
    memo: dict[sp.Basic, sp.Expr] = {}
    return _pruned(expression, memo)


def _pruned(node: sp.Expr, memo: dict[sp.Basic, sp.Expr]) -> sp.Expr:
    if not node.args:
        return node
    if node in memo:
        return memo[node]
    args = [_pruned(argument, memo) for argument in node.args]
    if isinstance(node, sp.Max):
        result = _maximum(args)
    elif all(new is old for new, old in zip(args, node.args, strict=True)):
        result = node
    elif isinstance(node, sp.Add | sp.Mul | sp.Min):
        result = node.func(*args, evaluate=False)
    else:
        result = node.func(*args)
    memo[node] = result
    return result


def _maximum(candidates: Sequence[sp.Expr]) -> sp.Expr:
    """Return the maximum of pruned ``candidates``: flattened, terms shared, lines enveloped."""
    flat: list[sp.Expr] = []
    for candidate in candidates:
        flat.extend(candidate.args if isinstance(candidate, sp.Max) else [candidate])
    kept = list(dict.fromkeys(_enveloped(_shared_terms(flat))))
    return kept[0] if len(kept) == 1 else sp.Max(*kept, evaluate=False)


def _shared_terms(candidates: list[sp.Expr]) -> list[sp.Expr]:
    """Candidates ``X + Max(...)`` with the same ``X`` merged into one: ``X + Max(all)``."""
    inner: dict[sp.Expr, list[sp.Expr]] = {}
    members: dict[sp.Expr, int] = {}
    for candidate in candidates:
        split = _added_maximum(candidate)
        if split is not None:
            inner.setdefault(split[0], []).extend(split[1].args)
            members[split[0]] = members.get(split[0], 0) + 1
    result: list[sp.Expr] = []
    merged: set[sp.Expr] = set()
    for candidate in candidates:
        split = _added_maximum(candidate)
        if split is None or members[split[0]] == 1:
            result.append(candidate)
        elif split[0] not in merged:  # the group's first member stands for all of it
            merged.add(split[0])
            result.append(sp.Add(split[0], _maximum(inner[split[0]]), evaluate=False))
    return result


def _added_maximum(candidate: sp.Expr) -> tuple[sp.Expr, sp.Max] | None:
    """``(X, M)`` for a candidate ``X + M`` with one ``Max`` ``M`` among its terms, else None."""
    if not isinstance(candidate, sp.Add):
        return None
    maxima = [term for term in candidate.args if isinstance(term, sp.Max)]
    if len(maxima) != 1:
        return None
    rest = [term for term in candidate.args if term is not maxima[0]]
    return sp.Add(*rest), maxima[0]


def _enveloped(candidates: list[sp.Expr]) -> list[sp.Expr]:
    """``candidates`` less the lines in one product that are the largest at no whole point."""
    by_product: dict[sp.Expr | None, list[_Line]] = {}  # None: the numbers
    for index, candidate in enumerate(candidates):
        line = _line(candidate)
        if line is not None:
            slope, product, intercept = line
            by_product.setdefault(product, []).append((slope, intercept, index))
    if None in by_product and len(by_product) == 2:  # numbers: lines of slope 0 in the product
        numbers = by_product.pop(None)
        next(iter(by_product.values())).extend(numbers)
    dropped: set[int] = set()
    for lines in by_product.values():
        kept = _on_envelope(lines)
        dropped.update(index for _, _, index in lines if index not in kept)
    return [c for index, c in enumerate(candidates) if index not in dropped]


def _line(candidate: sp.Expr) -> tuple[Fraction, sp.Expr | None, Fraction] | None:
    """Return ``(a, m, k)`` for a candidate ``a*m + k`` (``m`` None for a number), else None."""
    if candidate.is_Rational:
        return Fraction(0), None, _fraction(candidate)
    constant, terms = candidate.as_coeff_add()
    if len(terms) != 1 or not constant.is_Rational:
        return None
    slope, product = terms[0].as_coeff_Mul()
    if not slope.is_Rational or not _is_size_product(product):
        return None
    return _fraction(slope), product, _fraction(constant)


def _fraction(number: sp.Expr) -> Fraction:
    return Fraction(int(number.p), int(number.q))


def _is_size_product(product: sp.Expr) -> bool:
    """Whether ``product`` is a product of powers of positive integer symbols (so at least 1)."""
    for factor in product.args if product.is_Mul else (product,):
        base, exponent = factor.as_base_exp()
        if not (base.is_Symbol and base.is_integer and base.is_positive):
            return False
        if not (exponent.is_Integer and exponent > 0):
            return False
    return True


def _on_envelope(lines: list[_Line]) -> set[int]:
    """Return the indices of the lines that are the largest at some whole ``x >= 1``.

    Examples
    --------
    >>> F = Fraction
    >>> sorted(_on_envelope([(F(8), F(100), 0), (F(9), F(90), 1), (F(10), F(80), 2)]))
    [0, 2]
    >>> sorted(_on_envelope([(F(0), F(22), 0), (F(10), F(0), 1), (F(20), F(-28), 2)]))
    [0, 2]
    >>> # the second is on top only from x = 2.2 to 2.8
    >>> sorted(_on_envelope([(F(1), F(0), 0), (F(0), F(5), 1)]))  # x wins from x = 5
    [0, 1]
    """
    best: dict[Fraction, tuple[Fraction, int]] = {}
    for slope, intercept, index in lines:  # one slope: the largest intercept, the first on ties
        if slope not in best or intercept > best[slope][0]:
            best[slope] = (intercept, index)
    hull: list[_Line] = []
    for slope, (intercept, index) in sorted(best.items()):
        while len(hull) >= 2 and _covered(hull[-2], hull[-1], (slope, intercept, index)):
            hull.pop()
        hull.append((slope, intercept, index))
    # hull[j] is on top between its crossings with hull[j - 1] and hull[j + 1]
    crossings = [(b[1] - c[1]) / (c[0] - b[0]) for b, c in zip(hull, hull[1:], strict=False)]
    kept = set()
    for j, (_, _, index) in enumerate(hull):
        lowest = max(1, math.ceil(crossings[j - 1])) if j else 1
        if j == len(crossings) or lowest <= math.floor(crossings[j]):
            kept.add(index)
    return kept


def _covered(first: _Line, middle: _Line, last: _Line) -> bool:
    """Whether ``middle`` (slopes in increasing order) is nowhere above both others.

    It is when ``last`` overtakes ``first`` no later than ``middle`` does.
    """
    (a1, k1, _), (a2, k2, _), (a3, k3, _) = first, middle, last
    return (k1 - k3) * (a2 - a1) <= (k1 - k2) * (a3 - a1)
