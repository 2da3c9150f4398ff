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

    The autograd convention refuses it, for a reason outside the slice: on a
    tiny Phi-3 (CPU, PyTorch 2.13) every saved tensor and the backward agree
    with ``measure`` and an SGD step is exact, but the for-loop Adam step's
    temporaries follow Phi-3's ``module.parameters()`` order, which the
    convention does not (``tests/pytorch/test_family_autograd.py``).

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
    autograd_refusal = (
        "Phi-3's fused projections are sliced (qkv_proj into q, k, v; gate_up_proj into gate "
        "and up). Measured on a tiny Phi-3 (CPU, PyTorch 2.13) the slices' saved tensors and "
        "backward agree to the byte, and an SGD step is exact, but torch.optim's for-loop "
        "Adam/AdamW step is not: its temporaries follow module.parameters() order, and Phi-3 "
        "registers o_proj before qkv_proj and each layer's norms after its MLP, an order the "
        "convention (which lists parameters layer by layer, in data-flow order) does not "
        "follow (4,032 bytes low in bf16). convention='breakdown' gives an estimate."
    )

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
