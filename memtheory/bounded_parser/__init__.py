"""Reading numbers and formulas from text within fixed limits, before sympy sees them.

Text from a person (a learner's answer, a size such as ``"80 GB"``) is read
by a small parser of its own, never by :func:`eval` nor by sympy's parser.
The grammar is the arithmetic one::

    sum      := product (("+" | "-") product)*
    product  := unary (("*" | "/") unary | unary)*      # juxtaposition multiplies: 2B, 2(B+1)
    unary    := ("+" | "-") unary | power
    power    := atom ("^" unary)?                       # "**" is "^"; right-associative
    atom     := number | name | function "(" sum ("," sum)* ")" | "(" sum ")"

Numbers are decimal literals read exactly (``0.1`` is one tenth, ``2.5e3`` is
2500). In *numeric* text (:func:`parse_arithmetic`), commas may group thousands
(``1,048,576``), spaces may too (``1 048 576``), and ``x``, ``×`` or ``·``
multiply (``3 x 10^6``); names are refused. In a *formula*
(:func:`parse_formula`) names are the symbols and functions the caller allows,
and commas separate a function's arguments.

Every limit is checked before the number or expression it guards is computed:

==============  ==========================================================
limit           refuses
==============  ==========================================================
``length``      text longer than this many characters
``depth``       parentheses, signs and powers nested deeper than this
``digits``      a literal with more digits than this
``exponent``    e-notation beyond ``10**exponent`` (``1e99999999``)
``power``       a power ``a^n`` with ``n`` not a whole number up to this
``bits``        any exact number (an intermediate one too) of more bits
``degree``      a formula (or part of one) whose numerator and denominator, over
                one common denominator, have a higher total degree together
``terms``       a formula whose expanded numerator or denominator could have
                more terms
``arguments``   more arguments to ``Min`` or ``Max``
==============  ==========================================================

So ``(((9^64)^64)^64)^64`` and ``((B+1)^64)^64`` are refused at once, with
a message naming the limit, instead of being computed. Every refusal is a
:class:`~memtheory.errors.ParseError` saying what is wrong and how to write it.

Examples
--------
>>> parse_arithmetic("4096*128 + 128")
Fraction(524416, 1)
>>> parse_arithmetic("3 x 10^6"), parse_arithmetic("1,048,576")
(Fraction(3000000, 1), Fraction(1048576, 1))
>>> from memtheory.symbols import B, H
>>> parse_formula("2B H^2 + floor(H/2)", {"B": B, "H": H})
2*B*H**2 + floor(H/2)
>>> parse_arithmetic("((9^64)^64)^64")
Traceback (most recent call last):
...
memtheory.errors.ParseError: '((9^64)^64)^64' is too large to compute: ...
"""

from memtheory.bounded_parser.formula_shape import check_formula_size
from memtheory.bounded_parser.parse_limits import DEFAULT_LIMITS, Limits
from memtheory.bounded_parser.parse_text import parse_arithmetic, parse_formula, quote_text
from memtheory.bounded_parser.tokens import FORMULA_FUNCTIONS, read_literal

__all__ = [
    "DEFAULT_LIMITS",
    "FORMULA_FUNCTIONS",
    "Limits",
    "check_formula_size",
    "parse_arithmetic",
    "parse_formula",
    "quote_text",
    "read_literal",
]
