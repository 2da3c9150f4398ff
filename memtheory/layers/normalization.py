"""Batch normalisation."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DTypeLike, dtype
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["BatchNorm2d"]


@dataclass(frozen=True)
class BatchNorm2d(Layer):
    """Batch normalisation over the channels of a ``(batch, channels, height, width)`` input.

    With ``affine`` it learns a scale and a shift per channel (:math:`2C`
    parameters, counted as :math:`C` weights and :math:`C` biases); with
    ``track_running_stats`` it also keeps a running mean and variance per
    channel and an int64 count of batches, as buffers (state, not trained).

    Training keeps its input and, per channel, the batch mean and inverse
    standard deviation in the parameters' dtype (bf16 in a bf16 model, fp32
    under autocast; measured on PyTorch 2.13 CPU). In eval mode it computes no
    statistics.

    Parameters
    ----------
    affine : bool, default True
    track_running_stats : bool, default True
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> bn = BatchNorm2d()
    >>> bn.parameter_count((B, 64, 56, 56))
    128
    >>> [(b.role, b.shape) for b in bn.buffers((B, 64, 56, 56))]
    [('buffer', (64,)), ('buffer', (64,)), ('buffer', ())]
    """

    affine: bool = True
    track_running_stats: bool = True
    name: str | None = None
    kind = "BatchNorm2d"
    autograd_checked = True
    input_rank = 4

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        self.check_input(input_shape)
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """One scale per channel, if affine."""
        self.check_input(input_shape)
        return input_shape[1] if self.affine else sp.Integer(0)

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """One shift per channel, if affine."""
        return input_shape[1] if self.affine else sp.Integer(0)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` and ``bias`` of ``(channels,)``, if affine."""
        self.check_input(input_shape)
        channels = (input_shape[1],)
        return (("weight", channels), ("bias", channels)) if self.affine else ()

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the running mean and variance (parameter dtype) and the int64 batch count."""
        if not self.track_running_stats:
            return ()
        channels = input_shape[1]
        return (
            TensorSpec("buffer", (channels,)),
            TensorSpec("buffer", (channels,)),
            TensorSpec("buffer", (), dtype("int64")),
        )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input and the per-channel batch mean and inverse std (parameter dtype)."""
        channels = input_shape[1]
        return (
            TensorSpec("input", tuple(input_shape)),
            TensorSpec("statistics", (channels,)),
            TensorSpec("statistics", (channels,)),
        )

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its input and, in training, the statistics in the parameters' dtype.

        Its kernel plan says how PyTorch runs it:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.norms.batch_norm`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )
