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

* **with the expressions memtheory hands out.** A network's totals
  (``parameter_count``, ``activation_count``, ...), the counts it gives a
  convention, and every component, ``total`` and ``peak`` of a memory result
  built from it are registered with its constraints (:func:`carry`); so is
  what :func:`~memtheory.evaluation.evaluate` returns while symbols stay free,
  with the constraints still open. :func:`~memtheory.evaluation.evaluate`,
  :func:`~memtheory.evaluation.evaluate_grid` and
  :func:`~memtheory.evaluation.compile_exact` look them up.
* **with the results.** A memory result keeps its network's constraints
  (:attr:`~memtheory.footprint.Footprint.constraints`) and checks them in its
  ``evaluate`` and ``grid``; the what-if solvers start their search at the
  smallest size every layer takes.
* **explicitly.** Every evaluation function takes ``within=`` (a network, a
  memory result, or constraints).
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

The input batch does not depend on the layers, so it carries nothing. Two
networks can hand out the same expression: it then carries only the
constraints both share. The lookup is by equality, so a sympy expression you
type that equals one a network handed out is taken to be that network's.

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
from memtheory.errors import InvalidArgumentError, KernelTooLargeError, SizeWarning

__all__ = [
    "SizeConstraint",
    "carry",
    "check",
    "constraints_in",
    "register_sizes",
    "sizes_inside",
    "smallest_valid",
    "warn_outside",
    "as_constraints",
    "largest_valid",
    "too_small",
]

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
                f"a size constraint's where is text naming the layer, got {self.where!r}."
            )

    @property
    def condition(self) -> str:
        """The condition as text: ``'H - 4 >= 1'``."""
        return f"{self.size} >= 1"


@runtime_checkable
class _HasConstraints(Protocol):
    def size_checks(self) -> tuple[SizeConstraint, ...]: ...


_WHOLE: dict[object, frozenset[SizeConstraint]] = {}
_NODES: dict[object, tuple[SizeConstraint, ...]] = {}
_RANK: dict[SizeConstraint, tuple[int, int]] = {}  # (place in its network, registration)


def _store(registry: dict[Any, Any], key: object, value: object) -> None:
    if key not in registry and len(registry) >= REGISTRY_LIMIT:
        del registry[next(iter(registry))]
    registry[key] = value


def carry(expression: sp.Expr, constraints: Iterable[SizeConstraint]) -> sp.Expr:
    """Register ``expression`` as a whole with ``constraints``; return it unchanged.

    When two networks register the same expression, it keeps only the
    constraints they share: it is checked only against what both require.
    Registering no constraints changes nothing.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> total = carry(2 * H**3 + 7, [SizeConstraint(H - 9, "layer 3 of 'doc'")])
    >>> [c.condition for c in constraints_in(total)]
    ['H - 9 >= 1']
    """
    expression = sp.sympify(expression)
    new = frozenset(c for c in constraints if c.size.free_symbols)
    if not new or isinstance(expression, sp.Number):
        return expression
    key = _key(expression)
    known = _WHOLE.get(key)
    if known is None:
        _store(_WHOLE, key, new)
    elif known != new:
        _store(_WHOLE, key, known & new)
    return expression


def _key(expression: sp.Basic) -> object:
    """Return the expression without a rational factor: a total in MiB carries what bytes do.

    A sum becomes its terms with their coefficients divided by their common
    factor (built from Python integers: no sympy sum is rebuilt or sorted).
    """
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
    these values outside the network's range. ``sizes``: as for :func:`check`.
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
        f"SizeConstraints, got {within!r} ({type(within).__name__})."
    )


def constraints_in(expression: object, within: object = None) -> tuple[SizeConstraint, ...]:
    """Return every size constraint ``expression`` carries (and those of ``within``).

    Those of ``within`` come first, then those registered for the expression
    as a whole, then the sizes found inside it: :func:`check` reports the
    first that fails.

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
    found: dict[SizeConstraint, None] = dict.fromkeys(as_constraints(within))
    if _WHOLE:
        roots = expression if isinstance(expression, list | tuple) else [expression]
        for root in roots:
            if isinstance(root, sp.Basic):
                found.update(dict.fromkeys(sorted(_WHOLE.get(_key(root), ()), key=_order)))
    return tuple(found)


def _as_size(value: object, where: object) -> sp.Expr:
    """``value`` as a size expression: a whole number, or a sympy expression that can be one."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return sp.Integer(int(value))
    if isinstance(value, sp.Expr) and value.is_finite is not False:
        if not value.is_number or value.is_integer:
            return value
    raise InvalidArgumentError(
        f"a size constraint ({where!r}) needs a size: a whole number or a sympy expression in "
        f"size symbols, got {value!r} ({type(value).__name__})."
    )


def _order(constraint: SizeConstraint) -> str:
    return constraint.where


def check(
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
    >>> check([rule], {B: sp.Integer(3)})
    (SizeConstraint(size=H - 4, where="layer 1 of 'net', Conv2d 'conv2d_1', output dimension 2"),)
    >>> check([rule], {H: sp.Integer(3)})
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
