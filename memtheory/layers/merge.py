"""Merge layers: combine the outputs of several earlier layers (residual sums, concatenation).

A merge layer reads two or more tensors, so in a
:class:`~memtheory.network.Network` it is wrapped in a
:class:`~memtheory.network.Node` naming what it reads. Its formulas take the
tuple of input shapes; the single-shape methods every layer has treat one
shape as a merge of one tensor (which changes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy as sp

from memtheory._validation import as_size
from memtheory.dtypes import DTypeLike
from memtheory.errors import ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape

__all__ = ["Add", "BroadcastMultiply", "Concat", "Merge", "Multiply"]


class Merge(Layer):
    """Base of layers that read several inputs; they have no parameters.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> concat = Concat()
    >>> isinstance(concat, Merge), concat.merged_shape(((B, 64, 28, 28), (B, 32, 28, 28)))
    (True, (B, 96, 28, 28))
    >>> concat.parameter_count((B, 64, 28, 28))
    0
    """

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the output shape for these input shapes, or raise :class:`ShapeError`."""
        raise NotImplementedError

    def merged_saved_for_backward(self, input_shapes: tuple[Shape, ...]) -> tuple[TensorSpec, ...]:
        """Return the tensors the backward pass keeps: none for a sum or a concatenation."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Nothing saved; the backward hands the incoming gradient (or slices of it) on."""
        return Autograd(
            saved=self.merged_saved_for_backward(tuple(tuple(s) for s in input_shapes)),
            aliases_input=not self.stores_output(),
            gradient_is_view=True,
            promotes=self.promotes_inputs,
        )

    #: Whether inputs of different dtypes are promoted inside the kernel (``add``), not cast.
    promotes_inputs: ClassVar[bool] = False

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the output shape of a merge of one tensor: its shape."""
        return self.merged_shape((tuple(input_shape),))

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what a merge of one tensor keeps."""
        return self.merged_saved_for_backward((tuple(input_shape),))


def _known_different(first: sp.Expr, second: sp.Expr) -> bool:
    """Whether two sizes are provably different (numbers, or a nonzero numeric gap)."""
    gap = sp.expand(sp.sympify(first) - sp.sympify(second))
    return bool(gap.is_number and gap != 0)


@dataclass(frozen=True)
class Add(Merge):
    """Element-wise sum of tensors of one shape: a residual connection.

    The backward pass of a sum needs nothing but the incoming gradient. With
    ``inplace=True`` (torchvision's ``out += identity``) the sum is written into
    the first input's storage and creates no new activation memory.

    Sizes that are numbers must agree; symbolic sizes that sympy cannot prove
    equal are accepted here and checked again when the network is evaluated.

    Parameters
    ----------
    inplace : bool, default False
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> Add().merged_shape(((B, 64, 56, 56), (B, 64, 56, 56)))
    (B, 64, 56, 56)
    >>> Add(name="add").merged_shape(((B, 64, 56, 56), (B, 256, 56, 56)))
    Traceback (most recent call last):
    ...
    memtheory.errors.ShapeError: Add 'add': cannot add shapes (B, 64, 56, 56) and ...
    """

    inplace: bool = False
    name: str | None = None
    kind = "Add"
    autograd_checked = True
    promotes_inputs = True

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the common shape of the inputs."""
        first = tuple(input_shapes[0])
        for other in input_shapes[1:]:
            if len(other) != len(first) or any(
                _known_different(a, b) for a, b in zip(first, other, strict=True)
            ):
                raise ShapeError(
                    f"{self.label}: cannot add shapes {describe_shape(first)} and "
                    f"{describe_shape(tuple(other))}; a sum needs equal shapes. Give the shortcut "
                    "a projection (a 1x1 Conv2d or a Dense) to match them."
                )
        return first

    def stores_output(self) -> bool:
        """Return False when in place: the sum overwrites the first input."""
        return not self.inplace

    def describe(self) -> str:
        """``in place`` when it is."""
        return "in place" if self.inplace else ""


@dataclass(frozen=True)
class Concat(Merge):
    """Concatenation along one dimension (channels by default), as ``torch.cat``.

    Parameters
    ----------
    dim : int, default 1
        The dimension to join along, counting the batch as 0.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> Concat().merged_shape(((B, 64, 28, 28), (B, 32, 28, 28)))
    (B, 96, 28, 28)
    """

    dim: int = 1
    name: str | None = None
    kind = "Concat"
    autograd_checked = True

    def __post_init__(self) -> None:
        as_size(self.dim, "dim", self.label, minimum=1)

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the inputs' common shape with dimension ``dim`` summed."""
        first = tuple(input_shapes[0])
        if self.dim >= len(first):
            raise ShapeError(
                f"{self.label}: dim {self.dim} does not exist in {describe_shape(first)}."
            )
        for other in input_shapes[1:]:
            mismatch = len(other) != len(first) or any(
                i != self.dim and _known_different(a, b)
                for i, (a, b) in enumerate(zip(first, other, strict=True))
            )
            if mismatch:
                raise ShapeError(
                    f"{self.label}: cannot concatenate {describe_shape(first)} and "
                    f"{describe_shape(tuple(other))} along dim {self.dim}; every other "
                    "dimension must agree."
                )
        joined = sp.Add(*(shape[self.dim] for shape in input_shapes))
        return (*first[: self.dim], joined, *first[self.dim + 1 :])

    def describe(self) -> str:
        """Describe the dimension joined along."""
        return f"dim {self.dim}"


@dataclass(frozen=True)
class Multiply(Merge):
    """Element-wise product of two tensors of one shape: the gate of a gated MLP.

    SwiGLU (Shazeer 2020; Llama's ``act_fn(gate_proj(x)) * up_proj(x)``)
    multiplies the activated gate by the up projection. The product is a new
    tensor. Its backward (PyTorch's ``MulBackward0``) keeps each input for the
    other's gradient: both when both need a gradient, which is the case in a
    gated MLP; measured on CPU (PyTorch 2.13) on Hugging Face's ``LlamaMLP``.
    The backward makes a new gradient for each input.

    Parameters
    ----------
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> spec = Multiply().autograd(((B, S, 11008), (B, S, 11008)))
    >>> [(t.role, t.operand) for t in spec.saved], spec.gradient_is_view
    ([('input', 1), ('input', 0)], False)
    """

    name: str | None = None
    kind = "Multiply"
    autograd_checked = True  # tests/pytorch/test_llama_autograd.py

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the common shape of the two inputs."""
        if len(input_shapes) != 2:
            raise ShapeError(
                f"{self.label}: multiplies two tensors, got {len(input_shapes)}; wire it with "
                "Node(Multiply(), inputs=(first, second))."
            )
        first, second = (tuple(s) for s in input_shapes)
        if len(first) != len(second) or any(
            _known_different(a, b) for a, b in zip(first, second, strict=True)
        ):
            raise ShapeError(
                f"{self.label}: cannot multiply shapes {describe_shape(first)} and "
                f"{describe_shape(second)} element by element; give both branches the same "
                "width (the gate and up projections of a gated MLP have intermediate_size each)."
            )
        return first

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Keep the second input (for the first's gradient) and the first (for the second's)."""
        first, second = (tuple(s) for s in input_shapes)
        return Autograd(
            saved=(TensorSpec("input", second, operand=1), TensorSpec("input", first)),
        )


@dataclass(frozen=True)
class BroadcastMultiply(Multiply):
    """Scale a tensor by a gate of one feature: ``x * g`` with ``g`` of shape ``(..., 1)``.

    Qwen2-MoE scales its shared expert's output by ``sigmoid(gate(x))``, one
    number per position. The product has the first input's shape; the
    backward keeps both inputs, as :class:`Multiply`'s does (the gate's
    ``(..., 1)`` and the tensor), and makes a new gradient for each: the
    gate's is reduced over the features to its own shape. Measured on CPU
    (PyTorch 2.13) on transformers' ``Qwen2MoeSparseMoeBlock``, 0 bytes off
    in fp32 and bf16 (tests/pytorch/test_moe_autograd.py).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> BroadcastMultiply().merged_shape(((B, S, 64), (B, S, 1)))
    (B, S, 64)
    >>> [t.shape for t in BroadcastMultiply().autograd(((B, S, 64), (B, S, 1))).saved]
    [(B, S, 1), (B, S, 64)]
    """

    name: str | None = None
    kind = "BroadcastMultiply"
    autograd_checked = True  # tests/pytorch/test_moe_autograd.py

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the first input's shape, after checking the gate has one feature."""
        if len(input_shapes) != 2:
            raise ShapeError(
                f"{self.label}: multiplies a tensor by a gate, got {len(input_shapes)} inputs; "
                "wire it with Node(BroadcastMultiply(), inputs=(tensor, gate))."
            )
        first, gate = (tuple(s) for s in input_shapes)
        if len(first) != len(gate) or _known_different(gate[-1], 1) or any(
            _known_different(a, b) for a, b in zip(first[:-1], gate[:-1], strict=True)
        ):
            raise ShapeError(
                f"{self.label}: the gate {describe_shape(gate)} must match "
                f"{describe_shape(first)} with one feature."
            )
        return first
