"""Rebuild a view from PyTorch's fake-tensor cache without a storage it throws away.

On a cache hit PyTorch 2.13 rebuilds an operation's output from the entry's
sizes and strides with ``torch.empty_strided``; for a view (``view``,
``transpose``, ``select``, a slice...) it then points that new tensor at its
input's storage with ``set_``, and the storage ``empty_strided`` made is
dropped at once. With symbolic sizes that storage is not free: its size is
worked out from the sizes and strides, through ``SymNode`` arithmetic and
a guard per dimension, and then its tensor's sizes are set twice.
:func:`cached_view` makes the throwaway tensor empty and one-dimensional (a
size of 0 needs no symbolic arithmetic) and sets the view's sizes, strides,
offset and storage once, with the same ``set_``: the tensor it returns has the
metadata, dispatch keys and storage PyTorch's has (checked in the tests, view
by view). A GPT-2 small trace rebuilds several thousand views this way.

Examples
--------
>>> cached_views_supported() in (True, False)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses import _fake_tensor_utils
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager

from memtheory.errors import InvalidArgumentError

__all__ = ["cached_view", "cached_views_supported"]


def cached_views_supported() -> bool:
    """Whether this PyTorch rebuilds a cached view as :func:`cached_view` repeats (2.13).

    Examples
    --------
    >>> import torch
    >>> cached_views_supported() == torch.__version__.startswith("2.13.")
    True
    """
    if not torch.__version__.startswith("2.13."):
        return False
    rebuild = getattr(FakeTensorMode, "_get_output_tensor_from_cache_entry", None)
    code = getattr(rebuild, "__code__", None)
    stubs = ("_SymIntOutputStub", "_PySymInputStub")
    if code is None or not all(hasattr(_fake_tensor_utils, name) for name in stubs):
        return False
    names = set(code.co_names)
    for inner in code.co_consts:  # its nested check_value reads the stubs
        names |= set(getattr(inner, "co_names", ()))
    return {"empty_strided", "set_", "view_idx", "is_view", "extract"} <= names


def cached_view(
    mode: FakeTensorMode, state: Any, entry: Any, key: Any, args: Sequence[object],
) -> FakeTensor:
    """Return the view a cache ``entry`` describes, on the storage of its input in ``args``.

    ``mode``, ``state``, ``entry``, ``key`` and ``args`` are what PyTorch's
    ``FakeTensorMode._get_output_tensor_from_cache_entry`` receives, for a view
    operation (``entry.view_idx`` names its input) of strided layout in a mode
    with a shape environment. PyTorch 2.13's rebuild, with the tensor first made
    empty rather than of the view's size, and made and set in one kernel block
    (PyTorch enters it twice).
    """
    shape_env = mode.shape_env
    if shape_env is None:
        raise InvalidArgumentError(
            "cached_view needs a fake mode with a shape environment: pass "
            "FakeTensorMode(shape_env=ShapeEnv()); with fixed sizes PyTorch's rebuild is used")
    metadata = entry.metadata

    def value(size: Any) -> Any:
        if isinstance(size, _fake_tensor_utils._SymIntOutputStub):
            return size.extract(key, shape_env)
        if isinstance(size, _fake_tensor_utils._PySymInputStub):
            raise AssertionError("Unexpected _PySymInputStub value")
        return size

    shape = tuple(value(v) for v in metadata.shape)
    stride = tuple(value(v) for v in metadata.stride)
    storage_offset = value(metadata.storage_offset)
    if metadata.storage_bytes is not None:
        value(metadata.storage_bytes)
    source = args[entry.view_idx]
    if not isinstance(source, FakeTensor):
        raise AssertionError("view_arg must be a FakeTensor")
    storage = source.untyped_storage()
    with in_kernel_invocation_manager(mode), shape_env.suppress_guards():
        empty = torch.empty((0,), dtype=metadata.dtype, layout=metadata.layout, device="meta",
                            requires_grad=metadata.requires_grad)
        if metadata.is_conj:
            torch._C._set_conj(empty, True)
        if metadata.is_neg:
            torch._C._set_neg(empty, True)
        empty.set_(storage, storage_offset, shape, stride)
    return FakeTensor(mode, empty, metadata.device)
