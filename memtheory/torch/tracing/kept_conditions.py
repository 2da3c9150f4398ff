"""A traced peak that keeps its conditions when pickled: sympy's ``Max`` (or ``Add``), plus them.

A traced formula holds only where its conditions hold (``B < 16`` where a
kernel choice changes the bytes beyond). Within one process the conditions
travel with the expression through memtheory's registry
(:func:`memtheory.constraints.carry`), so that
:func:`~memtheory.evaluation.evaluate` and
:func:`~memtheory.whatif.max_batch` refuse sizes outside them. A bare
expression pickled and loaded in another process (a notebook saved and
reopened, a worker) used to come back without them, and answered silently
where the formula does not hold.

:func:`keeping` returns the peak as an instance of :class:`Max` (or
:class:`Add`, for a peak of one polynomial): a subclass of sympy's, equal
to the plain expression, with the same hash and printed the same, whose
pickle also holds the conditions and registers them again when it is loaded.
Arithmetic keeps them where sympy keeps the peak as one term (``peak +
reserve``, ``peak / 2**30``); an expression rebuilt from its parts
(``peak.subs(S, 128)``) is a new formula and carries nothing, as before.
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from memtheory.constraints import SizeConstraint, carry

__all__ = ["Add", "Max", "keeping"]


class _Keeping:
    """What :class:`Max` and :class:`Add` share: the conditions, kept through pickling."""

    _conditions: tuple[SizeConstraint, ...] = ()
    _plain: type[sp.Expr] = sp.Expr

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (_loaded, (self._plain, self.args, self._conditions))  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, self._plain):
            return bool(self._hashable_content() == other._hashable_content())  # type: ignore[attr-defined]
        return bool(self._plain.__eq__(self, other))  # type: ignore[call-arg]

    def __ne__(self, other: object) -> bool:
        return not self == other


class Max(_Keeping, sp.Max):
    """sympy's ``Max`` of a traced peak, keeping the size conditions in its pickle.

    Named ``Max`` so that it hashes, sorts and prints as sympy's own.
    """

    _plain = sp.Max
    __hash__ = sp.Max.__hash__


class Add(_Keeping, sp.Add):
    """sympy's ``Add`` of a traced peak of one polynomial, keeping the size conditions."""

    _plain = sp.Add
    __hash__ = sp.Add.__hash__


def keeping(expression: sp.Expr, conditions: tuple[SizeConstraint, ...]) -> sp.Expr:
    """Return ``expression`` as one whose pickle keeps ``conditions`` (registered for it too).

    A number, an expression without conditions, or one neither a ``Max``
    nor an ``Add`` comes back as it is (registered).

    Examples
    --------
    >>> import pickle
    >>> from memtheory.evaluation import evaluate
    >>> from memtheory.symbols import B
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
    """
    expression = carry(expression, conditions)
    kind = {sp.Max: Max, sp.Add: Add}.get(type(expression))
    if kind is None or not conditions or expression.is_number:
        return expression
    kept = _built(kind, expression.args)
    kept._conditions = tuple(conditions)
    return kept


def _built(kind: type[sp.Expr], args: tuple[sp.Expr, ...]) -> Any:
    """``kind(*args, evaluate=False)`` with the arguments in their order (sympy's would sort).

    A peak's ``Max`` keeps its moments in step order
    (:func:`memtheory.max_pruning.maximum`); sorted, it would be another key
    for the registry, and not equal to the peak.
    """
    if issubclass(kind, sp.Add):
        return kind._from_args(args)
    built = sp.Expr.__new__(kind, *args)
    built._argset = frozenset(args)  # what Max's own constructor sets
    return built


def _loaded(
    plain: type[sp.Expr], args: tuple[sp.Expr, ...], conditions: tuple[SizeConstraint, ...]
) -> sp.Expr:
    """Rebuild a pickled peak: the same expression, its conditions registered again."""
    return keeping(_built(plain, args), conditions)
