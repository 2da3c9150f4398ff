"""A traced result's value that keeps its conditions: through arithmetic, substitution, pickling.

A traced formula holds only where its conditions hold (``B < 16`` where a
kernel choice changes the bytes beyond). Within one process the conditions
travel with an expression through memtheory's registry
(:func:`memtheory.constraints.carry`, the mechanism a network's size
constraints use), so that :func:`~memtheory.evaluation.evaluate`,
:func:`~memtheory.evaluation.evaluate_grid`,
:func:`~memtheory.evaluation.compile_exact`,
:func:`~memtheory.whatif.max_value` and :func:`~memtheory.whatif.max_batch`
refuse sizes outside them. The registry knows an expression up to a rational
factor (``peak / 2**30``) and a maximum shifted by a number; an expression
rebuilt by sympy (``peak - 7*B``, ``peak.subs(H, 32)``, a one-polynomial
peak plus a reserve, which sympy merges into one sum) is a new one, and used
to carry nothing.

:func:`keeping` returns the value as an instance of :class:`Max`,
:class:`Add` or :class:`Mul`: a subclass of sympy's, equal to the plain
expression, with the same hash and printed the same, that holds its
conditions and hands them on:

* **arithmetic** (``+``, ``-``, ``*``, ``/``, ``**`` with a number or an
  expression, on either side): the result keeps the conditions of every kept
  operand, and is registered with them;
* **substitution** (``subs``, ``xreplace``): the conditions are substituted
  too; those that become numbers are checked, and values outside them are
  refused there (:class:`~memtheory.errors.KernelTooLargeError`), as
  ``evaluate`` refuses them;
* **rewriting** (``expand``, ``simplify`` as method or function, ``factor``,
  ``cancel``, ``together``, ``doit``): the same formula, the same conditions;
* **pickling**: the pickle holds the conditions, registered again when it is
  loaded (a notebook saved and reopened, a worker).

A result of another kind (``peak // 2**20``, a floor; a lone symbol) is
registered but not wrapped; a function that builds a new expression from the
parts without calling the value's methods (``sympy.Max(peak, 2**25)`` takes
the peak's moments; ``sympy.floor(peak / 2**20)``) returns a plain one. Both
still contain parts that hold the conditions (the peak, and each moment of a
maximum holds them too), in this process and through a pickle, and
:func:`~memtheory.constraints.carried.held_within` finds them there: every
evaluation path checks them. Only a sum that sympy merges term by term
(``sympy.Add(peak, c)`` on a one-polynomial peak, ``sympy.factor(peak)``)
keeps no part: do the arithmetic on the value itself, or pass
``within=memory`` to the evaluation. Such an expression is still never
evaluated silently: known to no network, at sizes that break a condition a
kept value in this process puts on one of its sizes, it is evaluated by each
path with a :class:`~memtheory.errors.SizeWarning` that names the condition
(:func:`~memtheory.constraints.carried.warn_lost`). The conditions are noted
per size, never per expression, so nothing can collide; a plain expression
unpickled in a process that traced nothing is not warned about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import sympy as sp

from memtheory.constraints import SizeConstraint, too_small
from memtheory.constraints.carried import note_held

__all__ = ["Add", "Max", "Mul", "keeping"]


class _Keeping:
    """What :class:`Max`, :class:`Add` and :class:`Mul` share: conditions, handed on."""

    _conditions: tuple[SizeConstraint, ...] = ()
    _plain: type[sp.Expr] = sp.Expr
    _op_priority = 10.5  # above a plain expression's 10.0: ``x + peak`` is the peak's __radd__

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build sympy's own class: :func:`keeping` alone builds one that keeps conditions."""
        return cls._plain(*args, **kwargs)

    @property
    def func(self) -> type[sp.Expr]:
        """The class sympy (and memtheory's substitution) rebuilds with: sympy's own.

        sympy's ``Max`` tells a maximum from a minimum by its class (``cls is
        Max``); built as a subclass, a maximum with substituted arguments took the
        smaller one (``Max(689*B, 22875*B + 1332)`` gave ``689*B``). Rebuilt
        as sympy's own, the result is right, and the methods here wrap it again.
        """
        return self._plain

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (_loaded, (self._plain, self.args, self._conditions))  # type: ignore[attr-defined]

    @property
    def carried_constraints(self) -> tuple[SizeConstraint, ...]:
        """The conditions this value holds: they, not an equal expression's, apply to it."""
        return self._conditions

    def __eq__(self, other: object) -> bool:
        if isinstance(other, self._plain):
            return bool(self._hashable_content() == other._hashable_content())  # type: ignore[attr-defined]
        equal = self._plain.__eq__(self, other)  # type: ignore[call-arg]
        return equal if equal is NotImplemented else bool(equal)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def subs(self, *args: Any, **kwargs: Any) -> sp.Basic:
        """Substitute as sympy does, the conditions too, checked where they become numbers.

        Raises
        ------
        KernelTooLargeError
            Where the values make a condition false: the formula does not hold there.
        """
        result = super().subs(*args, **kwargs)  # type: ignore[misc]
        shown = _shown_values(args)
        conditions = substituted(self._conditions, lambda size: size.subs(*args, **kwargs), shown)
        return keeping(result, conditions)

    def xreplace(self, rule: Any, **kwargs: Any) -> sp.Basic:
        """Replace as sympy does, the conditions too, checked where they become numbers.

        Raises
        ------
        KernelTooLargeError
            Where the values make a condition false: the formula does not hold there.
        """
        result = super().xreplace(rule, **kwargs)  # type: ignore[misc]
        shown = _shown_values((rule,))
        conditions = substituted(self._conditions, lambda size: size.xreplace(rule), shown)
        return keeping(result, conditions)

    def _eval_simplify(self, **kwargs: Any) -> sp.Basic:
        """Return what ``sympy.simplify`` returns for the plain expression, with the conditions."""
        return keeping(sp.simplify(self.plain(), **kwargs), self._conditions)

    def plain(self) -> sp.Expr:
        """Return the plain sympy expression, carrying nothing (the arguments in their order)."""
        return _built(self._plain, self.args)  # type: ignore[attr-defined]


def _handing_on(name: str) -> Callable[..., Any]:
    """Return sympy's method ``name`` whose result keeps the conditions of every kept operand."""

    def method(self: _Keeping, *args: Any, **kwargs: Any) -> Any:
        result = getattr(super(_Keeping, self), name)(*args, **kwargs)
        if result is NotImplemented:
            return result
        return keeping(result, _joined((self, *args)))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"sympy's ``{name}``; the result keeps the conditions."
    return method


_HANDED_ON = (
    *("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__"),
    *("__truediv__", "__rtruediv__", "__neg__", "__pow__", "__floordiv__"),
    *("expand", "factor", "cancel", "together", "doit"),
)
for _name in _HANDED_ON:
    setattr(_Keeping, _name, _handing_on(_name))


class Max(_Keeping, sp.Max):
    """sympy's ``Max`` of a traced peak, keeping the size conditions.

    Named ``Max`` so that it hashes, sorts and prints as sympy's own.
    """

    _plain = sp.Max
    __hash__ = sp.Max.__hash__


class Add(_Keeping, sp.Add):
    """sympy's ``Add`` of a traced value (a peak of one polynomial, a shifted peak)."""

    _plain = sp.Add
    __hash__ = sp.Add.__hash__


class Mul(_Keeping, sp.Mul):
    """sympy's ``Mul`` of a traced value (a peak scaled, ``2 * peak``, ``peak / 2**30``)."""

    _plain = sp.Mul
    __hash__ = sp.Mul.__hash__


_KINDS: dict[type, type[sp.Expr]] = {
    sp.Max: Max,
    sp.Add: Add,
    sp.Mul: Mul,
    Max: Max,
    Add: Add,
    Mul: Mul,
}


def keeping(expression: sp.Basic, conditions: Iterable[SizeConstraint]) -> Any:
    """Return ``expression`` as one that keeps ``conditions``.

    A number, an expression without conditions, or one that is not a ``Max``,
    an ``Add`` or a ``Mul`` comes back as it is. Nothing is registered in a
    process-wide table keyed by the expression: a hand-built formula that
    equals a traced one up to a factor (``100*B + 50`` against ``8*B + 4``)
    never takes its conditions. An expression sympy rebuilt from the value's
    terms keeps none, and is evaluated with a warning where it breaks a traced
    result's condition on a size (:func:`~memtheory.constraints.carried.warn_lost`).

    Examples
    --------
    >>> import pickle
    >>> from memtheory.evaluation import evaluate
    >>> from memtheory.symbols import B, H
    >>> peak = keeping(sp.Max(8 * B + 4, 6 * B + 20), (SizeConstraint(16 - B, "B < 16"),))
    >>> peak, peak == sp.Max(8 * B + 4, 6 * B + 20)
    (Max(6*B + 20, 8*B + 4), True)
    >>> loaded = pickle.loads(pickle.dumps(peak + 100))
    >>> evaluate(loaded, B=4)  # max(6*4 + 20, 8*4 + 4) + 100
    144
    >>> evaluate(loaded, B=20)
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: B=20 is outside B < 16: ...

    A peak of one polynomial, shifted by a reserve or by another expression,
    or with a size substituted, keeps them too:

    >>> one = keeping(12 * B * H + 7, (SizeConstraint(16 - B, "B < 16"),))
    >>> evaluate(one + 2**30, B=4, H=2)  # 12*4*2 + 7 + 2**30
    1073741927
    >>> evaluate((one - B).subs(H, 2), B=20)
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: B=20 is outside B < 16: ...
    >>> one.subs(B, 20)
    Traceback (most recent call last):
    ...
    memtheory.errors.KernelTooLargeError: B=20 is outside B < 16: ...
    """
    conditions = tuple(dict.fromkeys(conditions))
    kind = _KINDS.get(type(expression))
    if kind is None or not conditions or expression.is_number:
        return expression
    args = expression.args
    if kind is Max:  # each moment holds them too: sympy.Max(peak, x) is built from the moments
        args = tuple(_held(arg, conditions) for arg in args)
    kept = _built(kind, args)
    kept._conditions = conditions
    note_held(conditions)
    return kept


def _held(part: sp.Expr, conditions: tuple[SizeConstraint, ...]) -> sp.Expr:
    """Return a moment of a kept maximum as one holding ``conditions`` (not registered)."""
    kind = _KINDS.get(type(part))
    if kind is None or part.is_number or isinstance(part, _Keeping):
        return part
    held = _built(kind, part.args)
    held._conditions = conditions
    return held


def substituted(
    conditions: Iterable[SizeConstraint], substitute: Callable[[sp.Expr], sp.Expr], shown: str
) -> tuple[SizeConstraint, ...]:
    """Return the conditions with ``substitute`` applied; refuse values that make one false.

    ``shown`` names the values for the message (``"B=20"``). A condition that
    becomes a number at least 1 holds, and is dropped.

    Raises
    ------
    KernelTooLargeError
        Naming the values and the condition they make false.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> rules = (SizeConstraint(16 - B, "B < 16"), SizeConstraint(H - 1, "H >= 2"))
    >>> substituted(rules, lambda size: size.subs(H, 32), "H=32")
    (SizeConstraint(size=16 - B, where='B < 16'),)
    """
    kept: list[SizeConstraint] = []
    for condition in conditions:
        size = sp.sympify(substitute(condition.size))
        if size.free_symbols:
            kept.append(
                condition if size == condition.size else SizeConstraint(size, condition.where)
            )
        elif size < 1:
            raise too_small(condition, shown, size)
    return tuple(kept)


def _shown_values(args: tuple[Any, ...]) -> str:
    """Return the values of a ``subs`` call as text: ``"B=20, H=32"``."""
    if len(args) == 2:
        pairs: Iterable[Any] = [args]
    elif args and hasattr(args[0], "items"):
        pairs = args[0].items()
    else:
        pairs = args[0] if args else ()
    return ", ".join(f"{old}={new}" for old, new in pairs)


def _joined(operands: Iterable[object]) -> tuple[SizeConstraint, ...]:
    """Every condition of the kept operands, once, in their order."""
    found: dict[SizeConstraint, None] = {}
    for operand in operands:
        found.update(dict.fromkeys(getattr(operand, "_conditions", ())))
    return tuple(found)


def _built(kind: type[sp.Expr], args: tuple[sp.Expr, ...]) -> Any:
    """``kind(*args, evaluate=False)`` with the arguments in their order (sympy's would sort).

    A peak's ``Max`` keeps its moments in step order
    (:func:`memtheory.max_pruning.maximum`); sorted, it would be another key
    for the registry, and not equal to the peak.
    """
    if issubclass(kind, sp.Add | sp.Mul):
        return kind._from_args(args)
    built = sp.Expr.__new__(kind, *args)
    built._argset = frozenset(args)  # what Max's own constructor sets
    return built


def _loaded(
    plain: type[sp.Expr], args: tuple[sp.Expr, ...], conditions: tuple[SizeConstraint, ...]
) -> sp.Expr:
    """Rebuild a pickled value: the same expression, its conditions registered again."""
    return keeping(_built(plain, args), conditions)
