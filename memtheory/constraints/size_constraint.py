"""A size that must be at least 1 (:class:`SizeConstraint`), and the constraints of an object.

Examples
--------
>>> from memtheory.symbols import H
>>> as_constraints([SizeConstraint(H - 2, "layer 1")])[0].condition
'H - 2 >= 1'
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import sympy as sp

from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError

__all__ = [
    "CarriesConstraints","MODEL_LIMIT", "SizeConstraint", "as_constraints"]


MODEL_LIMIT = "the model's limit: "
"""How a constraint's ``where`` begins when it is a largest size the model takes.

A learned table of 1,024 positions takes no sequence longer than 1,024: the
constraint ``1025 - S >= 1`` is the model's limit, and the what-if solvers stop
there (:attr:`SizeConstraint.is_limit`), where a traced formula's upper bound
(``16 - B``) says only that the formula is not known beyond.
"""


@dataclass(frozen=True)
class SizeConstraint:
    """A size that must be at least 1: a layer's output dimension, with where it comes from.

    Attributes
    ----------
    size : sympy expression
        The output size (``H - 4``).
    where : str
        The layer and the dimension, for messages
        (``"layer 1 of 'cnn', Conv2d 'conv2d_1', output dimension 2"``).

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> SizeConstraint(H - 4, "layer 1").condition
    'H - 4 >= 1'
    """

    size: sp.Expr
    where: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _as_size(self.size, self.where))
        if not isinstance(self.where, str):
            raise InvalidArgumentError(
                f"a size constraint's where is text naming the layer, got {shown(self.where)}."
            )

    @property
    def condition(self) -> str:
        """The condition as text: ``'H - 4 >= 1'``."""
        return f"{self.size} >= 1"

    @property
    def is_limit(self) -> bool:
        """Whether it is a largest size the model takes (:data:`MODEL_LIMIT`).

        Examples
        --------
        >>> from memtheory.symbols import S
        >>> SizeConstraint(1025 - S, MODEL_LIMIT + "layer 2 of 'gpt2'").is_limit
        True
        """
        return self.where.startswith(MODEL_LIMIT)


@runtime_checkable
class _HasConstraints(Protocol):
    def size_checks(self) -> tuple[SizeConstraint, ...]: ...


@runtime_checkable
class CarriesConstraints(Protocol):
    """An expression that holds its own constraints (a traced result's value, for one).

    Its own are the ones that apply to it: what other results registered for an equal
    expression does not (see :func:`memtheory.constraints.candidates`).
    """

    @property
    def carried_constraints(self) -> tuple[SizeConstraint, ...]:
        """The constraints this value holds."""
        ...


def as_constraints(within: object) -> tuple[SizeConstraint, ...]:
    """Return the constraints of a network, a memory result, a mapping, or constraints.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> as_constraints({"layer 1": H - 2})
    (SizeConstraint(size=H - 2, where='layer 1'),)
    """
    if within is None:
        return ()
    if isinstance(within, _HasConstraints):
        return within.size_checks()
    if isinstance(within, Mapping):
        return tuple(SizeConstraint(v, str(k)) for k, v in within.items())
    if isinstance(within, Iterable) and not isinstance(within, str | bytes):
        items = tuple(within)
        if all(isinstance(item, SizeConstraint) for item in items):
            return items
    raise InvalidArgumentError(
        f"within= takes a Network, a memory result, a mapping of label to size or "
        f"SizeConstraints, got {shown(within)} ({type(within).__name__})."
    )


def _as_size(value: object, where: object) -> sp.Expr:
    """``value`` as a size expression: a whole number, or a sympy expression that can be one."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return sp.Integer(int(value))
    if isinstance(value, sp.Expr) and value.is_finite is not False:
        if not value.is_number or value.is_integer:
            return value
    raise InvalidArgumentError(
        f"a size constraint ({where!r}) needs a size: a whole number or a sympy expression in "
        f"size symbols, got {shown(value)} ({type(value).__name__})."
    )
