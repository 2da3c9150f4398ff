"""Kernels whose memory fake tensors cannot know: refused by name, never counted as zero.

PyTorch's CPU LSTM runs, by default, on oneDNN (``aten.mkldnn_rnn_layer``),
which returns a workspace for backward whose size oneDNN alone decides; the
fake kernel says 0 bytes. For an fp32 layer at whole-number sizes,
:mod:`~memtheory.torch.tracing.kernels_onednn` gives its size to the byte. Any
other (a bf16 layer, which oneDNN runs only on CPUs with AVX-512 bf16, with
buffers not measured here; sizes PyTorch keeps symbolic) :func:`check_opaque`
refuses, with the fix: with oneDNN's RNN off, the LSTM runs PyTorch's own
cell, which a trace follows to the byte.

Examples
--------
>>> import torch
>>> check_opaque(torch.ops.aten.mm.default, "forward fc")
>>> rnn = torch.ops.aten.mkldnn_rnn_layer.default
>>> x = torch.randn(5, 3, 6)
>>> check_opaque(rnn, "forward rnn", (x, None, None, None, None, None, None, False, [], 2, 8))
>>> check_opaque(rnn, "forward rnn", (x.bfloat16(), None, None, None, None, None, None, False, [],
...                                   2, 8))
Traceback (most recent call last):
...
memtheory.errors.UntraceableError: aten.mkldnn_rnn_layer.default in forward rnn keeps a oneDNN \
workspace ...
"""

from __future__ import annotations

from typing import Any

import torch

from memtheory.errors import UntraceableError
from memtheory.torch.tracing.kernels_onednn import modelled_sizes

__all__ = ["OPAQUE", "check_opaque"]

OPAQUE = frozenset({torch.ops.aten.mkldnn_rnn_layer.default})
"""Operators whose real storages fake tensors cannot size (unless a kernels module models them)."""


def check_opaque(func: Any, where: str, args: tuple[Any, ...] = ()) -> None:
    """Raise :class:`~memtheory.errors.UntraceableError` for an operator in :data:`OPAQUE`.

    An fp32 ``mkldnn_rnn_layer`` at whole-number sizes passes: its workspace
    is sized by :mod:`~memtheory.torch.tracing.kernels_onednn`.

    Parameters
    ----------
    func : torch operator
        The ATen operator about to run.
    where : str
        Phase and module, for the message.
    args : tuple, optional
        Its arguments.
    """
    if func not in OPAQUE:
        return
    if len(args) > 10 and modelled_sizes(args) is not None:
        return
    raise UntraceableError(
        f"{func} in {where} keeps a oneDNN workspace for backward whose size fake tensors do "
        "not know (the fake kernel says 0 bytes). memtheory sizes it for an fp32 LSTM at "
        "fixed sizes only; this layer is another dtype or has symbolic sizes. Turn oneDNN's "
        "RNN off around both the trace and the real training (with "
        "torch.backends.mkldnn.flags(enabled=False): ...), where the LSTM runs PyTorch's own "
        "cell and the trace is exact, or measure the model at the sizes you need with "
        "memtheory.torch.measure."
    )
