"""A memory estimate split into its components, each an exact expression in bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import sympy as sp

from memtheory.constraints import carry
from memtheory.errors import UnknownNameError
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = ["MemoryBreakdown"]

_LAYER_FREE = frozenset({"input", "targets"})
"""Components that do not depend on the layers: valid for any input size, so never checked."""


@dataclass(frozen=True)
class MemoryBreakdown(Footprint):
    """Bytes per component of a training step (or an inference pass), their total and peak.

    A :class:`~memtheory.footprint.Footprint`: see there what ``total`` and
    ``peak`` mean and which one the what-if solvers use.

    Attributes
    ----------
    components : mapping of str to sympy expression
        Bytes per component, in :data:`COMPONENT_TITLES` order. Symbols (batch
        ``B``, image size ``H``, ...) stay until :meth:`evaluate` fills them in.
    mode : {"training", "inference"}
    convention : str
        Name of the accounting convention that produced it.
    optimizer : Optimizer or None
    precision : Precision
    notes : tuple of str
        What the convention assumed, in words.
    timeline : mapping of str to sympy expression
        Live bytes at the moments of the step where the peak can occur, in the
        order they happen (``"forward conv2d_1"``, ``"backward maxpool2d_2"``,
        ``"optimizer step"``), for conventions that follow the step tensor by
        tensor; empty otherwise. :attr:`peak` is their maximum: unlike
        :attr:`total`, it is not a sum of components, because not every tensor
        is alive at the same time.
    timeline_parts : mapping of str to mapping of str to sympy expression
        For some moments of :attr:`timeline`, the live bytes of the components
        that come and go during the step (gradients, saved activations, weight
        copies), so that a split of the step across devices can scale each
        moment (:func:`~memtheory.techniques.parallel_memory`); empty when not followed.
    constraints : mapping of str to sympy expression
        Symbolic output sizes of the network, labelled, that must stay at least
        1; :meth:`evaluate` raises :class:`~memtheory.errors.KernelTooLargeError`
        for values that break one (set by :func:`~memtheory.memory.training_memory`),
        and so does every evaluation of a component, the total or the peak
        (:mod:`memtheory.constraints`).

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=50)
    >>> memory = training_memory(counts, optimizer="sgd+momentum")
    >>> memory["optimizer_state"], memory.total
    (4000, 1800*B + 12000)
    >>> print(memory.evaluate(B=10).table("kB"))
    component                           kB  share
    -------------------------------  -----  -----
    parameters (weights and biases)   4.00  13.3%
    parameter gradients               4.00  13.3%
    optimizer state                   4.00  13.3%
    forward activations               8.00  26.7%
    activation gradients              8.00  26.7%
    input batch                       2.00   6.7%
    -------------------------------  -----  -----
    total                            30.00   100%
    """

    components: Mapping[str, sp.Expr]
    mode: Literal["training", "inference"]
    convention: str
    precision: Precision
    optimizer: Optimizer | None = None
    notes: tuple[str, ...] = field(default=())
    timeline: Mapping[str, sp.Expr] = field(default_factory=dict)
    constraints: Mapping[str, sp.Expr] = field(default_factory=dict)
    timeline_parts: Mapping[str, Mapping[str, sp.Expr]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        unknown = set(self.components) - set(COMPONENT_TITLES)
        if unknown:
            raise UnknownNameError(
                f"unknown memory components {sorted(unknown)}; known: {list(COMPONENT_TITLES)}"
            )
        checks = self.size_checks()
        ordered = {
            name: carry(sp.sympify(self.components[name]), () if name in _LAYER_FREE else checks)
            for name in COMPONENT_TITLES
            if name in self.components
        }
        object.__setattr__(self, "components", ordered)
        if not callable(getattr(self.timeline, "running_sum", None)):  # a lazy timeline stays so
            object.__setattr__(
                self, "timeline", {label: sp.sympify(v) for label, v in self.timeline.items()}
            )

    # -- numbers -----------------------------------------------------------------------
    def evaluate(self, **values: object) -> MemoryBreakdown:
        """Substitute values by symbol name (``B=64``) into every component, exactly.

        Examples
        --------
        >>> from memtheory import ModelCounts, training_memory
        >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
        >>> memory = training_memory(counts, optimizer="sgd")
        >>> memory.evaluate(B=2).total
        136
        """
        moments = list(self.timeline_parts.values())
        parts = (self.components, self.timeline, *moments)
        values_in_order, remaining = self.substituted(
            values, [v for part in parts for v in part.values()]
        )
        substituted = iter(values_in_order)
        components, timeline, *evaluated = ({k: next(substituted) for k in p} for p in parts)
        return replace(
            self,
            components=components,
            timeline=timeline,
            constraints={c.where: c.size for c in remaining},
            timeline_parts=dict(zip(self.timeline_parts, evaluated, strict=True)),
        )

    def __str__(self) -> str:
        lines = [f"{self.mode} memory ({self.convention} convention), in bytes:"]
        lines += [f"  {name}: {value}" for name, value in self.components.items()]
        lines.append(f"  total: {self.total}")
        if self.timeline:
            lines.append(f"  peak: {self.peak}")
        return "\n".join(lines)
