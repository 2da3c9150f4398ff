"""``aten._unsafe_view`` sent to the fake-tensor cache as the ``aten.view`` it fakes.

Matrix products of batched inputs (every ``nn.Linear`` on a 3-d input, the
attention's products) end in ``aten._unsafe_view``: a view that autograd does
not track as one. PyTorch's fake-tensor cache refuses it ("unsafe view"), so
each one runs its fake kernel in full, about three times a cached view's cost
with symbolic sizes (GPT-2 small: about 120 per symbolic trace). Yet PyTorch
2.13 fakes it as ``aten.view`` exactly: with symbolic sizes both run the same
kernel (``_view_meta``), and with fixed sizes its decomposition calls
``aten.view``. Below autograd the two are one operation (autograd, above the
fake mode, still sees ``_unsafe_view`` and records no view), so
:func:`as_view` hands the fake mode ``aten.view`` in its place: a cached view,
with the same sizes, strides and storage.

Examples
--------
>>> import torch
>>> from torch._subclasses.fake_tensor import FakeTensorMode
>>> aten = torch.ops.aten
>>> fake = FakeTensorMode().from_tensor(torch.empty(2, 3, 4))
>>> as_view(aten._unsafe_view.default, (fake, [6, 4])) is (
...     aten.view.default if unsafe_views_supported() else aten._unsafe_view.default)
True
>>> as_view(aten.mm.default, (fake, fake)) is aten.mm.default
True
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

__all__ = ["as_view", "unsafe_views_supported"]

_aten = torch.ops.aten


@functools.cache
def unsafe_views_supported() -> bool:
    """Whether this PyTorch fakes ``_unsafe_view`` as ``view`` (2.13, checked, not assumed).

    Examples
    --------
    >>> unsafe_views_supported() == torch.__version__.startswith("2.13.")
    True
    """
    if not torch.__version__.startswith("2.13."):
        return False
    from torch._decomp import decomposition_table, meta_table
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensorMode

    view, unsafe = _aten.view.default, _aten._unsafe_view.default
    kernels = fake_impls.op_implementations_dict
    decomposition = getattr(decomposition_table.get(unsafe), "__wrapped__", None)
    special = getattr(FakeTensorMode, "_unbacked_special_fake_handling_ops", ())
    return (
        kernels.get(view) is not None and kernels.get(view) is kernels.get(unsafe)
        and view not in meta_table and unsafe not in meta_table
        and view in special and unsafe in special
        and decomposition is not None and "view" in decomposition.__code__.co_names
    )


def as_view(func: Any, args: Sequence[object]) -> Any:
    """Return ``aten.view`` for ``aten._unsafe_view`` on a fake tensor; any other ``func`` as is.

    A tensor with a constant value (PyTorch computes its view for real) keeps
    ``_unsafe_view``, as does a PyTorch other than 2.13.
    """
    if func is not _aten._unsafe_view.default or not unsafe_views_supported():
        return func
    source = args[0] if args else None
    if isinstance(source, FakeTensor) and source.constant is None:
        return _aten.view.default
    return func
