"""Substitution into many expressions at once, each shared subexpression rebuilt once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy as sp

__all__ = ["replaced"]


def replaced(expressions: Iterable[sp.Expr], mapping: Mapping[sp.Basic, sp.Basic]) -> list[sp.Expr]:
    """Return ``[e.xreplace(mapping) for e in expressions]``, each shared subexpression once.

    The moments of a deep network's timeline share most of their terms, each
    a floor nested as deep as the network; ``xreplace`` alone would rebuild
    every one of them again for every moment.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> replaced([B * sp.floor(H / 2), sp.floor(H / 2) + 1], {H: 9})
    [4*B, 5]
    """
    done: dict[sp.Basic, tuple[sp.Basic, bool]] = {}

    def walk(node: sp.Basic) -> tuple[sp.Basic, bool]:  # Basic._xreplace, remembered
        known = done.get(node)
        if known is not None:
            return known
        if node in mapping:
            result = (mapping[node], True)
        else:
            arguments = [walk(a) if isinstance(a, sp.Basic) else (a, False) for a in node.args]
            changed = any(change for _, change in arguments)
            result = (node.func(*(a for a, _ in arguments)), True) if changed else (node, False)
        done[node] = result
        return result

    return [walk(sp.sympify(e))[0] if mapping else sp.sympify(e) for e in expressions]
