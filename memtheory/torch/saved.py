"""List what autograd saved for the backward pass, tensor by tensor, with the layer that saved it.

:func:`measured_saved_tensors` runs one forward pass (and the loss) of a PyTorch module
and reads the autograd graph it built: each backward node exposes the tensors
it saved as ``_saved_<name>`` attributes (``MaxPool2DWithIndicesBackward0``
has ``self`` and ``result1``, the int64 indices). Forward hooks on every
submodule tell which module created each node, so each saved tensor is listed
with the layer that keeps it, its dtype and shape, and the bytes of its storage.

Several nodes often save one storage (a ReLU's output is the next layer's
input, a linear layer saves a view of its weight): :attr:`MeasuredSavedTensor.storage`
names the storage, and :func:`distinct_bytes` adds each storage once, which is
what the process holds. Where :func:`~memtheory.torch.measure` gives the total
of the saved activations, this says which layer keeps what; the two agree to
the byte. CPU or any device; nothing is allocated beyond one forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memtheory.errors import InvalidArgumentError

__all__ = ["MeasuredSavedTensor", "distinct_bytes", "measured_saved_tensors"]

Category = Literal["activation", "parameter", "buffer", "weight copy", "input", "targets"]


@dataclass(frozen=True)
class MeasuredSavedTensor:
    """One tensor an autograd node saved for the backward pass.

    Attributes
    ----------
    module : str
        Path of the module whose forward created the node (``"2"`` in an
        ``nn.Sequential``, ``"layer1.0.conv1"``), ``"loss"`` for the loss, or
        the root module's class name for operations in its own ``forward()``.
    node : str
        The autograd node's class, such as ``"ReluBackward0"``.
    name : str
        The saved tensor's name in the node (``"result"``, ``"self"``, ``"mat2"``).
    dtype : str
        ``"float32"``, ``"bfloat16"``, ``"int64"``, ...
    shape : tuple of int
    nbytes : int
        Bytes of the tensor's storage (a view saves its whole storage).
    storage : int
        The storage's number in this listing (0, 1, 2, ... in order of first
        appearance): equal numbers are one storage, held once.
    category : {"activation", "parameter", "buffer", "weight copy", "input", "targets"}
        ``"parameter"`` and ``"buffer"``: the module's own storage, which a
        layer saves without copying; ``"weight copy"``: a cast of a parameter
        (autocast's 16-bit weights); ``"input"`` and ``"targets"``: the data
        the caller passed; ``"activation"``: everything else.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> relu, linear = [t for t in measured_saved_tensors(model, torch.randn(16, 8))
    ...                 if t.category == "activation"]
    >>> relu.module, relu.node, relu.name, relu.shape, relu.nbytes
    ('1', 'ReluBackward0', 'result', (16, 4), 256)
    >>> linear.node, linear.name, linear.storage == relu.storage  # one storage, saved twice
    ('AddmmBackward0', 'mat1', True)
    """

    module: str
    node: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    storage: int
    category: Category


def distinct_bytes(tensors: Iterable[MeasuredSavedTensor]) -> int:
    """Bytes of the storages of ``tensors``, each storage once.

    Examples
    --------
    >>> a = MeasuredSavedTensor("1", "ReluBackward0", "result", "float32", (4,), 16, 0,
    ...                         "activation")
    >>> b = MeasuredSavedTensor("2", "AddmmBackward0", "mat1", "float32", (4,), 16, 0,
    ...                         "activation")
    >>> a.nbytes + b.nbytes, distinct_bytes([a, b])  # one storage, saved by two nodes
    (32, 16)
    """
    return sum({t.storage: t.nbytes for t in tensors}.values())


def measured_saved_tensors(
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002 (PyTorch's name)
    loss: Callable[..., torch.Tensor] | None = None,
    target: torch.Tensor | None = None,
    *,
    autocast: torch.dtype | None = None,
) -> tuple[MeasuredSavedTensor, ...]:
    """Run ``module(input)`` (and the loss) once and list every tensor autograd saved.

    The module runs in the mode it is in (training mode for a training step);
    nothing is backpropagated and the parameters do not change. Dropout draws
    its random mask as in any forward pass.

    Parameters
    ----------
    module : torch.nn.Module
    input : torch.Tensor
        The input batch.
    loss : callable, optional
        ``loss(output, target)`` (or ``loss(output)`` without a target), such as
        ``nn.CrossEntropyLoss()``; without it the graph is read from the
        module's outputs.
    target : torch.Tensor, optional
    autocast : torch.dtype, optional
        Run under ``torch.autocast(device, dtype=autocast)``, the device being
        the input's.

    Returns
    -------
    tuple of MeasuredSavedTensor
        In the order the nodes were created (the forward order), each node's
        tensors in the order of their names.

    Raises
    ------
    InvalidArgumentError
        If nothing in the output requires a gradient (no graph to read).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.MaxPool1d(2), nn.Linear(4, 3))
    >>> saved = measured_saved_tensors(model, torch.randn(16, 4))
    >>> [(t.module, t.name, t.dtype, t.nbytes, t.category) for t in saved if t.module == "2"]
    [('2', 'result1', 'int64', 512, 'activation'), ('2', 'self', 'float32', 512, 'activation')]
    >>> activations = [t for t in saved if t.category == "activation"]
    >>> sum(t.nbytes for t in activations), distinct_bytes(activations)  # the ReLU's output twice
    (1792, 1280)
    """
    owner: dict[torch.autograd.graph.Node, str] = {}
    names = {child: path for path, child in module.named_modules()}

    def attribute(label: str, outputs: Any) -> None:
        stack: list[Any] = [t.grad_fn for t in _tensors(outputs) if t.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node is None or node in owner or type(node).__name__ == "AccumulateGrad":
                continue
            owner[node] = label
            stack.extend(next_node for next_node, _ in node.next_functions)

    def hook(child: nn.Module, args: Any, output: Any) -> None:
        attribute(names[child] or type(module).__name__, output)

    handles = [child.register_forward_hook(hook) for child in module.modules()]
    context: Any = (
        torch.autocast(input.device.type, dtype=autocast) if autocast is not None else nullcontext()
    )
    try:
        with context:
            output = module(input)
            if loss is not None:
                value = loss(output) if target is None else loss(output, target)
                attribute("loss", value)
                output = value
    finally:
        for handle in handles:
            handle.remove()
    if not owner:
        raise InvalidArgumentError(
            "measured_saved_tensors: nothing in the output requires a gradient, so autograd saved "
            "nothing; put the module in training mode with parameters that require grad, "
            "outside torch.no_grad()."
        )
    return _listing(owner, module, input, target)


def _listing(
    owner: dict[torch.autograd.graph.Node, str],
    module: nn.Module,
    input: torch.Tensor,  # noqa: A002
    target: torch.Tensor | None,
) -> tuple[MeasuredSavedTensor, ...]:
    known: dict[int, Category] = {_pointer(p): "parameter" for p in module.parameters()}
    known.update({_pointer(b): "buffer" for b in module.buffers()})
    known[_pointer(input)] = "input"
    if target is not None:
        known[_pointer(target)] = "targets"
    parameters = {id(p) for p in module.parameters()}
    numbers: dict[int, int] = {}
    listing = []
    for node in sorted(owner, key=lambda n: n._sequence_nr()):  # noqa: SLF001
        for attribute in sorted(a for a in dir(node) if a.startswith("_saved_")):
            try:
                value = getattr(node, attribute)
            except RuntimeError:  # a saved tensor already freed (not after one forward)
                continue
            for tensor in _tensors(value):
                storage = tensor.untyped_storage()
                if storage.nbytes() == 0:
                    continue
                pointer = storage.data_ptr()
                category = known.get(pointer) or (
                    "weight copy" if _casts_parameter(tensor, parameters) else "activation"
                )
                listing.append(
                    MeasuredSavedTensor(
                        module=owner[node],
                        node=type(node).__name__,
                        name=attribute.removeprefix("_saved_"),
                        dtype=str(tensor.dtype).removeprefix("torch."),
                        shape=tuple(tensor.shape),
                        nbytes=storage.nbytes(),
                        storage=numbers.setdefault(pointer, len(numbers)),
                        category=category,
                    )
                )
    return tuple(listing)


def _casts_parameter(tensor: torch.Tensor, parameters: set[int]) -> bool:
    """Whether ``tensor`` is (a view of) a cast of a parameter: ToCopy, then the parameter."""
    node: Any = tensor.grad_fn
    cast = False
    for _ in range(4):  # a cast, and at most a few views of it (a transpose, an expand)
        if node is None or len(node.next_functions) != 1:
            return False
        cast = cast or type(node).__name__ == "ToCopyBackward0"
        node = node.next_functions[0][0]
        if type(node).__name__ == "AccumulateGrad":
            return cast and id(node.variable) in parameters
    return False


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _pointer(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().data_ptr())
