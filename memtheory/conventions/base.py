"""What an accounting convention is, and what every convention shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from memtheory.counts import ModelCounts
from memtheory.errors import UnsupportedError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = ["Convention", "Model", "model_counts"]

Model = Network | ModelCounts


def model_counts(model: Model) -> ModelCounts:
    """Return the counts of a network, or the counts themselves.

    Examples
    --------
    >>> model_counts(ModelCounts(parameters=1, activations=2, input_elements=3)).activations
    2
    """
    if isinstance(model, Network):
        return model.counts()
    if isinstance(model, ModelCounts):
        return model
    raise UnsupportedError(
        f"expected a memtheory Network or ModelCounts, got {type(model).__name__}. "
        "Build a Network from layers, or ModelCounts.per_sample(...) from known totals "
        "(a PyTorch module converts with memtheory.torch.from_module)."
    )


class Convention(ABC):
    """A way of accounting for training memory: which tensors count, and how many copies.

    Subclasses turn a model, an optimizer and a precision into a
    :class:`~memtheory.memory_breakdown.MemoryBreakdown`. Conventions register in
    :data:`memtheory.conventions.CONVENTIONS` by :attr:`name`.
    """

    name: ClassVar[str]
    title: ClassVar[str]

    @abstractmethod
    def training(
        self, model: Model, optimizer: Optimizer | None, precision: Precision
    ) -> MemoryBreakdown:
        """Memory of one training step."""

    @abstractmethod
    def inference(self, model: Model, precision: Precision) -> MemoryBreakdown:
        """Memory of one forward pass without gradients."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
