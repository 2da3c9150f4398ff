"""Symbolic sizes for a trace: the user's names for PyTorch's shape symbols, and back again.

PyTorch's :class:`~torch.fx.experimental.symbolic_shapes.ShapeEnv` names the
dynamic sizes of a fake tensor ``s0``, ``s1``, ... and writes sizes with its
own integer functions (``FloorDiv``, ``PythonMod``, ``CeilDiv``, ...). This
module

* reads ``dims`` (``{"B": 4, "S": 512}``: a name for each example size) into
  memtheory size symbols (positive integers, see :mod:`memtheory.symbols`);
* rewrites PyTorch's expressions with plain sympy (``floor``, ``ceiling``,
  ``Max``, ``Min``) in the user's symbols;
* turns expressions into polynomials (a dict of monomial to coefficient),
  the form in which a trace adds up storages quickly;
* says in words where a traced formula holds, from the guards PyTorch
  recorded (``"S <= 1024"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sympy as sp

from memtheory.errors import InvalidArgumentError, InvalidSizeError
from memtheory.symbols import size_symbol

__all__ = [
    "DataDependentSize",
    "Polynomial",
    "SymbolMap",
    "add_into",
    "as_polynomial",
    "dimension_symbols",
    "from_polynomial",
    "plain_sympy",
]

Polynomial = dict[sp.Expr, int]
"""Bytes as a polynomial: integer coefficient per monomial (``sympy.S.One`` for the constant)."""


def dimension_symbols(dims: Mapping[Any, Any]) -> dict[int, sp.Symbol]:
    """Read ``dims`` into one symbol per example size: ``{4: B, 512: S}``.

    Parameters
    ----------
    dims : mapping
        A name (``"B"`` or a sympy Symbol such as :data:`memtheory.symbols.B`)
        for each example size that should stay symbolic, mapped to that size
        as it appears in the example inputs.

    Raises
    ------
    InvalidSizeError
        For a size that is not a whole number of at least 2 (PyTorch treats
        sizes 0 and 1 as constants, so they cannot stand for a symbol).
    InvalidArgumentError
        When two names share an example size: they could not be told apart.

    Examples
    --------
    >>> dimension_symbols({"B": 4, "S": 7})
    {4: B, 7: S}
    >>> dimension_symbols({"B": 4, "S": 4})
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: B and S share the example size 4: give each name a \
different size (e.g. B=4, S=5), so that the trace can tell them apart.
    """
    if not isinstance(dims, Mapping) or not dims:
        raise InvalidArgumentError(
            'dims names the symbolic sizes: pass e.g. dims={"B": 4, "S": 128}, where 4 and 128 '
            "are the batch and sequence length of the example inputs."
        )
    by_size: dict[int, sp.Symbol] = {}
    for name, size in dims.items():
        symbol = _symbol(name)
        if isinstance(size, bool) or not isinstance(size, int) or size < 2:
            raise InvalidSizeError(
                f"dims[{symbol.name!r}] must be the example size of {symbol.name} (a whole number "
                f"of at least 2; PyTorch fixes sizes 0 and 1), got {size!r}."
            )
        if size in by_size:
            raise InvalidArgumentError(
                f"{by_size[size].name} and {symbol.name} share the example size {size}: give each "
                f"name a different size (e.g. {by_size[size].name}={size}, "
                f"{symbol.name}={size + 1}), so that the trace can tell them apart."
            )
        by_size[size] = symbol
    return by_size


def _symbol(name: object) -> sp.Symbol:
    if isinstance(name, sp.Symbol):
        if not (name.is_integer and name.is_positive):
            return size_symbol(name.name)
        return name
    if isinstance(name, str) and name.isidentifier():
        return size_symbol(name)
    raise InvalidArgumentError(
        f"a name in dims must be an identifier such as 'B' or a sympy Symbol, got {name!r}."
    )


@dataclass
class SymbolMap:
    """PyTorch's shape symbols (``s0``) and the user's symbols (``B``) they stand for."""

    to_user: dict[sp.Symbol, sp.Symbol]

    def __post_init__(self) -> None:
        self._cache: dict[sp.Expr, Polynomial] = {}

    def expression(self, expr: Any) -> sp.Expr:
        """Return a PyTorch size (int, SymInt or sympy expression) in plain sympy, user symbols."""
        if hasattr(expr, "node"):
            expr = expr.node.expr
        if isinstance(expr, int):
            return sp.Integer(expr)
        return plain_sympy(sp.sympify(expr)).xreplace(self.to_user)

    def polynomial(self, size: Any) -> Polynomial:
        """Return a PyTorch size as a :data:`Polynomial` in the user's symbols (cached)."""
        if isinstance(size, int):
            return {sp.S.One: size} if size else {}
        expr = size.node.expr if hasattr(size, "node") else size
        if expr.is_Integer:
            return {sp.S.One: int(expr)} if expr else {}
        found = self._cache.get(expr)
        if found is None:
            expression = self.expression(expr)
            unknown = expression.free_symbols - set(self.to_user.values())
            if unknown:
                raise DataDependentSize(sorted(map(str, unknown)))
            found = as_polynomial(expression)
            self._cache[expr] = found
        return found


class DataDependentSize(Exception):  # noqa: N818 (caught and translated, never shown)
    """A size depends on tensor values (PyTorch's unbacked symbols ``u0``, ...)."""


def plain_sympy(expr: sp.Expr) -> sp.Expr:
    """Rewrite PyTorch's integer functions (``FloorDiv``, ``PythonMod``, ...) with plain sympy.

    Examples
    --------
    >>> from torch.utils._sympy.functions import FloorDiv
    >>> x = sp.Symbol("x", integer=True, positive=True)
    >>> plain_sympy(FloorDiv(x - 1, 2) + 1)
    floor(x/2 - 1/2) + 1
    """
    rules = _rules()

    def rewrite(node: sp.Expr) -> sp.Expr:
        if not node.args or node.is_Symbol or node.is_Number:
            return node
        args = [rewrite(a) for a in node.args]
        for kinds, rule in rules:
            if isinstance(node, kinds):
                return rule(*args)
        return node.func(*args)

    return rewrite(expr)


def _modular_indexing(base: sp.Expr, divisor: sp.Expr, modulus: sp.Expr) -> sp.Expr:
    quotient = sp.floor(base / divisor)
    return quotient - modulus * sp.floor(quotient / modulus)


@lru_cache(maxsize=1)
def _rules() -> tuple[tuple[tuple[type, ...], Callable[..., sp.Expr]], ...]:
    """Each PyTorch integer function (its classes) and its plain sympy form, given its arguments."""
    from torch.utils._sympy import functions as fn

    return (
        ((fn.CleanDiv, fn.IntTrueDiv), lambda a, b: a / b),
        ((fn.FloorDiv,), lambda a, b: sp.floor(a / b)),
        ((fn.CeilDiv,), lambda a, b: sp.ceiling(a / b)),
        ((fn.PythonMod, fn.Mod), lambda a, b: a - b * sp.floor(a / b)),
        ((fn.ModularIndexing,), _modular_indexing),
        ((fn.Max,), sp.Max),
        ((fn.Min,), sp.Min),
        ((fn.PowByNatural,), lambda a, b: a**b),
        ((fn.CeilToInt,), sp.ceiling),
        ((fn.FloorToInt, fn.TruncToInt), sp.floor),
        ((fn.Identity,), lambda a: a),
    )


def as_polynomial(expr: sp.Expr) -> Polynomial:
    """Expand ``expr`` at the top level into integer coefficients per monomial.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> as_polynomial(4 * B * (S + 2)) == {B * S: 4, B: 8}
    True
    """
    terms: Polynomial = {}
    for term in sp.Add.make_args(sp.expand(expr)):
        coefficient, monomial = term.as_coeff_Mul()
        if not coefficient.is_Integer:
            # a rational coefficient (inside a product with floors): keep the term whole
            coefficient, monomial = sp.Integer(1), term
        value = terms.get(monomial, 0) + int(coefficient)
        if value:
            terms[monomial] = value
        else:
            terms.pop(monomial, None)
    return terms


def add_into(total: Polynomial, terms: Polynomial, sign: int = 1) -> None:
    """Add ``sign * terms`` into ``total`` in place, dropping zero coefficients."""
    for monomial, coefficient in terms.items():
        value = total.get(monomial, 0) + sign * coefficient
        if value:
            total[monomial] = value
        else:
            del total[monomial]


def from_polynomial(terms: Mapping[sp.Expr, int]) -> sp.Expr:
    """Return the sympy expression of a :data:`Polynomial`."""
    return sp.Add(*(coefficient * monomial for monomial, coefficient in terms.items()))
