"""Where PyTorch's CPU kernels return a bigger storage than their fake (meta) kernels say.

A fake kernel gives each output the storage its shape needs. A few CPU
kernels instead compute into a buffer of the input's size and then shrink the
output to the reduced shape in place, which keeps the storage: a mean-reduced
``mse_loss`` over ``N`` elements returns one number whose storage holds ``N``
(measured with :func:`memtheory.torch.measure` on PyTorch 2.13 CPU, see the
tests). :func:`real_storage_bytes` gives those outputs their real storage
size, so a trace counts what ``measure`` counts.

Other CPU kernels return outputs of another dtype or storage than their fake
kernels, found by running each operation of a zoo of modules on real CPU
tensors and on fake copies of its inputs side by side
(``tests/pytorch/test_trace_kernels.py``), under fp32, bf16 and autocast.
:func:`cpu_outputs` replaces those fake outputs by ones like the CPU's:

* a normalisation over a bf16 (or fp16) input with fp32 weights, as autocast
  runs it, keeps its statistics in fp32 (``native_batch_norm``'s,
  ``native_layer_norm``'s and ``native_group_norm``'s mean and inverse
  standard deviation), where the fake kernel says the input's dtype: 4 bytes
  per channel (batch norm) under-counted; and ``native_group_norm_backward``
  returns the input's gradient in the input's dtype, not fp32;
* ``_embedding_bag`` in mean or max mode returns its ``offset2bag`` in a
  storage one element longer than its shape (8 bytes); with bf16 weights in
  sum mode it returns none at all;
* oneDNN's ``mkldnn_rnn_layer_backward`` returns the bias gradient twice, the
  second a clone (``diff_b2_``, ``aten/src/ATen/native/mkldnn/RNN.cpp``), where
  the fake kernel returns one tensor twice: ``4 H`` fp32 numbers under-counted
  per LSTM layer and direction. (Its forward's workspace is sized in
  :mod:`~memtheory.torch.tracing.kernels_onednn`.)
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RESIZED_LOSSES", "cpu_outputs", "real_storage_bytes"]

_LOW = (torch.bfloat16, torch.float16)

_NORMS = {
    torch.ops.aten.native_batch_norm.default: 1,
    torch.ops.aten.native_layer_norm.default: 2,
    torch.ops.aten.native_group_norm.default: 1,
}
"""Normalisations whose statistics (outputs 1 and 2) the CPU keeps in fp32 for a low-precision
input with fp32 weights, with the position of their weight argument."""

RESIZED_LOSSES: dict[Any, int] = {
    torch.ops.aten.mse_loss.default: 2,
    torch.ops.aten.smooth_l1_loss.default: 2,
    torch.ops.aten.soft_margin_loss.default: 2,
    torch.ops.aten.binary_cross_entropy.default: 3,
}
"""Losses whose reduced CPU output keeps a storage of the (broadcast) input's size, with the
position of their ``reduction`` argument (0 is "none", which has no such buffer)."""


def real_storage_bytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Return the CPU storage bytes of ``func``'s output when its fake kernel says less, else None.

    Examples
    --------
    >>> x, y = torch.randn(3, 5), torch.randn(3, 5)
    >>> real_storage_bytes(torch.ops.aten.mse_loss.default, (x, y, 1), {})
    60
    >>> torch.nn.functional.mse_loss(x, y).untyped_storage().nbytes()  # what the CPU keeps
    60
    """
    position = RESIZED_LOSSES.get(func)
    if position is None:
        return None
    reduction = args[position] if len(args) > position else kwargs.get("reduction", 1)
    if reduction == 0:
        return None
    shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
    count: Any = 1
    for size in shape:
        count = count * size
    return count * args[0].element_size()


def cpu_outputs(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
    """Return ``out`` (a fake kernel's outputs) with the CPU kernel's dtypes and storages.

    Examples
    --------
    >>> x, w = torch.randn(4, 3, dtype=torch.bfloat16), torch.ones(3)
    >>> real = torch.ops.aten.native_layer_norm.default(x, [3], w, None, 1e-5)
    >>> real[1].dtype  # the CPU keeps the statistics in fp32
    torch.float32
    >>> from torch._subclasses.fake_tensor import FakeTensorMode
    >>> with FakeTensorMode(allow_non_fake_inputs=True):
    ...     fake = torch.ops.aten.native_layer_norm.default(x, [3], w, None, 1e-5)
    ...     fixed = cpu_outputs(torch.ops.aten.native_layer_norm.default, (x, [3], w, None, 1e-5),
    ...                         {}, fake)
    >>> fake[1].dtype, fixed[1].dtype  # what the fake kernel says, and what a trace counts
    (torch.bfloat16, torch.float32)
    """
    if func in _NORMS:
        return _norm_statistics(args, _NORMS[func], out)
    if func is torch.ops.aten.native_group_norm_backward.default:
        return _group_norm_input_gradient(args, out)
    if func is torch.ops.aten._embedding_bag.default:
        return _embedding_bag(args, kwargs, out)
    if func is torch.ops.aten.mkldnn_rnn_layer_backward.default:
        return _rnn_bias_gradients(out)
    return out


def _argument(args: tuple[Any, ...], position: int) -> Any:
    return args[position] if len(args) > position else None


def _norm_statistics(args: tuple[Any, ...], weight_at: int, out: Any) -> Any:
    """Give the mean and inverse deviation in fp32 for a low-precision input with fp32 weights."""
    x, weight = args[0], _argument(args, weight_at)
    if x.dtype not in _LOW or not isinstance(weight, torch.Tensor):
        return out
    if weight.dtype != torch.float32 or out[1].dtype == torch.float32:
        return out
    return (out[0], *(t.to(torch.float32) for t in out[1:3]), *out[3:])


def _group_norm_input_gradient(args: tuple[Any, ...], out: Any) -> Any:
    """Give ``native_group_norm_backward``'s input gradient the input's dtype (argument 1)."""
    x, gradient = args[1], out[0]
    if gradient is None or gradient.dtype == x.dtype:
        return out
    return (gradient.to(x.dtype), *out[1:])


def _rnn_bias_gradients(out: Any) -> Any:
    """Give ``mkldnn_rnn_layer_backward``'s second bias gradient its own storage (a clone)."""
    first, second = out[3], out[4]
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor):
        return out
    if first.untyped_storage()._cdata != second.untyped_storage()._cdata:
        return out
    return (*out[:4], torch.empty_like(second), *out[5:])


def _embedding_bag(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
    """Give ``offset2bag`` one more element in mean and max modes, and none in bf16 sum mode."""
    weight, indices = args[0], args[1]
    mode = _argument(args, 4) if len(args) > 4 else kwargs.get("mode", 0)
    offset2bag = out[1]
    if mode in (1, 2):  # mean, max
        longer = offset2bag.new_empty(offset2bag.numel() + 1)[: offset2bag.numel()]
        return (out[0], longer.view(offset2bag.shape), *out[2:])
    if weight.dtype == torch.bfloat16 and offset2bag.numel() == indices.numel():
        return (out[0], offset2bag.new_empty(0), *out[2:])
    return out
