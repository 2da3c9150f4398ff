"""RMS normalisation: each position divided by the root mean square of its features."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import sympy as sp

from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import (
    Autograd,
    Shape,
    Stage,
    TensorSpec,
    elements,
)
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

        Measured on CPU (PyTorch 2.13): a 16-bit input is upcast to fp32 and
        the upcast copy is kept; the inverse RMS is fp32; the normalised input
        is in the input's dtype (``"llama"``) or fp32 (``"torch"``). Both run
        their backward as the same nodes (``torch.rms_norm`` decomposes on
        CPU): the upcast (16 bits), ``pow``, ``mean``, ``rsqrt``, the
        normalising ``mul`` and the scale, each with the gradients and
        temporaries it allocates (``pow``'s two fp32 products; the unsummed
        products behind the inverse RMS's and the scale's gradients); the two
        fp32 gradients of the input meet and are added, as autograd adds them.
        Without a gradient for the input only the scale's node is recorded.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> [t.role for t in RMSNorm(implementation="torch").autograd(((B, S, 8),)).saved]
        ['input', 'statistics', 'intermediate']
        >>> [s.label for s in RMSNorm().autograd(((B, S, 8),), input_dtype="bf16").stages]
        ['to fp32', 'pow', 'mean', 'rsqrt', 'mul', 'scale']
        """
        shape = tuple(input_shapes[0])
        self.check_input(shape)
        fp32 = as_dtype("fp32")
        given = as_dtype(input_dtype) if input_dtype is not None else None
        saved = [
            TensorSpec("input", shape)
            if given in (None, fp32)
            else TensorSpec("intermediate", shape, fp32),
            TensorSpec("statistics", shape[:-1], fp32),
        ]
        if self.elementwise_affine:
            normalised = given if self.implementation == "llama" else fp32
            saved.append(TensorSpec("intermediate", shape, normalised))
        refused = None
        if given is not None and given != fp32:
            refused = (
                f"reading a {given.name} tensor that needs no gradient (the network's input), "
                "none of its fp32 intermediates is saved and its forward's own transients "
                "(the fp32 copy, x.pow(2), the product before the cast back) set the peak; "
                "that case is not measured. Put a layer with parameters before it, or feed "
                "fp32 (autocast)."
            )
        return Autograd(
            saved=tuple(saved),
            stages=self._stages(shape, given),
            without_input_gradient=refused,
        )

    def _stages(self, shape: Shape, given: DType | None) -> tuple[Stage, ...]:
        """Its backward nodes in creation order, with the gradients and temporaries they make."""
        fp32 = as_dtype("fp32")
        full, rows = (
            TensorSpec("intermediate", shape, fp32),
            TensorSpec("statistics", shape[:-1], fp32),
        )
        stages: list[Stage] = []
        upcast = given not in (None, fp32)
        if upcast:  # x.to(fp32)
            stages.append(Stage("to fp32", edges=((-1, TensorSpec("input", shape, given)),)))
        into = len(stages) - 1  # where the gradient of the fp32 input goes (-1: the input)
        stages.append(Stage("pow", (0,), edges=((into, full),), temporaries=(full, full)))
        stages.append(Stage("mean", edges=((len(stages) - 1, full),)))
        stages.append(
            Stage("rsqrt", (1,), edges=((len(stages) - 1, rows),), temporaries=(rows, rows))
        )
        stages.append(
            Stage("mul", (0, 1), edges=((into, full), (len(stages) - 1, rows)), temporaries=(full,))
        )
        if self.elementwise_affine:
            out = TensorSpec("output", shape, given)
            stages.append(
                Stage(
                    "scale",
                    (2,),
                    edges=((len(stages) - 1, out),),
                    temporaries=(out,),
                    parameters=("weight",),
                )
            )
        return tuple(stages)

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
    at the end. Its autograd behaviour has not been measured: the autograd
    convention refuses it.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> GemmaRMSNorm().parameter_count((B, S, 2048))
    2048
    """

    kind = "GemmaRMSNorm"
    autograd_checked = False
