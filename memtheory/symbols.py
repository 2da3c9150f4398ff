"""Conventional sympy symbols for the sizes that appear in memory formulas.

Every size is a positive integer, and the symbols say so: sympy can then
simplify ``floor(H - 1) + 1`` to ``H`` and knows that ``B * H`` is positive.

The names follow the usual deep-learning notation:

======  ==========================================
symbol  meaning
======  ==========================================
``B``   batch size (samples per step)
``C``   channels of an image-like input
``H``   height of an image-like input
``W``   width of an image-like input
``S``   sequence length (tokens or time steps)
``D``   model width (hidden size)
``L``   number of layers
``P``   number of parameters
======  ==========================================

Examples
--------
>>> from memtheory.symbols import B, H
>>> B.is_integer, B.is_positive
(True, True)
>>> size_symbol("K")
K
"""

from __future__ import annotations

import sympy as sp

__all__ = ["B", "C", "D", "H", "L", "P", "S", "W", "size_symbol"]


def size_symbol(name: str) -> sp.Symbol:
    """Return a sympy symbol for a size: a positive integer.

    Parameters
    ----------
    name : str
        The symbol's name, as it will print.

    Returns
    -------
    sympy.Symbol
        A symbol with ``integer=True`` and ``positive=True``.

    Examples
    --------
    >>> k = size_symbol("k")
    >>> (k + 1).is_positive
    True
    """
    return sp.Symbol(name, integer=True, positive=True)


B = size_symbol("B")
C = size_symbol("C")
H = size_symbol("H")
W = size_symbol("W")
S = size_symbol("S")
D = size_symbol("D")
L = size_symbol("L")
P = size_symbol("P")
