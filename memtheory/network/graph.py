"""Wiring: which earlier layers each layer reads, and the names that wiring uses.

A :class:`Node` wraps a layer to make it read earlier layers by name (a residual
shortcut, or a merge that reads several); a plain layer reads the one before it.
:func:`name_layers` names unnamed layers after their kind and position, and
:func:`resolve_inputs` turns the wiring into the names each layer reads, checking
that every name is an earlier layer and that only merges read more than one.

Examples
--------
>>> from memtheory.layers import Add, Dense, Input
>>> layers = list(name_layers([Input((4,)), Dense(4), Add()]))
>>> [layer.name for layer in layers]
['input', 'dense_1', 'add_1']
>>> list(resolve_inputs("net", layers, [None, None, ("input", "dense_1")]))
[(), ('input',), ('input', 'dense_1')]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from memtheory.errors import ShapeError, UnsupportedError
from memtheory.layers.base import Layer
from memtheory.layers.core import Input
from memtheory.layers.merge import Merge

__all__ = ["Node", "is_sequential", "name_layers", "resolve_inputs"]


@dataclass(frozen=True)
class Node:
    """A layer that reads the outputs of named earlier layers instead of the previous one.

    Parameters
    ----------
    layer : Layer
        The layer. Name the layers a node reads (``Conv2d(..., name="conv")``),
        or use the names a :class:`~memtheory.network.Network` gives unnamed
        layers (``conv2d_1``).
    inputs : str or sequence of str
        Names of earlier layers whose outputs it reads, in order. A merge layer
        (:class:`~memtheory.layers.Add`, :class:`~memtheory.layers.Concat`) reads
        two or more; any other layer reads exactly one.

    Examples
    --------
    >>> from memtheory.layers import Add
    >>> Node(Add(), inputs=("block_in", "bn3")).inputs
    ('block_in', 'bn3')
    >>> Node(Add(), inputs="bn3").inputs
    ('bn3',)
    """

    layer: Layer
    inputs: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str):
            inputs: tuple[object, ...] = (self.inputs,)
        elif isinstance(self.inputs, Iterable):
            inputs = tuple(self.inputs)
        else:
            inputs = ()  # refused below, by name
        if not isinstance(self.layer, Layer):
            raise UnsupportedError(f"Node: layer must be a memtheory layer, got {self.layer!r}.")
        if not inputs or not all(isinstance(name, str) and name for name in inputs):
            raise ShapeError(
                f"Node({self.layer.label}): inputs must name one or more earlier layers, "
                f"got {self.inputs!r:.80}."
            )
        object.__setattr__(self, "inputs", inputs)

    @property
    def name(self) -> str | None:
        """The wrapped layer's name."""
        return self.layer.name


def name_layers(layers: Sequence[Layer]) -> Iterator[Layer]:
    """Yield the layers, each unnamed one named after its kind and position.

    The input is called ``input``; other layers ``conv2d_1``, ``maxpool2d_1``, ...
    skipping names already taken.

    Raises
    ------
    ShapeError
        If two layers were given the same name.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> [layer.name for layer in name_layers([Input((4,)), Dense(3, name="dense_1"), Dense(2)])]
    ['input', 'dense_1', 'dense_2']
    """
    taken = {layer.name for layer in layers if layer.name}
    duplicates = [
        name for name, n in Counter(layer.name for layer in layers if layer.name).items() if n > 1
    ]
    if duplicates:
        raise ShapeError(
            f"layer names must be unique; repeated: {', '.join(duplicates)}. Rename one, or leave "
            "it unnamed to get an automatic name."
        )
    counters: Counter[str] = Counter()
    for layer in layers:
        if layer.name:
            yield layer
            continue
        if isinstance(layer, Input):
            base, candidate = "input", "input"
        else:
            base = layer.kind.lower()
            counters[base] += 1
            candidate = f"{base}_{counters[base]}"
        while candidate in taken:
            counters[base] += 1
            candidate = f"{base}_{counters[base]}"
        taken.add(candidate)
        yield replace(cast(Any, layer), name=candidate)  # every Layer is a dataclass


def resolve_inputs(
    network: str,
    layers: Sequence[Layer],
    wiring: Iterable[tuple[str, ...] | None],
) -> Iterator[tuple[str, ...]]:
    """Yield, for each named layer, the names of the layers it reads.

    Parameters
    ----------
    network : str
        The network's name, for messages.
    layers : sequence of Layer
        The layers, named (see :func:`name_layers`), the input first.
    wiring : iterable of tuple of str or None
        For each layer, the names its :class:`Node` gives, or None to read the
        previous layer.

    Raises
    ------
    ShapeError
        If a name is not an earlier layer, a merge reads fewer than two layers,
        or another layer reads more than one.
    """
    earlier: list[str] = []
    seen: set[str] = set()  # the names in earlier, for constant-time lookups
    for index, (layer, inputs) in enumerate(zip(layers, wiring, strict=True)):
        name = layer.name or ""
        if index == 0:
            resolved: tuple[str, ...] = ()
        elif inputs is None:
            resolved = (earlier[-1],)
        else:
            missing = [n for n in inputs if n not in seen]
            if missing:
                raise ShapeError(
                    f"layer {index} of {network!r}, {layer.label}: reads "
                    f"{', '.join(map(repr, missing))}, which is not an earlier layer. "
                    f"Earlier layers: {', '.join(earlier)}."
                )
            resolved = inputs
        if isinstance(layer, Merge) and len(resolved) < 2:
            raise ShapeError(
                f"layer {index} of {network!r}, {layer.label}: merges two or more inputs "
                f"but reads {len(resolved)}. Wrap it as Node({layer.kind}(), "
                "inputs=('first', 'second'))."
            )
        if not isinstance(layer, Merge) and len(resolved) > 1:
            raise ShapeError(
                f"layer {index} of {network!r}, {layer.label}: reads one input, but the "
                f"node names {len(resolved)}. Merge them first with Add or Concat."
            )
        earlier.append(name)
        seen.add(name)
        yield resolved


def is_sequential(names: Sequence[str], inputs: Sequence[tuple[str, ...]]) -> bool:
    """Return whether every layer reads exactly the one before it.

    Examples
    --------
    >>> is_sequential(["x", "a", "b"], [(), ("x",), ("a",)])
    True
    >>> is_sequential(["x", "a", "b"], [(), ("x",), ("x", "a")])
    False
    """
    return all(
        reads == (previous,) for previous, reads in zip(names, inputs[1:], strict=False)
    )
