"""Where a traced formula holds, in words, from the guards PyTorch recorded while tracing.

Whenever the model's code (or PyTorch's) branches on a symbolic size, the
:class:`~torch.fx.experimental.symbolic_shapes.ShapeEnv` records a guard: the
condition under which the same branch is taken again (``s1 <= 1024`` where a
position table has 1024 rows). The traced formulas hold wherever every guard
holds. A guard that fixes a size (``Eq(s0, 4)``) means the code specialised
it: the trace is then a number, not a formula, and :func:`specialised` says
which size and which line did it.

PyTorch names a guard's place by the innermost frame outside its own
tracing files, which is often ``torch/nn/functional.py`` or memtheory's own
``rewrites.py``. :func:`name_user_frames` makes a ShapeEnv skip every frame
in PyTorch's and memtheory's packages instead, so the line named is the
first one in the user's code (or the model library's, such as transformers).
"""

from __future__ import annotations

import inspect
import os
import types
from dataclasses import dataclass

import sympy as sp
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from memtheory.max_pruning import provably_nonnegative
from memtheory.torch.tracing.sizes import SymbolMap

__all__ = ["Conditions", "Specialisation", "conditions", "name_user_frames", "specialised"]

_LIBRARIES = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep,
)
"""PyTorch's package folder and memtheory's: frames there are not the user's code."""


def name_user_frames(env: ShapeEnv) -> None:
    """Make ``env`` place each guard at the innermost frame outside PyTorch and memtheory."""
    default = env._get_user_frame

    def user_frame() -> types.FrameType | None:
        frame = inspect.currentframe()
        while frame is not None and _in_libraries(frame.f_code.co_filename):
            frame = frame.f_back
        return frame if frame is not None else default()

    env._get_user_frame = user_frame  # type: ignore[method-assign]


def _in_libraries(filename: str) -> bool:
    return filename.startswith(_LIBRARIES) or filename == "<string>"


@dataclass(frozen=True)
class Conditions:
    """Where the formulas hold: words, and inequalities as expressions that must stay >= 1."""

    words: tuple[str, ...]
    constraints: dict[str, sp.Expr]


@dataclass(frozen=True)
class Specialisation:
    """A user size the traced code fixed to its example value, and where."""

    symbol: sp.Symbol
    value: int
    where: str

    def __str__(self) -> str:
        return f"{self.symbol.name} was fixed to {self.value} by {self.where}"


def specialised(env: ShapeEnv, symbols: SymbolMap) -> list[Specialisation]:
    """Return the user's sizes that the traced code fixed to a number."""
    from torch._guards import format_frame

    found = []
    for torch_symbol, user in symbols.to_user.items():
        value = env.replacements.get(torch_symbol)
        bounds = env.var_to_range.get(torch_symbol)
        if value is None and bounds is not None and bounds.is_singleton():
            value = bounds.lower
        if value is None or not sp.sympify(value).is_Integer:
            continue
        where = "PyTorch's shape checks"
        for guard in env.guards:
            if torch_symbol in guard.expr.free_symbols and isinstance(guard.expr, sp.Eq):
                location = guard.sloc.framework_loc
                if location is not None:
                    where = location if isinstance(location, str) else format_frame(location)
                if guard.sloc.maybe_user_loc:
                    where = f"{guard.sloc.maybe_user_loc} ({where})"
                break
        found.append(Specialisation(user, int(value), where))
    return found


def conditions(env: ShapeEnv, symbols: SymbolMap) -> Conditions:
    """Return where the traced formulas hold, from the guards and the sizes' ranges."""
    words: list[str] = []
    constraints: dict[str, sp.Expr] = {}
    for torch_symbol, user in sorted(symbols.to_user.items(), key=lambda kv: kv[1].name):
        bounds = env.var_to_range.get(torch_symbol)
        if bounds is not None and bounds.lower >= 2 and not any(
            w.startswith(f"{user.name} >= ") for w in words
        ):
            label = f"{user.name} >= {bounds.lower}"
            words.append(
                f"{label} (traced for sizes of at least 2: PyTorch treats a size of 1 apart, "
                "so at 1 other code may run; measure that size)"
            )
            constraints[label] = user - int(bounds.lower) + 1
    for guard in env.guards:
        relation = symbols.expression(guard.expr)
        if relation is sp.true or not relation.free_symbols:
            continue
        if not relation.free_symbols <= set(symbols.to_user.values()):
            continue
        label = _words(relation)
        if label in constraints or label in words:
            continue
        margin = _margin(relation)
        if margin is not None:
            if margin.is_number or _holds_for_positive(margin):
                continue
            constraints[label] = margin
        words.append(label)
    return Conditions(tuple(words), constraints)


def _margin(relation: sp.Basic) -> sp.Expr | None:
    """Return what is >= 1 exactly when an integer (in)equality holds; None otherwise."""
    if isinstance(relation, sp.StrictLessThan):
        return sp.expand(relation.rhs - relation.lhs)
    if isinstance(relation, sp.LessThan):
        return sp.expand(relation.rhs - relation.lhs + 1)
    if isinstance(relation, sp.StrictGreaterThan):
        return sp.expand(relation.lhs - relation.rhs)
    if isinstance(relation, sp.GreaterThan):
        return sp.expand(relation.lhs - relation.rhs + 1)
    if isinstance(relation, sp.Eq):  # integers: a = b exactly when 1 - (a - b)**2 >= 1
        return 1 - (relation.lhs - relation.rhs) ** 2
    if isinstance(relation, sp.Ne):  # integers: a != b exactly when (a - b)**2 >= 1
        return (relation.lhs - relation.rhs) ** 2
    return None


def _holds_for_positive(margin: sp.Expr) -> bool:
    """Whether ``margin >= 1`` for every positive integer value of its symbols."""
    if provably_nonnegative(margin - 1):
        return True
    shifted = margin.xreplace({s: s + 1 for s in margin.free_symbols}) - 1
    expanded = sp.expand(shifted)
    if not expanded.is_polynomial(*margin.free_symbols):
        return False
    poly = sp.Poly(expanded, *margin.free_symbols)
    return all(c >= 0 for c in poly.coeffs())


def _words(relation: sp.Basic) -> str:
    if isinstance(relation, sp.Eq):
        return f"{relation.lhs} = {relation.rhs}"
    if isinstance(relation, sp.Ne):
        return f"{relation.lhs} != {relation.rhs}"
    return str(relation)
