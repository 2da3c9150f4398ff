r"""RMS normalisation of each attention head: Qwen3's ``q_norm`` and ``k_norm``.

Qwen3 normalises the queries and the keys head by head, after their
projections and before the rotary embedding: each head's :math:`d` features
are divided by their root mean square and scaled by one learned weight of
:math:`d` (``Qwen3RMSNorm(head_dim)``, shared by every head).

Examples
--------
>>> from memtheory.symbols import B, S
>>> norm = HeadRMSNorm(128)
>>> norm.output_shape((B, S, 4096)), norm.parameter_count((B, S, 4096))
((B, S, 4096), 128)
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.errors import ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape
from memtheory.layers.rms_norm import GemmaRMSNorm, RMSNorm

__all__ = ["HeadRMSNorm"]


@dataclass(frozen=True)
class HeadRMSNorm(Layer):
    r"""Llama-style RMS norm over each head's :math:`d` features of a ``(B, S, a d)`` tensor.

    Its parameters are one weight of ``head_dim``; what it keeps is that of
    :class:`~memtheory.layers.RMSNorm` on the ``(B, S, a, d)`` view (an fp32
    copy or the input, one inverse RMS per position and head, the normalised
    input). Measured (CPU, PyTorch 2.13, transformers 5.24's ``Qwen3ForCausalLM``):
    a Qwen3 training step is exact under the autograd convention in fp32, bf16
    and autocast (``tests/pytorch/test_family_autograd.py``).

    Gemma 3 normalises its heads with its ``(1 + w)`` norm (``Gemma3RMSNorm(head_dim)``):
    ``gemma=True`` keeps what :class:`~memtheory.layers.rms_norm.GemmaRMSNorm` keeps.

    Parameters
    ----------
    head_dim : size
        Width :math:`d` of one head.
    gemma : bool, default False
        Gemma's ``(1 + w)`` norm, scaled in fp32.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> [t.shape for t in HeadRMSNorm(8).saved_for_backward((B, S, 32))]
    [(B, S, 4, 8), (B, S, 4), (B, S, 4, 8)]
    """

    head_dim: SizeLike
    name: str | None = None
    gemma: bool = False
    kind = "HeadRMSNorm"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (Qwen3)
    #: As RMSNorm's: inference under the autograd convention is not checked.
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_dim", as_size(self.head_dim, "head_dim", self.label))

    def _heads(self, input_shape: Shape) -> Shape:
        """Return the ``(..., heads, head_dim)`` view of ``input_shape``."""
        if len(input_shape) < 2:
            raise ShapeError(
                f"{self.label}: needs (batch, ..., heads * head_dim), got "
                f"{describe_shape(tuple(input_shape))}."
            )
        width = sp.sympify(input_shape[-1])
        heads = width / sp.sympify(self.head_dim)
        if heads.is_number and not heads.is_integer:
            raise ShapeError(
                f"{self.label}: the last axis ({width}) is not a whole number of heads of "
                f"{self.head_dim}. Check head_dim."
            )
        return (*tuple(input_shape)[:-1], heads, sp.sympify(self.head_dim))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        self._heads(input_shape)
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """One scale per feature of a head: ``head_dim``."""
        self._heads(input_shape)
        return sp.sympify(self.head_dim)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(head_dim,)``."""
        self._heads(input_shape)
        return (("weight", (sp.sympify(self.head_dim),)),)

    def _norm(self) -> RMSNorm:
        """Return the norm it runs on each head: Llama's, or Gemma's."""
        return GemmaRMSNorm() if self.gemma else RMSNorm()

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what :class:`RMSNorm` keeps on the per-head view."""
        return self._norm().saved_for_backward(self._heads(input_shape))

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of its output and of the normalised input it keeps."""
        return self._norm().activation_count(self._heads(input_shape))

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return :class:`RMSNorm`'s description on the per-head view."""
        return self._norm().autograd(
            (self._heads(input_shapes[0]),), training=training, input_dtype=input_dtype,
            autocast=autocast,
        )

    def describe(self) -> str:
        """Show the head width."""
        return f"per head of {self.head_dim}" + (", 1 + w" if self.gemma else "")
