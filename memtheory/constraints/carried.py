"""Constraints carried with the expressions memtheory hands out: registered, then looked up.

A network registers each total it hands out with its constraints
(:func:`carry`); evaluating a bare expression looks them up
(:func:`candidates`, :func:`constraints_in`), one set per network known to
hand it out.

Examples
--------
>>> from memtheory.symbols import size_symbol
>>> side = size_symbol("carried_side")
>>> total = carry(5 * side**2, [SizeConstraint(side - 3, "layer 2 of 'doc'")])
>>> [c.condition for c in constraints_in(total / 4)]
['carried_side - 3 >= 1']
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy as sp

from memtheory._shown import shown
from memtheory.constraints.checks import check_sizes
from memtheory.constraints.size_constraint import (
    CarriesConstraints,
    SizeConstraint,
    as_constraints,
)
from memtheory.errors import KernelTooLargeError, SizeWarning

__all__ = [
    "Candidates",
    "OWNER_LIMIT",
    "REGISTRY_LIMIT",
    "candidates",
    "carry",
    "constraints_in",
    "expression_key",
    "held_conditions",
    "held_within",
    "note_held",
    "store_keyed",
    "warn_lost",
    "warn_unknown",
]


REGISTRY_LIMIT = 200_000
"""Most entries each registry keeps; the oldest go first (a long session builds many networks)."""


_WHOLE: dict[object, dict[frozenset[sp.Expr], frozenset[SizeConstraint]]] = {}
"""Per expression (up to a rational factor), each distinct set of sizes it needs, labelled."""
_CROWDED: dict[object, None] = {}


OWNER_LIMIT = 8
"""Most distinct constraint sets kept for one expression; beyond, its constraints are unknown."""


def store_keyed(registry: dict[Any, Any], key: object, value: object) -> None:
    """Store ``value`` under ``key``, dropping the oldest entry once the registry is full."""
    if key not in registry and len(registry) >= REGISTRY_LIMIT:
        del registry[next(iter(registry))]
    registry[key] = value


def carry(
    expression: sp.Expr, constraints: Iterable[SizeConstraint], *, vouch: bool = False
) -> sp.Expr:
    """Register ``expression`` as a whole with ``constraints``; return it unchanged.

    Each network (or memory result) that hands out the expression registers
    its own constraints: several networks can hand out the same expression,
    each with its own. Evaluating the bare expression then uses the
    constraints of the one network it is known to, and never one network's
    constraints for another's expression (:func:`candidates`).

    No constraints register nothing, unless ``vouch``: the caller knows the
    expression needs none (a network without a size that can fall below 1),
    which is then one more network it is known to.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> total = carry(2 * H**3 + 7, [SizeConstraint(H - 9, "layer 3 of 'doc'")])
    >>> [c.condition for c in constraints_in(total)]
    ['H - 9 >= 1']
    """
    expression = sp.sympify(expression)
    if isinstance(expression, sp.Number) or not isinstance(expression, sp.Basic):
        return expression
    owner = frozenset(c for c in constraints if c.size.free_symbols)
    if not owner and not vouch:
        return expression
    key = expression_key(expression)
    sizes = frozenset(c.size for c in owner)  # the same sizes give the same verdicts
    if key in _WHOLE:
        owners = _WHOLE[key]
        if sizes not in owners and len(owners) >= OWNER_LIMIT:
            store_keyed(_CROWDED, key, None)  # not kept: its constraints are unknown from now on
            return expression
        owners.pop(sizes, None)
        owners[sizes] = owner  # labelled as the latest network to hand it out
    else:
        store_keyed(_WHOLE, key, {sizes: owner})
    return expression


@dataclass(frozen=True)
class Candidates:
    """The constraint sets an expression may have to satisfy: one per network it may come from.

    Attributes
    ----------
    sets : tuple of tuples of SizeConstraint
        One set per network (or memory result) known to hand out the
        expression, or the one set ``within=`` names. Empty when no network
        is known to hand it out (a formula built by hand).
    unknown : bool
        Whether more networks handed it out than are remembered
        (:data:`OWNER_LIMIT`): its constraints are then unknown, and values
        that fail every set kept are warned about, not refused.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> rule = SizeConstraint(H - 4, "layer 1 of 'a'")
    >>> Candidates(((rule,),)).check({H: sp.Integer(5)}).sets
    ((),)
    """

    sets: tuple[tuple[SizeConstraint, ...], ...] = ()
    unknown: bool = False

    @property
    def known(self) -> bool:
        """Whether some network (or ``within=``) vouches for the expression."""
        return bool(self.sets) or self.unknown

    @property
    def ambiguous(self) -> bool:
        """Whether the expression's network cannot be told: several sets, or too many."""
        return self.unknown or len(self.sets) > 1

    @property
    def every(self) -> tuple[SizeConstraint, ...]:
        """Every constraint of every set, once: what holds whichever network it comes from."""
        return tuple(dict.fromkeys(c for group in self.sets for c in group))

    def check(self, values: Mapping[sp.Symbol, sp.Expr], stacklevel: int = 3) -> Candidates:
        """Check ``values`` against every set; return the constraints still symbolic, per set.

        One set: values that fail it are refused (:func:`check_sizes`). Several
        (the expression's network is unknown): values that fail every set are
        refused (whichever network it is, they are out of its range); values
        that fail some are evaluated with a :class:`SizeWarning` saying the
        constraints are unknown, and only the sets they pass go on.
        """
        remaining: list[tuple[SizeConstraint, ...]] = []
        errors: list[KernelTooLargeError] = []
        for group in self.sets:
            try:
                remaining.append(check_sizes(group, values))
            except KernelTooLargeError as error:
                errors.append(error)
        if errors and not remaining and not self.unknown:
            raise errors[0]  # out of range whichever network it comes from
        if errors:
            warn_unknown(str(errors[0]), stacklevel=stacklevel + 1)
        return Candidates(tuple(dict.fromkeys(remaining)), self.unknown)


def warn_unknown(failure: str, stacklevel: int = 3) -> None:
    """Warn that an expression's size constraints are unknown, and that one network refuses."""
    warnings.warn(
        SizeWarning(
            "this expression is handed out by several networks (or memory results) with "
            "different size constraints, so which apply to it is unknown; it is evaluated, "
            f"but for one of them these values are out of range: {failure} Evaluate the "
            "memory result itself (memory.evaluate(...)), or pass within=the network, to "
            "check its own constraints."
        ),
        stacklevel=stacklevel,
    )


def candidates(expression: object, within: object = None) -> Candidates:
    """Return the constraint sets ``expression`` may have to satisfy (see :class:`Candidates`).

    ``within`` (a network, a memory result, or constraints) names the set:
    the expression's own registered constraints are added to it only when
    exactly one network is known to hand the expression out.

    Examples
    --------
    >>> from memtheory import Conv2d, Input, Network
    >>> from memtheory.symbols import size_symbol
    >>> side = size_symbol("doc_side")
    >>> first = Network([Input((1, side, side)), Conv2d(8, 5)], "first")
    >>> [[c.where for c in group] for group in candidates(first.activation_count).sets]
    [["layer 1 of 'first', Conv2d 'conv2d_1', output dimension 2"]]
    >>> other = Network([Input((1, side - 6, side - 6)), Conv2d(8, 1, padding=1)], "other")
    >>> other.activation_count == first.activation_count  # 8*B*(doc_side - 4)**2 both
    True
    >>> [[c.condition for c in group] for group in candidates(first.activation_count).sets]
    [['doc_side - 4 >= 1'], ['doc_side - 6 >= 1', 'doc_side - 4 >= 1']]
    """
    owners: dict[frozenset[sp.Expr], frozenset[SizeConstraint]] = {}
    unknown = False
    roots = expression if isinstance(expression, list | tuple) else [expression]
    holders = [root for root in roots if isinstance(root, CarriesConstraints)]
    if roots and len(holders) == len(roots):
        # values that hold their own constraints: theirs apply, whatever else was registered
        held = tuple(dict.fromkeys(c for root in holders for c in root.carried_constraints))
        return Candidates((tuple(dict.fromkeys((*as_constraints(within), *held))),))
    inside = held_within(roots)
    if inside is not None:
        # a value built from held ones (sympy.Max(peak, x), floor(peak / 2**20), pickled):
        # theirs apply to it, with what ``within`` names
        return Candidates((tuple(dict.fromkeys((*as_constraints(within), *inside))),))
    if _WHOLE:
        for root in roots:
            if isinstance(root, sp.Basic) and not isinstance(root, sp.Number):
                key = expression_key(root)
                if key in _WHOLE:
                    owners.update(_WHOLE[key])
                    unknown = unknown or key in _CROWDED
    sets = tuple(  # fewest constraints first, then by label: the same order in any session
        sorted(
            (tuple(sorted(group, key=_order)) for group in owners.values()),
            key=lambda group: (len(group), [c.where for c in group]),
        )
    )
    if within is not None:
        own = as_constraints(within)
        extra = sets[0] if len(sets) == 1 and not unknown else ()
        return Candidates((tuple(dict.fromkeys((*own, *extra))),))
    return Candidates(sets, unknown)


_HELD = [False]
"""Whether this process has built a value that holds its own constraints (else none is searched)."""


_HELD_SIZES: dict[sp.Symbol, dict[SizeConstraint, None]] = {}
"""Per size, the conditions on it of values that hold their own (for :func:`warn_lost`)."""


def note_held(conditions: Iterable[SizeConstraint] = ()) -> None:
    """Note that a value holding its own ``conditions`` exists.

    :func:`held_within` then searches expressions for such values, and
    :func:`warn_lost` checks bare expressions against these conditions.
    """
    _HELD[0] = True
    for condition in conditions:
        for size in condition.size.free_symbols:
            _HELD_SIZES.setdefault(size, {})[condition] = None


def held_conditions(expression: object) -> tuple[SizeConstraint, ...]:
    """Return the conditions that values holding their own put on ``expression``'s sizes.

    Process-wide and per size, not per expression: what some traced result
    in this process requires of a size the expression depends on, whether or
    not the expression comes from it. Only ever warned about
    (:func:`warn_lost`), never refused.

    Examples
    --------
    >>> from memtheory.symbols import size_symbol
    >>> held_conditions(size_symbol("never_held") + 1)
    ()
    """
    if not _HELD_SIZES or not isinstance(expression, sp.Basic):
        return ()
    found: dict[SizeConstraint, None] = {}
    for size in expression.free_symbols:
        found.update(_HELD_SIZES.get(size, {}))
    return tuple(found)


def warn_lost(expression: object, values: Mapping[sp.Basic, object]) -> bool:
    """Warn where ``values`` break a traced result's condition on a bare expression's sizes.

    A value that holds its conditions keeps them through its own arithmetic
    and through functions that keep a part of it, but sympy can rebuild it
    from its terms and keep no part (``sympy.Add(peak, c)`` on a peak of one
    polynomial, ``sympy.factor(peak)``). Such an expression is known to no
    network and holds nothing. Where it depends on a size that a held value's
    conditions constrain in this process (:func:`held_conditions`) and
    ``values`` (symbol to number) make one of them false, it may be that
    value's formula outside the sizes where it holds: it is evaluated, with
    a :class:`SizeWarning` that says so, never silently. Nothing is kept per
    expression, so nothing can collide: an expression that merely shares the
    size is warned about too, and one unpickled in a process that traced
    nothing is not. The warning points at the first line outside memtheory.
    Returns whether it warned.

    Examples
    --------
    >>> from memtheory.symbols import size_symbol
    >>> side = size_symbol("never_held")
    >>> warn_lost(side + 1, {side: 20})  # no held value constrains this size
    False
    """
    broken = []
    for condition in held_conditions(expression):
        size = condition.size
        if not size.free_symbols <= set(values):
            continue
        number = size.xreplace({s: sp.sympify(values[s]) for s in size.free_symbols})
        if number.is_number and number < 1:
            at = ", ".join(f"{s}={shown(values[s])}" for s in sorted(size.free_symbols, key=str))
            broken.append(f"{at} is outside {condition.where}")
    if not broken:
        return False
    more = f" (and {len(broken) - _SHOWN} more)" if len(broken) > _SHOWN else ""
    warnings.warn(
        SizeWarning(
            f"{'; '.join(broken[:_SHOWN])}{more}: conditions of traced results in this "
            "process, and this expression carries no conditions. If it was built from such a "
            "result by a sympy function that rebuilds it from its terms (sympy.Add(peak, c), "
            "sympy.factor(peak)), its conditions are lost and this number is not its "
            "formula's. Do the arithmetic on the result's value itself (memory.peak + c), or "
            "pass within=memory to check its conditions."
        ),
        stacklevel=_outside_memtheory(),
    )
    return True


_SHOWN = 5
"""Most broken conditions one warning names."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _outside_memtheory() -> int:
    """Return the ``stacklevel`` of the first frame out of :func:`warn_lost` not in memtheory."""
    frame, level = sys._getframe(2), 2  # warn_lost's caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def held_within(roots: Iterable[object]) -> tuple[SizeConstraint, ...] | None:
    """Return the constraints of every value inside ``roots`` that holds its own; None if none.

    A value built from a traced peak by a function that does not call the
    peak's methods (``sympy.Max(peak, 2**25)`` takes the peak's moments,
    ``sympy.floor(peak / 2**20)``) is a plain expression, but the parts it
    was built from still hold the peak's conditions, in this process and
    through a pickle: they apply to the whole, since its value depends on theirs.

    Examples
    --------
    >>> from memtheory.symbols import size_symbol
    >>> held_within([size_symbol("held_side") + 1]) is None  # nothing holds constraints
    True
    """
    if not _HELD[0]:
        return None
    found: dict[SizeConstraint, None] = {}
    seen = False
    for root in roots:
        if not isinstance(root, sp.Basic):
            continue
        nodes = sp.preorder_traversal(root)
        for node in nodes:
            held = getattr(type(node), "carried_constraints", None)
            if held is not None:
                seen = True
                found.update(dict.fromkeys(held.__get__(node)))
                nodes.skip()
    return tuple(found) if seen else None


def expression_key(expression: sp.Basic) -> object:
    """Return the expression without a rational factor: a total in MiB carries what bytes do.

    A sum becomes its terms with their coefficients divided by their common
    factor (built from Python integers: no sympy sum is rebuilt or sorted).
    A peak (a maximum) shifted by a number, as ``peak + reserve`` is, carries
    what the peak carries.
    """
    if expression.is_Add:
        constant, rest = expression.as_coeff_Add()
        if constant and not rest.is_Add and rest.has(sp.Max):
            return expression_key(rest)
    if expression.is_Mul:
        return expression.as_coeff_Mul()[1]
    if not expression.is_Add:
        return expression
    pairs = [term.as_coeff_Mul() for term in expression.args]
    if not all(coefficient.is_Rational for coefficient, _ in pairs):
        return expression
    numerator = math.gcd(*(int(c.p) for c, _ in pairs))
    denominator = math.lcm(*(int(c.q) for c, _ in pairs))
    content = Fraction(numerator, denominator)
    return frozenset((term, Fraction(int(c.p), int(c.q)) / content) for c, term in pairs)


def constraints_in(expression: object, within: object = None) -> tuple[SizeConstraint, ...]:
    """Return every size constraint ``expression`` carries (and those of ``within``).

    Those of ``within`` come first, then those registered for the expression
    as a whole: :func:`check_sizes` reports the first that fails. When several
    networks hand out the expression with different constraints, only those
    every one of them requires (see :func:`candidates` for each set).

    Parameters
    ----------
    expression : sympy expression, or a list of them
    within : Network, memory result, mapping of label to size, or SizeConstraints, optional

    Examples
    --------
    >>> from memtheory import Conv2d, Input, MaxPool2d, Network
    >>> from memtheory.symbols import size_symbol
    >>> side = size_symbol("side")
    >>> net = Network([Input((1, side, side)), Conv2d(8, 5), MaxPool2d(2)])
    >>> sorted(c.condition for c in constraints_in(net.activation_count))
    ['floor(side/2) - 2 >= 1', 'side - 4 >= 1']
    >>> constraints_in(side - 3)
    ()
    """
    found = candidates(expression, within)
    if len(found.sets) == 1:
        return found.sets[0]
    shared = set.intersection(*(set(group) for group in found.sets)) if found.sets else set()
    return tuple(c for c in found.every if c in shared)  # what every one of them requires


def _order(constraint: SizeConstraint) -> str:
    return constraint.where
