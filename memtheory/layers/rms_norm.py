"""RMS normalisation: each position divided by the root mean square of its features."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import (
    Autograd,
    Shape,
    TensorSpec,
    elements,
)
from memtheory.layers.kernel_plans import planned_autograd
from memtheory.layers.layer_norm import FeatureNorm

__all__ = ["GemmaRMSNorm", "RMSNorm"]


@dataclass(frozen=True)
class RMSNorm(FeatureNorm):
    r"""Root-mean-square normalisation over the last dimension (Zhang and Sennrich 2019).

    :math:`y = w \odot x / \sqrt{\overline{x^2} + \epsilon}`: one learned scale
    per feature (:math:`D` parameters), no shift and no mean. Both
    implementations compute in fp32 whatever the input's dtype. Measured on
    CPU (PyTorch 2.13), training keeps:

    * ``implementation="llama"`` (default; Hugging Face's ``LlamaRMSNorm``):
      the input in fp32 (the input itself at fp32, else an fp32 copy), the fp32
      inverse RMS of every position, and the normalised input cast back to the
      input's dtype (what the scale multiplies);
    * ``implementation="torch"`` (``torch.nn.RMSNorm``): the fp32 input (or
      copy), the fp32 inverse RMS, and, with a scale, the fp32 normalised input.

    Parameters
    ----------
    elementwise_affine : bool, default True
        Learn the scale (Llama always does).
    implementation : {"llama", "torch"}, default "llama"
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> norm = RMSNorm()
    >>> norm.output_shape((B, S, 4096)), norm.parameter_count((B, S, 4096))
    ((B, S, 4096), 4096)
    >>> from memtheory.layers.saved_storages import saved_storages
    >>> [(t.role, t.dtype.name) for t in saved_storages(norm, (B, S, 64), dtype="bf16")]
    [('intermediate', 'fp32'), ('statistics', 'fp32'), ('intermediate', 'bf16')]
    """

    elementwise_affine: bool = True
    implementation: Literal["llama", "torch"] = "llama"
    name: str | None = None
    kind = "RMSNorm"
    autograd_checked = True
    #: Its forward holds the variance and fp32 intermediates that the one forward moment of the
    #: autograd convention does not show: inference under it is refused (see ``autograd``).
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        if self.implementation not in ("llama", "torch"):
            raise InvalidSizeError(
                f"{self.label}: implementation must be 'llama' or 'torch', "
                f"got {self.implementation!r}."
            )
        if self.implementation == "llama" and not self.elementwise_affine:
            raise InvalidSizeError(
                f"{self.label}: Llama's RMSNorm always learns its scale; "
                "use implementation='torch' for elementwise_affine=False."
            )

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(features,)``, if affine."""
        self.check_input(input_shape)
        return (("weight", (input_shape[-1],)),) if self.elementwise_affine else ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return the saved storages with their dtypes (the same in training and eval).

        How PyTorch runs it is its kernel plan's to say,
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.norms.rms_norm`.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> [t.role for t in RMSNorm(implementation="torch").autograd(((B, S, 8),)).saved]
        ['input', 'statistics', 'intermediate']
        >>> [s.label for s in RMSNorm().autograd(((B, S, 8),), input_dtype="bf16").stages]
        ['to fp32', 'pow', 'mean', 'rsqrt', 'mul', 'scale']
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what an fp32 run keeps: its input, the inverse RMS, the normalised input."""
        return tuple(
            s if s.role == "statistics" else replace(s, dtype=None)
            for s in self.autograd((tuple(input_shape),)).saved
        )

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of its output and of the normalised input it keeps (at fp32)."""
        kept = [s for s in self.saved_for_backward(input_shape) if s.role == "intermediate"]
        return elements(self.output_shape(input_shape)) + sum(
            (s.elements for s in kept), start=sp.Integer(0)
        )

    def describe(self) -> str:
        """``no affine`` when off, and a non-default implementation."""
        parts = [] if self.elementwise_affine else ["no affine"]
        if self.implementation != "llama":
            parts.append(self.implementation)
        return ", ".join(parts)


@dataclass(frozen=True)
class GemmaRMSNorm(RMSNorm):
    r"""Gemma's RMS norm: :math:`y = (1 + w) \odot x / \sqrt{\overline{x^2} + \epsilon}`.

    The same :math:`D` parameters as :class:`RMSNorm` (the scale is stored as
    an offset from one, initialised to zero), computed in fp32 and cast back
    at the end: training keeps the fp32 input (or copy), the fp32 inverse
    RMS, the fp32 normalised input and the fp32 ``1 + w``
    (:func:`memtheory.conventions.autograd.kernels.torch_2_13.norms.gemma_rms_norm`;
    measured against Gemma 1, 2 and 3 on CPU, ``tests/pytorch/test_family_autograd.py``).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> GemmaRMSNorm().parameter_count((B, S, 2048))
    2048
    """

    kind = "GemmaRMSNorm"
    autograd_checked = True
