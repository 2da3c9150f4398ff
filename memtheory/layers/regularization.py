"""Dropout."""

from __future__ import annotations

from dataclasses import dataclass

from memtheory._validation import check_probability
from memtheory.dtypes import DType, DTypeLike, dtype
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec

__all__ = ["Dropout"]

_DEVICE_MASKS: dict[str, str | None] = {"cuda": "bool", "cpu": None}
"""The mask dtype PyTorch's dropout keeps on each device (None: the activation dtype)."""


@dataclass(frozen=True)
class Dropout(Layer):
    """Zero each element with probability ``p`` during training (and rescale the rest).

    Training keeps a mask the size of the input, and nothing else (not the
    output). Its element type depends on the device: PyTorch's fused GPU kernel
    (``native_dropout``) keeps a one-byte ``bool`` mask (the default here); its
    CPU path draws the scaled noise ``bernoulli(1 - p) / (1 - p)`` in the
    activation dtype, multiplies, and keeps that noise (``device="cpu"``, or
    ``mask_dtype=None``). Checked against PyTorch 2.13 with
    ``torch.autograd.graph.saved_tensors_hooks``.

    Parameters
    ----------
    p : float, default 0.5
        Probability of dropping an element, in ``[0, 1)``.
    inplace : bool, default False
    mask_dtype : dtype name or None, default ``"bool"``
        ``None`` means the activation dtype.
    name : str, optional
    device : {"cuda", "cpu"} or None, default None
        Where it runs; sets the mask dtype (``"cuda"``: ``bool``, ``"cpu"``: the
        activation dtype) when ``mask_dtype`` is left at its default.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> [s.role for s in Dropout(0.5).saved_for_backward((B, 500))]
    ['mask']
    >>> cpu = Dropout(0.5, device="cpu").saved_for_backward((B, 500))[0]
    >>> cpu.dtype is None, cpu.nbytes(dtype("bf16"))
    (True, 1000*B)
    >>> Dropout(1.5)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: Dropout: p must be in [0, 1), got 1.5.
    """

    p: float = 0.5
    inplace: bool = False
    mask_dtype: DTypeLike | None = "bool"
    name: str | None = None
    device: str | None = None
    kind = "Dropout"
    autograd_checked = True

    def __post_init__(self) -> None:
        check_probability(self.p, "p", self.label)
        if self.device is not None:
            if self.device not in _DEVICE_MASKS:
                raise InvalidSizeError(
                    f"{self.label}: device must be 'cuda' or 'cpu', got {self.device!r}."
                )
            default = self.mask_dtype == "bool" or self.mask_dtype == dtype("bool")
            if not default and _DEVICE_MASKS[self.device] != self.mask_dtype:
                raise InvalidSizeError(
                    f"{self.label}: mask_dtype={self.mask_dtype!r} contradicts "
                    f"device={self.device!r}; give one of them."
                )
            object.__setattr__(self, "mask_dtype", _DEVICE_MASKS[self.device])
        if self.mask_dtype is not None:
            object.__setattr__(self, "mask_dtype", dtype(self.mask_dtype))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape unchanged."""
        return tuple(input_shape)

    def stores_output(self) -> bool:
        """Return False when in place."""
        return not self.inplace

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the mask (nothing when ``p`` is 0: PyTorch then passes the input through)."""
        if self.p == 0:
            return ()
        mask_dtype = self.mask_dtype if isinstance(self.mask_dtype, DType) else None
        return (TensorSpec("mask", tuple(input_shape), mask_dtype),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its mask; the identity (no node, no storage) when ``p`` is 0 or in eval mode."""
        if self.p == 0 or not training:
            return Autograd(aliases_input=True, records=False)
        return Autograd(
            saved=self.saved_for_backward(tuple(input_shapes[0])), aliases_input=self.inplace
        )

    def describe(self) -> str:
        """Drop probability."""
        return f"p={self.p}" + (", in place" if self.inplace else "")
