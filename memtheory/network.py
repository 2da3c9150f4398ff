"""Networks: layers wired with shape inference, and their per-layer tables.

A :class:`Network` is a list of layers in the order they run. By default each
layer reads the output of the one before it (a sequential network). A
:class:`Node` wraps a layer to make it read earlier layers by name instead: a
residual shortcut, or a merge layer (:class:`~memtheory.layers.Add`,
:class:`~memtheory.layers.Concat`) that reads several. Shapes flow from the
:class:`~memtheory.layers.Input` through every layer, so each layer's formulas
see the exact (possibly symbolic) shape that reaches it.

Examples
--------
A residual block, ``relu(x + conv(x))``:

>>> from memtheory.layers import Add, Conv2d, Input, ReLU
>>> net = Network([
...     Input((8, 32, 32), name="x"),
...     Conv2d(8, 3, padding=1, name="conv"),
...     Node(Add(name="add"), inputs=("x", "conv")),
...     ReLU(name="relu"),
... ])
>>> net["add"].inputs, net["relu"].inputs
(('x', 'conv'), ('add',))
>>> net.parameter_count
584
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import sympy as sp

from memtheory.counts import ModelCounts
from memtheory.dtypes import DType
from memtheory.errors import KernelTooLargeError, ShapeError, UnsupportedError
from memtheory.evaluation import substitution, symbols_by_name
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape, elements
from memtheory.layers.core import Input
from memtheory.layers.merge import Merge

__all__ = ["LayerRow", "Network", "NetworkSummary", "Node", "SavedTensor"]


@dataclass(frozen=True)
class Node:
    """A layer that reads the outputs of named earlier layers instead of the previous one.

    Parameters
    ----------
    layer : Layer
        The layer. Name the layers a node reads (``Conv2d(..., name="conv")``),
        or use the names a :class:`Network` gives unnamed layers (``conv2d_1``).
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
        inputs = (self.inputs,) if isinstance(self.inputs, str) else tuple(self.inputs)
        if not isinstance(self.layer, Layer):
            raise UnsupportedError(f"Node: layer must be a memtheory layer, got {self.layer!r}.")
        if not inputs or not all(isinstance(name, str) and name for name in inputs):
            raise ShapeError(
                f"Node({self.layer.label}): inputs must name one or more earlier layers, "
                f"got {self.inputs!r}."
            )
        object.__setattr__(self, "inputs", inputs)

    @property
    def name(self) -> str | None:
        """The wrapped layer's name."""
        return self.layer.name


@dataclass(frozen=True)
class SavedTensor:
    """One tensor the backward pass keeps, counted once however many layers keep it.

    Attributes
    ----------
    saver : str
        The first layer (in running order) that keeps it.
    owner : str
        The layer whose memory it is: for a layer's own input or output, the
        layer that allocated that storage (views and in-place layers share
        their input's storage, so they are never owners); for any other
        tensor, the saver itself.
    spec : TensorSpec
        Role, shape and dtype, as the saver reports them.
    """

    saver: str
    owner: str
    spec: TensorSpec

    def nbytes(self, default: DType) -> sp.Expr:
        """Bytes, with ``default`` standing in for an unspecified dtype."""
        return self.spec.nbytes(default)


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
    inputs : tuple of str
        Names of the layers it reads (the previous layer in a sequential
        network; none for the input).
    input_shapes : tuple of shapes
        Their output shapes, in order; ``input_shape`` is the first.
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


class Network:
    """A network: an :class:`~memtheory.layers.Input`, then layers in the order they run.

    Parameters
    ----------
    layers : sequence of Layer or Node
        The first must be an :class:`~memtheory.layers.Input`. A plain layer
        reads the output of the item before it; a :class:`Node` reads the
        earlier layers it names (residual shortcuts, merges). Unnamed layers
        are named after their kind and position (``conv2d_1``, ``maxpool2d_1``, ...).
    name : str, default "network"

    Raises
    ------
    ShapeError
        If a layer cannot take the shape that reaches it (the message names the
        layer and its position), or a node names a layer that does not come
        before it.

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

    def __init__(self, layers: Sequence[Layer | Node], name: str = "network") -> None:
        items = list(layers)
        if not items or not isinstance(items[0], Input):
            raise ShapeError(
                f"Network {name!r}: the first layer must be an Input giving the sample shape, "
                "e.g. Input((3, 224, 224))."
            )
        for position, item in enumerate(items):
            layer = item.layer if isinstance(item, Node) else item
            if not isinstance(layer, Layer):
                raise UnsupportedError(
                    f"Network {name!r}: item {position} is {item!r}, not a memtheory layer. "
                    "Build layers from memtheory.layers (Conv2d(32, 3), Dense(10), ...)."
                )
            if isinstance(layer, Input) and position:
                raise ShapeError(
                    f"Network {name!r}: only the first layer may be an Input (item {position})."
                )
        self.name = name
        self.layers: tuple[Layer, ...] = tuple(
            _named([item.layer if isinstance(item, Node) else item for item in items])
        )
        wiring = [item.inputs if isinstance(item, Node) else None for item in items]
        self._inputs: tuple[tuple[str, ...], ...] = tuple(self._resolve_inputs(wiring))
        self.rows: tuple[LayerRow, ...] = tuple(self._derive_rows())
        self._by_name: dict[str, LayerRow] = {row.name: row for row in self.rows}

    def _resolve_inputs(self, wiring: list[tuple[str, ...] | None]) -> Iterator[tuple[str, ...]]:
        earlier: list[str] = []
        for index, (layer, inputs) in enumerate(zip(self.layers, wiring, strict=True)):
            name = layer.name or ""
            if index == 0:
                resolved: tuple[str, ...] = ()
            elif inputs is None:
                resolved = (earlier[-1],)
            else:
                missing = [n for n in inputs if n not in earlier]
                if missing:
                    raise ShapeError(
                        f"layer {index} of {self.name!r}, {layer.label}: reads "
                        f"{', '.join(map(repr, missing))}, which is not an earlier layer. "
                        f"Earlier layers: {', '.join(earlier)}."
                    )
                resolved = inputs
            if isinstance(layer, Merge) and len(resolved) < 2:
                raise ShapeError(
                    f"layer {index} of {self.name!r}, {layer.label}: merges two or more inputs "
                    f"but reads {len(resolved)}. Wrap it as Node({layer.kind}(), "
                    "inputs=('first', 'second'))."
                )
            if not isinstance(layer, Merge) and len(resolved) > 1:
                raise ShapeError(
                    f"layer {index} of {self.name!r}, {layer.label}: reads one input, but the "
                    f"node names {len(resolved)}. Merge them first with Add or Concat."
                )
            earlier.append(name)
            yield resolved

    def _derive_rows(self) -> Iterator[LayerRow]:
        shapes: dict[str, Shape] = {}
        for index, (layer, inputs) in enumerate(zip(self.layers, self._inputs, strict=True)):
            input_shapes = tuple(shapes[name] for name in inputs)
            shape: Shape = input_shapes[0] if input_shapes else ()
            try:
                if isinstance(layer, Merge):
                    output = layer.merged_shape(input_shapes)
                    saved = layer.merged_saved_for_backward(input_shapes)
                else:
                    output = layer.output_shape(shape)
                    saved = layer.saved_for_backward(shape)
                row = LayerRow(
                    index=index,
                    layer=layer,
                    input_shape=shape,
                    output_shape=output,
                    weights=sp.sympify(layer.weight_count(shape)),
                    biases=sp.sympify(layer.bias_count(shape)),
                    buffers=layer.buffers(shape),
                    activations=sp.sympify(
                        elements(output) * int(layer.stores_output())
                        if isinstance(layer, Merge)
                        else layer.activation_count(shape)
                    ),
                    saved=saved,
                    inputs=inputs,
                    input_shapes=input_shapes,
                )
            except ShapeError as error:
                raise type(error)(f"layer {index} of {self.name!r}: {error}") from None
            shapes[layer.name or ""] = output
            yield row

    # -- structure ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, name: str) -> LayerRow:
        """Return the row of the layer called ``name``."""
        try:
            return self._by_name[name]
        except KeyError:
            names = ", ".join(r.name for r in self.rows)
            raise KeyError(f"no layer named {name!r}; layers: {names}") from None

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
    def is_sequential(self) -> bool:
        """Whether every layer reads the one before it (no shortcuts, no merges).

        Examples
        --------
        >>> from memtheory.layers import Dense, Input
        >>> Network([Input((4,)), Dense(3)]).is_sequential
        True
        """
        return _is_sequential(self.rows)

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

    def size_constraints(self) -> dict[str, sp.Expr]:
        """Return every symbolic output size, labelled, that must stay at least 1.

        A memory estimate built from the network carries these, so that
        evaluating it for an input too small for a window is an error rather than
        a number (a side of ``H - 4`` squared is positive even for ``H = 2``).

        Examples
        --------
        >>> from memtheory.layers import Conv2d, Input
        >>> from memtheory.symbols import H
        >>> Network([Input((1, H, H)), Conv2d(8, 5)]).size_constraints()
        {"layer 1, Conv2d 'conv2d_1', output dimension 2": H - 4}
        """
        constraints: dict[str, sp.Expr] = {}
        for row in self.rows:
            for axis, size in enumerate(row.output_shape):
                size = sp.sympify(size)
                if size.is_positive is not True and size not in constraints.values():
                    label = f"layer {row.index}, {row.layer.label}, output dimension {axis}"
                    constraints[label] = size
        return constraints

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

    def storage_owner(self, name: str) -> str:
        """Return the layer whose memory holds the output of layer ``name``.

        A layer that stores its output owns it; a view (Flatten) or an in-place
        layer (``ReLU(inplace=True)``, ``Add(inplace=True)``) writes into its
        first input's storage, so the owner is found upstream.

        Examples
        --------
        >>> from memtheory.layers import Conv2d, Input, ReLU
        >>> net = Network([Input((3, 8, 8)), Conv2d(4, 3), ReLU(inplace=True)])
        >>> net.storage_owner("relu_1")
        'conv2d_1'
        """
        row = self[name]
        while row.inputs and not row.layer.stores_output():
            row = self[row.inputs[0]]
        return row.name

    def saved_tensors(self) -> tuple[SavedTensor, ...]:
        """Return every tensor the backward pass keeps, each counted once.

        A layer that keeps its input keeps its first input's storage, and one
        that keeps its output keeps its own (or, for views and in-place layers,
        the storage it writes into): when two layers keep the same storage it
        appears once, with the first saver. Other saved tensors (indices, masks,
        statistics, intermediates) belong to the layer that saves them.

        Examples
        --------
        >>> from memtheory.layers import Dense, Input, ReLU
        >>> net = Network([Input((4,)), Dense(3), ReLU(), Dense(2)])
        >>> [(t.saver, t.owner, t.spec.role) for t in net.saved_tensors()]
        [('dense_1', 'input', 'input'), ('relu_1', 'relu_1', 'output')]
        """
        found: list[SavedTensor] = []
        seen: set[tuple[str, ...]] = set()
        for row in self.rows:
            for position, spec in enumerate(row.saved):
                if spec.role == "input" and row.inputs:
                    owner = self.storage_owner(row.inputs[0])
                    key: tuple[str, ...] = (owner,)
                elif spec.role == "output":
                    owner = self.storage_owner(row.name)
                    key = (owner,)
                else:
                    owner = row.name
                    key = (owner, str(position))
                if key not in seen:
                    seen.add(key)
                    found.append(SavedTensor(row.name, owner, spec))
        return tuple(found)

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
            if isinstance(row.layer, Merge):
                try:
                    row.layer.merged_shape(row.input_shapes)
                except ShapeError as error:
                    raise type(error)(
                        f"layer {row.index} of {self.name!r}: for {_values_text(values)}: {error}"
                    ) from None
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

        In a network with shortcuts or merges, a layer that does not read the
        row above it says what it reads in its config (``from x, conv``).
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
                _config_text(r, previous),
                describe_shape(r.output_shape),
                _count_text(r.weights),
                _count_text(r.biases),
                _count_text(r.activations if r.index else elements(r.output_shape)),
            )
            for r, previous in zip(self.rows, (None, *self.rows[:-1]), strict=True)
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


def _is_sequential(rows: Sequence[LayerRow]) -> bool:
    return all(
        row.inputs == (previous.name,) for previous, row in zip(rows, rows[1:], strict=False)
    )


def _config_text(row: LayerRow, previous: LayerRow | None) -> str:
    text = row.layer.describe()
    if previous is None or row.inputs == (previous.name,):
        return text
    reads = f"from {', '.join(row.inputs)}"
    return f"{text}; {reads}" if text else reads


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
        yield replace(layer, name=candidate)
