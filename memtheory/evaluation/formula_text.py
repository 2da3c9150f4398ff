"""A peak's formula as sympy's ``str`` prints it, written without sympy's printer.

A large step's exact peak is a maximum of hundreds of integer polynomials
(``Max(2676200*B*S + 31473984319, ...)``). sympy's :class:`~sympy.printing.str.StrPrinter`
sorts every maximum's arguments by :func:`~sympy.core.sorting.default_sort_key` and
every sum's terms by monomial, and that sorting took most of a ZeRO-3 question's
printing (issue 26). :func:`formula_text` writes the same text for what such formulas
are made of (integers, plain symbols, sums, products, whole powers, ``Max`` and
``Min``), computing the same sort keys once per node; anything else is printed by
sympy itself, in place. The text is sympy's, character for character
(``tests/test_formula_text.py`` checks it against ``str`` on random formulas).

Examples
--------
>>> import sympy as sp
>>> from memtheory.symbols import B, S
>>> peak = sp.Max(3 * B * S**2 + 8, 1024 * S - 2 * B) + sp.Min(B, S)
>>> formula_text(peak) == str(peak)
True
>>> formula_text(peak)
'Max(-2*B + 1024*S, 3*B*S**2 + 8) + Min(B, S)'
"""

from __future__ import annotations

from typing import Any

import sympy as sp
from sympy.core.sorting import default_sort_key

__all__ = ["formula_text"]

_NUMBER_CLASS = sp.Integer.class_key()
_SYMBOL_CLASS = sp.Symbol.class_key()
_ONE_KEY = (_NUMBER_CLASS, (0, ()), (), 1)
"""``S.One.sort_key()``: the exponent and coefficient of a plain factor."""


class _Node:
    """One subexpression's text and sort key (``default_sort_key``), each made once."""

    __slots__ = ("key", "text")

    def __init__(self, text: str, key: Any) -> None:
        self.text = text
        self.key = key


def formula_text(expression: sp.Basic) -> str:
    """Return ``str(expression)``, written directly where sympy's sorting is the cost.

    Parameters
    ----------
    expression : sympy expression
        Typically a peak: a ``Max`` of integer polynomials in the sizes.

    Returns
    -------
    str
        The same characters as ``str(expression)``.

    Examples
    --------
    >>> import sympy as sp
    >>> from memtheory.symbols import B, S
    >>> formula_text(sp.Min(4 * B, S) + 1024 * S - 7)
    '1024*S + Min(4*B, S) - 7'
    >>> formula_text(sp.floor(S / 2) + B)  # a floor: sympy prints that part
    'B + floor(S/2)'
    """
    return _Writer().node(expression).text


class _Writer:
    """Writes nodes, each once (a factored peak shares its parts), keyed by identity."""

    def __init__(self) -> None:
        self._done: dict[int, tuple[sp.Basic, _Node]] = {}

    def node(self, expression: sp.Basic) -> _Node:
        known = self._done.get(id(expression))
        if known is not None:
            return known[1]
        written = self._written(expression)
        self._done[id(expression)] = (expression, written)
        return written

    def _written(self, expression: sp.Basic) -> _Node:
        if expression.is_Integer:
            return _Node(str(expression.p), (_NUMBER_CLASS, (0, ()), (), expression.p))
        if type(expression) is sp.Symbol:
            return _Node(expression.name, (_SYMBOL_CLASS, (1, (expression.name,)), _ONE_KEY, 1))
        if expression.is_Pow:
            return self._power(expression)
        if expression.is_Mul:
            return self._product(expression)
        if expression.is_Add:
            return self._sum(expression)
        if isinstance(expression, sp.Max | sp.Min):
            return self._extremum(expression)
        return _Node(str(expression), default_sort_key(expression))

    def _power(self, expression: sp.Basic) -> _Node:
        base, power = expression.args
        if type(base) is not sp.Symbol or not power.is_Integer or power.p < 2:
            return _Node(str(expression), default_sort_key(expression))
        key = (_SYMBOL_CLASS, (1, (base.name,)), (_NUMBER_CLASS, (0, ()), (), power.p), 1)
        return _Node(f"{base.name}**{power.p}", key)

    def _extremum(self, expression: sp.Basic) -> _Node:
        """``Max(...)``: the arguments sorted by their keys (sympy's ``_print_LatticeOp``)."""
        nodes = [self.node(argument) for argument in expression.args]
        name = type(expression).__name__
        text = f"{name}({', '.join(n.text for n in sorted(nodes, key=lambda n: n.key))})"
        key = (type(expression).class_key(), (len(nodes), tuple(n.key for n in nodes)),
               _ONE_KEY, 1)
        return _Node(text, key)

    def _product(self, expression: sp.Basic) -> _Node:
        """``c*x*y``: the coefficient first, the factors by key (``StrPrinter._print_Mul``)."""
        coefficient, *factors = expression.args
        if not coefficient.is_Integer:
            coefficient, factors = sp.S.One, list(expression.args)
        nodes = [self.node(factor) for factor in factors]
        if any(f.is_number or f.is_Add or (f.is_Pow and f.exp.is_negative) for f in factors) \
                or any(n.text.startswith("-") for n in nodes):
            return _Node(str(expression), default_sort_key(expression))
        nodes.sort(key=lambda n: n.key)
        value = coefficient.p
        shown = [str(abs(value))] if abs(value) != 1 else []
        text = ("-" if value < 0 else "") + "*".join([*shown, *(n.text for n in nodes)])
        if len(nodes) == 1:  # c*x: the key of x with c as its coefficient (Expr.sort_key)
            inner = nodes[0].key
            return _Node(text, (*inner[:3], value))
        key = (sp.Mul.class_key(), (len(nodes), tuple(n.key for n in nodes)), _ONE_KEY, value)
        return _Node(text, key)

    def _sum(self, expression: sp.Basic) -> _Node:
        """Terms by monomial, highest first (``Expr.as_ordered_terms``), signs pulled out."""
        terms = []
        generators: dict[sp.Basic, _Node] = {}
        for term in expression.args:
            powers = self._monomial(term, generators)
            if powers is None:
                return _Node(str(expression), default_sort_key(expression))
            terms.append((term, powers))
        order = sorted(generators, key=lambda g: generators[g].key)
        place = {generator: index for index, generator in enumerate(order)}

        def monomial(powers: dict[sp.Basic, int]) -> tuple[int, ...]:
            exponents = [0] * len(place)
            for generator, power in powers.items():
                exponents[place[generator]] = power
            return tuple(exponents)

        ordered = _two_term_order(expression) or [
            term for term, _ in sorted(terms, key=lambda t: monomial(t[1]), reverse=True)
        ]
        nodes = [self.node(term) for term in ordered]
        pieces = []
        for node in nodes:
            sign, text = ("-", node.text[1:]) if node.text.startswith("-") else ("+", node.text)
            pieces += [sign, text]
        first = pieces.pop(0)
        text = ("" if first == "+" else first) + " ".join(pieces)
        key = (sp.Add.class_key(), (len(nodes), tuple(n.key for n in nodes)), _ONE_KEY, 1)
        return _Node(text, key)

    def _monomial(
        self, term: sp.Basic, generators: dict[sp.Basic, _Node]
    ) -> dict[sp.Basic, int] | None:
        """Return the term's exponent of each generator (``Expr.as_terms``), or None.

        None where sympy must sort the sum itself (a fraction, a number such as pi).

        A generator is a factor's base, compared by value as sympy's dictionary compares it.
        """
        if term.is_Integer:
            return {}
        factors = term.args if term.is_Mul else (term,)
        powers: dict[sp.Basic, int] = {}
        for index, factor in enumerate(factors):
            if factor.is_Integer and index == 0:
                continue
            base, power = (factor.args if factor.is_Pow else (factor, sp.S.One))
            if (not power.is_Integer or power.p < 1 or base.is_Add or base.is_Mul or base.is_Pow
                    or base.is_number):
                return None
            if base not in generators:
                generators[base] = self.node(base)
            powers[base] = power.p
        return powers


def _two_term_order(expression: sp.Basic) -> list[sp.Basic] | None:
    """``5 - 2*B`` as sympy orders it: a positive number before one negative multiple."""
    if len(expression.args) != 2:
        return None
    number, other = sorted(expression.args, key=lambda a: not a.is_Number)
    if not (number.is_Number and other.is_Mul and len(other.args) == 2):
        return None
    coefficient = sorted(other.args, key=lambda a: not a.is_Number)[0]
    if coefficient.is_Number and number.is_positive and coefficient.is_negative:
        return [number, other]
    return None
