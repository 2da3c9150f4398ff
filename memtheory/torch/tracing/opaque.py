"""Kernels whose memory fake tensors cannot know: refused by name, never counted as zero.

PyTorch's CPU LSTM runs, by default, on oneDNN (``aten.mkldnn_rnn_layer``),
which returns a workspace for backward whose size oneDNN alone decides: at
least 28,672 bytes, rounded to 4 KiB pages, not a polynomial in the batch
and the sequence length (measured on PyTorch 2.13 CPU). The fake kernel says
0 bytes. Rather than a formula that is silently short, :func:`check_opaque`
stops the trace with the fix: with oneDNN's RNN off, the LSTM runs PyTorch's
own cell, which a trace follows to the byte.

Examples
--------
>>> import torch
>>> check_opaque(torch.ops.aten.mm.default, "forward fc")
>>> check_opaque(torch.ops.aten.mkldnn_rnn_layer.default, "forward rnn")
Traceback (most recent call last):
...
memtheory.errors.UntraceableError: aten.mkldnn_rnn_layer.default in forward rnn keeps a oneDNN \
workspace ...
"""

from __future__ import annotations

from typing import Any

import torch

from memtheory.errors import UntraceableError

__all__ = ["OPAQUE", "check_opaque"]

OPAQUE = frozenset({torch.ops.aten.mkldnn_rnn_layer.default})
"""Operators whose real storages fake tensors cannot size."""


def check_opaque(func: Any, where: str) -> None:
    """Raise :class:`~memtheory.errors.UntraceableError` for an operator in :data:`OPAQUE`.

    Parameters
    ----------
    func : torch operator
        The ATen operator about to run.
    where : str
        Phase and module, for the message.
    """
    if func not in OPAQUE:
        return
    raise UntraceableError(
        f"{func} in {where} keeps a oneDNN workspace for backward whose size fake tensors do "
        "not know (the fake kernel says 0 bytes; the CPU kernel takes 28,672 bytes or more, "
        "rounded to 4 KiB pages, which no polynomial in the sizes gives). Turn oneDNN's RNN "
        "off around both the trace and the real training (with "
        "torch.backends.mkldnn.flags(enabled=False): ...), where the LSTM runs PyTorch's own "
        "cell and the trace is exact, or measure the model at the sizes you need with "
        "memtheory.torch.measure."
    )
