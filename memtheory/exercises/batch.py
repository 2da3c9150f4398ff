"""The largest batch that fits: solving ``total(B) <= limit`` with sympy.

Training memory is affine in the batch size, ``a*B + b`` (memtheory's
:func:`~memtheory.training_memory` derives ``a`` and ``b``). The largest
batch that fits in ``limit`` bytes is the root of ``a*B + b = limit``,
rounded down.

Examples
--------
>>> from memtheory import ModelCounts, training_memory
>>> from memtheory.symbols import B
>>> counts = ModelCounts.per_sample(
...     parameters=19_072_984, activations=532_752, input_elements=9_000)
>>> total = training_memory(counts, "adam").total
>>> total
4298016*B + 305167744
>>> largest_batch(total, 4 * 2**30)
928
"""

from __future__ import annotations

import sympy as sp

from memtheory.symbols import B

__all__ = ["largest_batch", "largest_batch_formula"]


def _affine(total: sp.Expr, batch: sp.Symbol) -> tuple[sp.Expr, sp.Expr, sp.Symbol]:
    unknown = sp.Symbol("x", real=True)
    expr = sp.sympify(total).xreplace({batch: unknown})
    if unknown not in expr.free_symbols:
        raise ValueError(f"the total {total} does not depend on the batch {batch}.")
    try:
        poly = sp.Poly(expr, unknown)
    except sp.PolynomialError:
        raise ValueError(f"the total {total} is not a polynomial in {batch}.") from None
    if poly.degree() != 1:
        raise ValueError(f"the total {total} is not affine in {batch} (degree {poly.degree()}).")
    slope, intercept = poly.all_coeffs()
    return slope, intercept, unknown


def largest_batch(total: sp.Expr, limit: sp.Expr | int, batch: sp.Symbol = B) -> int:
    """Largest whole batch size ``b >= 0`` with ``total(b) <= limit``.

    Parameters
    ----------
    total : sympy expression
        Bytes, affine in ``batch`` with a positive slope; every other symbol
        substituted.
    limit : int or sympy number
        Bytes available.
    batch : sympy.Symbol, default ``B``

    Returns
    -------
    int
        0 when not even one sample fits.

    Raises
    ------
    ValueError
        If ``total`` is not affine in ``batch`` with a positive slope, or has
        other free symbols.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> largest_batch(100 * B + 50, 1000), largest_batch(100 * B + 50, 10)
    (9, 0)
    """
    slope, intercept, unknown = _affine(total, batch)
    if not (slope.is_number and intercept.is_number):
        raise ValueError(f"the total {total} has other free symbols: substitute them first.")
    if slope <= 0:
        raise ValueError(f"the total {total} does not grow with the batch.")
    (root,) = sp.solve(sp.Eq(slope * unknown + intercept, sp.sympify(limit)), unknown)
    best = max(int(sp.floor(root)), 0)
    exact = sp.sympify(total)
    assert best == 0 or exact.xreplace({batch: best}) <= limit
    assert exact.xreplace({batch: best + 1}) > limit
    return best


def largest_batch_formula(total: sp.Expr, memory: sp.Symbol, batch: sp.Symbol = B) -> sp.Expr:
    """Return the largest batch as a formula in the memory size: ``floor((memory - b)/a)``.

    Valid where at least one sample fits.

    Examples
    --------
    >>> from memtheory.symbols import B, size_symbol
    >>> M = size_symbol("M")
    >>> largest_batch_formula(100 * B + 50, M)
    floor(M/100 - 1/2)
    """
    slope, intercept, unknown = _affine(total, batch)
    (root,) = sp.solve(sp.Eq(slope * unknown + intercept, memory), unknown)
    return sp.floor(root)
