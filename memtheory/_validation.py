"""Checks that turn user-supplied sizes into sympy expressions, or explain why not."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TypeAlias

import sympy as sp

from memtheory._shown import shown
from memtheory.errors import InvalidSizeError

__all__ = [
    "Pair",
    "PairLike",
    "SizeLike",
    "as_pair",
    "as_size",
    "check_kv_heads",
    "check_probability",
]

SizeLike: TypeAlias = int | sp.Expr
PairLike: TypeAlias = SizeLike | tuple[SizeLike, SizeLike]
"""One size for both axes, or a ``(height, width)`` pair: what a layer accepts."""
Pair: TypeAlias = tuple[sp.Expr, sp.Expr]
"""A ``(height, width)`` pair of sizes: what :func:`as_pair` returns."""


def as_size(value: object, what: str, owner: str, *, minimum: int = 1) -> sp.Expr:
    """Return ``value`` as a sympy integer expression that is at least ``minimum``.

    Symbolic values are accepted when their assumptions allow a whole number of
    at least ``minimum``; numbers must be whole and in range. ``owner`` and
    ``what`` name the layer and the argument in the error message.

    Examples
    --------
    >>> as_size(3, "stride", "Conv2d")
    3
    >>> as_size(2.5, "stride", "Conv2d")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: Conv2d: stride must be a whole number, got 2.5 (float). ...
    """
    fix = f"Pass a whole number >= {minimum}."
    if isinstance(value, bool):
        raise InvalidSizeError(f"{owner}: {what} must be a whole number, got {shown(value)}. {fix}")
    if isinstance(value, sp.Basic):
        expr = sp.sympify(value)
        if expr.is_number:
            if not expr.is_integer:
                raise InvalidSizeError(f"{owner}: {what} must be a whole number, got {expr}. {fix}")
        elif expr.is_integer is False or not expr.free_symbols:
            raise InvalidSizeError(f"{owner}: {what} must be a whole number, got {expr}. {fix}")
        elif expr.is_integer is None:
            raise InvalidSizeError(
                f"{owner}: {what} = {expr} is not known to be a whole number. "
                "Use symbols made by memtheory.symbols.size_symbol (integer, positive)."
            )
    elif isinstance(value, numbers.Integral):
        expr = sp.Integer(int(value))
    elif isinstance(value, numbers.Real):
        kind = type(value).__name__
        raise InvalidSizeError(
            f"{owner}: {what} must be a whole number, got {shown(value)} ({kind}). {fix}"
        )
    else:
        kind = type(value).__name__
        raise InvalidSizeError(
            f"{owner}: {what} must be a whole number, got {shown(value)} ({kind}). {fix}"
        )
    if expr.is_number:
        if expr < minimum:
            raise InvalidSizeError(
                f"{owner}: {what} must be a {_range_word(minimum)} integer, got {expr}. {fix}"
            )
    elif (expr - minimum).is_negative:
        raise InvalidSizeError(f"{owner}: {what} = {expr} can be below {minimum}. {fix}")
    return expr


def as_pair(value: object, what: str, owner: str, *, minimum: int = 1) -> Pair:
    """Return ``value`` (one size or a pair) as a ``(height, width)`` pair of sizes.

    Examples
    --------
    >>> as_pair(3, "kernel_size", "Conv2d")
    (3, 3)
    >>> as_pair((1, 7), "kernel_size", "Conv2d")
    (1, 7)
    """
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 2:
            raise InvalidSizeError(
                f"{owner}: {what} must be one size or a (height, width) pair, got {shown(value)}."
            )
        first, second = value
        return as_size(first, what, owner, minimum=minimum), as_size(
            second, what, owner, minimum=minimum
        )
    size = as_size(value, what, owner, minimum=minimum)
    return size, size


def _range_word(minimum: int) -> str:
    return {0: "non-negative", 1: "positive"}.get(minimum, f">= {minimum}")


def check_probability(value: object, what: str, owner: str) -> None:
    """Refuse a probability (a dropout rate) outside ``[0, 1)``, or one that is not a number.

    Examples
    --------
    >>> check_probability(0.1, "p", "Dropout")
    >>> check_probability(1.5, "p", "Dropout")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: Dropout: p must be in [0, 1), got 1.5.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise InvalidSizeError(f"{owner}: {what} must be in [0, 1), got {shown(value)}.")


def check_kv_heads(heads: sp.Expr, kv_heads: sp.Expr, owner: str) -> None:
    """Refuse key/value heads that do not divide the query heads (when both are numbers).

    Examples
    --------
    >>> check_kv_heads(sp.Integer(32), sp.Integer(8), "attention")
    >>> check_kv_heads(sp.Integer(12), sp.Integer(5), "attention")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: attention: kv_heads (5) must divide heads (12); each ...
    """
    remainder = sp.Mod(heads, kv_heads)
    if remainder.is_number and remainder != 0:
        raise InvalidSizeError(
            f"{owner}: kv_heads ({kv_heads}) must divide heads ({heads}); "
            "each key/value head serves a whole group of query heads."
        )
