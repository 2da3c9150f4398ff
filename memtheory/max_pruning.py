r"""A symbolic Max pruner: the exact maximum of many byte counts, dominated candidates dropped.

A peak is the largest of a timeline's moments. Symbolically that is a ``Max``
of one polynomial per moment; on a deep network it would hold thousands of
candidates, most of which can never be the largest. :func:`maximum` keeps only
the candidates that no other one dominates for every admissible value of the
symbols, where admissible means: every size symbol is a positive integer (at
least 1), and every floor of a nonnegative expression is at least 0.

Candidate ``a`` dominates ``b`` when, writing ``a - b`` as a polynomial in its
atoms (size symbols, floors, ...) without looking inside the atoms:

* every term whose sign is unknown has coefficient 0 in ``a - b``;
* every term that is a product of nonnegative atoms has a coefficient >= 0;
* the constant term may be negative, as long as the coefficients of the terms
  that are products of size symbols alone (each at least 1) make up for it.

Each rule only ever proves ``a >= b``, so what is dropped is never the maximum;
a candidate the rules cannot compare is kept. The comparison runs on integer
coefficient vectors (one column per distinct term), a whole row of kept
candidates at a time, instead of on sympy expressions.

Examples
--------
>>> import sympy as sp
>>> from memtheory.symbols import B, H
>>> maximum([3, 7, 5])
7
>>> maximum([4 * B * H**2 + 100, 6 * B * H**2 + 98, B * H**2 + 10])
6*B*H**2 + 98
>>> maximum([4 * B * H**2 + 100, 5 * B * H**2])
Max(5*B*H**2, 4*B*H**2 + 100)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import lcm
from typing import TYPE_CHECKING

import sympy as sp

from memtheory._collector import with_fewer_collections
from memtheory._numpy_types import LazyNumpy

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyNumpy(globals())  # imported when a maximum is first pruned, not with memtheory

__all__ = [
    "NARROW",
    "RunningSum",
    "count_candidates",
    "maximum",
    "provably_nonnegative",
    "substituted_maximum",
    "undominated",
]

_UNKNOWN, _NONNEGATIVE, _AT_LEAST_ONE = 0, 1, 2
_INT64_SAFE = 2**56
"""Largest coefficient magnitude compared in int64 (row sums of differences stay in range)."""


@with_fewer_collections
def maximum(values: Iterable[object]) -> sp.Expr:
    """Return the maximum of byte counts, keeping only the candidates no other one dominates.

    Numbers give a number. Symbolic candidates that another one dominates for
    every admissible value (see the module docstring) are dropped; the
    survivors, expanded, form a ``Max`` left unevaluated (in the order of
    ``values``), which evaluates as soon as the symbols get values. One
    survivor is returned as it is.

    Parameters
    ----------
    values : iterable of sympy expressions or numbers
        Byte counts, each a polynomial in size symbols and floors of them.

    Returns
    -------
    sympy.Expr
        A number, one candidate, or a ``Max`` of the surviving candidates.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> maximum([2 * B + 8, 3 * B + 8, B])
    3*B + 8

    Values that can give themselves as a :class:`RunningSum` (a method
    ``running_sum``, as the autograd timeline's moments have) are read from
    their changes: the same result, without building the values it drops.
    """
    running = getattr(values, "running_sum", None)
    if callable(running):
        found = _running_maximum(running())
        if found is not None:
            return found
    expressions = [sp.sympify(v) for v in values]
    if all(e.is_number for e in expressions):
        return max(sp.expand(e) for e in expressions)
    memo = _Memo()
    polynomials, originals = _unique([_terms(e, memo) for e in expressions], expressions)
    kept = _undominated(polynomials)
    if len(kept) == 1:
        return originals[kept[0]]
    if len(kept) > FACTOR_ABOVE:
        return _factored([polynomials[i] for i in kept])
    return _unevaluated_max([originals[i] for i in kept])


def undominated(values: Sequence[object]) -> list[int]:
    """Return the positions of the values :func:`maximum` keeps as candidates, in order.

    Of equal values the first is kept; a value that another one dominates for
    every admissible value of the symbols is dropped.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> undominated([2 * B + 8, 3 * B + 8, B, 100, 3 * B + 8])
    [1, 3]
    """
    expressions = [sp.sympify(v) for v in values]
    first: dict[frozenset[tuple[sp.Expr, Fraction]], int] = {}
    polynomials: list[_Terms] = []
    positions: list[int] = []
    memo = _Memo()
    for index, expression in enumerate(expressions):
        terms = _terms(expression, memo)
        key = frozenset(terms.items())
        if key not in first:
            first[key] = index
            polynomials.append(terms)
            positions.append(index)
    if not polynomials:
        return []
    return [positions[i] for i in _undominated(polynomials)]


FACTOR_ABOVE = 8
"""Beyond this many survivors, a peak shares the terms its candidates have in common."""


def _factored(polynomials: Sequence[_Terms]) -> sp.Expr:
    """Return the maximum of the polynomials, with shared terms written once.

    ``Max(c + a, c + b)`` is ``c + Max(a, b)``: the candidates (in timeline
    order) are halved recursively, and the terms every candidate of a half
    shares move out of its ``Max``. Moments in a row share most of what is
    alive, so a deep network's peak shrinks from one full sum per candidate to
    about the number of candidates times the depth of the halving.
    """
    commons: dict[tuple[int, int], _Terms] = {}
    _common(polynomials, 0, len(polynomials), commons)
    return _factored_within(0, len(polynomials), {}, commons)


def _common(
    polynomials: Sequence[_Terms], start: int, stop: int, commons: dict[tuple[int, int], _Terms]
) -> _Terms:
    """Return (and keep in ``commons``) the terms every polynomial in ``start:stop`` has.

    Worked out from the leaves up, each half's as the intersection of its two
    halves', so a polynomial is read whole once, not once per level.
    """
    if stop - start == 1:
        common = polynomials[start]
    else:
        half = start + (stop - start) // 2
        left = _common(polynomials, start, half, commons)
        right = _common(polynomials, half, stop, commons)
        common = {m: c for m, c in left.items() if right.get(m) == c}
    commons[start, stop] = common
    return common


def _factored_within(
    start: int, stop: int, outer: _Terms, commons: dict[tuple[int, int], _Terms]
) -> sp.Expr:
    """Return the maximum of ``start:stop`` less ``outer``, the terms already moved out."""
    common = commons[start, stop]
    shared = {m: c for m, c in common.items() if m not in outer}
    if stop - start == 1:
        return _expression(shared)
    half = start + (stop - start) // 2
    inner = _unevaluated_max([
        _factored_within(start, half, common, commons),
        _factored_within(half, stop, common, commons),
    ])
    return sp.Add(_expression(shared), inner) if shared else inner


@dataclass(frozen=True)
class RunningSum:
    """Byte counts given as the states of one running sum: each the previous one plus changes.

    Attributes
    ----------
    log : sequence of (sympy expression or None, sympy Rational)
        Every change of the running sum, in order: a term and its coefficient from
        then on (0 once it is gone); ``None`` as the term for the constant.
    places : sequence of (int, sympy expression or None)
        Each value, in order: how many changes of ``log`` it has seen, and the value
        itself where it is not the running sum then (None where it is).
    value : callable
        ``value(i)`` builds the ``i``-th value: the same expression as the values give.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> log = [(B, sp.Integer(4)), (None, sp.Integer(100)), (B, sp.Integer(5))]
    >>> values = [4 * B, 4 * B + 100, 5 * B + 100, sp.Integer(7)]
    >>> running = RunningSum(log, [(1, None), (2, None), (3, None), (3, sp.Integer(7))],
    ...                      values.__getitem__)
    >>> maximum(running)
    5*B + 100
    """

    log: Sequence[tuple[sp.Expr | None, sp.Expr]]
    places: Sequence[tuple[int, sp.Expr | None]]
    value: Callable[[int], sp.Expr]

    def running_sum(self) -> RunningSum:
        """Return itself (what :func:`maximum` asks its values for)."""
        return self


def _running_maximum(running: RunningSum) -> sp.Expr | None:
    """:func:`maximum` of the running sum's values, built from its changes; None for numbers."""
    if not running.places:
        return None
    changes = _running_changes(running)
    if all(m is sp.S.One for m in changes.monomials):  # numbers: as maximum() takes them
        return None
    if len(changes.monomials) <= NARROW:
        return _running_maximum_in_python(running, changes)
    matrix = _running_matrix(changes)
    first: dict[bytes | tuple[object, ...], int] = {}
    for index, row in enumerate(matrix):
        first.setdefault(_row_key(row), index)
    unique = sorted(first.values())
    rows = matrix[unique]
    kept = _undominated_rows(rows, changes.monomials)
    if len(kept) == 1:
        return running.value(unique[kept[0]])
    if len(kept) > FACTOR_ABOVE:
        return _factored_rows(rows[kept], changes.monomials, changes.scale)
    return _unevaluated_max([running.value(unique[i]) for i in kept])


NARROW = 16
"""Most distinct monomials whose maximum is worked out in plain Python, without NumPy.

A transformer's timeline has a handful (``B*S``, ``B*S**2``, ``1``): there NumPy's
import (about 0.1 s, a tenth of a whole ``memtheory estimate``) costs more than the
arithmetic. Wider ones (a pooled CNN's nested floors) are compared a row at a time in NumPy.
"""


def _running_maximum_in_python(running: RunningSum, changes: _Changes) -> sp.Expr:
    """:func:`_running_maximum` on rows of Python integers: the same survivors, the same Max."""
    first: dict[tuple[int, ...], int] = {}
    for index, row in enumerate(_running_rows(changes)):
        first.setdefault(row, index)
    unique = sorted(first.values())
    rows = list(first)  # in order of first appearance: the order of ``unique``
    kept = _undominated_lists(rows, changes.monomials)
    if len(kept) == 1:
        return running.value(unique[kept[0]])
    if len(kept) > FACTOR_ABOVE:
        monomials, scale = changes.monomials, changes.scale
        return _factored([
            {m: Fraction(v, scale) for m, v in zip(monomials, rows[i], strict=True) if v}
            for i in kept
        ])
    return _unevaluated_max([running.value(unique[i]) for i in kept])


@dataclass(frozen=True)
class _Changes:
    """A running sum's values as changes of integer coefficients (times ``scale``)."""

    count: int
    """How many values."""
    monomials: list[sp.Expr]
    """One per column, in order of first appearance."""
    changes: list[tuple[int, int, int]]
    """(value, column, change): from that value on, the column's coefficient changes by it."""
    explicit: dict[int, list[tuple[int, int]]]
    """The values that are not the running sum: (column, coefficient) each."""
    scale: int


def _running_changes(running: RunningSum) -> _Changes:
    """Return the running sum's changes as integers, one column per monomial.

    The work in Python is one step per term changed between two values (its last
    change there; the log may change a term several times in between), not one per
    term of every value.
    """
    column: dict[sp.Expr, int] = {}
    split: dict[sp.Expr, list[tuple[int, Fraction]]] = {}
    state: dict[sp.Expr, Fraction] = {}
    steps: list[tuple[int, int, Fraction]] = []
    explicit: dict[int, list[tuple[int, Fraction]]] = {}
    at = 0
    for index, (place, value) in enumerate(running.places):
        for term, coefficient in dict(running.log[at:place]).items():  # each term's last
            key = sp.S.One if term is None else term
            new = _fraction(coefficient)
            change = new - state.get(key, 0)
            state[key] = new
            if not change:
                continue
            parts = split.get(key)
            if parts is None:
                parts = split[key] = [
                    (column.setdefault(m, len(column)), c) for m, c in _terms(key).items()
                ]
            for where, c in parts:
                steps.append((index, where, change * c))
        at = place
        if value is not None:
            explicit[index] = [
                (column.setdefault(m, len(column)), c) for m, c in _terms(value).items()
            ]
    fixed = [c for pairs in explicit.values() for _, c in pairs]
    # an int is its own numerator over 1 (``_fraction`` makes a Fraction only of a fraction)
    scale = lcm(*{c.denominator for c in (*(s for _, _, s in steps), *fixed)})
    return _Changes(
        count=len(running.places),
        monomials=list(column),
        changes=[(index, where, int(step * scale)) for index, where, step in steps],
        explicit={index: [(where, int(c * scale)) for where, c in pairs]
                  for index, pairs in explicit.items()},
        scale=scale,
    )


def _running_rows(changes: _Changes) -> list[tuple[int, ...]]:
    """Return each value's row of coefficients times ``scale``, as Python integers."""
    width = len(changes.monomials)
    current = [0] * width
    rows: list[tuple[int, ...]] = []
    pending = iter(changes.changes)
    upcoming = next(pending, None)
    for index in range(changes.count):
        while upcoming is not None and upcoming[0] == index:
            current[upcoming[1]] += upcoming[2]
            upcoming = next(pending, None)
        pairs = changes.explicit.get(index)
        if pairs is None:
            rows.append(tuple(current))
        else:
            row = [0] * width
            for where, c in pairs:
                row[where] = c
            rows.append(tuple(row))
    return rows


def _running_matrix(changes: _Changes) -> np.ndarray:
    """Return the values as a NumPy matrix of coefficients times ``scale`` (cumulative sums)."""
    reach = [0] * len(changes.monomials)  # no running coefficient exceeds its changes' total
    for _, where, step in changes.changes:
        reach[where] += abs(step)
    fixed = [abs(c) for pairs in changes.explicit.values() for _, c in pairs]
    largest = max((*reach, *fixed), default=0)
    dtype: type = np.int64 if largest * (len(reach) + 1) < _INT64_SAFE else object
    matrix: np.ndarray = np.zeros((changes.count, len(reach)), dtype=dtype)
    if changes.changes:
        rows, columns, steps = zip(*changes.changes, strict=True)
        np.add.at(matrix, (np.array(rows), np.array(columns)), np.array(steps, dtype=dtype))
    matrix = np.cumsum(matrix, axis=0, dtype=dtype)
    for index, pairs in changes.explicit.items():
        matrix[index] = 0
        for where, c in pairs:
            matrix[index, where] = c
    return matrix


def _factored_rows(matrix: np.ndarray, monomials: Sequence[sp.Expr], scale: int) -> sp.Expr:
    """:func:`_factored` of the polynomials as rows of coefficients times ``scale``.

    A column is common to a range of rows where its least and largest values there
    are equal and not 0; each range's least and largest come from its halves'.
    """
    commons: dict[tuple[int, int], np.ndarray] = {}

    def common(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        if stop - start == 1:
            low = high = matrix[start]
        else:
            half = start + (stop - start) // 2
            (left_low, left_high), (right_low, right_high) = (
                common(start, half), common(half, stop))
            low, high = np.minimum(left_low, right_low), np.maximum(left_high, right_high)
        commons[start, stop] = np.asarray((low == high) & (low != 0), dtype=bool)
        return low, high

    def within(start: int, stop: int, outer: np.ndarray) -> sp.Expr:
        here = commons[start, stop]
        columns = np.flatnonzero(here & ~outer).tolist()
        shared = _expression({
            monomials[j]: Fraction(int(matrix[start, j]), scale) for j in columns
        })
        if stop - start == 1:
            return shared
        half = start + (stop - start) // 2
        inner = _unevaluated_max([within(start, half, here), within(half, stop, here)])
        return sp.Add(shared, inner) if columns else inner

    common(0, matrix.shape[0])
    return within(0, matrix.shape[0], np.zeros(matrix.shape[1], dtype=bool))


def count_candidates(peak: sp.Expr) -> int:
    """Return how many candidates a peak from :func:`maximum` keeps, shared terms factored or not.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> count_candidates(maximum([B + 9, 2 * B])), count_candidates(3 * B)
    (2, 1)
    """
    if isinstance(peak, sp.Max):
        return sum(count_candidates(argument) for argument in peak.args)
    inner = [argument for argument in sp.Add.make_args(peak) if isinstance(argument, sp.Max)]
    return count_candidates(inner[0]) if len(inner) == 1 else 1


def substituted_maximum(
    candidates: Sequence[sp.Expr],
    values: Mapping[sp.Expr, sp.Expr],
    substitute: Callable[[sp.Expr], sp.Expr] | None = None,
) -> sp.Expr:
    """Return :func:`maximum` of the candidates with ``values`` substituted into each.

    Equal to ``maximum([c.xreplace(values) for c in candidates])``, but each
    distinct term is substituted once and the candidates are summed as
    coefficient vectors: sympy builds only the survivors. ``substitute``, if
    given, replaces ``xreplace(values)`` on each term (to treat nested
    ``Max`` terms the same way).

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> substituted_maximum([B * H**2 + 40, 2 * B * H**2, B + 1], {H: 3})
    Max(18*B, 9*B + 40)
    """
    substituted: dict[sp.Expr, _Terms] = {}
    polynomials = []
    for candidate in candidates:
        total: _Terms = {}
        for monomial, coefficient in _terms(sp.sympify(candidate)).items():
            if monomial not in substituted:
                replaced = substitute(monomial) if substitute else monomial.xreplace(values)
                substituted[monomial] = _terms(replaced)
            _accumulate(total, {m: coefficient * c for m, c in substituted[monomial].items()})
        polynomials.append(total)
    if all(set(p) <= {sp.S.One} for p in polynomials):
        return max(_expression(p) for p in polynomials)
    unique, _ = _unique(polynomials, list(candidates))
    survivors = [_expression(unique[i]) for i in _undominated(unique)]
    return survivors[0] if len(survivors) == 1 else _unevaluated_max(survivors)


def provably_nonnegative(expression: sp.Expr) -> bool:
    """Return whether ``expression`` is >= 0 for all admissible values, by its terms alone.

    True when, expanded at the top level, every coefficient is >= 0 and every
    term a product of nonnegative atoms (sizes, floors of nonnegative
    expressions); False means "not shown", not "negative". This costs one pass
    over the terms, where sympy's ``is_nonnegative`` can walk every nested
    floor of a deep network again.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> provably_nonnegative(3 * B * sp.floor(H / 2) ** 2 + 5), provably_nonnegative(H - 5)
    (True, False)
    """
    terms = _terms(sp.sympify(expression))
    return all(c >= 0 and _kind(m) != _UNKNOWN for m, c in terms.items())


# -- polynomials in atoms, without looking inside the atoms ----------------------------
_Terms = dict[sp.Expr, Fraction]
"""A polynomial: coefficient (exact) per monomial (a product of atom powers; 1 for constants)."""


def _terms(expression: sp.Expr, memo: _Memo | None = None) -> _Terms:
    """Expand ``expression`` at the top level only: floors and other functions stay atoms.

    With a ``memo``, each argument of a sum is split once (see :class:`_Memo`).
    """
    if expression.is_Rational:
        return {sp.S.One: _fraction(expression)} if expression else {}
    if expression.is_Add:
        total: _Terms = {}
        for argument in expression.args:
            split = _terms(argument) if memo is None else memo.split(argument)
            for monomial, coefficient in split.items():
                value = total.get(monomial, 0) + coefficient
                if value:
                    total[monomial] = value
                else:
                    total.pop(monomial, None)
        return total
    if expression.is_Mul:
        coefficient, rest = expression.as_coeff_Mul(rational=True)
        factors = sp.Mul.make_args(rest)
        if not any(_needs_expansion(f) for f in factors):
            return {rest: _fraction(coefficient)}
        product: _Terms = {sp.S.One: _fraction(coefficient)}
        for factor in factors:
            product = _multiply(product, _terms(factor))
        return product
    if _needs_expansion(expression):
        base, exponent = expression.as_base_exp()
        power: _Terms = {sp.S.One: Fraction(1)}
        for _ in range(int(exponent)):
            power = _multiply(power, _terms(base))
        return power
    return {expression: Fraction(1)}


class _Memo:
    """The arguments of sums already split in one call, by identity, and one object per monomial.

    The moments of a timeline share most of their arguments (the same objects), so a
    deep network's peak splits each distinct argument once, not once per moment, and
    every moment then names its monomials by the same objects: dictionary lookups by
    identity instead of sympy's structural ``==``. Kept for one call only (by ``id``,
    with the argument held so that its ``id`` stays its own).
    """

    def __init__(self) -> None:
        self.arguments: dict[int, tuple[sp.Expr, _Terms]] = {}
        self.monomials: dict[sp.Expr, sp.Expr] = {}

    def split(self, argument: sp.Expr) -> _Terms:
        """Return ``_terms(argument)`` (read only: callers never change it)."""
        known = self.arguments.get(id(argument))
        if known is None:
            intern = self.monomials.setdefault
            terms = {intern(m, m): c for m, c in _terms(argument).items()}
            self.arguments[id(argument)] = known = (argument, terms)
        return known[1]


def _needs_expansion(factor: sp.Expr) -> bool:
    if factor.is_Add:
        return True
    if factor.is_Pow:
        base, exponent = factor.as_base_exp()
        return bool(base.is_Add and exponent.is_Integer and exponent > 0)
    return False


def _fraction(number: sp.Expr) -> Fraction:
    numerator, denominator = int(number.p), int(number.q)
    return Fraction(numerator, denominator) if denominator != 1 else numerator  # type: ignore[return-value]


def _accumulate(total: _Terms, terms: _Terms) -> None:
    for monomial, coefficient in terms.items():
        value = total.get(monomial, 0) + coefficient
        if value:
            total[monomial] = value
        else:
            total.pop(monomial, None)


def _multiply(left: _Terms, right: _Terms) -> _Terms:
    product: _Terms = {}
    for m1, c1 in left.items():
        for m2, c2 in right.items():
            _accumulate(product, {sp.Mul(m1, m2): c1 * c2})
    return product


def _unique(
    polynomials: list[_Terms], expressions: list[sp.Expr]
) -> tuple[list[_Terms], list[sp.Expr]]:
    """Return the distinct polynomials, each with the first expression that gave it."""
    first: dict[frozenset[tuple[sp.Expr, Fraction]], int] = {}
    for index, terms in enumerate(polynomials):
        first.setdefault(frozenset(terms.items()), index)
    kept = sorted(first.values())
    return [polynomials[i] for i in kept], [expressions[i] for i in kept]


def _expression(terms: _Terms) -> sp.Expr:
    return sp.Add(*(_scaled(sp.Rational(c.numerator, c.denominator), m) for m, c in terms.items()))


def _scaled(coefficient: sp.Rational, monomial: sp.Expr) -> sp.Expr:
    """``coefficient * monomial``, built directly where ``Mul`` would only put the number first.

    That is so for a product of symbols, roundings and their whole powers (the
    monomials of a peak), and for one of them alone; anything else is multiplied by sympy.
    """
    if coefficient is sp.S.One:
        return monomial
    if monomial.is_Mul and coefficient and all(_plain_factor(f) for f in monomial.args):
        return monomial._new_rawargs(coefficient, *monomial.args)
    if coefficient and _plain_factor(monomial):  # one factor: Mul puts the number before it
        return sp.Mul._from_args((coefficient, monomial), True)
    return coefficient * monomial


def _plain_factor(factor: sp.Expr) -> bool:
    base, exponent = factor.as_base_exp()
    return bool(
        (base.is_Symbol or isinstance(base, sp.floor | sp.ceiling))
        and exponent.is_Integer
        and exponent > 0
    )


# -- dominance ---------------------------------------------------------------------------
@lru_cache(maxsize=65536)
def _kind(monomial: sp.Expr) -> int:
    """How much is known about a monomial's sign over admissible values."""
    if monomial is sp.S.One:
        return _AT_LEAST_ONE
    factors = sp.Mul.make_args(monomial)
    if all(_is_size_power(f) for f in factors):
        return _AT_LEAST_ONE
    if all(_is_size_power(f) or _nonnegative_atom(f.as_base_exp()[0]) for f in factors):
        return _NONNEGATIVE
    return _UNKNOWN


def _nonnegative_atom(atom: sp.Expr) -> bool:
    """Return whether an atom is >= 0: a floor of what its terms show >= 0, or as sympy says."""
    if isinstance(atom, sp.floor | sp.ceiling) and provably_nonnegative(atom.args[0]):
        return True
    return bool(atom.is_nonnegative)


def _is_size_power(factor: sp.Expr) -> bool:
    base, exponent = factor.as_base_exp()
    return bool(
        base.is_Symbol
        and base.is_integer
        and base.is_positive
        and exponent.is_Integer
        and exponent >= 0
    )


def _undominated(polynomials: Sequence[_Terms]) -> list[int]:
    """Return the indices kept: no candidate dominated by another, the first of equals."""
    monomials = list(dict.fromkeys(m for terms in polynomials for m in terms))
    column = {m: i for i, m in enumerate(monomials)}
    scale = lcm(*(c.denominator for terms in polynomials for c in terms.values()))
    if len(monomials) <= NARROW:
        return _undominated_lists(
            [tuple(int(terms.get(m, 0) * scale) for m in monomials) for terms in polynomials],
            monomials,
        )
    largest = max((abs(c) * scale for terms in polynomials for c in terms.values()), default=0)
    dtype: type = np.int64 if largest * (len(monomials) + 1) < _INT64_SAFE else object
    matrix: np.ndarray = np.zeros((len(polynomials), len(monomials)), dtype=dtype)
    rows = [row for row, terms in enumerate(polynomials) for _ in terms]
    columns = [column[monomial] for terms in polynomials for monomial in terms]
    values = [int(c * scale) for terms in polynomials for c in terms.values()]
    if values:  # one assignment of every coefficient, not one NumPy call each
        matrix[rows, columns] = np.array(values, dtype=dtype)
    return _undominated_rows(matrix, monomials)


def _undominated_rows(matrix: np.ndarray, monomials: Sequence[sp.Expr]) -> list[int]:
    """:func:`_undominated` of the polynomials as rows of coefficients (one column per monomial)."""
    count = matrix.shape[0]
    dtype = matrix.dtype.type if matrix.dtype != object else object
    column = {m: i for i, m in enumerate(monomials)}
    kinds = np.array([_kind(m) for m in monomials], dtype=int)
    unknown = kinds == _UNKNOWN
    signed = kinds != _UNKNOWN
    constant = column.get(sp.S.One)
    at_least_one = kinds == _AT_LEAST_ONE
    if constant is not None:
        at_least_one[constant] = False
        signed[constant] = False

    # a - b proves a >= b when it is 0 on every column of unknown sign, >= 0 on every signed
    # one, and (with a constant) the at-least-one columns' sum covers the constant's difference.
    # Rows differing on an unknown column never compare, so they are grouped by those columns.
    # If a dominates b, a's signed columns sum to at least b's, and where the sums are level
    # (every signed difference 0) a's cover is at least b's: so, taken in decreasing order of
    # (sum, cover), a row can only be dominated by one taken before it, never dominate one, and
    # the kept rows of a group only grow (of equal rows, the first is taken first).
    positive = matrix[:, signed]
    cover = (
        matrix[:, at_least_one].sum(axis=1) + matrix[:, constant] if constant is not None else None
    )
    sums = positive.sum(axis=1).tolist()
    covers = cover.tolist() if cover is not None else [0] * count
    order = sorted(range(count), key=lambda r: (sums[r], covers[r]), reverse=True)
    keys = [_row_key(values) for values in matrix[:, unknown]]
    sizes = Counter(keys)
    groups: dict[bytes | tuple[object, ...], _Group] = {}
    for row in order:
        group = groups.get(keys[row])
        if group is None:
            group = groups[keys[row]] = _Group(sizes[keys[row]], positive.shape[1], dtype)
        if not group.dominated(positive[row], None if cover is None else cover[row]):
            group.keep(row, positive[row], None if cover is None else cover[row])
    return sorted(row for group in groups.values() for row in group.rows)


def _undominated_lists(rows: Sequence[tuple[int, ...]], monomials: Sequence[sp.Expr]) -> list[int]:
    """:func:`_undominated_rows` on rows of Python integers (see :data:`NARROW`): the same rows.

    The same order of candidates (decreasing signed sum, then cover) and the same test,
    column by column, against the kept rows of the candidate's group. The kept rows are
    tried most recent winner first (moved to the front): a deep stack's moments are
    beaten by a few rows each, and a GPT-2-wide stack of 200 blocks keeps 604 of 4,015
    rows, which a candidate would otherwise try in the order they were kept.
    """
    kinds = [_kind(m) for m in monomials]
    constant = next((j for j, m in enumerate(monomials) if m is sp.S.One), None)
    unknown = [j for j, k in enumerate(kinds) if k == _UNKNOWN]
    signed = [j for j, k in enumerate(kinds) if k != _UNKNOWN and j != constant]
    at_least_one = [j for j, k in enumerate(kinds) if k == _AT_LEAST_ONE and j != constant]
    positive = [tuple(row[j] for j in signed) for row in rows]
    covers = (
        [sum(row[j] for j in at_least_one) + row[constant] for row in rows]
        if constant is not None else [0] * len(rows)
    )
    sums = [sum(values) for values in positive]
    order = sorted(range(len(rows)), key=lambda r: (sums[r], covers[r]), reverse=True)
    groups: dict[tuple[int, ...], list[int]] = {}  # kept rows by group, latest winner first
    for row in order:
        kept = groups.setdefault(tuple(rows[row][j] for j in unknown), [])
        values, cover = positive[row], covers[row]
        for place, other in enumerate(kept):
            if covers[other] >= cover and all(
                    a >= b for a, b in zip(positive[other], values, strict=True)):
                if place:  # to the front: the next candidates are often beaten by it too
                    kept.insert(0, kept.pop(place))
                break
        else:
            kept.append(row)
    return sorted(row for kept in groups.values() for row in kept)


class _Group:
    """The kept rows of one group (equal on every column of unknown sign), in NumPy buffers."""

    def __init__(self, size: int, width: int, dtype: type) -> None:
        self.rows: list[int] = []
        self.signed: np.ndarray = np.zeros((size, width), dtype=dtype)
        self.cover: np.ndarray = np.zeros(size, dtype=dtype)
        self.last = 0
        """The kept row that dominated the previous candidate: tried first (neighbours in the
        timeline are beaten by the same moment, so one row is compared instead of all)."""

    def dominated(self, signed: np.ndarray, cover: object) -> bool:
        """Whether a kept row proves itself at least ``signed`` (and ``cover``) everywhere."""
        count = len(self.rows)
        if not count:
            return False
        last = self.last
        if (cover is None or self.cover[last] >= cover) and bool(
            np.all(self.signed[last] >= signed)
        ):
            return True
        # A row that proves itself at least the candidate is at least its largest coefficient
        # in that column: only those rows are compared whole (a deep CNN's rows are sparse
        # and its columns many: comparing every kept row whole grew as depth squared).
        if len(signed):
            column = int(np.argmax(signed))
            rows = np.flatnonzero(self.signed[:count, column] >= signed[column])
        else:
            rows = np.arange(count)
        proven = np.asarray(self.signed[rows] >= signed).all(axis=1)
        if cover is not None:
            proven &= np.asarray(self.cover[rows] >= cover, dtype=bool)
        found = rows[proven]
        if found.size:
            self.last = int(found[0])
            return True
        return False

    def keep(self, row: int, signed: np.ndarray, cover: object) -> None:
        """Add ``row`` to the kept rows."""
        count = len(self.rows)
        self.signed[count] = signed
        if cover is not None:
            self.cover[count] = cover
        self.rows.append(row)


def _row_key(values: np.ndarray) -> bytes | tuple[object, ...]:
    """Return a hashable key for a row's values (int64 or Python integers)."""
    return values.tobytes() if values.dtype != object else tuple(values.tolist())


def _unevaluated_max(candidates: list[sp.Expr]) -> sp.Expr:
    """``Max(*candidates, evaluate=False)`` in the given order.

    sympy's own constructor sorts the arguments canonically, which costs more
    than the whole pruning on deep candidates full of nested floors; the
    candidates here are distinct and their order is deterministic, so the sort
    adds nothing.
    """
    try:
        result = sp.Expr.__new__(sp.Max, *candidates)
        result._argset = frozenset(candidates)  # what Max's own constructor sets
    except (AttributeError, TypeError):  # a sympy whose Max is built otherwise: the slow way
        return sp.Max(*candidates, evaluate=False)
    return result


# -- the previous algorithm, kept as a reference for tests and benchmarks ------------------
def _reference_maximum(values: Iterable[sp.Expr]) -> sp.Expr:
    """Compute the maximum as before :func:`maximum`; kept to check and time it against.

    Returns the maximum of byte counts, keeping only the candidates no other one dominates.

    Numbers give a number. Symbolic candidates are compared term by term: ``a``
    dominates ``b`` when, expanded, each coefficient of ``a`` is at least the
    same coefficient of ``b`` and every term with a difference is nonnegative
    (a product of sizes). The survivors form a ``Max`` left unevaluated, since
    sympy's pairwise comparison of many floor-laden candidates is slow; it
    evaluates as soon as the symbols get values.
    """
    expanded = [sp.expand(v) for v in values]
    if all(v.is_number for v in expanded):
        return max(expanded)
    kept: list[Mapping[sp.Expr, sp.Expr]] = []
    survivors: list[sp.Expr] = []
    for value in expanded:
        terms = value.as_coefficients_dict()
        if any(_dominates(other, terms) for other in kept):
            continue
        keep = [i for i, other in enumerate(kept) if not _dominates(terms, other)]
        kept = [kept[i] for i in keep] + [terms]
        survivors = [survivors[i] for i in keep] + [value]
    if len(survivors) == 1:
        return survivors[0]
    return sp.Max(*survivors, evaluate=False)


def _dominates(a: Mapping[sp.Expr, sp.Expr], b: Mapping[sp.Expr, sp.Expr]) -> bool:
    for term in set(a) | set(b):
        difference = a.get(term, 0) - b.get(term, 0)
        if difference < 0 or (difference > 0 and not _nonnegative(term)):
            return False
    return True


def _nonnegative(term: sp.Expr) -> bool:
    return bool(term.is_number or term.is_nonnegative)
