"""What :func:`~memtheory.evaluation.evaluate_grid` checks before it computes.

The dtype asked for, each array (whole numbers, in int64's range), the signs a
size symbol allows, and the size constraints of the network (no output size
below 1 anywhere on the grid).

Examples
--------
>>> import numpy as np
>>> as_array([1.0, 2.0], np.int64, "B")
array([1, 2])
>>> as_array([1.5], np.int64, "B")
Traceback (most recent call last):
...
memtheory.errors.EvaluationError: B must hold whole numbers; got non-integer values.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np
import sympy as sp

from memtheory._shown import shown
from memtheory.constraints import (
    SizeConstraint,
    candidates,
    sizes_inside,
    too_small,
    warn_outside,
)
from memtheory.constraints.carried import held_conditions, warn_lost
from memtheory.errors import EvaluationError, EvaluationOverflowError, KernelTooLargeError
from memtheory.evaluation.overflow import computed_grid
from memtheory.evaluation.values import refuse_or_warn, symbols_by_name

__all__ = ["as_array", "check_grid_constraints", "check_signs", "grid_dtype"]


def grid_dtype(dtype: object) -> bool:
    """Whether ``dtype`` asks for exact Python integers (object) rather than int64."""
    if dtype is object or (isinstance(dtype, str) and dtype == "object"):
        return True
    try:
        chosen = np.dtype(dtype)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        chosen = None
    if chosen is None or chosen != np.int64:
        raise EvaluationError(f"dtype must be 'int64' or object, got {shown(dtype)}.")
    return False


def as_array(value: object, dtype: type, name: str) -> np.ndarray:
    """Return ``value`` as an array of ``dtype`` (int64 or object), or refuse it.

    Whole numbers only (whole floats are taken), within int64 unless ``dtype`` is
    object; ``name`` is the symbol it is for, as the error names it.
    """
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise EvaluationError(
            f"{name} must be a whole number or an array of them; NumPy cannot read "
            f"{value!r} ({error})."
        ) from None
    if array.dtype == object:
        items = array.ravel().tolist()
    else:
        items = None
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.floor(array)):
            raise EvaluationError(f"{name} must hold whole numbers; got non-integer values.")
    elif array.dtype.kind == "b" or (array.dtype.kind not in "iu" and items is None):
        raise EvaluationError(f"{name} must hold whole numbers; got dtype {array.dtype}.")
    if items is not None and not all(
        isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in items
    ):
        raise EvaluationError(f"{name} must hold whole numbers.")
    if dtype is object:
        return np.array([int(i) for i in array.ravel().tolist()], dtype=object).reshape(array.shape)
    if array.dtype.kind in "uf" and array.size and np.max(np.abs(array)) >= 2**63:
        raise EvaluationOverflowError(f"{name} does not fit in int64; pass dtype=object.")
    if items is not None and any(abs(i) >= 2**63 for i in items):
        raise EvaluationOverflowError(f"{name} does not fit in int64; pass dtype=object.")
    return array.astype(np.int64)


def check_signs(symbol: sp.Symbol, array: np.ndarray) -> None:
    """Refuse an ``array`` with a value below what ``symbol`` allows (1 for a size).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> check_signs(B, np.array([[3, 0]]))
    Traceback (most recent call last):
    ...
    memtheory.errors.EvaluationError: B must be positive; got 0 (at index (0, 1)).
    """
    lowest = 1 if symbol.is_positive else 0 if symbol.is_nonnegative else None
    if lowest is None or not array.size:
        return
    bad = array < lowest
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        word = "positive" if lowest else "non-negative"
        raise EvaluationError(f"{symbol} must be {word}; got {array[where]} (at index {where}).")


def check_grid_constraints(
    expr: sp.Expr, within: object, values: Mapping[str, np.ndarray], exact: bool
) -> None:
    """Refuse (or, for an expression built by hand, warn about) sizes below 1 on the grid."""
    found = candidates(expr, within)
    if not found.known:  # built by hand: warn about its network's sizes, never refuse
        _warn_lost(expr, values, exact)
        for constraint in sizes_inside(expr):
            if _check_grid_constraint(constraint, values, exact, warn=True):
                break  # warned once: enough
    failures = []
    for group in found.sets:
        try:
            for constraint in group:
                _check_grid_constraint(constraint, values, exact, warn=False)
        except KernelTooLargeError as error:
            failures.append(error)
    refuse_or_warn(failures, found, stacklevel=4)


def _warn_lost(expr: sp.Expr, values: Mapping[str, np.ndarray], exact: bool) -> None:
    """Warn at the first grid point outside a traced result's condition on ``expr``'s sizes."""
    conditions = held_conditions(expr)
    if not conditions:
        return
    names = sorted(values)
    grid = dict(zip(names, np.broadcast_arrays(*(np.asarray(values[n]) for n in names)),
                    strict=True))
    for condition in conditions:
        involved = sorted(symbols_by_name([condition.size]))
        if not set(involved) <= set(grid):
            continue
        sizes = computed_grid(condition.size, tuple(involved), [grid[n] for n in involved], exact)
        bad = np.asarray(sizes < 1)
        if np.any(bad):
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            point = {s: int(grid[n][where]) for n, s in symbols_by_name([expr]).items()
                     if n in grid}
            warn_lost(expr, point)
            return


def _check_grid_constraint(
    constraint: SizeConstraint, values: Mapping[str, np.ndarray], exact: bool, warn: bool
) -> bool:
    """Refuse (or with ``warn``, warn about) a grid point that makes the size less than 1.

    Returns whether it warned.
    """
    involved = sorted(symbols_by_name([constraint.size]))
    if not set(involved) <= set(values):
        return False  # the expression does not depend on those sizes
    if len(involved) == 1:  # one size: its distinct values are enough
        inputs = [np.unique(values[involved[0]])]
    else:
        inputs = [values[name] for name in involved]
    sizes = computed_grid(constraint.size, tuple(involved), inputs, exact)
    bad = np.asarray(sizes < 1)
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        at = np.broadcast_arrays(*inputs)
        if warn:
            symbols = symbols_by_name([constraint.size])
            point = {
                symbols[n]: sp.Integer(int(a[where])) for n, a in zip(involved, at, strict=True)
            }
            return warn_outside([constraint], point, stacklevel=5)
        shown = ", ".join(f"{name}={a[where]}" for name, a in zip(involved, at, strict=True))
        raise too_small(constraint, shown, np.asarray(sizes)[where])
    return False
