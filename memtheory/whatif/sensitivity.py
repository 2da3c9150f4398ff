r"""Sensitivity: which size the memory responds to most, at a point.

:func:`sensitivity` gives the derivative and the elasticity of the memory with
respect to each size, and the exact change for one more of each. Used in the
book's chapter "Batch size".

Examples
--------
>>> from memtheory.symbols import B, S
>>> result = sensitivity(8 * B * S**2 + 100 * B * S + 10**6, B=8, S=1024)
>>> result.most_sensitive
'S'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy as sp

from memtheory.conventions import ConventionLike
from memtheory.errors import EvaluationError, UnknownNameError
from memtheory.evaluation import evaluate, substitution, symbols_by_name
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.recipes import Setup
from memtheory.tables import Column, Table
from memtheory.units import convert, round_half_up
from memtheory.whatif.limits import By, Quantity, total_bytes

__all__ = ["Sensitivity", "SymbolSensitivity", "sensitivity"]


@dataclass(frozen=True)
class SymbolSensitivity:
    r"""How the total responds to one size at a point.

    Attributes
    ----------
    symbol : str
    value : sympy number
        The size's value at the point.
    derivative : sympy expression
        :math:`\partial T / \partial x` of the total with floors and ceilings
        relaxed to their arguments, at the point (bytes per unit of the size).
    elasticity : sympy expression
        :math:`(\partial \tilde T / \partial x)\, x / \tilde T`, with
        :math:`\tilde T` the total with floors relaxed (both the derivative and
        the total, so that it is the elasticity of one smooth function): the
        percent change of the total for one percent more of the size. It never
        exceeds the total's degree in the size.
    step : sympy number
        :math:`T(x + 1) - T(x)`, exactly: the bytes one more costs.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> row = sensitivity(4 * B + 100, B=10)["B"]
    >>> row.step, row.elasticity
    (4, 2/7)
    """

    symbol: str
    value: sp.Expr
    derivative: sp.Expr
    elasticity: sp.Expr
    step: sp.Expr


@dataclass(frozen=True)
class Sensitivity:
    """Sensitivities of a total to each of its sizes, most sensitive first.

    Attributes
    ----------
    total : sympy number
        The total at the point, in bytes.
    rows : tuple of SymbolSensitivity

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> result = sensitivity(4 * B + 100, B=10)
    >>> result.total, result.most_sensitive
    (140, 'B')
    """

    total: sp.Expr
    rows: tuple[SymbolSensitivity, ...]

    @property
    def most_sensitive(self) -> str:
        """The size with the largest elasticity."""
        return self.rows[0].symbol

    def __getitem__(self, symbol: str) -> SymbolSensitivity:
        for row in self.rows:
            if row.symbol == symbol:
                return row
        raise UnknownNameError(
            f"no size named {symbol!r}; sizes: {', '.join(r.symbol for r in self.rows)}"
        )

    def table(self, unit: str = "MiB", digits: int = 3) -> Table:
        """Tabulate one row per size: value, elasticity, and what one more costs."""
        columns = [
            Column("size"),
            Column("value", align="right"),
            Column("elasticity", align="right"),
            Column(f"+1 costs ({unit})", align="right"),
        ]
        body = [
            (
                r.symbol,
                str(r.value),
                str(round_half_up(r.elasticity, digits)),
                str(round_half_up(convert(r.step, unit), digits)),
            )
            for r in self.rows
        ]
        return Table(columns, body)

    def __str__(self) -> str:
        return self.table().text()

    def _repr_html_(self) -> str:
        return self.table().html()


def _relaxed(expression: sp.Expr) -> sp.Expr:
    return expression.replace(sp.floor, lambda arg: arg).replace(sp.ceiling, lambda arg: arg)


def sensitivity(
    model: Quantity,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike | None = None,
    convention: ConventionLike | None = None,
    mode: Literal["training", "inference"] = "training",
    by: By = "peak",
    setup: Setup | str | None = None,
    **values: object,
) -> Sensitivity:
    """Which size the memory is most sensitive to, at the point ``values``.

    Parameters
    ----------
    model : Network, ModelCounts, Footprint (a memory result) or expression
    optimizer, precision, convention, mode, by, setup
        As for :func:`~memtheory.whatif.max_batch`.
    **values
        A value for every free symbol (``B=32, S=1024``).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> result = sensitivity(gpt2("small"), optimizer="adam", B=8, S=1024)
    >>> result.most_sensitive, float(result["S"].elasticity) > float(result["B"].elasticity)
    ('S', True)
    """
    total = total_bytes(
        model, optimizer=optimizer, precision=precision, convention=convention, mode=mode, by=by,
        setup=setup,
    )
    free = symbols_by_name([total])
    missing = sorted(set(free) - set(values))
    if missing:
        raise EvaluationError(f"sensitivity needs a value for {', '.join(missing)}.")
    given = {k: v for k, v in values.items() if k in free}
    at_point = evaluate(total, **given)  # checks every value, and the network's sizes
    if not at_point.is_number:
        raise EvaluationError(f"sensitivity needs numbers for its sizes, got {given}.")
    point = substitution([total], given)
    relaxed = _relaxed(total)
    relaxed_at_point = sp.nsimplify(relaxed.xreplace(point))
    rows = []
    for name, symbol in free.items():
        derivative = sp.nsimplify(sp.diff(relaxed, symbol).xreplace(point))
        value = point[symbol]
        shifted = {**point, symbol: value + 1}
        rows.append(
            SymbolSensitivity(
                name,
                value,
                derivative,
                sp.nsimplify(derivative * value / relaxed_at_point),
                total.xreplace(shifted) - at_point,
            )
        )
    rows.sort(key=lambda r: (-abs(float(r.elasticity)), r.symbol))
    return Sensitivity(at_point, tuple(rows))
