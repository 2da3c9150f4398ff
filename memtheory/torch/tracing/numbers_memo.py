"""Ask sympy once per expression, not once per read, whether a symbolic size is a number.

Every read of a symbolic size in PyTorch (``SymNode.expr``, and
``SymNode.maybe_as_int`` after it) first asks sympy whether the node's
expression is a number, and sympy answers by walking the expression: its
``Expr.is_number`` is not cached. A trace reads sizes millions of times (each
shape check, stride and contiguity test reads them), and a CNN's spatial size
after its pooling chain is a nested floor expression, so the walks were about
a fifth of DenseNet-121's symbolic trace, with only a few thousand distinct
expressions behind millions of reads.

:func:`memoised_numbers` makes those two reads take the answer from a table
keyed on the expression while a trace runs. Sympy expressions are immutable
and ``is_number`` depends on the expression alone (equal expressions give the
same answer), so every read returns what it returned before: only the walk is
saved. ``expr`` asks last, only where PyTorch's answer depends on it: an
expression with no replacement yet, or with its replacement cached, is returned
as it is whether or not it is a number. The rest of both methods is PyTorch's,
unchanged; a PyTorch whose ``SymNode`` lacks what they read is left as it is.

Examples
--------
>>> from torch.fx.experimental.sym_node import SymNode
>>> with memoised_numbers():
...     replaced = SymNode.expr is not _ORIGINAL_EXPR
>>> replaced, SymNode.expr is _ORIGINAL_EXPR
(True, True)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.fx.experimental.sym_node import SymNode

__all__ = ["memoised_numbers"]

_ORIGINAL_EXPR: Any = SymNode.__dict__.get("expr")
_ORIGINAL_AS_INT: Any = SymNode.__dict__.get("maybe_as_int")
_READ = ("_expr", "_expr_cache", "_expr_ver", "shape_env")
"""What the replacement of ``SymNode.expr`` reads, set in ``SymNode.__init__`` (PyTorch 2.13)."""


def _supported() -> bool:
    """Whether this PyTorch's ``SymNode`` is the one the replacements copy (PyTorch 2.13).

    The release first: the replacements copy 2.13's method bodies, and another release could
    change their logic while keeping the names they read.
    """
    if not torch.__version__.startswith("2.13."):
        return False
    if not isinstance(_ORIGINAL_EXPR, property) or not callable(_ORIGINAL_AS_INT):
        return False
    code = getattr(_ORIGINAL_EXPR.fget, "__code__", None)
    if code is None:
        return False
    names = set(code.co_names) | set(code.co_varnames)
    return set(_READ) <= names and {"_replacements_version_counter", "replace"} <= names


@contextmanager
def memoised_numbers() -> Iterator[None]:
    """In the block, ``SymNode.expr`` and ``maybe_as_int`` ask ``is_number`` once per expression.

    Re-entrant: an inner block (a trace inside a trace) shares the outer
    block's table. The table is dropped when the outermost block ends.

    Examples
    --------
    >>> from torch.fx.experimental.sym_node import SymNode
    >>> with memoised_numbers():
    ...     with memoised_numbers():  # the same table
    ...         inner = SymNode.expr
    ...     inner is SymNode.expr
    True
    """
    if not _supported() or SymNode.__dict__.get("expr") is not _ORIGINAL_EXPR:
        yield  # an older or newer PyTorch, or already inside a block
        return
    known: dict[Any, bool] = {}

    def is_number(expr: Any) -> bool:
        answer = known.get(expr)
        if answer is None:
            answer = known[expr] = bool(expr.is_number)
        return answer

    def expr(self: Any) -> Any:
        # PyTorch 2.13's SymNode.expr, with ``self._expr.is_number`` read from the table, and
        # read last: where PyTorch returns the node's expression (no replacement yet) or its
        # cached replacement, it returns that whether the expression is a number or not (a
        # number never reaches the cache: it is returned before ``replace``, and ``_expr`` is
        # only set in ``__init__``), so the answer is the same without asking
        value = self._expr
        if isinstance(value, int):
            return value
        shape_env = self.shape_env
        if shape_env is not None:
            ver = shape_env._replacements_version_counter
            if ver == 0:
                return value
            if self._expr_cache is not None and ver == self._expr_ver:
                return self._expr_cache
        if is_number(value):
            return value
        if shape_env is None:
            raise AssertionError("shape_env is required to access expr")
        result = shape_env.replace(value)
        self._expr_ver = ver
        self._expr_cache = result
        return result

    def maybe_as_int(self: Any) -> int | None:
        # PyTorch 2.13's SymNode.maybe_as_int, with the same table
        value = self.expr
        return int(value) if is_number(value) else None

    SymNode.expr = property(expr)  # type: ignore[assignment, method-assign]
    SymNode.maybe_as_int = maybe_as_int  # type: ignore[method-assign]
    try:
        yield
    finally:
        SymNode.expr = _ORIGINAL_EXPR  # type: ignore[assignment, method-assign]
        SymNode.maybe_as_int = _ORIGINAL_AS_INT  # type: ignore[method-assign]
