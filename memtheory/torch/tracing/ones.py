"""A size of 1, answered: the step traced again there, where the formulas do not hold at 1.

PyTorch treats a size of 1 apart (a dimension of 1 broadcasts, a transpose
of it is already contiguous, so a kernel may skip a copy or return a view),
so a formula traced at sizes of at least 2 can be off at 1: Hugging Face's
GPT-2 saves 8 bytes fewer activations at ``B = 1`` than its formula in ``B``
says. The trace then keeps the condition ``B >= 2``, checks it by tracing at
``B = 1`` (:mod:`~memtheory.torch.tracing.verify`), and where the bytes differ
traces the step once more with that size at 1 and every other size still a
symbol (:func:`memtheory.torch.tracing.api.trace`). The result keeps that
trace in :attr:`~memtheory.torch.tracing.result.TracedMemory.at_one`, and
answers from it:

* :meth:`~memtheory.torch.tracing.result.TracedMemory.evaluate` at ``B=1``
  returns the trace at ``B = 1``, evaluated at the other values;
* :attr:`~memtheory.torch.tracing.result.TracedMemory.peak` and ``total``
  are ``Piecewise``: the recorded bytes where ``B = 1``, the formulas
  elsewhere, so :func:`~memtheory.whatif.max_batch` and every evaluation
  path take ``B = 1`` as the step gives it.

The trace at 1 is itself a trace: its own conditions (``S >= 2`` at ``B =
1``) are checked and answered the same way, so ``B = 1, S = 1`` is a trace
at both sizes fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

import sympy as sp

from memtheory.errors import MemtheoryError

if TYPE_CHECKING:
    from memtheory.torch.tracing.result import TracedMemory

__all__ = ["ANSWERED_AT_ONE", "answered", "below_two", "one_asked", "piecewise",
           "pieces_evaluated"]

ANSWERED_AT_ONE = "is answered from that trace"
"""How a condition's words end once a trace at 1 answers it (see :func:`answered`)."""


def answered(word: str, label: str, symbol: sp.Symbol) -> str:
    """Return a condition's words, saying that a trace at 1 answers it where it is ``label``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> answered("B >= 2 (traced for sizes of at least 2)", "B >= 2", B)[:50]
    'B >= 2: at B = 1 other code runs (the bytes differ'
    >>> answered("S <= 64", "B >= 2", B)
    'S <= 64'
    """
    if word != label and not word.startswith(f"{label} ("):
        return word
    name = symbol.name
    return (f"{label}: at {name} = 1 other code runs (the bytes differ), so the step was "
            f"traced at {name} = 1 too and {name} = 1 {ANSWERED_AT_ONE}")


def below_two(constraints: Mapping[str, sp.Expr], symbol: sp.Symbol) -> str | None:
    """Return the label of the constraint that is exactly ``symbol >= 2``, if there is one.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> below_two({"S <= 64": 65 - S, "B >= 2": B - 1}, B)
    'B >= 2'
    >>> below_two({"B >= 3": B - 2}, B) is None
    True
    """
    return next(
        (label for label, margin in constraints.items()
         if sp.expand(sp.sympify(margin) - (symbol - 1)) == 0),
        None,
    )


def one_asked(
    at_one: Mapping[sp.Symbol, TracedMemory], values: Mapping[str, object]
) -> tuple[str, TracedMemory] | None:
    """Return the name and the recorded trace of the first size ``values`` sets to 1 that has one.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> one_asked({B: "traced at B = 1"}, {"B": 1, "S": 7})
    ('B', 'traced at B = 1')
    >>> one_asked({B: "traced at B = 1"}, {"B": 2}) is None
    True
    """
    for symbol, recorded in at_one.items():
        value = values.get(symbol.name)
        if value is not None and _is_one(value):
            return symbol.name, recorded
    return None


def _is_one(value: object) -> bool:
    try:
        return bool(sp.sympify(value) == 1)
    except (sp.SympifyError, TypeError):
        return False


def pieces_evaluated(
    memory: TracedMemory, general: TracedMemory, values: Mapping[str, object]
) -> TracedMemory:
    """Return ``general`` (``memory``'s formulas evaluated) with the traces at 1 still open.

    A trace at 1 whose size ``values`` fixes (to another value) is dropped; the
    others are evaluated at the values they have symbols for. One that cannot
    be (values outside its own conditions) is dropped, and the size's
    ``>= 2`` limit comes back, so that 1 is refused rather than answered
    from the formulas.
    """
    kept: dict[sp.Symbol, TracedMemory] = {}
    limits: dict[str, sp.Expr] = {}
    for symbol, recorded in memory.at_one.items():
        if symbol.name in values:
            continue
        names = {s.name for s in recorded.free_symbols}
        given = {k: v for k, v in values.items() if k in names}
        try:
            kept[symbol] = recorded.evaluate(**given) if given else recorded
        except MemtheoryError:
            limits[f"{symbol.name} >= 2"] = symbol - 1
    return replace(general, at_one=kept, constraints={**general.constraints, **limits})


def piecewise(
    memory: TracedMemory, general: sp.Expr, which: Literal["peak", "total"]
) -> sp.Expr:
    """Return ``general`` where no size is 1, and each trace at 1's ``which`` where one is.

    Without traces at 1 this is ``general`` itself.
    """
    if not memory.at_one:
        return general
    pieces = [
        (getattr(recorded, which), sp.Eq(symbol, 1)) for symbol, recorded in memory.at_one.items()
    ]
    return sp.Piecewise(*pieces, (general, True))
