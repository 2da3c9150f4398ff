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

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from memtheory.errors import ParseError

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


@dataclass(frozen=True)
class Limits:
    """The bounds a text must keep to be read (see the module's table).

    Examples
    --------
    >>> Limits().power, Limits(length=80).length
    (64, 80)
    """

    length: int = 500
    depth: int = 40
    digits: int = 80
    exponent: int = 100
    power: int = 64
    bits: int = 1100
    degree: int = 24
    terms: int = 2000
    nodes: int = 2000
    arguments: int = 8


DEFAULT_LIMITS = Limits()
"""The limits used when none are given: ample for any memory figure or formula."""

FORMULA_FUNCTIONS: dict[str, Callable[..., sp.Expr]] = {
    "floor": sp.floor,
    "ceiling": sp.ceiling,
    "ceil": sp.ceiling,
    "Min": sp.Min,
    "min": sp.Min,
    "Max": sp.Max,
    "max": sp.Max,
}
"""Functions a formula may call, by the names a person may write."""

_ROUNDING = {sp.floor, sp.ceiling}

_SYMBOLS_TO_ASCII = str.maketrans(
    {
        "×": "*",
        "·": "*",
        "⋅": "*",
        "∙": "*",
        "÷": "/",
        "−": "-",
        "–": "-",
        "\u00a0": " ",
        "\u202f": " ",
        "\u2009": " ",
    }
)
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_RUN = re.compile(r"[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SPACE_GROUP = re.compile(r"(?<=\d) (?=\d{3}(?![\d,_]))")
_EXPONENT = r"(?:[eE][+-]?\d+)?"
_NUMERIC_LITERAL = re.compile(
    r"(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+(?:_\d+)*)(?:\.\d*)?" + _EXPONENT + r"|\.\d+" + _EXPONENT
)
_FORMULA_LITERAL = re.compile(r"\d+(?:_\d+)*(?:\.\d*)?" + _EXPONENT + r"|\.\d+" + _EXPONENT)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = "+-*/^(),"
_COMMA_HINT = (
    "a comma may only group thousands (1,048,576); write decimals with a point (224.69, not 224,69)"
)


def quote_text(text: object, limit: int = 60) -> str:
    """Quote text for a message, cut to ``limit`` characters (a refusal never echoes 5000).

    Examples
    --------
    >>> quote_text("22.9 MiB"), quote_text("9" * 100, 10)
    ("'22.9 MiB'", "'9999999999...' (100 characters)")
    """
    shown = str(text)
    if len(shown) <= limit:
        return repr(shown)
    return f"{shown[:limit]!r}"[:-1] + f"...' ({len(shown)} characters)"


# -- tokens ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Token:
    kind: str  # "number", "name", "op", "end"
    text: str
    value: Fraction | None = None


def read_literal(literal: str, limits: Limits = DEFAULT_LIMITS, *, where: str = "") -> Fraction:
    """Read one decimal literal (``"1,048,576"``, ``"2.5e3"``, ``".5"``) exactly, within limits.

    Parameters
    ----------
    literal : str
        Digits with an optional point, digit groups (``,`` or ``_``) and e-notation.
    limits : Limits
    where : str
        The whole text, quoted in messages.

    Raises
    ------
    ParseError
        For too many digits or an exponent beyond ``limits.exponent``.

    Examples
    --------
    >>> read_literal("2.5e3"), read_literal("1_000")
    (Fraction(2500, 1), Fraction(1000, 1))
    >>> read_literal("1e99999999")
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: '1e99999999': exponents beyond 10^100 are not accepted.
    """
    quoted = repr(where or literal)
    compact = literal.replace(",", "").replace("_", "")
    mantissa, _, exponent_text = compact.lower().partition("e")
    digits = sum(c.isdigit() for c in mantissa)
    if digits > limits.digits:
        raise ParseError(
            f"{quoted}: a number has {digits} digits; the limit is {limits.digits} (use "
            "e-notation, e.g. 1.5e12)."
        )
    exponent = 0
    if exponent_text:
        if len(exponent_text.lstrip("+-")) > 6 or abs(int(exponent_text)) > limits.exponent:
            raise ParseError(f"{quoted}: exponents beyond 10^{limits.exponent} are not accepted.")
        exponent = int(exponent_text)
    whole, _, decimals = mantissa.partition(".")
    value = Fraction(int(whole or "0") * 10 ** len(decimals) + int(decimals or "0"))
    value /= 10 ** len(decimals)
    return value * Fraction(10) ** exponent


def _superscripts(text: str) -> str:
    return _SUPERSCRIPT_RUN.sub(lambda m: "^(" + m.group().translate(_SUPERSCRIPTS) + ")", text)


def _check_name(name: str, text: str, *, numeric: bool, names: Collection[str]) -> None:
    if name in names:
        return
    if numeric:
        detail = "" if name == text else f"{name!r} is not part of a number; "
        raise ParseError(
            f"cannot read {text!r} as a number: {detail}write digits such as 4632902 or 4,632,902."
        )
    allowed = ", ".join(sorted(n for n in names if n not in FORMULA_FUNCTIONS)) or "none"
    raise ParseError(
        f"{name!r} is not allowed in a formula: use the symbols {allowed}, numbers, "
        "+ - * / ** and floor(), ceiling(), Min(), Max()."
    )


def _tokens(
    text: str, *, numeric: bool, limits: Limits, names: Collection[str] = ()
) -> list[_Token]:
    source = _superscripts(text.translate(_SYMBOLS_TO_ASCII))
    if numeric:
        source = _SPACE_GROUP.sub("", source)
    literal = _NUMERIC_LITERAL if numeric else _FORMULA_LITERAL
    tokens: list[_Token] = []
    position = 0
    while position < len(source):
        char = source[position]
        if char.isspace():
            position += 1
            continue
        if source.startswith("**", position):
            tokens.append(_Token("op", "^"))
            position += 2
            continue
        if source.startswith("//", position):
            raise ParseError(f"{text!r}: write floor(a/b) instead of a//b.")
        number = literal.match(source, position)
        if number:
            tokens.append(
                _Token("number", number.group(), read_literal(number.group(), limits, where=text))
            )
            position = number.end()
            continue
        if numeric and char in "xX" and not _NAME.match(source, position + 1):
            tokens.append(_Token("op", "*"))
            position += 1
            continue
        name = _NAME.match(source, position)
        if name:
            _check_name(name.group(), text, numeric=numeric, names=names)
            tokens.append(_Token("name", name.group()))
            position = name.end()
            continue
        if char in "'\"":
            raise ParseError(f"quoted text is not allowed in {text!r}.")
        if char == "," and numeric:
            raise ParseError(f"cannot read {text!r} as a number: {_COMMA_HINT}.")
        if char in _OPERATORS:
            tokens.append(_Token("op", char))
            position += 1
            continue
        raise ParseError(
            f"{char!r} is not allowed in {text!r}: use numbers, + - * / ^ and parentheses."
        )
    tokens.append(_Token("end", ""))
    return tokens


# -- values ------------------------------------------------------------------------------------
def _monomials(terms: int, n: int, degree: int, atoms: int) -> int:
    """Bound the terms of ``(t terms)**n`` expanded: the multinomial count or the monomials."""
    multinomial = math.comb(terms + n - 1, n) if n else 1
    return min(multinomial, math.comb(degree + atoms, atoms)) if atoms else multinomial


@dataclass(frozen=True)
class _Shape:
    """Bounds on a formula put over one common denominator: degree and terms of each part."""

    degree: int = 0
    terms: int = 1
    den_degree: int = 0
    den_terms: int = 1

    @property
    def total(self) -> int:
        return self.degree + self.den_degree

    def plus(self, other: _Shape) -> _Shape:
        if self.den_degree == 0 and other.den_degree == 0:
            return _Shape(max(self.degree, other.degree), self.terms + other.terms)
        return _Shape(
            max(self.degree + other.den_degree, other.degree + self.den_degree),
            self.terms * other.den_terms + other.terms * self.den_terms,
            self.den_degree + other.den_degree,
            self.den_terms * other.den_terms,
        )

    def times(self, other: _Shape) -> _Shape:
        return _Shape(
            self.degree + other.degree,
            self.terms * other.terms,
            self.den_degree + other.den_degree,
            self.den_terms * other.den_terms,
        )

    def inverse(self) -> _Shape:
        return _Shape(self.den_degree, self.den_terms, self.degree, self.terms)

    def power(self, n: int, atoms: int) -> _Shape:
        base = self.inverse() if n < 0 else self
        n = abs(n)
        return _Shape(
            base.degree * n,
            _monomials(base.terms, n, base.degree * n, atoms),
            base.den_degree * n,
            _monomials(base.den_terms, n, base.den_degree * n, atoms),
        )

    def refusal(self, limits: Limits) -> str | None:
        """Say which limit the shape breaks, if one."""
        if self.total > limits.degree:
            return f"its degree reaches {self.total}; the limit is {limits.degree}"
        if max(self.terms, self.den_terms) > limits.terms:
            terms = max(self.terms, self.den_terms)
            return f"expanded it could have {terms} terms; the limit is {limits.terms}"
        return None


_CONSTANT = _Shape()
_ATOM = _Shape(1, 1)


@dataclass(frozen=True)
class _Formula:
    """A non-constant part of a formula, with bounds on what expanding it would cost."""

    expr: sp.Expr
    shape: _Shape


_Value = Fraction | _Formula


def _bits(value: Fraction) -> int:
    return max(abs(value.numerator).bit_length(), value.denominator.bit_length())


class _Reader:
    """A recursive-descent reader over the tokens of one text."""

    def __init__(
        self,
        text: str,
        *,
        numeric: bool,
        symbols: Mapping[str, sp.Symbol],
        functions: Mapping[str, Callable[..., sp.Expr]],
        limits: Limits,
    ) -> None:
        self.text = text
        self.symbols = symbols
        self.functions = functions
        self.limits = limits
        self.numeric = numeric
        names = {*symbols, *functions}
        self.tokens = _tokens(text, numeric=numeric, limits=limits, names=names)
        if len(self.tokens) > limits.nodes:
            raise ParseError(f"{text!r} has more than {limits.nodes} parts.")
        self.index = 0
        self.depth = 0
        self.atoms = len(symbols)

    # .. helpers
    @property
    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, text: str) -> None:
        if self.peek.text != text or self.peek.kind != "op":
            self.fail_incomplete()
        self.index += 1

    def fail_incomplete(self) -> None:
        token = self.peek
        if token.kind == "end":
            if self.text.count("(") > self.text.count(")"):
                raise ParseError(f"cannot read {self.text!r}: check that every '(' has its ')'.")
            raise ParseError(
                f"cannot read {self.text!r}: it is incomplete (is an operand missing at the end?)."
            )
        if token.text == ")":
            raise ParseError(f"cannot read {self.text!r}: a ')' has no matching '('.")
        raise ParseError(
            f"cannot read {self.text!r}: unexpected {token.text!r} (is an operator or a "
            "parenthesis missing?)."
        )

    def too_large(self, what: str) -> ParseError:
        return ParseError(f"{self.text!r} is too large to compute: {what}.")

    def nest(self) -> None:
        self.depth += 1
        if self.depth > self.limits.depth:
            raise ParseError(
                f"{self.text!r} is nested more than {self.limits.depth} levels deep; "
                "write it more simply."
            )

    # .. grammar
    def read(self) -> _Value:
        value = self.sum()
        if self.peek.kind != "end":
            if self.peek.text == "," and not self.numeric:
                raise ParseError(
                    f"cannot read {self.text!r}: a comma separates the arguments of Min or Max "
                    "only (write 1048576, not 1,048,576, in a formula)."
                )
            self.fail_incomplete()
        return value

    def sum(self) -> _Value:
        value = self.product()
        while self.peek.kind == "op" and self.peek.text in "+-":
            sign = self.take().text
            right = self.product()
            value = self.add(value, right if sign == "+" else self.negate(right))
        return value

    def starts_atom(self) -> bool:
        token = self.peek
        return token.kind in ("number", "name") or (token.kind == "op" and token.text == "(")

    def product(self) -> _Value:
        value = self.unary()
        while True:
            token = self.peek
            if token.kind == "op" and token.text in "*/":
                self.take()
                right = self.unary()
                value = (
                    self.multiply(value, right) if token.text == "*" else self.divide(value, right)
                )
            elif self.starts_atom():
                if self.numeric and token.kind == "number":
                    raise ParseError(
                        f"cannot read {self.text!r}: two numbers in a row (write an operator "
                        "between them; group digits in threes: 1 048 576)."
                    )
                value = self.multiply(value, self.unary())
            else:
                return value

    def unary(self) -> _Value:
        token = self.peek
        if token.kind == "op" and token.text in "+-":
            self.take()
            self.nest()
            value = self.unary()
            self.depth -= 1
            return self.negate(value) if token.text == "-" else value
        return self.power()

    def power(self) -> _Value:
        base = self.atom()
        if self.peek.kind == "op" and self.peek.text == "^":
            self.take()
            self.nest()
            exponent = self.unary()
            self.depth -= 1
            return self.raise_to(base, exponent)
        return base

    def atom(self) -> _Value:
        token = self.take()
        if token.kind == "number":
            assert token.value is not None
            return self.checked(token.value)
        if token.kind == "op" and token.text == "(":
            self.nest()
            value = self.sum()
            self.expect(")")
            self.depth -= 1
            return value
        if token.kind == "name":
            return self.name(token.text)
        self.index -= 1
        self.fail_incomplete()
        raise AssertionError  # pragma: no cover - fail_incomplete always raises

    def name(self, name: str) -> _Value:
        if name in self.functions:
            if not (self.peek.kind == "op" and self.peek.text == "("):
                raise ParseError(f"cannot read {self.text!r}: write {name}(...) with parentheses.")
            self.take()
            self.nest()
            arguments = [self.sum()]
            while self.peek.kind == "op" and self.peek.text == ",":
                self.take()
                arguments.append(self.sum())
            self.expect(")")
            self.depth -= 1
            return self.call(name, arguments)
        return _Formula(self.symbols[name], _ATOM)

    # .. arithmetic, each bounded before it is computed
    def checked(self, value: Fraction) -> Fraction:
        if _bits(value) > self.limits.bits:
            raise self.too_large(f"a number in it exceeds {self.limits.bits} bits")
        return value

    def formula(self, value: _Value) -> _Formula:
        if isinstance(value, Fraction):
            return _Formula(sp.Rational(value.numerator, value.denominator), _CONSTANT)
        return value

    def bounded(self, expr: sp.Expr, shape: _Shape) -> _Formula:
        refusal = shape.refusal(self.limits)
        if refusal:
            raise self.too_large(refusal)
        return _Formula(expr, shape)

    def negate(self, value: _Value) -> _Value:
        if isinstance(value, Fraction):
            return -value
        return _Formula(-value.expr, value.shape)

    def add(self, left: _Value, right: _Value) -> _Value:
        if isinstance(left, Fraction) and isinstance(right, Fraction):
            return self.checked(left + right)
        a, b = self.formula(left), self.formula(right)
        return self.bounded(a.expr + b.expr, a.shape.plus(b.shape))

    def multiply(self, left: _Value, right: _Value) -> _Value:
        if isinstance(left, Fraction) and isinstance(right, Fraction):
            if _bits(left) + _bits(right) > self.limits.bits + 1:
                raise self.too_large(f"a product in it exceeds {self.limits.bits} bits")
            return self.checked(left * right)
        a, b = self.formula(left), self.formula(right)
        return self.bounded(a.expr * b.expr, a.shape.times(b.shape))

    def divide(self, left: _Value, right: _Value) -> _Value:
        if isinstance(right, Fraction):
            if right == 0:
                raise ParseError(f"{self.text!r} divides by zero.")
            if isinstance(left, Fraction):
                return self.checked(left / right)
            return self.multiply(left, 1 / right)
        a, b = self.formula(left), self.formula(right)
        return self.bounded(a.expr / b.expr, a.shape.times(b.shape.inverse()))

    def raise_to(self, base: _Value, exponent: _Value) -> _Value:
        limit = self.limits.power
        if not isinstance(exponent, Fraction) or exponent.denominator != 1:
            raise ParseError(
                f"in {self.text!r}: powers must be whole numbers up to {limit}, such as H**2 "
                "or 10**6."
            )
        n = int(exponent)
        if abs(n) > limit:
            raise self.too_large(f"the power {n} is beyond {limit}")
        if isinstance(base, Fraction):
            if base == 0 and n < 0:
                raise ParseError(f"{self.text!r} divides by zero.")
            if _bits(base) * abs(n) > self.limits.bits + abs(n):
                raise self.too_large(f"a power in it exceeds {self.limits.bits} bits")
            return self.checked(base**n)
        return self.bounded(base.expr**n, base.shape.power(n, self.atoms))

    def call(self, name: str, arguments: list[_Value]) -> _Value:
        function = self.functions[name]
        if function in _ROUNDING and len(arguments) != 1:
            raise ParseError(f"cannot read {self.text!r}: {name}() takes one argument.")
        if len(arguments) > self.limits.arguments:
            raise ParseError(
                f"cannot read {self.text!r}: {name}() takes at most {self.limits.arguments} "
                "arguments here."
            )
        parts = [self.formula(a) for a in arguments]
        self.atoms += 1
        expr = function(*(p.expr for p in parts))
        if expr.is_Number:
            return self.checked(Fraction(int(expr.p), int(expr.q)))
        for part in parts:  # each argument is expanded on its own when compared
            self.bounded(part.expr, part.shape)
        return self.bounded(expr, _ATOM)


def _prepare(text: object, limits: Limits, what: str) -> str:
    if not isinstance(text, str):
        raise ParseError(f"{what} must be text, got {type(text).__name__} ({text!r:.40}).")
    stripped = text.strip()
    if len(stripped) > limits.length:
        raise ParseError(
            f"the text is {len(stripped)} characters long; the limit is {limits.length}."
        )
    if not stripped:
        raise ParseError(f"the text is empty: write {what}.")
    return stripped


def parse_arithmetic(text: str, limits: Limits = DEFAULT_LIMITS) -> Fraction:
    """Read a number, or arithmetic on numbers, exactly: ``"1,048,576"``, ``"3 x 10^6"``.

    Parameters
    ----------
    text : str
        Decimal literals (digit groups and e-notation allowed), ``+ - * / ^``
        (``**``, ``x``, ``×``, ``·`` also), parentheses; no names.
    limits : Limits

    Returns
    -------
    fractions.Fraction
        The exact value.

    Raises
    ------
    ParseError
        If the text is not arithmetic on numbers, or breaks a limit.

    Examples
    --------
    >>> parse_arithmetic("2^30 / 10^9")
    Fraction(2097152, 1953125)
    >>> parse_arithmetic("224,69")
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: cannot read '224,69' as a number: a comma may only group ...
    """
    source = _prepare(text, limits, "a number such as 4632902 or 22.9")
    value = _Reader(source, numeric=True, symbols={}, functions={}, limits=limits).read()
    assert isinstance(value, Fraction)
    return value


def parse_formula(
    text: str,
    symbols: Mapping[str, sp.Symbol],
    limits: Limits = DEFAULT_LIMITS,
    functions: Mapping[str, Callable[..., sp.Expr]] = FORMULA_FUNCTIONS,
) -> sp.Expr:
    """Read a formula in ``symbols`` into a sympy expression, within limits.

    Parameters
    ----------
    text : str
        ``^`` or ``**`` for powers; juxtaposition multiplies (``2B H``);
        decimals are exact (``0.5`` is one half).
    symbols : mapping of str to sympy.Symbol
        The names the formula may use.
    limits : Limits
    functions : mapping of str to callable
        Functions it may call (by default floor, ceiling, Min, Max).

    Raises
    ------
    ParseError
        If the text is not such a formula, or breaks a limit.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> parse_formula("((B+1)^64)^64", {"B": B})
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: '((B+1)^64)^64' is too large to compute: its degree reaches ...
    """
    source = _prepare(text, limits, "a formula such as 2*B + 5")
    reader = _Reader(source, numeric=False, symbols=symbols, functions=functions, limits=limits)
    value = reader.read()
    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    return value.expr


def _size(expr: sp.Basic, limits: Limits, atoms: int) -> _Shape:
    """Bound a sympy expression's shape, refusing what breaks the limits."""
    if expr.is_Number:
        if expr.is_Rational:
            if max(abs(int(expr.p)).bit_length(), int(expr.q).bit_length()) > limits.bits:
                raise ParseError(f"a number in the formula exceeds {limits.bits} bits.")
        return _CONSTANT
    if expr.is_Symbol:
        return _ATOM
    if isinstance(expr, sp.Pow):
        exponent = expr.exp
        if not exponent.is_Integer or abs(int(exponent)) > limits.power:
            raise ParseError(
                f"powers must be whole numbers up to {limits.power}; the formula has {exponent}."
            )
        shape = _size(expr.base, limits, atoms).power(int(exponent), atoms)
    elif isinstance(expr, sp.Add | sp.Mul):
        shapes = [_size(arg, limits, atoms) for arg in expr.args]
        shape = shapes[0]
        for other in shapes[1:]:
            shape = shape.plus(other) if isinstance(expr, sp.Add) else shape.times(other)
    else:
        for arg in expr.args:
            _size(arg, limits, atoms)
        shape = _ATOM if expr.args else _CONSTANT
    refusal = shape.refusal(limits)
    if refusal:
        raise ParseError(f"the formula is too large to compute: {refusal}.")
    return shape


def check_formula_size(expr: sp.Basic, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse a sympy expression (one built in a notebook) that breaks the limits.

    Raises
    ------
    ParseError
        If it has more than ``limits.nodes`` nodes, nests deeper than
        ``limits.depth``, or breaks the power, bits, degree or terms limit.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> check_formula_size((B + 1) ** 4)
    >>> check_formula_size(((B + 1) ** 64) ** 64)
    Traceback (most recent call last):
    ...
    memtheory.errors.ParseError: powers must be whole numbers up to 64; the formula has 4096.
    """
    count = 0
    stack: list[tuple[sp.Basic, int]] = [(expr, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > limits.nodes:
            raise ParseError(f"the formula has more than {limits.nodes} parts.")
        if depth > limits.depth:
            raise ParseError(f"the formula is nested more than {limits.depth} levels deep.")
        stack.extend((arg, depth + 1) for arg in node.args)
    atoms = len(expr.free_symbols) + sum(
        1 for _ in expr.atoms(sp.floor, sp.ceiling, sp.Min, sp.Max)
    )
    _size(expr, limits, atoms)
