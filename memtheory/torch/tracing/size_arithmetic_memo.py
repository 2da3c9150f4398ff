"""Work out each sum, product and comparison of symbolic sizes once per trace, not once per use.

PyTorch builds every new tensor's metadata from its sizes in C++, and where a
size is symbolic each ``+``, ``*`` and comparison goes back to Python through
``SymNode``: a ``(B, S, 768)`` output's storage size and contiguity take about a
dozen such operations, and a GPT-2 small trace runs about 113,000 of them with
only about 550 distinct ones. Each builds a new node the long way (proxy-mode
and logging checks, an FX node for translation validation, sympy's cached
result). :func:`memoised_size_arithmetic` keeps, while a trace runs, the
expression, type and summation flag each ``SymNode`` binary operation produced
for its operands' expressions, and builds the next such node from them directly.

What a node holds is what PyTorch would have given it:

* its expression is the one sympy returned for the same operand expressions
  (sympy's answer is a function of them, and PyTorch itself caches it by them);
  ``mod``, whose expression also reads the shape environment's value ranges,
  always runs PyTorch's code;
* its hint is worked out again from the operands' hints, as PyTorch does;
* it has no FX node, as PyTorch's has none without translation validation.

PyTorch's own code runs instead wherever any of that may not hold: under a proxy
mode (``make_fx``), with translation validation on, with structured tracing on,
or where the two nodes have different shape environments. The guards are
untouched: evaluating a comparison still goes through the shape environment,
which records what it records.

Examples
--------
>>> from torch.fx.experimental.sym_node import SymNode
>>> before = SymNode._mul
>>> with memoised_size_arithmetic():
...     inside = SymNode._mul is not before
>>> inside, SymNode._mul is before
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.fx.experimental import sym_node
from torch.fx.experimental.sym_node import SymNode

__all__ = ["memoised_size_arithmetic"]

_METHODS = ("add", "sub", "mul", "int_floordiv", "eq", "ne", "gt", "ge", "lt", "le",
            "sym_max", "sym_min", "and_", "or_")
"""The binary ``SymNode`` methods whose result is a function of the operands' expressions.

Named by their attribute (``SymNode._<name>``); ``and`` and ``or`` carry PyTorch's trailing
underscore. ``mod`` is not among them: its expression depends on the value ranges."""

_ORIGINALS: dict[str, Any] = {
    name: SymNode.__dict__[f"_{name}"] for name in _METHODS if f"_{name}" in SymNode.__dict__
}


def _supported() -> bool:
    """Whether this PyTorch builds binary nodes as the replacement does (PyTorch 2.13).

    The replacement repeats 2.13's ``binary_magic_impl``: its hint, type and node
    arguments. Another release may build them otherwise while keeping the names.
    """
    if not torch.__version__.startswith("2.13."):
        return False
    if set(_ORIGINALS) != set(_METHODS):
        return False
    needed = ("_NO_HINT", "method_to_operator", "SymTypes")
    if not hasattr(torch._logging._internal, "GET_DTRACE_STRUCTURED"):
        return False
    return all(hasattr(sym_node, name) for name in needed) and all(
        getattr(original, "__name__", None) == "binary_magic_impl"
        for original in _ORIGINALS.values())


def _memoised(name: str, original: Callable[..., SymNode],
              known: dict[tuple[Any, ...], tuple[Any, type, bool]]) -> Callable[..., SymNode]:
    """``SymNode._<name>`` that keeps each result's expression, type and summation flag."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    method = name.rstrip("_")
    op = sym_node.method_to_operator(method)
    no_hint, symbolic_types = sym_node._NO_HINT, sym_node.SymTypes
    logging = torch._logging._internal  # its GET_DTRACE_STRUCTURED: structured tracing on

    def binary(self: SymNode, other: SymNode | None = None) -> SymNode:
        shape_env = self.shape_env
        if (
            other is None
            or not isinstance(other, SymNode)
            or shape_env is None
            or other.shape_env is not shape_env
            or shape_env._translation_validation_enabled
            or logging.GET_DTRACE_STRUCTURED
            or get_proxy_mode()
        ):
            return original(self, other) if other is not None else original(self)
        key = (name, self.expr, other.expr, self.pytype, other.pytype,
               self._optimized_summation, other._optimized_summation)
        found = known.get(key)
        if found is None:
            result = original(self, other)
            known[key] = (result._expr, result.pytype, result._optimized_summation)
            return result
        out, pytype, summation = found
        # PyTorch 2.13's binary_magic_impl: the hint from the operands' hints (``SymNode.hint``
        # is ``_hint``)
        out_hint: object = no_hint
        if self._hint is not None and other._hint is not None:
            out_hint = op(self._hint, other._hint)
        if (
            pytype is not None
            and out_hint is not no_hint
            and out_hint is not None
            and not isinstance(out_hint, symbolic_types)
        ):
            out_hint = pytype(out_hint)
        return SymNode(out, shape_env, pytype, out_hint, fx_node=None,
                       optimized_summation=summation)

    binary.__name__ = binary.__qualname__ = f"memoised_{name}"
    return binary


@contextmanager
def memoised_size_arithmetic() -> Iterator[None]:
    """In the block, each binary ``SymNode`` operation is worked out once per operand expressions.

    Re-entrant: an inner block (a trace inside a trace) shares the outer block's table. The
    table is dropped, and PyTorch's methods put back, when the outermost block ends.

    Examples
    --------
    >>> from torch.fx.experimental.sym_node import SymNode
    >>> with memoised_size_arithmetic():
    ...     with memoised_size_arithmetic():  # the same table
    ...         inner = SymNode._add
    ...     inner is SymNode._add
    True
    """
    if not _supported() or any(
            SymNode.__dict__.get(f"_{name}") is not original
            for name, original in _ORIGINALS.items()):
        yield  # another PyTorch, or already inside a block
        return
    known: dict[tuple[Any, ...], tuple[Any, type, bool]] = {}
    for name, original in _ORIGINALS.items():
        setattr(SymNode, f"_{name}", _memoised(name, original, known))
    try:
        yield
    finally:
        for name, original in _ORIGINALS.items():
            setattr(SymNode, f"_{name}", original)
