"""A network's output sizes, remembered to warn where an expression built from them is not checked.

Examples
--------
>>> from memtheory.symbols import size_symbol
>>> side = size_symbol("known_side")
>>> register_sizes([SizeConstraint(side - 2, "layer 1 of 'doc'")])
>>> [c.where for c in sizes_inside(4 * (side - 2) ** 2 + 1)]
["layer 1 of 'doc'"]
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping

import sympy as sp

from memtheory._replace import replaced
from memtheory.constraints.carried import expression_key, store_keyed
from memtheory.constraints.size_constraint import SizeConstraint
from memtheory.errors import SizeWarning

__all__ = ["register_sizes", "sizes_inside", "warn_outside"]


_NODES: dict[object, tuple[SizeConstraint, ...]] = {}
_RANK: dict[SizeConstraint, tuple[int, int]] = {}  # (place in its network, registration)


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
            key = expression_key(constraint.size)
            known = _NODES.get(key, ())
            if constraint not in known:
                store_keyed(_NODES, key, (*known, constraint))
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
            found.update(dict.fromkeys(_NODES.get(expression_key(node), ())))
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
            same = {c for c in _NODES.get(expression_key(constraint.size), ())
                    if c.size == constraint.size}
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
