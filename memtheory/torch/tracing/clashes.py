"""Example sizes that the model fixes too: a ``dims`` value equal to a channel count or a width.

``dims={"B": 3}`` makes every example dimension of size 3 the batch ``B``,
so with 3 input channels the channels become ``B`` as well; ``{"S": 64}``
on a model whose hidden size is 64 does the same to the hidden dimension.
The model then fixes the symbol (a convolution needs 3 channels), and a fit
that varies it is refused at every size. :func:`clash_error` recognises the
coincidence and names it, with an example size that no input dimension and
no parameter already has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sympy as sp
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memtheory.errors import InvalidArgumentError

__all__ = ["clash_error", "free_size"]


def clash_error(
    model: nn.Module, inputs: Any, sizes: Mapping[int, sp.Symbol], symbols: Iterable[sp.Symbol] = ()
) -> InvalidArgumentError | None:
    """Return the error naming an example size the model fixes too, or None if there is none.

    A size clashes where a parameter or buffer of the model has it; an
    example input that has it in two dimensions is named too, and makes that
    size the likeliest culprit.

    Parameters
    ----------
    model : torch.nn.Module
    inputs : tensor, tuple or dict
        The example inputs (and the target).
    sizes : mapping
        Example size to symbol, as ``dims`` gave them.
    symbols : iterable of sympy.Symbol, optional
        Only these symbols (those the trace found fixed); all by default.

    Examples
    --------
    >>> from torch import nn
    >>> error = clash_error(nn.Conv2d(3, 8, 3), torch.empty(3, 3, 32, 32),
    ...                     {3: sp.Symbol("B")})
    >>> print(error)
    B=3 is also a size the model fixes (input 0 has shape (3, 3, 32, 32), size 3 at \
dimensions 0, 1; weight has shape (8, 3, 3, 3)), and dims makes every example dimension \
of size 3 the symbol B, so B cannot vary alone. Give B an example size the model does not \
use: e.g. example inputs with B=4 and dims={'B': 4}.
    >>> clash_error(nn.Conv2d(3, 8, 3), torch.empty(4, 3, 32, 32), {4: sp.Symbol("B")}) is None
    True
    """
    wanted = set(symbols) or set(sizes.values())
    tensors = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
    fixed = [(name, tuple(t.shape)) for name, t in _named_tensors(model)]
    found = [(size, symbol, _evidence(size, tensors, fixed)) for size, symbol in sizes.items()
             if symbol in wanted]
    found.sort(key=lambda clash: -len(clash[2]))  # an input with the size twice: likeliest
    for size, symbol, evidence in found:
        if evidence:
            other = free_size(size, [tuple(t.shape) for t in tensors] + [s for _, s in fixed],
                              set(sizes))
            return InvalidArgumentError(
                f"{symbol.name}={size} is also a size the model fixes ({'; '.join(evidence)}), "
                f"and dims makes every example dimension of size {size} the symbol "
                f"{symbol.name}, so {symbol.name} cannot vary alone. Give {symbol.name} an "
                f"example size the model does not use: e.g. example inputs with "
                f"{symbol.name}={other} and dims={{{symbol.name!r}: {other}}}."
            )
    return None


def _named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    found = [*model.named_parameters(), *model.named_buffers()]
    return [(name, t) for name, t in found if isinstance(t, torch.Tensor)]


def _evidence(
    size: int, tensors: list[torch.Tensor], fixed: list[tuple[str, tuple[int, ...]]]
) -> list[str]:
    """Where ``size`` is fixed: inputs with it twice, then a parameter with it; or nothing."""
    said = []
    for index, tensor in enumerate(tensors):
        at = [d for d, n in enumerate(tensor.shape) if int(n) == size]
        if len(at) > 1:
            said.append(
                f"input {index} has shape {tuple(tensor.shape)}, size {size} at dimensions "
                + ", ".join(map(str, at))
            )
    owner = next(((name, shape) for name, shape in fixed if size in shape), None)
    if owner is not None:
        said.append(f"{owner[0]} has shape {owner[1]}")
        return said
    return []


def free_size(size: int, shapes: Iterable[tuple[int, ...]], taken: set[int]) -> int:
    """Return the smallest size above ``size`` that no shape and no other example size has.

    Examples
    --------
    >>> free_size(3, [(3, 3, 32, 32), (8, 3, 3, 3)], {3})
    4
    >>> free_size(64, [(64, 64), (65,)], {64, 66})
    67
    """
    used = {int(n) for shape in shapes for n in shape} | set(taken)
    candidate = size + 1
    while candidate in used:
        candidate += 1
    return candidate
