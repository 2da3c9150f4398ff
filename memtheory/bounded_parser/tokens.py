"""Text into tokens: exact decimal literals, names, operators, within limits.

Examples
--------
>>> [token.text for token in tokenize("2B^2", numeric=False, limits=DEFAULT_LIMITS, names={"B"})]
['2', 'B', '^', '2', '']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from memtheory.bounded_parser.parse_limits import DEFAULT_LIMITS, Limits
from memtheory.errors import ParseError

__all__ = ["FORMULA_FUNCTIONS", "Token", "read_literal", "tokenize"]


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


@dataclass(frozen=True)
class Token:
    """One token of a formula or number: its kind, its text and, for a number, its value."""

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


def tokenize(
    text: str, *, numeric: bool, limits: Limits, names: Collection[str] = ()
) -> list[Token]:
    """Split ``text`` into tokens, ending with an ``"end"`` token (see the module's example)."""
    source = _superscripts(text.translate(_SYMBOLS_TO_ASCII))
    if numeric:
        source = _SPACE_GROUP.sub("", source)
    literal = _NUMERIC_LITERAL if numeric else _FORMULA_LITERAL
    tokens: list[Token] = []
    position = 0
    while position < len(source):
        char = source[position]
        if char.isspace():
            position += 1
            continue
        if source.startswith("**", position):
            tokens.append(Token("op", "^"))
            position += 2
            continue
        if source.startswith("//", position):
            raise ParseError(f"{text!r}: write floor(a/b) instead of a//b.")
        number = literal.match(source, position)
        if number:
            tokens.append(
                Token("number", number.group(), read_literal(number.group(), limits, where=text))
            )
            position = number.end()
            continue
        if numeric and char in "xX" and not _NAME.match(source, position + 1):
            tokens.append(Token("op", "*"))
            position += 1
            continue
        name = _NAME.match(source, position)
        if name:
            _check_name(name.group(), text, numeric=numeric, names=names)
            tokens.append(Token("name", name.group()))
            position = name.end()
            continue
        if char in "'\"":
            raise ParseError(f"quoted text is not allowed in {text!r}.")
        if char == "," and numeric:
            raise ParseError(f"cannot read {text!r} as a number: {_COMMA_HINT}.")
        if char in _OPERATORS:
            tokens.append(Token("op", char))
            position += 1
            continue
        raise ParseError(
            f"{char!r} is not allowed in {text!r}: use numbers, + - * / ^ and parentheses."
        )
    tokens.append(Token("end", ""))
    return tokens
