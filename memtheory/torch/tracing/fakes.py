"""Put a model and its inputs on fake tensors: shapes and dtypes without a byte of data.

:func:`fake_parameters` swaps every parameter and buffer of a module for a
fake tensor of the same shape, dtype and ``requires_grad`` (tied tensors stay
tied) and puts the originals back afterwards, so a model built on the meta
device (``with torch.device("meta"):``) is traced as if it lived on the CPU,
and a real model's weights are neither copied nor changed.
:func:`fake_inputs` makes the example inputs fake, with the sizes named in
``dims`` symbolic (or, for a fit, every size fixed). An example input that
is a view (``x[:8]``, ``x.t()``) or shares its storage is first replaced by
a fresh tensor of its shape and dtype (:func:`fresh_tensor`), as a data
loader's batch is: the trace follows the step, not the example's storage.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sympy as sp
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext
from torch.utils._pytree import tree_map

from memtheory.errors import InvalidArgumentError

__all__ = ["fake_inputs", "fake_parameters", "fake_tensor", "fresh_tensor", "layout_of",
           "shared_storage_notes"]

_CPU = torch.device("cpu")


def fake_tensor(
    tensor: torch.Tensor,
    mode: FakeTensorMode,
    dynamic: list[bool] | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Return a fake CPU tensor like ``tensor`` (real or meta), with symbolic sizes where flagged.

    ``dtype`` casts a floating tensor first.
    """
    if dtype is not None and tensor.is_floating_point():
        tensor = tensor.detach().to(device="meta" if tensor.is_meta else None, dtype=dtype)
    if dynamic is None or not any(dynamic):
        if tensor.is_meta:
            return mode.fake_tensor_converter.from_meta_and_device(mode, tensor, _CPU)
        return mode.from_tensor(tensor, static_shapes=True)
    if tensor.is_meta:  # a meta example input: the sizes matter, not the values
        tensor = torch.empty(tensor.shape, dtype=tensor.dtype, memory_format=layout_of(tensor))
    context: StatelessSymbolicContext[Any, Any] = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dynamic]
    )
    return mode.from_tensor(tensor, symbolic_context=context)


@contextmanager
def fake_parameters(
    module: nn.Module,
    mode: FakeTensorMode,
    dtype: torch.dtype | None = None,
    fakes: dict[int, torch.Tensor] | None = None,
) -> Iterator[None]:
    """Swap the module's parameters and buffers for fake ones in the block, then restore them.

    ``fakes`` (each real tensor's ``id`` to its fake) keeps the fakes made, and the
    fakes found there are swapped in again: a later block with the same dictionary
    (and ``mode``) gets the very same fake parameters, their gradients and whatever
    an optimizer keeps for them.
    """
    swapped: list[tuple[nn.Module, str, str, Any]] = []
    fakes = {} if fakes is None else fakes
    try:
        for sub in module.modules():
            for kind in ("_parameters", "_buffers"):
                table = getattr(sub, kind)
                for name, value in list(table.items()):
                    if value is None:
                        continue
                    fake = fakes.get(id(value))
                    if fake is None:
                        fake = fake_tensor(value.detach(), mode, dtype=dtype)
                        if kind == "_parameters":
                            fake = nn.Parameter(fake, requires_grad=value.requires_grad)
                        fakes[id(value)] = fake
                    swapped.append((sub, kind, name, value))
                    table[name] = fake
        yield
    finally:
        for sub, kind, name, value in reversed(swapped):
            getattr(sub, kind)[name] = value


def layout_of(tensor: torch.Tensor) -> torch.memory_format:
    """Return the layout a fresh tensor like ``tensor`` gets: channels-last kept, else contiguous.

    Examples
    --------
    >>> layout_of(torch.empty(2, 3, 4, 4).to(memory_format=torch.channels_last))
    torch.channels_last
    >>> layout_of(torch.empty(4, 3).t())
    torch.contiguous_format
    """
    if tensor.dim() > 1 and not tensor.is_contiguous():
        for layout, rank in ((torch.channels_last, 4), (torch.channels_last_3d, 5)):
            if tensor.dim() == rank and tensor.is_contiguous(memory_format=layout):
                return layout
    return torch.contiguous_format


def _owns_storage(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a dense tensor alone in its storage (no view, no stride trick)."""
    if tensor.layout != torch.strided or tensor._base is not None or tensor.storage_offset():
        return False
    if not tensor.is_contiguous(memory_format=layout_of(tensor)):
        return False
    return tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()


def fresh_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Return ``tensor``, or where it is a view or shares its storage, a new one of its shape.

    The new tensor has the same dtype, device and ``requires_grad``, its own
    storage and a dense layout (:func:`layout_of`): what a real step receives
    at other sizes, and what PyTorch's fake tensors follow with symbolic sizes
    (a view's base would bring sizes of its own).

    Examples
    --------
    >>> x = torch.randn(16, 3)[:8]
    >>> fresh = fresh_tensor(x)
    >>> fresh.shape, fresh._base is None, fresh.untyped_storage().nbytes()
    (torch.Size([8, 3]), True, 96)
    >>> y = torch.randn(4, 3)
    >>> fresh_tensor(y) is y
    True
    """
    if _owns_storage(tensor):
        return tensor
    fresh = torch.empty(
        tensor.shape, dtype=tensor.dtype, device=tensor.device, memory_format=layout_of(tensor)
    )
    return fresh.requires_grad_() if tensor.requires_grad else fresh


def shared_storage_notes(inputs: Any) -> tuple[str, ...]:
    """Say which example inputs were views or shared storage, and by how many bytes.

    Examples
    --------
    >>> print(shared_storage_notes((torch.randn(16, 3)[:8],))[0])
    example input 0, of shape (8, 3), is a view or shares its storage (192 bytes, 96 beyond its \
own): it was traced as a fresh float32 tensor of its shape, as a data loader's batch is; \
measure() given this very tensor also counts the rest of its storage.
    """
    notes = []
    for index, tensor in enumerate(_tensors(inputs)):
        if tensor.layout != torch.strided or _owns_storage(tensor):
            continue
        whole = tensor.untyped_storage().nbytes()
        beyond = whole - tensor.numel() * tensor.element_size()
        extra = f" ({whole} bytes, {beyond} beyond its own)" if beyond > 0 else ""
        notes.append(
            f"example input {index}, of shape {tuple(tensor.shape)}, is a view or shares its "
            f"storage{extra}: it was traced as a fresh {str(tensor.dtype).removeprefix('torch.')} "
            "tensor of its shape, as a data loader's batch is; measure() given this very "
            "tensor also counts the rest of its storage."
        )
    return tuple(notes)


def fake_inputs(
    inputs: Any,
    mode: FakeTensorMode,
    sizes: Mapping[int, sp.Symbol],
    dtype: torch.dtype | None = None,
) -> tuple[Any, dict[sp.Symbol, sp.Symbol]]:
    """Make every tensor in ``inputs`` fake, the sizes in ``sizes`` symbolic.

    Returns the fake inputs (same structure) and PyTorch's symbol for each of
    the user's symbols (``{s0: B}``). With ``sizes`` empty every size is fixed.

    Raises
    ------
    InvalidArgumentError
        If a size in ``sizes`` appears in no input.
    """
    found: dict[sp.Symbol, sp.Symbol] = {}
    made: dict[int, Any] = {}  # a tensor passed twice (input and target) is one fake tensor

    def convert(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) not in made:
            made[id(value)] = converted_once(value)
        return made[id(value)]

    def converted_once(value: torch.Tensor) -> Any:
        if value.layout == torch.strided:
            value = fresh_tensor(value)
        dynamic = [int(size) in sizes for size in value.shape]
        fake = fake_tensor(value, mode, dynamic, dtype if value.is_floating_point() else None)
        for size, flag, symbolic in zip(value.shape, dynamic, fake.shape, strict=True):
            if flag:
                node = symbolic.node.expr if isinstance(symbolic, torch.SymInt) else symbolic
                if isinstance(node, sp.Symbol):
                    found[node] = sizes[int(size)]
        return fake

    converted = tree_map(convert, inputs)
    missing = set(sizes.values()) - set(found.values())
    if missing:
        shapes = [tuple(t.shape) for t in _tensors(inputs)]
        named = ", ".join(f"{s.name}={k}" for k, s in sizes.items() if s in missing)
        raise InvalidArgumentError(
            f"no example input has a size given in dims ({named}); the inputs' shapes are "
            f"{shapes}. Give dims the sizes the example inputs have."
        )
    return converted, found


def _tensors(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]
