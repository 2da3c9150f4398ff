"""The sizes a network cannot go below, carried with the expressions it hands out.

A layer's output size is an expression such as ``H - 4`` (a 5x5 kernel) or
``floor(H/2) - 2`` (then a 2x2 pooling). For ``H = 2`` it is negative, and a
formula that squares it (``64*B*(H - 4)**2``) would turn an impossible network
into a plausible number of bytes. So every output size that is not positive for
every admissible value of its symbols becomes a :class:`SizeConstraint`: it must
be at least 1, and every evaluation path of memtheory checks it.

How a constraint travels
------------------------
The expressions stay plain sympy expressions: they print, compare, simplify
and grade exactly as before. The constraints travel beside them:

* **with the results, first.** A memory result keeps its network's constraints
  (:attr:`~memtheory.footprint.Footprint.constraints`) and checks exactly those
  in its ``evaluate`` and ``grid``, whatever any other network registered; the
  what-if solvers given a memory result, a network or counts use its own, and
  start their search at the smallest size every layer takes.
* **explicitly.** Every evaluation function takes ``within=`` (a network, a
  memory result, or constraints): those constraints are checked.
* **with the expressions memtheory hands out.** A network's totals
  (``parameter_count``, ``activation_count``, ...), the counts it gives a
  convention, and every component, ``total`` and ``peak`` of a memory result
  built from it are registered with its constraints (:func:`carry`), one set
  per network: two networks can hand out one expression (the same layers under
  two names, or different layers whose counts coincide) and each keeps its own.
  :func:`~memtheory.evaluation.evaluate`,
  :func:`~memtheory.evaluation.evaluate_grid` and
  :func:`~memtheory.evaluation.compile_exact` of a bare expression look them up
  (:func:`candidates`). Known to one network, or to several that need the same
  sizes: its constraints are checked. Known to several that need different
  sizes: values every one of them refuses are refused, values only some refuse
  give a :class:`~memtheory.errors.SizeWarning` saying its constraints are
  unknown, and never is one network's range used silently for another's
  expression. What :func:`~memtheory.evaluation.evaluate` returns while
  symbols stay free carries each network's constraints still open.
* **as a warning.** An expression *you* build from others
  (``4 * net.activation_count + 1``) is new, and carries nothing (beyond a
  rational factor: ``total / 2**20`` carries what ``total`` carries). If it
  still contains one of a network's output sizes (:func:`register_sizes`), and
  the values make that size less than 1, evaluating it gives a
  :class:`~memtheory.errors.SizeWarning` naming the layer, not silence: it may
  be a formula of your own, so it is not refused. Pass ``within=net`` to refuse,
  or evaluate the memory results and combine the numbers. (A size that sympy
  has merged into other terms, as with a fixed batch and one symbolic side, is
  beyond finding in a new expression: there only ``within=`` checks it.)

Most constraints are lower bounds (a window must fit). A model's limit is an
upper bound: a learned table of 1,024 positions takes no longer sequence
(:data:`MODEL_LIMIT`); evaluating past it is refused, and the what-if solvers
stop there. The input batch does not depend on the layers, so it carries
nothing.

Examples
--------
>>> from memtheory import Conv2d, Input, Network
>>> from memtheory.evaluation import evaluate
>>> from memtheory.symbols import B, H
>>> net = Network([Input((1, H, H)), Conv2d(8, 5)])
>>> [c.condition for c in constraints_in(net.activation_count)]
['H - 4 >= 1']
>>> evaluate(net.activation_count, B=1, H=2)
Traceback (most recent call last):
...
memtheory.errors.KernelTooLargeError: H=2 is too small for layer 1 of 'network', Conv2d ...
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import sympy as sp

from memtheory._replace import replaced
from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError, KernelTooLargeError, SizeWarning

__all__ = [
    "MODEL_LIMIT",
    "Candidates",
    "SizeConstraint",
    "candidates",
    "carry",
    "check_sizes",
    "constraints_in",
    "register_sizes",
    "sizes_inside",
    "smallest_valid",
    "warn_outside",
    "as_constraints",
    "largest_valid",
    "too_small",
    "warn_unknown",
]

MODEL_LIMIT = "the model's limit: "
"""How a constraint's ``where`` begins when it is a largest size the model takes.

A learned table of 1,024 positions takes no sequence longer than 1,024: the
constraint ``1025 - S >= 1`` is the model's limit, and the what-if solvers stop
there (:attr:`SizeConstraint.is_limit`), where a traced formula's upper bound
(``16 - B``) says only that the formula is not known beyond.
"""

REGISTRY_LIMIT = 200_000
"""Most entries each registry keeps; the oldest go first (a long session builds many networks)."""


@dataclass(frozen=True)
class SizeConstraint:
    """A size that must be at least 1: a layer's output dimension, with where it comes from.

    Attributes
    ----------
    size : sympy expression
        The output size (``H - 4``).
    where : str
        The layer and the dimension, for messages
        (``"layer 1 of 'cnn', Conv2d 'conv2d_1', output dimension 2"``).

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> SizeConstraint(H - 4, "layer 1").condition
    'H - 4 >= 1'
    """

    size: sp.Expr
    where: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _as_size(self.size, self.where))
        if not isinstance(self.where, str):
            raise InvalidArgumentError(
                f"a size constraint's where is text naming the layer, got {shown(self.where)}."
            )

    @property
    def condition(self) -> str:
        """The condition as text: ``'H - 4 >= 1'``."""
        return f"{self.size} >= 1"

    @property
    def is_limit(self) -> bool:
        """Whether it is a largest size the model takes (:data:`MODEL_LIMIT`).

        Examples
        --------
        >>> from memtheory.symbols import S
        >>> SizeConstraint(1025 - S, MODEL_LIMIT + "layer 2 of 'gpt2'").is_limit
        True
        """
        return self.where.startswith(MODEL_LIMIT)


@runtime_checkable
class _HasConstraints(Protocol):
    def size_checks(self) -> tuple[SizeConstraint, ...]: ...


_WHOLE: dict[object, dict[frozenset[sp.Expr], frozenset[SizeConstraint]]] = {}
"""Per expression (up to a rational factor), each distinct set of sizes it needs, labelled."""
_CROWDED: dict[object, None] = {}
"""Expressions handed out with more distinct sets than :data:`OWNER_LIMIT`: some are not kept."""
_NODES: dict[object, tuple[SizeConstraint, ...]] = {}
_RANK: dict[SizeConstraint, tuple[int, int]] = {}  # (place in its network, registration)

OWNER_LIMIT = 8
"""Most distinct constraint sets kept for one expression; beyond, its constraints are unknown."""


def _store(registry: dict[Any, Any], key: object, value: object) -> None:
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
    key = _key(expression)
    sizes = frozenset(c.size for c in owner)  # the same sizes give the same verdicts
    if key in _WHOLE:
        owners = _WHOLE[key]
        if sizes not in owners and len(owners) >= OWNER_LIMIT:
            _store(_CROWDED, key, None)  # not kept: its constraints are unknown from now on
            return expression
        owners.pop(sizes, None)
        owners[sizes] = owner  # labelled as the latest network to hand it out
    else:
        _store(_WHOLE, key, {sizes: owner})
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
    if _WHOLE:
        roots = expression if isinstance(expression, list | tuple) else [expression]
        for root in roots:
            if isinstance(root, sp.Basic) and not isinstance(root, sp.Number):
                key = _key(root)
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


def _key(expression: sp.Basic) -> object:
    """Return the expression without a rational factor: a total in MiB carries what bytes do.

    A sum becomes its terms with their coefficients divided by their common
    factor (built from Python integers: no sympy sum is rebuilt or sorted).
    A peak (a maximum) shifted by a number, as ``peak + reserve`` is, carries
    what the peak carries.
    """
    if expression.is_Add:
        constant, rest = expression.as_coeff_Add()
        if constant and not rest.is_Add and rest.has(sp.Max):
            return _key(rest)
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


def register_sizes(constraints: Iterable[SizeConstraint]) -> None:
    """Remember a network's output sizes, to warn about them where they are not checked.

    See :func:`sizes_inside`: an expression that is not the network's but
    contains one of these sizes is evaluated with a :class:`SizeWarning` when the
    size would be less than 1.

    Examples
    --------
    >>> from memtheory.symbols import size_symbol
    >>> side = size_symbol("side")
    >>> register_sizes([SizeConstraint(side - 6, "layer 1 of 'doc', a 7x7 window")])
    >>> [c.where for c in sizes_inside(3 * (side - 6) ** 2 + side)]
    ["layer 1 of 'doc', a 7x7 window"]
    """
    for position, constraint in enumerate(constraints):
        if constraint.size.free_symbols:
            key = _key(constraint.size)
            known = _NODES.get(key, ())
            if constraint not in known:
                _store(_NODES, key, (*known, constraint))
                # its place among its own network's sizes, then the order networks were built
                _RANK.setdefault(constraint, (position, len(_RANK)))


def sizes_inside(expression: sp.Basic) -> tuple[SizeConstraint, ...]:
    """Return the registered output sizes that occur in ``expression`` (up to a rational factor).

    Examples
    --------
    >>> from memtheory.symbols import size_symbol
    >>> sizes_inside(size_symbol("unseen") - 2)
    ()
    """
    if not _NODES or not isinstance(expression, sp.Basic):
        return ()
    found: dict[SizeConstraint, None] = {}
    seen: set[sp.Basic] = set()
    stack = [expression]
    while stack:
        node = stack.pop()
        if node in seen or not node.args:
            continue
        seen.add(node)
        if node.is_Add:
            found.update(dict.fromkeys(_NODES.get(_key(node), ())))
        stack.extend(node.args)
    return tuple(sorted(found, key=lambda c: _RANK.get(c, (0, 0))))  # in the order layers run


def warn_outside(
    constraints: Iterable[SizeConstraint],
    values: Mapping[sp.Symbol, sp.Expr],
    sizes: Iterable[sp.Expr] | None = None,
    stacklevel: int = 3,
) -> bool:
    """Warn (:class:`SizeWarning`) about the first size that ``values`` make less than 1.

    Returns whether it warned. ``stacklevel`` points the warning at the caller's caller.

    For the sizes :func:`sizes_inside` finds in an expression that carries no
    constraint of its own: the expression may be built from a network's, and
    these values outside the network's range. ``sizes``: as for :func:`check_sizes`.
    """
    constraints = tuple(constraints)
    if not constraints or not values:
        return False
    substituted = (
        list(sizes) if sizes is not None else replaced([c.size for c in constraints], values)
    )
    for constraint, size in zip(constraints, substituted, strict=True):
        if not size.free_symbols and size < 1:
            shown = ", ".join(
                f"{s}={v}" for s, v in values.items() if s in constraint.size.free_symbols
            )
            # several networks (or layers) may have this very size: name them, the most recently
            # built first (the likeliest source of the expression), a few at most
            same = {c for c in _NODES.get(_key(constraint.size), ()) if c.size == constraint.size}
            ranked = sorted(same | {constraint}, key=lambda c: -_RANK.get(c, (0, 0))[1])
            owners = [c.where for c in ranked]
            named = "; ".join(owners[:3]) + (
                f"; and {len(owners) - 3} more" if len(owners) > 3 else ""
            )
            which = "that network's" if len(owners) == 1 else "one of these networks'"
            warnings.warn(
                SizeWarning(
                    f"{shown} makes {constraint.size} = {size} in this expression: that is the "
                    f"output size of {named}, which needs {constraint.condition}. If the "
                    f"expression is built from {which}, these sizes are out of its range: "
                    "pass within=the network to refuse them."
                ),
                stacklevel=stacklevel,
            )
            return True
    return False


def as_constraints(within: object) -> tuple[SizeConstraint, ...]:
    """Return the constraints of a network, a memory result, a mapping, or constraints.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> as_constraints({"layer 1": H - 2})
    (SizeConstraint(size=H - 2, where='layer 1'),)
    """
    if within is None:
        return ()
    if isinstance(within, _HasConstraints):
        return within.size_checks()
    if isinstance(within, Mapping):
        return tuple(SizeConstraint(v, str(k)) for k, v in within.items())
    if isinstance(within, Iterable) and not isinstance(within, str | bytes):
        items = tuple(within)
        if all(isinstance(item, SizeConstraint) for item in items):
            return items
    raise InvalidArgumentError(
        f"within= takes a Network, a memory result, a mapping of label to size or "
        f"SizeConstraints, got {shown(within)} ({type(within).__name__})."
    )


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


def _as_size(value: object, where: object) -> sp.Expr:
    """``value`` as a size expression: a whole number, or a sympy expression that can be one."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return sp.Integer(int(value))
    if isinstance(value, sp.Expr) and value.is_finite is not False:
        if not value.is_number or value.is_integer:
            return value
    raise InvalidArgumentError(
        f"a size constraint ({where!r}) needs a size: a whole number or a sympy expression in "
        f"size symbols, got {shown(value)} ({type(value).__name__})."
    )


def _order(constraint: SizeConstraint) -> str:
    return constraint.where


def check_sizes(
    constraints: Iterable[SizeConstraint],
    values: Mapping[sp.Symbol, sp.Expr],
    sizes: Iterable[sp.Expr] | None = None,
) -> tuple[SizeConstraint, ...]:
    """Refuse ``values`` that make a size below 1; return the constraints still symbolic.

    ``sizes``, when given, are the constraints' sizes with ``values`` already
    substituted (by a caller that substitutes them with other expressions, sharing
    the work).

    Raises
    ------
    KernelTooLargeError
        Naming the values, the layer, the size and the condition.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> rule = SizeConstraint(H - 4, "layer 1 of 'net', Conv2d 'conv2d_1', output dimension 2")
    >>> check_sizes([rule], {B: sp.Integer(3)})
    (SizeConstraint(size=H - 4, where="layer 1 of 'net', Conv2d 'conv2d_1', output dimension 2"),)
    >>> check_sizes([rule], {H: sp.Integer(3)})
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: H=3 is too small for layer 1 of 'net', Conv2d ...
    """
    remaining: list[SizeConstraint] = []
    constraints = tuple(constraints)
    # One pass over every size: a deep network's sizes are floors nested in one another.
    if sizes is None:
        sizes = replaced([c.size for c in constraints], values) if values else None
    substituted = None if sizes is None else list(sizes)
    for index, constraint in enumerate(constraints):
        size = constraint.size if substituted is None else substituted[index]
        if not size.free_symbols:
            if size < 1:
                shown = ", ".join(
                    f"{symbol}={value}"
                    for symbol, value in values.items()
                    if symbol in constraint.size.free_symbols
                )
                raise too_small(constraint, shown, size)
        else:
            remaining.append(
                constraint if size == constraint.size else SizeConstraint(size, constraint.where)
            )
    return tuple(remaining)


def too_small(constraint: SizeConstraint, shown: str, size: object) -> KernelTooLargeError:
    """Return the error for values (``shown``, as ``"H=2"``) that make ``constraint`` fail."""
    hint = ""
    symbols = constraint.size.free_symbols
    if constraint.is_limit:
        largest = (
            largest_valid([constraint], next(iter(symbols))) if len(symbols) == 1 else None
        )
        bound = (
            f"{next(iter(symbols))} <= {largest} must hold ({constraint.condition})"
            if largest is not None
            else f"{constraint.condition} must hold"
        )
        return KernelTooLargeError(
            f"{shown} is beyond {constraint.where}; {bound}. The model takes no larger size: "
            "use a smaller one."
        )
    if len(symbols) == 1:
        (symbol,) = symbols
        if _shrinks(constraint.size, symbol):
            # An upper bound (a traced formula's "B < 16"), not a window that must fit.
            return KernelTooLargeError(
                f"{shown} is outside {constraint.where}: it would be {size}, and "
                f"{constraint.condition} must hold. Use a smaller {symbol}, or derive the "
                f"formula again for this range of {symbol}."
            )
        try:
            hint = f" (so {symbol} >= {smallest_valid([constraint], symbol)})"
        except KernelTooLargeError:
            hint = ""
    return KernelTooLargeError(
        f"{shown} is too small for {constraint.where}: it would be {size}, and "
        f"{constraint.condition} must hold{hint}. Use a larger input, more padding, or a "
        "smaller kernel or stride."
    )


def _shrinks(size: sp.Expr, symbol: sp.Symbol) -> bool:
    """Whether ``size`` falls as ``symbol`` grows large (an upper bound on ``symbol``).

    Compared far out, where a layer's size (even a square such as a flattened
    ``(H // 2 - 2)**2``) grows and a bound such as ``16 - B`` falls.
    """
    near, far = (size.xreplace({symbol: sp.Integer(2**v)}) for v in (40, 41))
    return bool(near.is_number and far.is_number and far < near)


def largest_valid(constraints: Iterable[SizeConstraint], symbol: sp.Symbol) -> int | None:
    """Return the largest value of ``symbol`` that the constraints bounding it from above allow.

    ``None`` when no constraint in ``symbol`` alone shrinks as it grows (no upper
    bound: the usual case for a layer's output size).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> largest_valid([SizeConstraint(16 - B, "the traced formulas' B < 16")], B)
    15
    """
    bounds = [
        c for c in constraints if c.size.free_symbols == {symbol} and _shrinks(c.size, symbol)
    ]
    if not bounds:
        return None

    def valid(value: int) -> bool:
        return all(c.size.xreplace({symbol: sp.Integer(value)}) >= 1 for c in bounds)

    if not valid(1):
        return 0
    low, high = 1, 2
    while valid(high):
        low, high = high, 2 * high
        if high > 2**64:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        if valid(middle):
            low = middle
        else:
            high = middle
    return low


def smallest_valid(constraints: Iterable[SizeConstraint], symbol: sp.Symbol, start: int = 1) -> int:
    """Return the smallest value of ``symbol`` from ``start`` on that every constraint allows.

    Constraints in other symbols too are ignored. Sizes are taken to grow
    with the input (a window slides over more positions), so the first valid
    value is found by doubling and then bisection, and checked.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> smallest_valid([SizeConstraint(sp.floor(H / 2) - 2, "pool")], H)
    6
    """
    own = [c for c in constraints if c.size.free_symbols == {symbol}]
    if not own:
        return start

    def valid(value: int) -> bool:
        return all(c.size.xreplace({symbol: sp.Integer(value)}) >= 1 for c in own)

    if valid(start):
        return start
    low, high = start, max(2 * start, 2)
    while not valid(high):
        low, high = high, 2 * high
        if high > 2**64:
            names = "; ".join(c.condition for c in own)
            raise KernelTooLargeError(f"no value of {symbol} satisfies {names}.")
    while high - low > 1:
        middle = (low + high) // 2
        if valid(middle):
            high = middle
        else:
            low = middle
    return high
