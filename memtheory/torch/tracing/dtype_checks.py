"""The dtype checks PyTorch's CPU kernels make and their fake kernels skip.

A fake (meta) kernel computes an output's shape and dtype; several do not
check that their operands share a dtype, which the real CPU kernel does. So
``nn.Linear`` given an ``int64`` input, or a ``float64`` input to a
``float32`` model, traces without complaint although a real step raises a
dtype error (``"expected m1 and m2 to have the same dtype"``).
:func:`check_dtypes` makes, before each such operation runs on fake
tensors, the check its CPU kernel makes, so that ``trace`` fails where the
real step fails, naming the operation and the module.

Examples
--------
>>> import torch
>>> check_dtypes(torch.ops.aten.mm.default, (torch.ones(2, 3), torch.ones(3, 4)), "forward fc")
>>> check_dtypes(torch.ops.aten.mm.default,
...              (torch.ones(2, 3, dtype=torch.int64), torch.ones(3, 4)), "forward fc")
Traceback (most recent call last):
...
memtheory.errors.InvalidArgumentError: aten.mm.default in forward fc mixes dtypes (int64, \
float32), which a real step refuses ...
"""

from __future__ import annotations

from typing import Any

import torch

from memtheory.errors import InvalidArgumentError

__all__ = ["CHECKED", "NORMS", "SAME_DTYPE", "check_dtypes"]

_aten = torch.ops.aten

SAME_DTYPE = frozenset(
    {
        _aten.mm.default,
        _aten.addmm.default,
        _aten.mv.default,
        _aten.addmv.default,
        _aten.dot.default,
        _aten.vdot.default,
        _aten.addbmm.default,
        _aten.convolution.default,
        _aten._convolution.default,
    }
)
"""Operators whose CPU kernels require every tensor operand to have one dtype."""

NORMS = frozenset(
    {
        _aten.native_layer_norm.default,
        _aten.native_group_norm.default,
        _aten.native_batch_norm.default,
        _aten._native_batch_norm_legit.default,
        _aten._native_batch_norm_legit_functional.default,
    }
)
"""Normalizations whose CPU kernels take one dtype, or a 16-bit input with float32 parameters."""

CHECKED = SAME_DTYPE | NORMS
"""Every operator :func:`check_dtypes` checks."""

_HALF = (torch.bfloat16, torch.float16)


def check_dtypes(func: Any, args: tuple[Any, ...], where: str) -> None:
    """Raise where the CPU kernel of ``func`` would refuse the dtypes of ``args``.

    Parameters
    ----------
    func : torch operator
        The ATen operator about to run (``torch.ops.aten.mm.default``).
    args : tuple
        Its positional arguments.
    where : str
        Phase and module, for the message (``"forward encoder.fc"``).

    Raises
    ------
    InvalidArgumentError
        If the operands mix dtypes the CPU kernel does not take together.
    """
    if func not in CHECKED:
        return
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    dtypes = list(dict.fromkeys(t.dtype for t in tensors))
    if len(dtypes) < 2:
        return
    if func in NORMS and tensors[0].dtype in _HALF and set(dtypes[1:]) == {torch.float32}:
        return  # a bfloat16 or float16 input with float32 weights: the CPU kernels allow it
    names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
    raise InvalidArgumentError(
        f"{func} in {where} mixes dtypes ({names}), which a real step refuses (PyTorch's CPU "
        "kernel raises a dtype error here). Give the example inputs the dtype the model expects "
        "(token ids as int64 go to an nn.Embedding, features to a Linear as the model's float "
        "dtype, e.g. x.float()), or pass dtype= to trace to cast the model and its floating "
        "inputs alike."
    )
