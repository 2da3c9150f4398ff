"""Layer normalisation: each position normalised over its features."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.errors import RankError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["LayerNorm"]


class FeatureNorm(Layer):
    """What LayerNorm and RMSNorm share: they normalise the last axis and learn a scale per feature.

    A base class without fields of its own; subclasses declare ``elementwise_affine``.
    """

    elementwise_affine: bool

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` for an input without features beside the batch."""
        if len(input_shape) < 2:
            raise RankError(
                f"{self.label}: needs at least a 2-D input (batch, ..., features), got "
                f"{len(input_shape)}-D {describe_shape(tuple(input_shape))}. "
                "Check the layers before it."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        self.check_input(input_shape)
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """One scale per feature, if affine."""
        self.check_input(input_shape)
        return input_shape[-1] if self.elementwise_affine else sp.Integer(0)


@dataclass(frozen=True)
class LayerNorm(FeatureNorm):
    """Layer normalisation over the last dimension, as ``torch.nn.LayerNorm(features)``.

    With ``elementwise_affine`` it learns a scale per feature and (with
    ``bias``) a shift per feature: :math:`2D` parameters for :math:`D`
    features. Training keeps its input and, per position, the mean and the
    inverse standard deviation. Measured on CPU (PyTorch 2.13): the statistics
    are in the input's dtype (bf16 for a bf16 model), except under autocast,
    where a 16-bit input meets fp32 parameters and they are fp32.

    Parameters
    ----------
    elementwise_affine : bool, default True
    bias : bool, default True
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> ln = LayerNorm()
    >>> ln.output_shape((B, S, 768)), ln.parameter_count((B, S, 768))
    ((B, S, 768), 1536)
    >>> [(t.role, t.shape) for t in ln.saved_for_backward((B, S, 768))]
    [('input', (B, S, 768)), ('statistics', (B, S)), ('statistics', (B, S))]
    >>> from memtheory.layers.saved_storages import saved_storages
    >>> [t.dtype.name for t in saved_storages(ln, (B, S, 768), dtype="bf16")]
    ['bf16', 'bf16', 'bf16']
    """

    elementwise_affine: bool = True
    bias: bool = True
    name: str | None = None
    kind = "LayerNorm"
    autograd_checked = True  # tests/pytorch/test_transformer_pairs.py

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """One shift per feature, if affine with a bias."""
        return input_shape[-1] if self.elementwise_affine and self.bias else sp.Integer(0)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` and (with ``bias``) ``bias`` of ``(features,)``, if affine."""
        self.check_input(input_shape)
        if not self.elementwise_affine:
            return ()
        features = (input_shape[-1],)
        return (("weight", features), ("bias", features)) if self.bias else (("weight", features),)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input, and the mean and inverse std of every position, in the input's dtype."""
        self.check_input(input_shape)
        positions = tuple(input_shape[:-1])
        return (
            TensorSpec("input", tuple(input_shape)),
            TensorSpec("statistics", positions),
            TensorSpec("statistics", positions),
        )

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its input, mean and inverse std: fp32 statistics under autocast when affine.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.norms.layer_norm`.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> spec = LayerNorm().autograd(((B, S, 8),), input_dtype="bf16", autocast="bf16")
        >>> [(t.role, t.dtype and t.dtype.name) for t in spec.saved]
        [('input', None), ('statistics', 'fp32'), ('statistics', 'fp32')]
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def describe(self) -> str:
        """``no affine`` or ``no bias`` when they are off."""
        if not self.elementwise_affine:
            return "no affine"
        return "" if self.bias else "no bias"
