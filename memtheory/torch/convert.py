"""Build a memtheory :class:`~memtheory.network.Network` from a PyTorch module.

:func:`from_module` reads a stack of layers (``nn.Sequential``, nested ones
included) whose layer types memtheory knows, checks each layer's sizes
against the shape that reaches it, and returns the equivalent Network. A loss
module can be appended, so that the autograd convention sees the whole
training step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sympy as sp
from torch import nn

from memtheory.errors import ShapeError, UnsupportedError
from memtheory.layers import (
    ELU,
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm2d,
    BCEWithLogitsLoss,
    Conv2d,
    CrossEntropyLoss,
    Dense,
    Dropout,
    Flatten,
    Input,
    L1Loss,
    Layer,
    LeakyReLU,
    LogSoftmax,
    MaxPool2d,
    MSELoss,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from memtheory.network import Network
from memtheory.torch.tracing.result import TracedMemory
from memtheory.torch.tracing.shapes import trace_shapes

__all__ = ["SUPPORTED_MODULES", "from_module"]

SUPPORTED_MODULES: tuple[str, ...] = (
    "Sequential",
    "Conv2d",
    "Linear",
    "Flatten",
    "MaxPool2d",
    "AvgPool2d",
    "AdaptiveAvgPool2d",
    "BatchNorm2d",
    "Dropout",
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "ELU",
    "GELU",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "Softmax",
    "LogSoftmax",
    "Identity",
)
"""Module types :func:`from_module` converts (and ``CrossEntropyLoss`` as the loss)."""


def from_module(
    module: nn.Module,
    input_shape: Sequence[Any],
    *,
    loss: nn.Module | None = None,
    device: str | None = None,
    name: str | None = None,
    **trace_options: Any,
) -> Network | TracedMemory:
    """Build the memtheory Network of a PyTorch stack of layers, or trace any other module.

    An ``nn.Sequential`` stack (or one supported layer) becomes a memtheory
    :class:`~memtheory.network.Network`, whose memory every convention
    derives. Any other module, with its own ``forward()``, is traced instead
    (:func:`memtheory.torch.tracing.shapes.trace_shapes`): the result is the
    :class:`~memtheory.torch.tracing.TracedMemory` of a training step, exact
    and symbolic in the symbols of ``input_shape``; ``trace_options``
    (``optimizer=``, ``target_shape=``, ``input_dtype=``, ``sizes=``) go there.

    Parameters
    ----------
    module : torch.nn.Module
        An ``nn.Sequential`` (nested ones are flattened) of the layers listed
        in :data:`SUPPORTED_MODULES`, or one such layer.
    input_shape : sequence of sizes
        The input batch's shape, batch first, as PyTorch writes it:
        ``(64, 3, 50, 50)``. Sizes may be memtheory symbols (``B``, ``H``).
    loss : torch.nn.Module, optional
        ``nn.CrossEntropyLoss()`` to append as the network's last layer.
    device : {"cpu", "cuda"}, optional
        Where the module runs, which sets the dropout mask's dtype; by default
        the device of the module's parameters (CPU when it has none).
    name : str, optional
        The network's name; by default the module's class name.

    Returns
    -------
    Network or TracedMemory
        A Network for a stack of layers; a TracedMemory for any other module.

    Raises
    ------
    UnsupportedError
        In a stack: for a module memtheory does not model (its path and type
        are named), a module with a custom ``forward`` inside the stack, or an
        option that changes what is kept (``padding_mode="reflect"``,
        ``return_indices=True``, ...).
    ShapeError
        If a layer's declared sizes (``in_features``, ``in_channels``,
        ``num_features``) do not match the shape that reaches it.

    Examples
    --------
    >>> from torch import nn
    >>> module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    ...                        nn.Flatten(), nn.Linear(8 * 16 * 16, 10))
    >>> net = from_module(module, (32, 3, 32, 32), loss=nn.CrossEntropyLoss())
    >>> net.parameter_count == sum(p.numel() for p in module.parameters())
    True
    >>> [row.layer.kind for row in net.rows]
    ['Input', 'Conv2d', 'ReLU', 'MaxPool2d', 'Flatten', 'Dense', 'CrossEntropyLoss']
    >>> from_module(nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4)), (2, 4))
    Traceback (most recent call last):
    ...
    memtheory.errors.UnsupportedError: from_module: module '1' is nn.LSTM, which memtheory ...
    """
    if not isinstance(module, nn.Sequential) and type(module) not in _CONVERTERS:
        return trace_shapes(module, input_shape, loss=loss, **trace_options)
    if trace_options:
        raise UnsupportedError(
            f"from_module: {', '.join(trace_options)} only apply to a module that is traced "
            "(one with its own forward()); a stack of layers becomes a Network."
        )
    shape = tuple(input_shape)
    if len(shape) < 2:
        raise ShapeError(
            f"from_module: input_shape must be batch first with at least one more dimension, "
            f"such as (64, 784), got {input_shape!r}."
        )
    if device is None:
        first = next(iter(module.parameters()), None)
        device = "cpu" if first is None else first.device.type
    device = "cuda" if device.startswith("cuda") else device
    layers: list[Layer] = [Input(shape[1:], batch=shape[0])]
    current = tuple(sp.sympify(s) for s in shape)
    for path, child in _leaves(module, ""):
        layer = _convert(path, child, current, device)
        if layer is None:
            continue
        current = layer.output_shape(current)
        layers.append(layer)
    if loss is not None:
        layers.append(_convert_loss(loss, current))
    return Network(layers, name=name or type(module).__name__)


def _leaves(module: nn.Module, path: str) -> Iterator[tuple[str, nn.Module]]:
    if isinstance(module, nn.Sequential):
        for child_name, child in module.named_children():
            yield from _leaves(child, f"{path}.{child_name}" if path else child_name)
        return
    yield path or type(module).__name__, module


def _convert(path: str, module: nn.Module, shape: tuple[sp.Expr, ...], device: str) -> Layer | None:
    kind = type(module).__name__
    converter = _CONVERTERS.get(type(module))
    if converter is None:
        if list(module.children()) or kind not in dir(nn):
            why = (
                f"{kind}, a module with its own forward(); inside an nn.Sequential only layers "
                "are read (memtheory.torch.trace traces the whole model instead)"
            )
        else:
            why = f"nn.{kind}, which memtheory does not model"
        raise UnsupportedError(
            f"from_module: module '{path}' is {why}. Supported: {', '.join(SUPPORTED_MODULES)}; "
            "memtheory.torch.trace(module, example_input, dims) traces any model."
        )
    return converter(path, module, shape, device)


def _unsupported(path: str, module: nn.Module, option: str) -> UnsupportedError:
    return UnsupportedError(
        f"from_module: module '{path}' ({type(module).__name__}) uses {option}, which changes "
        "what PyTorch keeps and is not modelled."
    )


def _check_size(path: str, what: str, declared: int, found: sp.Expr) -> None:
    if sp.sympify(found).is_number and int(found) != declared:
        raise ShapeError(
            f"from_module: module '{path}' expects {what} = {declared}, but the tensor reaching "
            f"it has {found}."
        )


def _conv2d(path: str, m: nn.Conv2d, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    if m.padding_mode != "zeros":
        raise _unsupported(path, m, f"padding_mode={m.padding_mode!r}")
    if len(shape) != 4:
        raise ShapeError(f"from_module: module '{path}' (Conv2d) needs a 4-D input, got {shape}.")
    _check_size(path, "in_channels", m.in_channels, shape[1])
    padding = m.padding if isinstance(m.padding, str) else tuple(m.padding)
    return Conv2d(
        m.out_channels,
        tuple(m.kernel_size),
        stride=tuple(m.stride),
        padding=padding,
        dilation=tuple(m.dilation),
        groups=m.groups,
        bias=m.bias is not None,
    )


def _linear(path: str, m: nn.Linear, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    if len(shape) != 2:
        raise ShapeError(
            f"from_module: module '{path}' (Linear) reads (batch, features) here; got "
            f"{len(shape)}-D {shape}. Insert nn.Flatten() before it."
        )
    _check_size(path, "in_features", m.in_features, shape[1])
    return Dense(m.out_features, bias=m.bias is not None)


def _flatten(path: str, m: nn.Flatten, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    end = m.end_dim % len(shape)
    if m.start_dim != 1 or end != len(shape) - 1:
        raise _unsupported(path, m, f"start_dim={m.start_dim}, end_dim={m.end_dim}")
    return Flatten()


def _max_pool(path: str, m: nn.MaxPool2d, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    if m.return_indices:
        raise _unsupported(path, m, "return_indices=True")
    return MaxPool2d(
        _pair(m.kernel_size),
        stride=_pair(m.stride),
        padding=_pair(m.padding),
        dilation=_pair(m.dilation),
        ceil_mode=m.ceil_mode,
    )


def _avg_pool(path: str, m: nn.AvgPool2d, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    return AvgPool2d(
        _pair(m.kernel_size),
        stride=_pair(m.stride),
        padding=_pair(m.padding),
        ceil_mode=m.ceil_mode,
    )


def _adaptive_avg_pool(
    path: str, m: nn.AdaptiveAvgPool2d, shape: tuple[sp.Expr, ...], device: str
) -> Layer:
    size = _pair(m.output_size)
    if size is None or (isinstance(size, tuple) and None in size):
        raise _unsupported(path, m, "output_size=None (keep the input size)")
    return AdaptiveAvgPool2d(size)


def _batch_norm(path: str, m: nn.BatchNorm2d, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    _check_size(path, "num_features", m.num_features, shape[1])
    return BatchNorm2d(affine=m.affine, track_running_stats=m.track_running_stats)


def _dropout(path: str, m: nn.Dropout, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    return Dropout(m.p, inplace=m.inplace, device=device)


def _softmax(path: str, m: nn.Softmax, shape: tuple[sp.Expr, ...], device: str) -> Layer:
    if m.dim is None or m.dim % len(shape) != len(shape) - 1:
        raise _unsupported(path, m, f"dim={m.dim} (memtheory's softmax is over the last dim)")
    return LogSoftmax() if isinstance(m, nn.LogSoftmax) else Softmax()


def _elementwise(kind: type[Layer], *attributes: str) -> Any:
    def convert(path: str, m: nn.Module, shape: tuple[sp.Expr, ...], device: str) -> Layer:
        options = {attribute: getattr(m, attribute) for attribute in attributes}
        if getattr(m, "inplace", False) and "inplace" not in attributes:
            raise _unsupported(path, m, "inplace=True")
        return kind(**options)

    return convert


def _identity(path: str, m: nn.Module, shape: tuple[sp.Expr, ...], device: str) -> None:
    return None


def _pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, tuple | list) else value


_CONVERTERS: dict[type, Any] = {
    nn.Conv2d: _conv2d,
    nn.Linear: _linear,
    nn.Flatten: _flatten,
    nn.MaxPool2d: _max_pool,
    nn.AvgPool2d: _avg_pool,
    nn.AdaptiveAvgPool2d: _adaptive_avg_pool,
    nn.BatchNorm2d: _batch_norm,
    nn.Dropout: _dropout,
    nn.Softmax: _softmax,
    nn.LogSoftmax: _softmax,
    nn.ReLU: _elementwise(ReLU, "inplace"),
    nn.ReLU6: _elementwise(ReLU6, "inplace"),
    nn.LeakyReLU: _elementwise(LeakyReLU, "negative_slope", "inplace"),
    nn.ELU: _elementwise(ELU, "alpha", "inplace"),
    nn.GELU: _elementwise(GELU, "approximate"),
    nn.SiLU: _elementwise(SiLU),
    nn.Sigmoid: _elementwise(Sigmoid),
    nn.Tanh: _elementwise(Tanh),
    nn.Identity: _identity,
}


_LOSSES: dict[type[nn.Module], type[Layer]] = {
    nn.MSELoss: MSELoss,
    nn.L1Loss: L1Loss,
    nn.BCEWithLogitsLoss: BCEWithLogitsLoss,
}
"""Regression and binary losses :func:`from_module` converts (mean reduction)."""


def _convert_loss(loss: nn.Module, shape: tuple[sp.Expr, ...]) -> Layer:
    if type(loss) in _LOSSES:
        extra = [name for name in ("weight", "pos_weight") if getattr(loss, name, None) is not None]
        reduction = getattr(loss, "reduction", "mean")
        if reduction != "mean" or extra:
            options = ", ".join([f"reduction={reduction!r}", *extra])
            raise UnsupportedError(
                f"from_module: {type(loss).__name__} ({options}) keeps other tensors; memtheory "
                "models the mean reduction without weights."
            )
        return _LOSSES[type(loss)]()
    if not isinstance(loss, nn.CrossEntropyLoss):
        raise UnsupportedError(
            f"from_module: the loss is {type(loss).__name__}; memtheory models "
            "nn.CrossEntropyLoss, nn.MSELoss, nn.L1Loss and nn.BCEWithLogitsLoss. Leave "
            "loss=None to model the network alone (trained on output.sum())."
        )
    if loss.label_smoothing or loss.weight is not None or loss.reduction != "mean":
        raise UnsupportedError(
            "from_module: CrossEntropyLoss with label_smoothing, class weights or a reduction "
            "other than 'mean' keeps other tensors and is not modelled."
        )
    if len(shape) not in (2, 3):
        raise ShapeError(
            "from_module: CrossEntropyLoss here reads (batch, classes) logits, or (batch, "
            f"sequence, vocabulary) logits the caller flattens; got {shape}."
        )
    return CrossEntropyLoss(ignore_index=loss.ignore_index)
