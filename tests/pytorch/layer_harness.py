"""Measure what one PyTorch module saves for backward, storage by storage (CPU, exact).

:func:`saved_storages` runs one forward pass of a module, with an input that
requires grad (token ids for an embedding), under
:func:`torch.autograd.graph.saved_tensors_hooks` and memtheory's
:class:`~memtheory.torch.measurement.StorageTracker`, and returns every storage
autograd saved: its bytes, dtype, the operation that produced it, whether a
saved tensor is a view covering only part of it, and whether it is the
module's input, output, a parameter, or a cast of a parameter (autocast's
weight copies). Precisions: ``"fp32"``, ``"bf16"`` (module and input cast to
bfloat16) and ``"autocast"`` (fp32 module under ``torch.autocast("cpu",
torch.bfloat16)``, input in ``input_dtype``).

The modules a memtheory layer stands for are written here as ordinary
``nn.Module`` s, as PyTorch and Hugging Face write them (Hugging Face's eager
attention and Llama's RMSNorm), independently of memtheory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from memtheory.torch.measurement import StorageTracker

__all__ = [
    "BertAddedEmbeddings",
    "EagerSelfAttention",
    "GPT2Positions",
    "LastToken",
    "LlamaRMSNorm",
    "MHA",
    "PRECISIONS",
    "Record",
    "SavedStorage",
    "Select",
    "saved_storages",
]

Kind = Literal["input", "output", "parameter", "parameter copy", "buffer", "intermediate"]
PRECISIONS = ("fp32", "bf16", "autocast")


@dataclass(frozen=True)
class SavedStorage:
    """One storage autograd saved (counted once however many saved tensors view it)."""

    nbytes: int
    dtype: torch.dtype
    kind: Kind
    producer: str
    partial: bool
    """Some saved tensor is a view of only part of the storage (the rest stays alive too)."""


@dataclass(frozen=True)
class Record:
    """Everything one forward pass saved, and the activation storages it produced."""

    saved: tuple[SavedStorage, ...]

    def activation_bytes(self) -> int:
        """Bytes of saved storages that are not parameters, their casts or buffers."""
        return sum(
            s.nbytes for s in self.saved if s.kind not in ("parameter", "parameter copy", "buffer")
        )

    def by_dtype(self, *kinds: Kind) -> dict[torch.dtype, int]:
        """Saved bytes per dtype, over the storages of the given kinds (all but parameters)."""
        kinds = kinds or ("input", "output", "intermediate")
        out: dict[torch.dtype, int] = {}
        for s in self.saved:
            if s.kind in kinds:
                out[s.dtype] = out.get(s.dtype, 0) + s.nbytes
        return out


class _Producers(StorageTracker):
    """A storage tracker that also names the operation that produced each storage."""

    def __init__(self) -> None:
        super().__init__()
        self.producer: dict[int, str] = {}
        self._named: dict[int, StorageWeakRef] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        out = super().__torch_dispatch__(func, types, args, kwargs)
        flat = out if isinstance(out, tuple | list) else (out,)
        for t in flat:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                pointer = t.untyped_storage().data_ptr()
                if pointer not in self._named or self._named[pointer].expired():
                    self._named[pointer] = StorageWeakRef(t.untyped_storage())
                    self.producer[pointer] = str(func).removeprefix("aten.")
        return out


def _pointer(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def saved_storages(
    module: nn.Module,
    x: torch.Tensor,
    *,
    precision: str = "fp32",
    training: bool = True,
    input_dtype: torch.dtype | None = None,
    forward: Callable[[nn.Module, torch.Tensor], Any] | None = None,
) -> Record:
    """Run ``module(x)`` once and return the storages autograd saved.

    Parameters
    ----------
    module : nn.Module
    x : torch.Tensor
        Floating inputs are cast to the precision's dtype (or ``input_dtype``)
        and made to require grad; integer inputs (token ids) are used as they are.
    precision : {"fp32", "bf16", "autocast"}
    training : bool
        ``module.train()`` or ``module.eval()`` (autograd still records).
    input_dtype : torch.dtype, optional
        The input's dtype under autocast (default fp32: the first layer of a
        network; bf16 for a layer after an autocast linear layer).
    forward : callable, optional
        ``forward(module, x)``; default ``module(x)``, and the first element if
        the module returns a tuple.
    """
    module = module.to(torch.bfloat16) if precision == "bf16" else module.float()
    module.train(training)
    if x.is_floating_point():
        dtype = torch.bfloat16 if precision == "bf16" else (input_dtype or torch.float32)
        x = x.detach().to(dtype).requires_grad_(True)
    parameters = list(module.parameters())
    param_ptrs = {_pointer(p) for p in parameters}
    buffer_ptrs = {_pointer(b) for b in module.buffers()}
    context = (
        torch.autocast("cpu", dtype=torch.bfloat16) if precision == "autocast" else nullcontext()
    )
    saved: dict[int, tuple[int, torch.dtype, bool]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.nbytes():
            pointer = storage.data_ptr()
            partial = t.numel() * t.element_size() < storage.nbytes()
            old = saved.get(pointer)
            saved[pointer] = (storage.nbytes(), t.dtype, partial or bool(old and old[2]))
        return t

    tracker = _Producers()
    tracker.watch_parameters(parameters)
    with tracker, context, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(x) if forward is None else forward(module, x)
    if isinstance(out, tuple):
        out = out[0]
    out_ptr = _pointer(out)
    in_ptr = _pointer(x)
    storages = []
    for pointer, (nbytes, dtype, partial) in saved.items():
        kind: Kind
        if pointer in param_ptrs:
            kind = "parameter"
        elif pointer in tracker.copies_of:
            kind = "parameter copy"
        elif pointer in buffer_ptrs:
            kind = "buffer"
        elif pointer == in_ptr:
            kind = "input"
        elif pointer == out_ptr:
            kind = "output"
        else:
            kind = "intermediate"
        producer = tracker.producer.get(pointer, "")
        storages.append(SavedStorage(nbytes, dtype, kind, producer, partial))
    del out
    return Record(tuple(storages))


# -- the modules, as their authors write them -------------------------------------------


class MHA(nn.Module):
    """``nn.MultiheadAttention`` used as self-attention, batch first."""

    def __init__(
        self,
        width: int,
        heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        need_weights: bool = False,
    ) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(
            width, heads, dropout=dropout, bias=bias, batch_first=True
        )
        self.need_weights = need_weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.attn(x, x, x, need_weights=self.need_weights)[0]


class EagerSelfAttention(nn.Module):
    """GPT-2/BERT-style attention as Hugging Face's eager path writes it (matmul, softmax).

    One fused ``c_attn`` projection split into queries, keys and values,
    ``matmul(q, k^T) * scale``, softmax in the scores' dtype and
    ``.type(value.dtype)`` (GPT-2's ``_attn``), dropout, ``matmul(p, v)``, merge
    heads, output projection.
    """

    def __init__(self, width: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.heads, self.width = heads, width
        self.c_attn = nn.Linear(width, 3 * width, bias=bias)
        self.c_proj = nn.Linear(width, width, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, s, _ = x.shape
        d = self.width // self.heads
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        probs = nn.functional.softmax(scores, dim=-1).type(v.dtype)
        probs = self.attn_dropout(probs)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.width)
        return self.c_proj(out)


class LlamaRMSNorm(nn.Module):
    """RMSNorm as Llama (Hugging Face ``LlamaRMSNorm``) writes it: fp32 statistics."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(dtype)


class Select(nn.Module):
    """``x[:, index]``: one position of every sequence (BERT's pooler reads position 0)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__()
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x[:, self.index]


class LastToken(Select):
    """``x[:, -1]``."""

    def __init__(self) -> None:
        super().__init__(-1)


class GPT2Positions(nn.Module):
    """GPT-2's learned positions: ``arange`` ids made in every forward pass, added."""

    def __init__(self, positions: int, width: int) -> None:
        super().__init__()
        self.wpe = nn.Embedding(positions, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ids = torch.arange(x.shape[1]).unsqueeze(0)
        return x + self.wpe(ids)


class BertAddedEmbeddings(nn.Module):
    """BERT's position and segment vectors, ids sliced from registered buffers (Hugging Face)."""

    def __init__(self, positions: int, width: int, types: int = 2) -> None:
        super().__init__()
        self.position_embeddings = nn.Embedding(positions, width)
        self.token_type_embeddings = nn.Embedding(types, width)
        ids = torch.arange(positions).expand((1, -1))
        self.register_buffer("position_ids", ids, persistent=False)
        zeros = torch.zeros((1, positions), dtype=torch.long)
        self.register_buffer("token_type_ids", zeros, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, s, _ = x.shape
        segments = self.token_type_ids[:, :s].expand(b, s)
        x = x + self.token_type_embeddings(segments)
        return x + self.position_embeddings(self.position_ids[:, :s])
