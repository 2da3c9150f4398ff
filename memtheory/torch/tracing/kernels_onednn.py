"""The workspace oneDNN's LSTM keeps for backward: its size, to the byte, and how a fit carries it.

PyTorch's CPU LSTM runs, by default, one oneDNN primitive per layer and
direction (``aten.mkldnn_rnn_layer``). With gradients on, it returns a uint8
workspace of ``pd.workspace_desc().get_size()`` bytes
(``aten/src/ATen/native/mkldnn/RNN.cpp``), which autograd saves for the
backward; with gradients off, none. The fake kernel says 0 bytes.

oneDNN sizes it in ``set_workspace_sizes`` (``src/cpu/rnn/rnn_utils.hpp``)
and lays it out in ``set_offsets`` (``src/cpu/rnn/rnn_utils.cpp``, v3.12, the
version PyTorch 2.13 ships): seven buffers, each starting on a 4,096-byte
page, for one layer and one direction over ``T`` steps of a batch of ``N``,
input width ``I`` and hidden width ``H`` in fp32:

====================  ==================================
buffer                bytes
====================  ==================================
gates                 ``T N ld(4H) 4``
ht                    ``T N ld(H) 4``
states                ``2 (T+1) N ld(max(I, H)) 4``
cell states           ``2 (T+1) N H 4``
diff states (layer)   ``2 (T+1) N ld(max(I, H)) 4``
diff states (iter)    ``2 (T+1) N ld(max(I, H)) 4``
diff cell states      ``2 (T+1) N H 4``
====================  ==================================

where ``ld(d)`` (``get_good_ld``) rounds ``d`` up to a multiple of 16 floats
(64 bytes) and adds 16 more when the result is a multiple of 256. The
workspace is the sum of the buffers, each rounded up to whole pages: at least
7 pages (28,672 bytes). Measured on PyTorch 2.13 CPU (oneDNN 3.12) at 188
random layers (1-3 layers, both directions, with and without bias, batch
first or not, T, N, I, H up to 70) and at edge sizes (``H = 64`` where
``ld(4H)`` adds 16, ``I = 256``, ``N = 200, T = 300``): 0 bytes off at every one;
``tests/pytorch/test_onednn_workspace.py`` repeats the comparison over a
hypothesis-drawn grid. (A later layer's ``I`` is ``H`` times the directions.)

Only fp32 is modelled: a bf16 LSTM runs on oneDNN only on CPUs with AVX-512
bf16 support, with other buffer types, and stays refused
(:mod:`~memtheory.torch.tracing.opaque`).

A fit (:mod:`~memtheory.torch.tracing.fit`) solves for polynomials, which
rounding to pages is not. In a fit's traces each workspace's bytes ride on a
marker symbol (:func:`workspace_marker`) instead of the constant term, so the
totals stay exact; the fit solves the rest, and ``T`` and ``N`` of each
workspace, as polynomials, then adds :attr:`Workspace.nbytes` at those
(with ceilings) wherever the marker was live
(:class:`~memtheory.torch.tracing.layout.MomentLayout`).

Examples
--------
>>> Workspace(steps=5, batch=3, input_size=6, hidden=8).nbytes
28672
>>> Workspace(steps=31, batch=20, input_size=46, hidden=28).nbytes  # measured: 1,384,448
1384448
>>> from memtheory.symbols import B, S
>>> symbolic = Workspace(steps=S, batch=B, input_size=6, hidden=8).nbytes
>>> symbolic.subs({S: 31, B: 20}) == Workspace(steps=31, batch=20, input_size=6, hidden=8).nbytes
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy as sp
import torch

__all__ = [
    "PAGE",
    "Workspace",
    "good_leading_dimension",
    "is_workspace_marker",
    "modelled_sizes",
    "onednn_workspace",
    "workspace_condition",
    "workspace_marker",
]

PAGE = 4096
"""oneDNN starts each buffer of an RNN workspace on a page of this many bytes (``set_offsets``)."""

_FLOAT = 4
"""Bytes of the fp32 states, gates and gradients oneDNN keeps for an fp32 LSTM."""

_MARKER = "onednn_workspace_"


def good_leading_dimension(dim: int, itemsize: int = _FLOAT) -> int:
    """Return oneDNN's ``get_good_ld``: ``dim`` rounded to 64 bytes, not a multiple of 256 elements.

    Examples
    --------
    >>> good_leading_dimension(28), good_leading_dimension(64), good_leading_dimension(256)
    (32, 64, 272)
    """
    step = 64 // itemsize
    ld = -(-dim // step) * step
    return ld + step if ld % 256 == 0 else ld


def _pages(nbytes: Any) -> Any:
    """``nbytes`` rounded up to whole pages (a ceiling, for a symbolic size)."""
    if isinstance(nbytes, int):
        return -(-nbytes // PAGE) * PAGE
    return PAGE * sp.ceiling(sp.expand(nbytes) / PAGE)


@dataclass(frozen=True)
class Workspace:
    """The oneDNN workspace of one fp32 LSTM layer and direction.

    Parameters
    ----------
    steps, batch : int or sympy expression
        ``T`` and ``N`` of the layer's (sequence-first) input.
    input_size, hidden : int
        Its input and hidden widths.
    """

    steps: Any
    batch: Any
    input_size: int
    hidden: int

    def buffers(self, steps: Any = None, batch: Any = None) -> list[Any]:
        """Return the seven buffers' bytes, unrounded, in oneDNN's order (``set_offsets``)."""
        t = self.steps if steps is None else steps
        n = self.batch if batch is None else batch
        states = good_leading_dimension(max(self.input_size, self.hidden))
        per_state = 2 * (t + 1) * n * _FLOAT  # (layers + 1) * (steps + 1) * batch, one layer
        return [
            t * n * good_leading_dimension(4 * self.hidden) * _FLOAT,  # gates
            t * n * good_leading_dimension(self.hidden) * _FLOAT,  # ht
            per_state * states,  # states (layer and iter share it)
            per_state * self.hidden,  # cell states
            per_state * states,  # diff states, layer
            per_state * states,  # diff states, iter
            per_state * self.hidden,  # diff cell states
        ]

    @property
    def nbytes(self) -> Any:
        """Bytes PyTorch allocates for it: every buffer rounded up to whole pages."""
        return sum((_pages(b) for b in self.buffers()), start=0)

    @property
    def unrounded(self) -> Any:
        """The buffers' bytes before rounding: a polynomial in the steps and the batch."""
        return sum(self.buffers(), start=0)



def workspace_marker(index: int) -> sp.Symbol:
    """Return the symbol the ``index``-th workspace's bytes ride on in a fit's traces.

    Examples
    --------
    >>> workspace_marker(0), is_workspace_marker(workspace_marker(0))
    (onednn_workspace_0, True)
    """
    return sp.Symbol(f"{_MARKER}{index}", integer=True, positive=True)


def is_workspace_marker(monomial: sp.Expr) -> bool:
    """Tell whether ``monomial`` is a :func:`workspace_marker`."""
    return isinstance(monomial, sp.Symbol) and monomial.name.startswith(_MARKER)


def workspace_condition(count: int) -> str:
    """Say how a fitted result counts ``count`` oneDNN LSTM workspaces.

    Examples
    --------
    >>> workspace_condition(2).split(" counted")[0]
    "oneDNN's LSTM workspaces (2, one per layer and direction)"
    """
    return (
        f"oneDNN's LSTM workspaces ({count}, one per layer and direction) counted by oneDNN "
        "3.12's own sizes (seven buffers, each rounded up to 4 KiB pages; hence the ceilings), "
        "not fitted: their steps and batch were fitted and confirmed like every other quantity"
    )


def onednn_workspace(func: Any, args: tuple[Any, ...], out: Any) -> Workspace | None:
    """Return the workspace an ``aten.mkldnn_rnn_layer`` call allocates on the CPU, or None.

    None for any other operator, with gradients off (the CPU kernel returns no
    workspace then), or for a layer that is not fp32 LSTM at whole-number sizes
    (which :func:`~memtheory.torch.tracing.opaque.check_opaque` refuses).

    Examples
    --------
    >>> lstm = torch.nn.LSTM(6, 8)
    >>> x = torch.randn(5, 3, 6)
    >>> args = (x, lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0,
    ...         torch.zeros(3, 8), torch.zeros(3, 8), False, [], 2, 8, 1, True, False, False,
    ...         True)
    >>> out = torch.ops.aten.mkldnn_rnn_layer.default(*args)
    >>> out[3].untyped_storage().nbytes(), onednn_workspace(
    ...     torch.ops.aten.mkldnn_rnn_layer.default, args, out).nbytes
    (28672, 28672)
    """
    if func is not torch.ops.aten.mkldnn_rnn_layer.default or not torch.is_grad_enabled():
        return None
    if not isinstance(out, tuple | list) or len(out) < 4 or out[3] is None:
        return None
    sizes = modelled_sizes(args)
    if sizes is None:
        return None
    steps, batch, input_size, hidden = sizes
    return Workspace(steps, batch, input_size, hidden)


def modelled_sizes(args: tuple[Any, ...]) -> tuple[int, int, int, int] | None:
    """``(T, N, I, H)`` of an ``mkldnn_rnn_layer`` call this module sizes, else None."""
    x, hidden, mode = args[0], args[10], args[9]
    if x.dtype != torch.float32 or x.dim() != 3 or mode != _LSTM_MODE:
        return None
    sizes = (*x.shape, hidden)
    if not all(type(s) is int for s in sizes):  # noqa: E721 (a SymInt is not sized here)
        return None
    return sizes


_LSTM_MODE = 2
"""``ideep::rnn_kind::LSTM``: the ``mode`` PyTorch passes for an LSTM."""
