"""Put a model and its inputs on fake tensors: shapes and dtypes without a byte of data.

:func:`fake_parameters` swaps every parameter and buffer of a module for a
fake tensor of the same shape, dtype and ``requires_grad`` (tied tensors stay
tied) and puts the originals back afterwards, so a model built on the meta
device (``with torch.device("meta"):``) is traced as if it lived on the CPU,
and a real model's weights are neither copied nor changed.
:func:`fake_inputs` makes the example inputs fake, with the sizes named in
``dims`` symbolic (or, for a fit, every size fixed).
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

__all__ = ["fake_inputs", "fake_parameters", "fake_tensor"]

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
        tensor = torch.empty(tensor.shape, dtype=tensor.dtype)
    context: StatelessSymbolicContext[Any, Any] = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dynamic]
    )
    return mode.from_tensor(tensor, symbolic_context=context)


@contextmanager
def fake_parameters(
    module: nn.Module, mode: FakeTensorMode, dtype: torch.dtype | None = None
) -> Iterator[None]:
    """Swap the module's parameters and buffers for fake ones in the block, then restore them."""
    swapped: list[tuple[nn.Module, str, str, Any]] = []
    fakes: dict[int, torch.Tensor] = {}
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

    def convert(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
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
