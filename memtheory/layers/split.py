"""A slice of the last axis: Phi-3's fused projections, split into queries, keys and values.

Phi-3 computes the queries, keys and values with one ``qkv_proj`` and the
gate and up halves of its MLP with one ``gate_up_proj``, then slices the
output (``qkv[..., :q]``, ``chunk(2, dim=-1)``): views, no new storage.

Examples
--------
>>> from memtheory.symbols import B, S
>>> Slice(0, 3072).output_shape((B, S, 9216))
(B, S, 3072)
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.errors import InvalidSizeError, ShapeError
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape

__all__ = ["Slice"]


@dataclass(frozen=True)
class Slice(Layer):
    """Features ``start`` to ``stop`` (excluded) of the last axis: a view, no parameters.

    Under the autograd convention a training step with slices is exact
    against ``measure`` on tiny Phi-3, GPT-NeoX and Falcon models (CPU,
    PyTorch 2.13, ``tests/pytorch/test_family_autograd.py``): the slices save
    nothing and their backward allocates the fused gradient. The for-loop
    Adam step's temporaries follow ``module.parameters()`` order, which Phi-3
    does not register in the order its layers run (``o_proj`` before
    ``qkv_proj``, the norms after the MLP): the builders give the network
    that order (:attr:`~memtheory.network.Network.parameter_order`). Its
    inference peak was not checked.

    Parameters
    ----------
    start, stop : int
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> Slice(2, 6).stores_output(), Slice(2, 6).saved_for_backward((B, S, 8))
    (False, ())
    """

    start: int
    stop: int
    name: str | None = None
    kind = "Slice"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        for key in ("start", "stop"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidSizeError(
                    f"{self.label}: {key} must be a whole number >= 0, got {value!r}."
                )
        if self.stop <= self.start:
            raise InvalidSizeError(
                f"{self.label}: stop ({self.stop}) must be greater than start ({self.start})."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape with ``stop - start`` features."""
        width = sp.sympify(input_shape[-1]) if input_shape else sp.Integer(0)
        if not input_shape or (width.is_number and width < self.stop):
            raise ShapeError(
                f"{self.label}: slices features {self.start}:{self.stop} of the last axis, "
                f"got {describe_shape(tuple(input_shape))}."
            )
        return (*tuple(input_shape)[:-1], sp.Integer(self.stop - self.start))

    def stores_output(self) -> bool:
        """Return False: a view of its input, no new storage."""
        return False

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: slicing's backward needs only the shape."""
        return ()

    def describe(self) -> str:
        """Show the range."""
        return f"[{self.start}:{self.stop}]"
