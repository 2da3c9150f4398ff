"""PyTorch's fake-tensor cache key, with each tensor's metadata written straight into the key.

Before an operation can be looked up in ``FakeTensorMode``'s dispatch cache,
PyTorch 2.13 turns its arguments into a key (``_prep_args_for_hash``): for
every fake tensor it builds a ``TensorMetadata`` dataclass of seventeen fields,
then walks the dataclass's fields and, through the same generic walk again,
each size and stride, writing a type tag before every integer. A GPT-2 small
trace makes about 28,000 keys, and building them was about a sixth of its
time.

:func:`prepared_for_hash` is that walk with the fake-tensor branch written out:
the same checks (another mode's fake, a constant, a sparse layout: no
caching), then a marker and the fields PyTorch reads, in one pass, each
symbolic size through PyTorch's own ``convert_sym_int`` (so a cached output
still finds its sizes by their place in the key). A dense tensor's record
holds what ``TensorMetadata`` holds: dtype, sizes, strides, device,
layout, storage offset, storage bytes, and the requires-grad, quantized,
conjugate, negative and inference flags. It leaves out the memory format,
which PyTorch reads from the sizes and strides alone (and writes only for a
tensor of fixed sizes), so it cannot tell apart two records the sizes and
strides do not. Every other argument is written as PyTorch writes it, but
for the subgraphs of higher-order operators (``torch.compile``'s, which a
trace never meets), which are not cached here.

Two arguments get equal keys here exactly where they get equal keys in
PyTorch (checked in the tests on the operations of whole traces), so a hit
returns what a hit returned before. A key with a tensor in it cannot equal one
of PyTorch's (theirs never hold the marker), and a key without tensors is
written the same way by both, so the two kinds can share PyTorch's process-wide
cache.

Examples
--------
>>> fast_keys_supported() in (True, False)
True
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterable
from typing import Any

import torch
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch._subclasses.meta_utils import is_sparse_any

__all__ = ["TENSOR_RECORD", "fast_keys_supported", "prepared_for_hash"]


class _TensorRecord:
    """The marker that starts a fake tensor's record in a key (never in PyTorch's own keys)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TENSOR_RECORD"


TENSOR_RECORD = _TensorRecord()
"""Written before each fake tensor's fields in a key."""

_FIELDS = (
    "dtype", "shape", "stride", "device", "layout", "memory_format", "storage_offset",
    "storage_bytes", "requires_grad", "is_quantized", "is_conj", "is_neg", "is_inference",
    "is_sparse", "is_coalesced", "dense_dim", "sparse_dim",
)
"""``TensorMetadata``'s fields in PyTorch 2.13; a record holds each dense tensor's."""


def fast_keys_supported() -> bool:
    """Whether this PyTorch builds keys as :func:`prepared_for_hash` repeats (2.13).

    Examples
    --------
    >>> import torch
    >>> fast_keys_supported() == torch.__version__.startswith("2.13.")
    True
    """
    if not torch.__version__.startswith("2.13."):
        return False
    metadata = getattr(fake_tensor, "TensorMetadata", None)
    walk = getattr(FakeTensorMode, "_prep_args_for_hash", None)
    code = getattr(walk, "__code__", None)
    if metadata is None or code is None:
        return False
    fields = tuple(getattr(metadata, "__dataclass_fields__", {}))
    names = set(code.co_names)
    return fields == _FIELDS and {
        "is_our_fake", "constant", "extract_tensor_metadata", "_flatten_into",
        "convert_sym_int", "GraphModule", "SubgraphCallableWrapper",
        "FunctionalCallableWithEpilogue"} <= names


def prepared_for_hash(
    mode: FakeTensorMode, result: list[object], args: Any, state: Any,
    id_hashed_objects: list[object],
) -> None:
    """Append the key of ``args`` to ``result``: PyTorch 2.13's walk with tensors written out.

    ``mode``, ``result``, ``args``, ``state`` and ``id_hashed_objects`` are
    ``FakeTensorMode._prep_args_for_hash``'s arguments. Raises PyTorch's
    ``_BypassDispatchCache`` where PyTorch does.
    """
    if isinstance(args, list | tuple | dict):
        result.append(type(args))
        result.append(f"length_{len(args)}")
    if isinstance(args, dict):
        prepared_for_hash(mode, result, args.keys(), state, id_hashed_objects)
        prepared_for_hash(mode, result, args.values(), state, id_hashed_objects)
        return
    for arg in args:
        if isinstance(arg, FakeTensor):
            _tensor_record(mode, result, arg, state)
        elif isinstance(arg, torch.Tensor):
            raise fake_tensor._BypassDispatchCache("non-fake tensor")
        elif isinstance(arg, torch.SymInt):
            state.convert_sym_int(result, arg)
        elif isinstance(arg, torch.SymBool | torch.SymFloat):
            raise fake_tensor._BypassDispatchCache("symbolic shape")
        elif isinstance(arg, list | tuple | dict):
            prepared_for_hash(mode, result, arg, state, id_hashed_objects)
        elif isinstance(arg, types.FunctionType):
            raise fake_tensor._BypassDispatchCache("function argument")
        elif isinstance(arg, _subgraphs()):  # compiled code's (never a trace's): not cached
            raise fake_tensor._BypassDispatchCache("subgraph argument")
        else:  # the type too: 1 and 1.0 hash alike and give outputs of other dtypes
            result.append(type(arg))
            result.append(arg)


@functools.cache
def _subgraphs() -> tuple[type, ...]:
    """Return the types of higher-order operators' subgraph arguments (keyed by identity)."""
    from torch._higher_order_ops.auto_functionalize import FunctionalCallableWithEpilogue
    from torch._higher_order_ops.utils import SubgraphCallableWrapper

    return torch.fx.GraphModule, SubgraphCallableWrapper, FunctionalCallableWithEpilogue


def _tensor_record(mode: FakeTensorMode, result: list[object], tensor: FakeTensor,
                   state: Any) -> None:
    """Append what ``extract_tensor_metadata`` and ``_flatten_into`` append, for a dense tensor."""
    if tensor.fake_mode is not mode:
        raise fake_tensor._BypassDispatchCache("not our fake")
    if tensor.constant is not None:
        raise fake_tensor._BypassDispatchCache("constant attribute")
    if is_sparse_any(tensor):
        raise fake_tensor._BypassDispatchCache(f"{tensor.layout} tensor")
    shape = tensor.shape
    strided = tensor.layout == torch.strided
    result.append(TENSOR_RECORD)
    result.append(tensor.dtype)
    _sizes(result, shape, state)  # as many sizes as strides, then the device: no rank needed
    if strided:
        _sizes(result, tensor.stride(), state)
    else:
        result.append(None)
    storage_bytes = tensor.untyped_storage().nbytes()
    result.append(tensor.device)
    result.append(tensor.layout)
    _sizes(result, (tensor.storage_offset(), storage_bytes), state)
    result.append((tensor.requires_grad, tensor.is_quantized, tensor.is_conj(),
                   tensor.is_neg(), tensor.is_inference()))


def _sizes(result: list[object], sizes: Iterable[Any], state: Any) -> None:
    for size in sizes:
        if isinstance(size, torch.SymInt):
            state.convert_sym_int(result, size)
        else:
            result.append(size)
