"""Shape inference: one :class:`LayerRow` per layer, with everything derived about it.

Shapes flow from the :class:`~memtheory.layers.Input` through every layer, so
each layer's formulas (parameters, buffers, activations, saved tensors) see the
exact, possibly symbolic, shape that reaches it.

Examples
--------
>>> from memtheory.layers import Dense, Input
>>> layers = [Input((4,), name="input"), Dense(3, name="dense")]
>>> rows = list(derive_rows("tiny", layers, [(), ("input",)]))
>>> rows[1].output_shape, rows[1].parameters
((B, 3), 15)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace

import sympy as sp

from memtheory.errors import ShapeError
from memtheory.layers.base import Layer, Shape, TensorSpec, elements
from memtheory.layers.merge import Merge

__all__ = ["LayerRow", "derive_rows", "row_expressions"]


@dataclass(frozen=True)
class LayerRow:
    """One layer of a network with everything derived about it.

    Attributes
    ----------
    index : int
        Position in the network, the input being 0.
    layer : Layer
        The layer, named.
    input_shape, output_shape : tuple of sympy expressions
    weights, biases : sympy expression
        Trainable parameter counts.
    buffers : tuple of TensorSpec
        Non-trainable state.
    activations : sympy expression
        New activation elements the layer keeps (its output, or 0 for a view
        or an in-place layer), batch included.
    saved : tuple of TensorSpec
        What the backward pass keeps, as PyTorch's autograd does: the
        layer's :meth:`~memtheory.layers.Layer.autograd` description in training.
    inputs : tuple of str
        Names of the layers it reads (the previous layer in a sequential
        network; none for the input).
    input_shapes : tuple of shapes
        Their output shapes, in order; ``input_shape`` is the first.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> from memtheory.network import Network
    >>> row = Network([Input((784,)), Dense(10)]).rows[1]
    >>> row.name, row.weights, row.biases, row.output_shape
    ('dense_1', 7840, 10, (B, 10))
    """

    index: int
    layer: Layer
    input_shape: Shape
    output_shape: Shape
    weights: sp.Expr
    biases: sp.Expr
    buffers: tuple[TensorSpec, ...]
    activations: sp.Expr
    saved: tuple[TensorSpec, ...]
    inputs: tuple[str, ...] = ()
    input_shapes: tuple[Shape, ...] = ()

    @property
    def name(self) -> str:
        """The layer's name."""
        return self.layer.name or ""

    @property
    def parameters(self) -> sp.Expr:
        """Weights plus biases."""
        return self.weights + self.biases

    def substitute(self, mapping: dict[sp.Symbol, sp.Expr]) -> LayerRow:
        """Return the row with ``mapping`` substituted into every formula."""

        def sub(expr: sp.Expr) -> sp.Expr:
            return sp.sympify(expr).xreplace(mapping)

        def sub_specs(specs: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
            return tuple(replace(s, shape=tuple(sub(d) for d in s.shape)) for s in specs)

        return replace(
            self,
            input_shape=tuple(sub(d) for d in self.input_shape),
            input_shapes=tuple(tuple(sub(d) for d in shape) for shape in self.input_shapes),
            output_shape=tuple(sub(d) for d in self.output_shape),
            weights=sub(self.weights),
            biases=sub(self.biases),
            buffers=sub_specs(self.buffers),
            activations=sub(self.activations),
            saved=sub_specs(self.saved),
        )


def derive_rows(
    network: str, layers: Sequence[Layer], inputs: Sequence[tuple[str, ...]]
) -> Iterator[LayerRow]:
    """Yield each layer's row, passing every output shape on to the layers that read it.

    Parameters
    ----------
    network : str
        The network's name, for messages.
    layers : sequence of Layer
        Named layers in running order, the input first.
    inputs : sequence of tuple of str
        For each layer, the names of the earlier layers it reads (see
        :func:`~memtheory.network.graph.resolve_inputs`).

    Raises
    ------
    ShapeError
        If a layer cannot take the shape that reaches it; the message names the
        layer and its position.
    """
    shapes: dict[str, Shape] = {}
    for index, (layer, reads) in enumerate(zip(layers, inputs, strict=True)):
        input_shapes = tuple(shapes[name] for name in reads)
        shape: Shape = input_shapes[0] if input_shapes else ()
        try:
            derived = _derived(layer, shape, input_shapes)
        except ShapeError as error:
            raise type(error)(f"layer {index} of {network!r}: {error}") from None
        output = derived[0]
        shapes[layer.name or ""] = output
        yield LayerRow(index, layer, shape, *derived, inputs=reads, input_shapes=input_shapes)


_Derived = tuple[Shape, sp.Expr, sp.Expr, tuple[TensorSpec, ...], sp.Expr, tuple[TensorSpec, ...]]
"""A row's formulas: output shape, weights, biases, buffers, activations, saved tensors."""

_SEEN: dict[object, _Derived] = {}
"""The formulas of each layer already derived at its input shapes, by what they depend on."""

_SEEN_AT_MOST = 8192


def _derived(layer: Layer, shape: Shape, input_shapes: tuple[Shape, ...]) -> _Derived:
    """Return the layer's formulas at these input shapes, derived once for equal layers.

    A layer's formulas depend on its kind, its options and the shapes reaching
    it, not on its name: a deep stack's identical blocks (32 decoder layers,
    each with its own names) are derived once. A layer whose options cannot be
    hashed is derived every time.
    """
    key = _key(layer, input_shapes)
    found = _SEEN.get(key) if key is not None else None
    if found is not None:
        return found
    if isinstance(layer, Merge):
        output = layer.merged_shape(input_shapes)
    else:
        output = layer.output_shape(shape)
    saved = layer.autograd(input_shapes or (shape,)).saved
    derived: _Derived = (
        output,
        sp.sympify(layer.weight_count(shape)),
        sp.sympify(layer.bias_count(shape)),
        layer.buffers(shape),
        sp.sympify(
            elements(output) * int(layer.stores_output())
            if isinstance(layer, Merge)
            else layer.activation_count(shape)
        ),
        saved,
    )
    if key is not None:
        if len(_SEEN) >= _SEEN_AT_MOST:
            _SEEN.clear()
        _SEEN[key] = derived
    return derived


def _key(layer: Layer, input_shapes: tuple[Shape, ...]) -> object:
    """Everything but the name the layer's formulas depend on, or None where it is not hashable."""
    if not is_dataclass(layer):  # a layer written otherwise: its options are not known here
        return None
    options = tuple(  # with each value's type: True and 1 are equal, and hash alike
        (type(value), value)
        for field in fields(layer) if field.name != "name"
        for value in (getattr(layer, field.name),)
    )
    key = (type(layer), options, input_shapes)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def row_expressions(rows: Iterable[LayerRow]) -> Iterator[sp.Expr]:
    """Yield the formulas the rows' symbols come from: output shapes, weights, biases."""
    for row in rows:
        yield from row.output_shape
        yield row.weights
        yield row.biases
