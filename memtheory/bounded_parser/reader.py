"""The recursive-descent reader: tokens into an exact number or a bounded sympy formula.

Examples
--------
>>> from memtheory.bounded_parser.parse_limits import DEFAULT_LIMITS
>>> FormulaReader("2^10 + 1", numeric=True, symbols={}, functions={}, limits=DEFAULT_LIMITS).read()
Fraction(1025, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from memtheory.bounded_parser.formula_shape import ATOM_SHAPE, CONSTANT_SHAPE, FormulaShape
from memtheory.bounded_parser.parse_limits import Limits
from memtheory.bounded_parser.tokens import Token, tokenize
from memtheory.errors import ParseError

__all__: list[str] = []


_ROUNDING = {sp.floor, sp.ceiling}


@dataclass(frozen=True)
class _Formula:
    """A non-constant part of a formula, with bounds on what expanding it would cost."""

    expr: sp.Expr
    shape: FormulaShape


_Value = Fraction | _Formula


def _bits(value: Fraction) -> int:
    return max(abs(value.numerator).bit_length(), value.denominator.bit_length())


class FormulaReader:
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
        self.tokens = tokenize(text, numeric=numeric, limits=limits, names=names)
        if len(self.tokens) > limits.nodes:
            raise ParseError(f"{text!r} has more than {limits.nodes} parts.")
        self.index = 0
        self.depth = 0
        self.atoms = len(symbols)

    # .. helpers
    @property
    def peek(self) -> Token:
        return self.tokens[self.index]

    def take(self) -> Token:
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
        return _Formula(self.symbols[name], ATOM_SHAPE)

    # .. arithmetic, each bounded before it is computed
    def checked(self, value: Fraction) -> Fraction:
        if _bits(value) > self.limits.bits:
            raise self.too_large(f"a number in it exceeds {self.limits.bits} bits")
        return value

    def formula(self, value: _Value) -> _Formula:
        if isinstance(value, Fraction):
            return _Formula(sp.Rational(value.numerator, value.denominator), CONSTANT_SHAPE)
        return value

    def bounded(self, expr: sp.Expr, shape: FormulaShape) -> _Formula:
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
        return self.bounded(expr, ATOM_SHAPE)
