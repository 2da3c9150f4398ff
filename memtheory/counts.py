"""The handful of counts that an accounting convention needs from a model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.constraints import SizeConstraint, as_constraints, carry
from memtheory.errors import InvalidSizeError
from memtheory.max_pruning import provably_nonnegative
from memtheory.symbols import B

__all__ = ["ModelCounts"]


@dataclass(frozen=True)
class ModelCounts:
    """Element counts of a model for one training step, batch included.

    A :class:`~memtheory.network.Network` derives these from its layers; when
    only totals are known (as in a question that quotes "532,752 activations
    and 19,072,984 parameters"), build them directly with :meth:`per_sample`.

    Parameters
    ----------
    parameters : size
        Trainable parameters (weights and biases).
    activations : size
        Activation elements the forward pass keeps, for the whole batch, the
        input excluded.
    input_elements : size
        Elements of the input batch.
    buffers : size, default 0
        Non-trainable state elements stored with the model (running statistics).
    batch : size, default ``B``
        The batch size the counts were made for.
    constraints : mapping of str to size, optional
        Labelled sizes that must stay at least 1 (a network's output sizes,
        :meth:`~memtheory.network.Network.size_constraints`): a memory result
        built from these counts refuses values that break one.

    Examples
    --------
    >>> counts = ModelCounts.per_sample(
    ...     parameters=19_072_984, activations=532_752, input_elements=9_000)
    >>> counts.activations
    532752*B
    """

    parameters: SizeLike
    activations: SizeLike
    input_elements: SizeLike
    buffers: SizeLike = 0
    batch: SizeLike = field(default=B)
    constraints: Mapping[str, sp.Expr] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, minimum in (
            ("parameters", 0),
            ("activations", 0),
            ("input_elements", 0),
            ("buffers", 0),
            ("batch", 1),
        ):
            object.__setattr__(self, name, _as_count(getattr(self, name), name, minimum))
        checks = as_constraints(self.constraints)
        object.__setattr__(self, "constraints", {c.where: c.size for c in checks})
        for name in ("parameters", "activations"):
            carry(getattr(self, name), checks)

    def size_checks(self) -> tuple[SizeConstraint, ...]:
        """Return :attr:`constraints` as :class:`~memtheory.constraints.SizeConstraint` objects."""
        return as_constraints(self.constraints)

    @classmethod
    def per_sample(
        cls,
        *,
        parameters: SizeLike,
        activations: SizeLike,
        input_elements: SizeLike,
        buffers: SizeLike = 0,
        batch: SizeLike = B,
    ) -> ModelCounts:
        """Build counts from per-sample activation and input counts, times ``batch``.

        Examples
        --------
        >>> ModelCounts.per_sample(parameters=10, activations=5, input_elements=2, batch=4)
        ModelCounts(parameters=10, activations=20, input_elements=8, buffers=0, batch=4)
        """
        batch = as_size(batch, "batch", "ModelCounts")
        per_sample_activations = _as_count(activations, "activations", 0)
        per_sample_input = _as_count(input_elements, "input_elements", 0)
        return cls(
            parameters=parameters,
            activations=per_sample_activations * batch,
            input_elements=per_sample_input * batch,
            buffers=buffers,
            batch=batch,
        )


def _as_count(value: SizeLike, name: str, minimum: int) -> sp.Expr:
    if isinstance(value, sp.Basic) and not isinstance(value, sp.Expr):
        raise InvalidSizeError(
            f"ModelCounts: {name} must be a count (a number or a sympy expression), "
            f"got {value} ({type(value).__name__})."
        )
    if isinstance(value, sp.Basic) and not value.is_number:
        if not provably_nonnegative(value) and value.is_nonnegative is False:
            raise InvalidSizeError(f"ModelCounts: {name} = {value} can be negative.")
        return sp.sympify(value)
    return as_size(value, name, "ModelCounts", minimum=minimum)
