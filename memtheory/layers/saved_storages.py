"""A view of :meth:`~memtheory.layers.Layer.autograd`, one layer at a time.

Every layer states what its backward node keeps in :meth:`Layer.autograd`,
given its input's dtype and autocast (PyTorch's CPU attention upcasts 16-bit
inputs to fp32 and keeps the upcast copies; LayerNorm keeps fp32 statistics
under autocast; dropout keeps nothing in eval mode). The autograd convention
and :meth:`~memtheory.network.Network.saved_tensors` read that description;
:func:`saved_storages` reads the same one for a single layer and resolves it
into storages with concrete dtypes, each once (a view of another saved tensor
and the layer's buffers are left out), as ``tests/pytorch/layer_harness.py``
measures them (PyTorch 2.13, CPU).
"""

from __future__ import annotations

from collections.abc import Iterable

from memtheory.dtypes import DType, DTypeLike, dtype
from memtheory.dtypes import dtype as dtype_of
from memtheory.layers.base import Layer, Role, Shape, TensorSpec

__all__ = ["compute_dtype", "resolve_dtypes", "saved_storages"]


def resolve_dtypes(specs: Iterable[TensorSpec], default: DTypeLike) -> tuple[TensorSpec, ...]:
    """Return ``specs`` with every unspecified dtype set to ``default``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> [s.dtype.name for s in resolve_dtypes([TensorSpec("input", (B, 4))], "bf16")]
    ['bf16']
    """
    fill = dtype(default)
    return tuple(TensorSpec(s.role, s.shape, s.dtype or fill) for s in specs)


def compute_dtype(input_dtype: DTypeLike, autocast: DTypeLike | None) -> DType:
    """Return the dtype an autocast-eligible operation (a matmul) computes in.

    Under autocast, the low-precision dtype; otherwise the input's dtype.

    Examples
    --------
    >>> compute_dtype("fp32", "bf16").name, compute_dtype("bf16", None).name
    ('bf16', 'bf16')
    """
    return dtype(autocast) if autocast is not None else dtype(input_dtype)


def saved_storages(
    layer: Layer,
    input_shape: Shape,
    *,
    dtype: DTypeLike = "fp32",  # noqa: A002 (the dtype of the layer's input)
    training: bool = True,
    autocast: DTypeLike | None = None,
) -> tuple[TensorSpec, ...]:
    """Return the storages ``layer`` keeps for backward, each once, with concrete dtypes.

    Its :meth:`~memtheory.layers.Layer.autograd` description resolved: a
    saved tensor of unspecified dtype has the layer's compute dtype (under
    autocast, the low dtype for layers that autocast casts, fp32 for losses);
    its input, if autocast casts it, is kept as the cast (``"intermediate"``).

    Parameters
    ----------
    layer : Layer
    input_shape : Shape
    dtype : dtype name, default ``"fp32"``
        The dtype of the tensor the layer receives.
    training : bool, default True
        Training mode (dropout active) or eval mode with autograd recording.
    autocast : dtype name, optional
        The low-precision dtype of ``torch.autocast("cpu", ...)``, if it is on.

    Examples
    --------
    >>> from memtheory.layers import GELU, LayerNorm
    >>> from memtheory.symbols import B, S
    >>> [(s.role, s.dtype.name) for s in saved_storages(GELU(), (B, S, 8), dtype="bf16")]
    [('input', 'bf16')]
    >>> [s.dtype.name for s in saved_storages(LayerNorm(), (B, S, 8), dtype="bf16")]
    ['bf16', 'bf16', 'bf16']
    >>> [s.dtype.name for s in saved_storages(LayerNorm(), (B, S, 8), dtype="bf16",
    ...                                       autocast="bf16")]
    ['bf16', 'fp32', 'fp32']
    """
    given = dtype_of(dtype)
    spec = layer.autograd(
        (tuple(input_shape),), training=training, input_dtype=given, autocast=autocast
    )
    compute = given
    if autocast is not None and spec.autocast == "low":
        compute = dtype_of(autocast)
    elif autocast is not None and spec.autocast == "fp32":
        compute = dtype_of("fp32")
    storages = []
    parameters = dtype_of("fp32") if autocast is not None else given
    for position, saved in enumerate(spec.saved):
        if saved.view_of is not None or saved.role == "buffer":
            continue
        if saved.role == "input" and saved.dtype is None:
            # read as it arrives, or (under autocast) as the cast autocast makes
            role: Role = "input" if compute == given else "intermediate"
            storages.append(TensorSpec(role, saved.shape, compute))
        else:
            default = parameters if position in spec.parameter_dtype else compute
            storages.append(TensorSpec(saved.role, saved.shape, saved.dtype or default))
    return tuple(storages)
