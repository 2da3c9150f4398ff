"""Run a few PyTorch functions by their size-generic operator, so that sizes stay symbolic.

Some functions are written in C++ above the dispatcher and read a tensor's
sizes as plain integers, which fixes a symbolic size to its example value:
``torch.nn.functional.pad`` with ``mode="constant"`` (used by Hugging Face's
causal-LM loss to shift the labels) is one, down to its operator
``aten.constant_pad_nd``. :class:`SizeGenericFunctions` pads a tensor that
needs no gradient (labels, masks) by hand instead: a tensor of the padded
shape filled with the value, and the input copied into its middle. That
allocates one storage of the padded size, the one ``constant_pad_nd`` returns,
and autograd saves nothing either way, so what ``measure`` counts is unchanged.
A tensor that needs a gradient is left to PyTorch (and if its size gets fixed,
:func:`~memtheory.torch.tracing.trace` fits the formulas instead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["SizeGenericFunctions"]


class SizeGenericFunctions(TorchFunctionMode):
    """A torch-function mode that sends constant padding to ``aten.constant_pad_nd``."""

    def __torch_function__(  # noqa: D105
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _PADS:
            padded = _constant_pad(*args, **kwargs)
            if padded is not None:
                return padded
        return func(*args, **kwargs)


def _constant_pad(
    input: torch.Tensor,  # noqa: A002 (PyTorch's name)
    pad: Any,
    mode: str = "constant",
    value: float | None = None,
) -> torch.Tensor | None:
    pads = list(pad)
    if (
        mode != "constant"
        or (input.requires_grad and torch.is_grad_enabled())
        or len(pads) % 2
        or len(pads) > 2 * input.dim()
        or any(not isinstance(p, int) or p < 0 for p in pads)
    ):
        return None
    shape = list(input.shape)
    slices: list[slice] = [slice(None)] * input.dim()
    for index in range(len(pads) // 2):
        axis = input.dim() - 1 - index
        before, after = pads[2 * index], pads[2 * index + 1]
        shape[axis] = shape[axis] + before + after
        slices[axis] = slice(before, before + input.shape[axis])
    padded = input.new_full(shape, 0 if value is None else value)
    padded[tuple(slices)].copy_(input)
    return padded


_PADS = {torch.nn.functional.pad, torch._C._nn.pad}
