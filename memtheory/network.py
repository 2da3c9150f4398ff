"""Networks: layers chained with shape inference, and their per-layer tables.

A :class:`Network` is sequential for now: each layer feeds the next. Shapes
flow from the :class:`~memtheory.layers.Input` through every layer, so each
layer's formulas see the exact (possibly symbolic) shape that reaches it.
Branching graphs (residual blocks) will extend :class:`Network` by giving a
layer more than one input; the per-layer rows and totals stay as they are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import sympy as sp

from memtheory.counts import ModelCounts
from memtheory.errors import KernelTooLargeError, ShapeError
from memtheory.evaluation import substitution, symbols_by_name
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape, elements
from memtheory.layers.core import Input

__all__ = ["LayerRow", "Network", "NetworkSummary"]


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
        What the backward pass keeps, as PyTorch's autograd does.
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
            output_shape=tuple(sub(d) for d in self.output_shape),
            weights=sub(self.weights),
            biases=sub(self.biases),
            buffers=sub_specs(self.buffers),
            activations=sub(self.activations),
            saved=sub_specs(self.saved),
        )


class Network:
    """A sequential network: an :class:`~memtheory.layers.Input`, then layers in order.

    Parameters
    ----------
    layers : sequence of Layer
        The first must be an :class:`~memtheory.layers.Input`. Unnamed layers are
        named after their kind and position (``conv2d_1``, ``maxpool2d_1``, ...).
    name : str, default "network"

    Raises
    ------
    ShapeError
        If a layer cannot take the shape that reaches it (the message names the
        layer and its position).

    Examples
    --------
    The small CNN of a StackExchange question on per-layer memory:

    >>> from memtheory.layers import Conv2d, Dense, Flatten, Input, MaxPool2d, Softmax
    >>> net = Network([
    ...     Input((3, 50, 50)),
    ...     Conv2d(32, 3, padding=1), MaxPool2d(2),
    ...     Conv2d(64, 3, padding=1), MaxPool2d(2),
    ...     Flatten(), Dense(500), Dense(10), Softmax(),
    ... ])
    >>> net.parameter_count
    4632902
    >>> net.activation_count
    149736*B
    >>> net.output_shape
    (B, 10)
    """

    def __init__(self, layers: Sequence[Layer], name: str = "network") -> None:
        layers = list(layers)
        if not layers or not isinstance(layers[0], Input):
            raise ShapeError(
                f"Network {name!r}: the first layer must be an Input giving the sample shape, "
                "e.g. Input((3, 224, 224))."
            )
        for position, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise TypeError(
                    f"Network {name!r}: item {position} is {layer!r}, not a memtheory layer."
                )
            if isinstance(layer, Input) and position:
                raise ShapeError(
                    f"Network {name!r}: only the first layer may be an Input (item {position})."
                )
        self.name = name
        self.layers: tuple[Layer, ...] = tuple(_named(layers))
        self.rows: tuple[LayerRow, ...] = tuple(self._derive_rows())

    def _derive_rows(self) -> Iterator[LayerRow]:
        shape: Shape = ()
        for index, layer in enumerate(self.layers):
            try:
                output = layer.output_shape(shape)
                row = LayerRow(
                    index=index,
                    layer=layer,
                    input_shape=shape,
                    output_shape=output,
                    weights=sp.sympify(layer.weight_count(shape)),
                    biases=sp.sympify(layer.bias_count(shape)),
                    buffers=layer.buffers(shape),
                    activations=sp.sympify(layer.activation_count(shape)),
                    saved=layer.saved_for_backward(shape),
                )
            except ShapeError as error:
                raise type(error)(f"layer {index} of {self.name!r}: {error}") from None
            yield row
            shape = output

    # -- structure ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, name: str) -> LayerRow:
        """Return the row of the layer called ``name``."""
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no layer named {name!r}; layers: {', '.join(r.name for r in self.rows)}")

    def __repr__(self) -> str:
        shape = describe_shape(self.input_shape)
        return f"Network({self.name!r}, {len(self.layers)} layers, input {shape})"

    @property
    def input(self) -> Input:
        """The input layer."""
        return self.layers[0]  # type: ignore[return-value]

    @property
    def input_shape(self) -> Shape:
        """Shape of the input batch."""
        return self.rows[0].output_shape

    @property
    def output_shape(self) -> Shape:
        """Shape of the last layer's output."""
        return self.rows[-1].output_shape

    @property
    def batch(self) -> sp.Expr:
        """The batch size (a symbol unless the input fixed it)."""
        return self.input.batch  # type: ignore[return-value]

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        """Symbols the network's formulas depend on."""
        return set(symbols_by_name(self._expressions()).values())

    def _expressions(self) -> Iterable[sp.Expr]:
        for row in self.rows:
            yield from row.output_shape
            yield row.weights
            yield row.biases

    # -- totals ------------------------------------------------------------------------
    @property
    def weight_count(self) -> sp.Expr:
        """Trainable weights, all layers."""
        return sp.Add(*(r.weights for r in self.rows))

    @property
    def bias_count(self) -> sp.Expr:
        """Trainable biases, all layers."""
        return sp.Add(*(r.biases for r in self.rows))

    @property
    def parameter_count(self) -> sp.Expr:
        """Trainable parameters (weights and biases), all layers."""
        return self.weight_count + self.bias_count

    @property
    def activation_count(self) -> sp.Expr:
        """Activation elements the forward pass keeps, batch included, the input excluded."""
        return sp.Add(*(r.activations for r in self.rows[1:]))

    @property
    def input_elements(self) -> sp.Expr:
        """Elements of the input batch."""
        return elements(self.input_shape)

    @property
    def buffer_specs(self) -> tuple[TensorSpec, ...]:
        """Every buffer of every layer."""
        return tuple(spec for row in self.rows for spec in row.buffers)

    def counts(self) -> ModelCounts:
        """Return the counts an accounting convention needs.

        Examples
        --------
        >>> from memtheory.layers import Dense, Input
        >>> Network([Input((4,)), Dense(3)]).counts()
        ModelCounts(parameters=15, activations=3*B, input_elements=4*B, buffers=0, batch=B)
        """
        return ModelCounts(
            parameters=self.parameter_count,
            activations=self.activation_count,
            input_elements=self.input_elements,
            buffers=sp.Add(*(spec.elements for spec in self.buffer_specs if spec.dtype is None)),
            batch=self.batch,
        )

    # -- numbers -----------------------------------------------------------------------
    def summary(self, **values: object) -> NetworkSummary:
        """Return the per-layer table and totals, with ``values`` substituted (by symbol name).

        Parameters
        ----------
        **values
            Numbers for some or all of the free symbols (``B=64``, ``H=224``).
            Every layer's output must then have positive sizes.

        Raises
        ------
        KernelTooLargeError
            If, for these values, a layer's output would have no positions.

        Examples
        --------
        >>> from memtheory.layers import Conv2d, Input
        >>> from memtheory.symbols import H
        >>> net = Network([Input((1, H, H)), Conv2d(8, 5)])
        >>> net.summary(B=2, H=28).rows[1].output_shape
        (2, 8, 24, 24)
        >>> net.summary(B=2, H=4)
        Traceback (most recent call last):
        ...
        memtheory.errors.KernelTooLargeError: layer 1 of 'network', Conv2d 'conv2d_1': ...
        """
        mapping = substitution(self._expressions(), values) if values else {}
        rows = tuple(row.substitute(mapping) for row in self.rows)
        for row in rows:
            for size in row.output_shape:
                if size.is_number and size < 1:
                    raise KernelTooLargeError(
                        f"layer {row.index} of {self.name!r}, {row.layer.label}: for "
                        f"{_values_text(values)} its input {describe_shape(row.input_shape)} is "
                        f"too small "
                        f"for its window (output {describe_shape(row.output_shape)}). "
                        "Use a larger input, more padding, or a smaller kernel."
                    )
        return NetworkSummary(self.name, rows)

    def evaluate(self, **values: object) -> NetworkSummary:
        """Alias of :meth:`summary`, for symmetry with memory breakdowns.

        Examples
        --------
        >>> from memtheory.layers import Dense, Input
        >>> Network([Input((4,)), Dense(3)]).evaluate(B=64).activation_count
        192
        """
        return self.summary(**values)


@dataclass(frozen=True)
class NetworkSummary:
    """A network's per-layer table and totals, symbolic or evaluated.

    ``str(summary)`` prints the table.
    """

    name: str
    rows: tuple[LayerRow, ...]

    @property
    def parameter_count(self) -> sp.Expr:
        """Trainable parameters."""
        return sp.Add(*(r.parameters for r in self.rows))

    @property
    def activation_count(self) -> sp.Expr:
        """Activation elements kept, batch included, the input excluded."""
        return sp.Add(*(r.activations for r in self.rows[1:]))

    @property
    def input_elements(self) -> sp.Expr:
        """Elements of the input batch."""
        return elements(self.rows[0].output_shape)

    def table(self) -> str:
        """Render the table as text (what ``str()`` returns).

        Examples
        --------
        >>> from memtheory.layers import Dense, Input
        >>> print(Network([Input((4,)), Dense(3)], name="tiny").summary(B=2).table())
        tiny
        #  layer    type   config  output shape  weights  biases  activations
        -  -------  -----  ------  ------------  -------  ------  -----------
        0  input    Input  4       (2, 4)              0       0            8
        1  dense_1  Dense  3       (2, 3)             12       3            6
        total                                         12       3            6
        parameters: 15; activations exclude the input.
        """
        header = (
            "#",
            "layer",
            "type",
            "config",
            "output shape",
            "weights",
            "biases",
            "activations",
        )
        body = [
            (
                str(r.index),
                r.name,
                r.layer.kind,
                r.layer.describe(),
                describe_shape(r.output_shape),
                _count_text(r.weights),
                _count_text(r.biases),
                _count_text(r.activations if r.index else elements(r.output_shape)),
            )
            for r in self.rows
        ]
        total = (
            "total",
            "",
            "",
            "",
            "",
            _count_text(sp.Add(*(r.weights for r in self.rows))),
            _count_text(sp.Add(*(r.biases for r in self.rows))),
            _count_text(self.activation_count),
        )
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
        numeric = {5, 6, 7}

        def render(line: tuple[str, ...]) -> str:
            cells = [
                cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                for i, cell in enumerate(line)
            ]
            return "  ".join(cells).rstrip()

        lines = [self.name, render(header), render(tuple("-" * w for w in widths))]
        lines += [render(line) for line in body]
        lines.append(_total_line(total, widths))
        lines.append(
            f"parameters: {_count_text(self.parameter_count)}; activations exclude the input."
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _total_line(total: tuple[str, ...], widths: list[int]) -> str:
    prefix_width = sum(widths[:5]) + 2 * 5
    numbers = "  ".join(total[i].rjust(widths[i]) for i in (5, 6, 7))
    return ("total".ljust(prefix_width) + numbers).rstrip()


def _count_text(value: sp.Expr) -> str:
    value = sp.sympify(value)
    return str(int(value)) if value.is_Integer else str(value)


def _values_text(values: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _named(layers: list[Layer]) -> Iterator[Layer]:
    taken = {layer.name for layer in layers if layer.name}
    duplicates = [
        name for name, n in Counter(layer.name for layer in layers if layer.name).items() if n > 1
    ]
    if duplicates:
        raise ValueError(f"layer names must be unique; repeated: {', '.join(duplicates)}")
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
        yield replace(layer, name=candidate)
