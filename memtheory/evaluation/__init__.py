"""Three exact ways to put numbers into a symbolic size.

* :func:`evaluate` substitutes values with sympy and returns an exact sympy
  number (or a smaller expression, when some symbols stay free).
* :func:`compile_exact` turns an expression into a plain Python function of
  Python integers: floors become ``//``, so results are exact whatever their size.
* :func:`evaluate_grid` runs the same integer code over NumPy arrays, for
  what-if grids of a million points and more. It uses ``int64`` by default and
  refuses, rather than wraps around, when a value would not fit; ``dtype=object``
  gives exact Python integers at any size.

All three agree exactly on every integer-valued expression memtheory builds,
and all three check what they are given the same way: a size symbol (a
positive integer, :mod:`memtheory.symbols`) takes positive whole numbers only
(NumPy's integers too; never ``True``, ``2.5``, ``0`` or ``NaN``), and no output
size of the network an expression comes from may fall below 1 (a 5x5 kernel on
a side of 2): :mod:`memtheory.constraints` says how those constraints travel
with the expressions, and ``within=`` names a network for an expression built
by hand.

Where each part lives: :mod:`~memtheory.evaluation.values` (what a caller hands
in, checked), :mod:`~memtheory.evaluation.substitution` (sympy),
:mod:`~memtheory.evaluation.exact` (Python integers),
:mod:`~memtheory.evaluation.grid` with :mod:`~memtheory.evaluation.grid_checks`
and :mod:`~memtheory.evaluation.overflow` (NumPy grids), which run code compiled
by :mod:`~memtheory.evaluation.numpy_code` from the printers of
:mod:`~memtheory.evaluation.integer_code`, its maxima pruned by
:mod:`~memtheory.evaluation.envelope`. :mod:`~memtheory.evaluation.formula_text`
prints a formula as sympy's ``str`` does, without sympy's sorting.

Examples
--------
>>> import numpy as np
>>> import sympy as sp
>>> from memtheory.symbols import B, H
>>> size = 4 * B * 32 * (sp.floor((H - 2) / 2) + 1) ** 2
>>> evaluate(size, B=64, H=50)
5120000
>>> compile_exact(size, ["B", "H"])(64, 50)
5120000
>>> from memtheory.evaluation import evaluate_grid  # NumPy's, imported on first use
>>> evaluate_grid(size, B=np.array([1, 64]), H=50)
array([  80000, 5120000])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtheory._lazy import lazy_attribute
from memtheory._replace import replaced
from memtheory.evaluation.exact import compile_exact
from memtheory.evaluation.substitution import evaluate, substitute, substitution
from memtheory.evaluation.values import as_expression as as_expression
from memtheory.evaluation.values import symbols_by_name

if TYPE_CHECKING:
    from memtheory.evaluation.grid import evaluate_grid
    from memtheory.evaluation.overflow import INT64_SAFE_LIMIT as INT64_SAFE_LIMIT

# INT64_SAFE_LIMIT and as_expression are importable from here, as before the split, outside __all__.
__all__ = [
    "compile_exact",
    "evaluate",
    "evaluate_grid",
    "replaced",
    "substitute",
    "substitution",
    "symbols_by_name",
]

_NUMPY_HOMES = {
    "evaluate_grid": "memtheory.evaluation.grid",
    "INT64_SAFE_LIMIT": "memtheory.evaluation.overflow",
}
"""The names that need NumPy, imported on first use (``memtheory estimate`` never uses them)."""


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _NUMPY_HOMES, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_NUMPY_HOMES})
