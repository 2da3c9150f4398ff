"""Evaluate an integer expression over NumPy arrays, checked: :func:`evaluate_grid`.

Examples
--------
>>> import numpy as np
>>> from memtheory.symbols import B
>>> evaluate_grid(3 * B, B=np.arange(1, 4))
array([3, 6, 9])
"""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from memtheory.errors import EvaluationError
from memtheory.evaluation.grid_checks import (
    as_array,
    check_grid_constraints,
    check_signs,
    grid_dtype,
)
from memtheory.evaluation.overflow import computed_grid
from memtheory.evaluation.values import as_expression, symbols_by_name

__all__ = ["evaluate_grid"]


def evaluate_grid(
    expression: sp.Expr,
    /,
    *,
    dtype: type | str = "int64",
    within: object = None,
    **arrays: object,
) -> np.ndarray:
    """Evaluate an integer-valued expression over NumPy arrays (broadcast together).

    Every value is checked as :func:`evaluate` checks one: a size symbol takes
    positive whole numbers only, and no output size of the network the
    expression comes from may drop below 1 anywhere on the grid.

    Parameters
    ----------
    expression : sympy expression
        Integer-valued for integer arguments.
    dtype : {"int64", object}
        ``"int64"`` is fast and checked: if any result (or intermediate, as
        estimated in float64) would leave int64's safe range,
        :class:`~memtheory.errors.EvaluationOverflowError` is raised instead of
        returning wrapped-around numbers. ``object`` computes with Python
        integers: exact at any size, and slower.
    within : Network, memory result or constraints, optional
        The size constraints to check (and the expression's own, when one network
        alone hands it out); see :func:`~memtheory.constraints.candidates`.
    **arrays
        A value or array for every free symbol, by name.

    Examples
    --------
    >>> import numpy as np
    >>> from memtheory.symbols import B, H
    >>> evaluate_grid(B * H, B=np.arange(1, 4), H=np.array([[10], [20]]))
    array([[10, 20, 30],
           [20, 40, 60]])
    >>> evaluate_grid(2**40 * B * H, B=2**20, H=2**10)
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationOverflowError: ... pass dtype=object for exact Python integers.
    >>> evaluate_grid(B * H, B=np.array([4, 0]), H=3)
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: B must be positive; got 0 (at index (1,)).
    """
    expr = as_expression(expression, "evaluate_grid")
    exact = grid_dtype(dtype)
    symbols = dict(_free_symbols(expr))
    names = sorted(symbols)
    missing = sorted(set(names) - set(arrays))
    if missing:
        raise EvaluationError(f"evaluate_grid needs values for {', '.join(missing)}.")
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise EvaluationError(
            f"no symbol named {', '.join(map(repr, extra))} here; the free symbols are: "
            f"{', '.join(names) or 'none'}."
        )
    kind = object if exact else np.int64
    values = {name: as_array(arrays[name], kind, name) for name in names}
    for name in names:
        check_signs(symbols[name], values[name])
    try:
        np.broadcast_shapes(*(v.shape for v in values.values()))
    except ValueError:
        shapes = ", ".join(f"{name} {values[name].shape}" for name in names)
        raise EvaluationError(
            f"the arrays do not broadcast together: {shapes}. Give them shapes NumPy can "
            "broadcast (e.g. B=np.arange(1, 9)[:, None] beside H=np.arange(1, 5))."
        ) from None
    check_grid_constraints(expr, within, values, exact)
    return computed_grid(expr, tuple(names), [values[name] for name in names], exact)


@functools.lru_cache(maxsize=256)
def _free_symbols(expr: sp.Expr) -> tuple[tuple[str, sp.Symbol], ...]:
    """Return ``expr``'s free symbols by name, kept: a grid is often evaluated again."""
    return tuple(symbols_by_name([expr]).items())
