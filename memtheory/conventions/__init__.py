"""Accounting conventions: which tensors a memory estimate counts, and how often.

* ``"rule_of_thumb"``: :class:`RuleOfThumbConvention`, the source documents' parameters x 3,
  activations x 2 x batch.
* ``"breakdown"``: :class:`BreakdownConvention`, every component counted for
  what it is, with the optimizer's real state and per-component precision.
* ``"autograd"``: :class:`AutogradConvention`, the tensors PyTorch's autograd
  really keeps, storage by storage, and the peak of a training step.

Another convention plugs in by
subclassing :class:`Convention` and adding itself to :data:`CONVENTIONS`.

Examples
--------
>>> sorted(CONVENTIONS)
['autograd', 'breakdown', 'rule_of_thumb']
>>> convention("rule of thumb").name
'rule_of_thumb'
"""

from __future__ import annotations

from memtheory.conventions.autograd import AutogradConvention
from memtheory.conventions.base import Convention, Model, model_counts
from memtheory.conventions.breakdown import BreakdownConvention
from memtheory.conventions.rule_of_thumb import RuleOfThumbConvention
from memtheory.errors import UnknownConventionError
from memtheory.registry import Registry

__all__ = [
    "CONVENTIONS",
    "CONVENTION_REGISTRY",
    "AutogradConvention",
    "BreakdownConvention",
    "Convention",
    "ConventionLike",
    "Model",
    "RuleOfThumbConvention",
    "convention",
    "model_counts",
]

CONVENTIONS: dict[str, Convention] = {
    c.name: c for c in (RuleOfThumbConvention(), BreakdownConvention(), AutogradConvention())
}
"""Registered conventions, by name."""

CONVENTION_REGISTRY: Registry[Convention] = Registry(
    "convention", CONVENTIONS, error=UnknownConventionError
)
"""The conventions by any spelling: case, spaces, ``_`` and ``-`` do not matter."""

ConventionLike = str | Convention


def convention(spec: ConventionLike) -> Convention:
    """Look up a convention by name (spaces, dashes and case do not matter).

    Examples
    --------
    >>> convention("Breakdown").title
    'breakdown (each component counted, an estimate)'
    >>> convention("exact")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownConventionError: unknown convention 'exact'. Known conventions: ...
    >>> convention("rule of thum")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownConventionError: ... Did you mean 'rule_of_thumb'? ...
    """
    if isinstance(spec, Convention):
        return spec
    return CONVENTION_REGISTRY[spec]
