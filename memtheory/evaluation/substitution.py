"""Exact evaluation with sympy: :func:`evaluate`, :func:`substitution`, :func:`substitute`.

The values are checked (:mod:`~memtheory.evaluation.values`), the size
constraints of the network an expression comes from are checked or carried
(:mod:`memtheory.constraints`), and each ``Max`` is pruned again as values go
in (:mod:`memtheory.max_pruning`).

Examples
--------
>>> from memtheory.symbols import B, H
>>> evaluate(B * H + 1, B=2, H=3)
7
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy as sp

from memtheory.constraints import candidates, carry, sizes_inside, warn_outside
from memtheory.constraints.carried import warn_lost
from memtheory.errors import EvaluationError
from memtheory.evaluation.values import as_expression, checked_value, symbols_by_name
from memtheory.max_pruning import substituted_maximum

__all__ = ["evaluate", "substitute", "substitution"]


def substitution(
    expressions: Iterable[sp.Expr], values: Mapping[str, object]
) -> dict[sp.Symbol, sp.Integer]:
    """Check ``values`` against the free symbols of ``expressions`` and build a substitution.

    Every name must be a free symbol of one of the expressions (a typo is an
    error, not a silent no-op), and every value must satisfy the symbol's
    assumptions (a batch size of 2.5 or -1 is refused).

    Raises
    ------
    EvaluationError
        Naming the offending symbol and what would fix it.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> substitution([2 * B], {"B": 8})
    {B: 8}
    >>> substitution([2 * B], {"b": 8})
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: no symbol named 'b' here; the free symbols are: B.
    """
    expressions = [sp.sympify(e) for e in expressions]
    available = symbols_by_name(expressions)
    result: dict[sp.Symbol, sp.Integer] = {}
    for name, value in values.items():
        if name not in available:
            names = ", ".join(sorted(available)) or "none (it is already a number)"
            raise EvaluationError(f"no symbol named {name!r} here; the free symbols are: {names}.")
        symbol = available[name]
        result[symbol] = checked_value(symbol, value)
    return result


def evaluate(expression: sp.Expr | int, /, *, within: object = None, **values: object) -> sp.Expr:
    """Substitute ``values`` (by symbol name) into ``expression``, exactly.

    Every size symbol must get a positive whole number, and no output size of
    the network the expression comes from may drop below 1 (see
    :mod:`memtheory.constraints`): a kernel that does not fit is an error, not a
    number.

    Parameters
    ----------
    expression : sympy expression
        Any memtheory quantity.
    within : Network, memory result or constraints, optional
        The size constraints to check (and the expression's own, when one network
        alone hands it out); see :func:`~memtheory.constraints.candidates`.
    **values
        Numbers for some or all of its free symbols, by name (``B=64``).

    Returns
    -------
    sympy expression
        An exact sympy number when every symbol got a value; otherwise the
        expression with the given values substituted (it carries the
        constraints that still apply).

    Raises
    ------
    EvaluationError
        For an unknown name or a value that is not a size.
    KernelTooLargeError
        For values that make a layer's output size less than 1.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> evaluate(B * H**2, B=2, H=3)
    18
    >>> evaluate(B * H**2, B=2)
    2*H**2
    """
    expr = as_expression(expression, "evaluate")
    mapping = substitution([expr], values)
    found = candidates(expr, within)
    remaining = found.check(mapping) if mapping else found
    if not found.known:  # built by hand, perhaps from a network's expressions: warn, never refuse
        warn_outside(sizes_inside(expr), mapping)
        warn_lost(expr, mapping)  # sizes outside a traced result's conditions
    result = _substituted(expr, mapping)
    if mapping:
        for group in remaining.sets:  # each network's constraints still open go with the result
            carry(result, group, vouch=True)
    return result


def substitute(expression: sp.Expr, values: Mapping[sp.Symbol, sp.Expr]) -> sp.Expr:
    """Substitute values already checked (:func:`substitution`), exactly, checking nothing.

    For a caller that has checked the size constraints itself (a memory
    result's own, say): unlike :func:`evaluate`, the result carries none.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> substitute(B * H + sp.Max(B, H), substitution([B * H], {"B": 2}))
    2*H + Max(2, H)
    """
    return _substituted(expression, dict(values))


def _substituted(expr: sp.Expr, values: dict[sp.Symbol, sp.Expr]) -> sp.Expr:
    """``expr.xreplace(values)``, each ``Max`` pruned again (:mod:`memtheory.max_pruning`).

    sympy re-evaluates a ``Max`` whose arguments change, comparing them pairwise
    while symbols remain (slow on a peak of many candidates); ``maximum`` prunes
    the candidates that another one dominates instead, and agrees with sympy
    once every symbol has a value.
    """
    if isinstance(expr, sp.Max):
        return substituted_maximum(expr.args, values, lambda term: _substituted(term, values))
    if not expr.args or not expr.has(sp.Max):
        return expr.xreplace(values)
    return expr.func(*(_substituted(argument, values) for argument in expr.args))
