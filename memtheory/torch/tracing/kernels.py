"""Where PyTorch's CPU kernels return a bigger storage than their fake (meta) kernels say.

A fake kernel gives each output the storage its shape needs. A few CPU
kernels instead compute into a buffer of the input's size and then shrink the
output to the reduced shape in place, which keeps the storage: a mean-reduced
``mse_loss`` over ``N`` elements returns one number whose storage holds ``N``
(measured with :func:`memtheory.torch.measure` on PyTorch 2.13 CPU, see the
tests). :func:`real_storage_bytes` gives those outputs their real storage
size, so a trace counts what ``measure`` counts.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RESIZED_LOSSES", "real_storage_bytes"]

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
