"""The :class:`Network`: layers wired together, with their totals and per-layer rows.

A :class:`Network` is a list of layers in the order they run. By default each
layer reads the output of the one before it (a sequential network). A
:class:`~memtheory.network.Node` wraps a layer to make it read earlier layers by
name instead. The network names its layers and resolves that wiring
(:mod:`~memtheory.network.graph`), derives a row per layer by shape inference
(:mod:`~memtheory.network.rows`), answers whose storage each saved tensor is
(:mod:`~memtheory.network.storage`) and prints its table
(:mod:`~memtheory.network.summary`).

Examples
--------
>>> from memtheory.layers import Dense, Input
>>> net = Network([Input((4,)), Dense(3)])
>>> net.parameter_count, net.output_shape
(15, (B, 3))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import sympy as sp

from memtheory._recursion import nesting_guard
from memtheory._shown import shown
from memtheory.constraints import MODEL_LIMIT, SizeConstraint, carry, register_sizes
from memtheory.counts import ModelCounts
from memtheory.errors import ShapeError, UnknownNameError, UnsupportedError
from memtheory.evaluation import symbols_by_name
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape, elements
from memtheory.layers.core import Input
from memtheory.network import storage
from memtheory.network.graph import Node, is_sequential, name_layers, resolve_inputs
from memtheory.network.rows import LayerRow, derive_rows, row_expressions
from memtheory.network.storage import SavedTensor
from memtheory.network.summary import NetworkSummary, summarize

__all__ = ["Network"]


class Network:
    """A network: an :class:`~memtheory.layers.Input`, then layers in the order they run.

    Parameters
    ----------
    layers : sequence of Layer or Node
        The first must be an :class:`~memtheory.layers.Input`. A plain layer
        reads the output of the item before it; a :class:`~memtheory.network.Node` reads the
        earlier layers it names (residual shortcuts, merges). Unnamed layers
        are named after their kind and position (``conv2d_1``, ``maxpool2d_1``, ...).
    name : str, default "network"
    calls : sequence of (str, str), optional
        Module calls, as ``(first, last)`` layer names: the layers from
        ``first`` to ``last`` run inside one Python call (an ``nn.Module``'s
        ``forward``, such as an ``nn.Sequential`` stage or a transformer
        block). The call's arguments and its caller's variables keep every
        tensor those layers read from before ``first`` alive until ``last``
        has run; the autograd convention's forward and inference timelines
        follow that. Unset, each layer's inputs are freed after their last
        reader, as in a forward written one operation per statement.
    parameter_order : sequence of str, optional
        Layer names in the order the module registers their parameters
        (``module.parameters()``), where that differs from the order the
        layers run: Phi-3 registers ``o_proj`` before ``qkv_proj`` and each
        layer's norms after its MLP. Layers it does not name follow those it
        does, in the order they run; a layer named ``a.b`` that is not listed
        takes the place of ``a`` if that is. Unset, the parameters are
        registered in the order the layers run. torch.optim's for-loop
        optimizer step follows it (:attr:`registered_rows`).

    Raises
    ------
    ShapeError
        If a layer cannot take the shape that reaches it (the message names the
        layer and its position), or a node names a layer that does not come
        before it.
    UnknownNameError
        If a call names a layer the network does not have, or ends before it starts.

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

    def __init__(
        self,
        layers: Sequence[Layer | Node],
        name: str = "network",
        calls: Sequence[tuple[str, str]] = (),
        parameter_order: Sequence[str] = (),
    ) -> None:
        if not isinstance(name, str):
            raise UnsupportedError(f"Network: name must be text, got {shown(name)}.")
        if isinstance(layers, str | bytes) or not isinstance(layers, Iterable):
            raise UnsupportedError(
                f"Network {name!r}: layers must be a list of layers, got {shown(layers)} "
                f"({type(layers).__name__}). Write Network([Input((3, 32, 32)), Conv2d(8, 3)])."
            )
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
            name_layers([item.layer if isinstance(item, Node) else item for item in items])
        )
        wiring = [item.inputs if isinstance(item, Node) else None for item in items]
        self._inputs: tuple[tuple[str, ...], ...] = tuple(
            resolve_inputs(name, self.layers, wiring)
        )
        with nesting_guard(f"Network {name!r}"):
            self.rows: tuple[LayerRow, ...] = tuple(
                derive_rows(name, self.layers, self._inputs)
            )
        self._by_name: dict[str, LayerRow] = {row.name: row for row in self.rows}
        self._checks = tuple(
            SizeConstraint(
                size,
                f"{MODEL_LIMIT if limit else ''}layer {row.index} of {name!r}, "
                f"{row.layer.label}, {axis}",
            )
            for row, axis, size, limit in self._constrained_sizes()
        )
        register_sizes(c for c in self._checks if not c.is_limit)
        self.calls: tuple[tuple[str, str], ...] = self._check_calls(calls)
        self.parameter_order: tuple[str, ...] = self._check_order(parameter_order)

    def _check_order(self, order: Sequence[str]) -> tuple[str, ...]:
        if isinstance(order, str) or not isinstance(order, Iterable):
            raise UnsupportedError(
                f"Network {self.name!r}: parameter_order is a list of layer names, got "
                f"{order!r:.80}."
            )
        names = tuple(order)
        for name in names:
            if not isinstance(name, str) or name not in self._by_name:
                raise UnknownNameError(
                    f"Network {self.name!r}: parameter_order names {name!r:.80}, which is not "
                    "one of its layers; list the layers' names (network.rows) in the order "
                    "the module registers their parameters."
                )
        return names

    @property
    def registered_rows(self) -> tuple[LayerRow, ...]:
        """The rows in the order the module registers their parameters (:attr:`parameter_order`).

        Examples
        --------
        >>> from memtheory.layers import Dense, Input
        >>> net = Network([Input((4,)), Dense(3, name="a"), Dense(2, name="b")],
        ...               parameter_order=["b"])
        >>> [row.name for row in net.registered_rows]
        ['b', 'input', 'a']
        """
        rank = {name: position for position, name in enumerate(self.parameter_order)}

        def key(row: LayerRow) -> int:
            name = row.name
            while name not in rank and "." in name:
                name = name.rsplit(".", 1)[0]
            return rank.get(name, len(rank))

        return tuple(sorted(self.rows, key=key))

    def _check_calls(self, calls: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        checked = []
        if isinstance(calls, str) or not isinstance(calls, Iterable):
            raise UnsupportedError(
                f"Network {self.name!r}: calls is a list of (first, last) pairs of layer names, "
                f"got {calls!r:.80}."
            )
        for call in calls:
            if not isinstance(call, tuple | list) or len(call) != 2:
                raise UnsupportedError(
                    f"Network {self.name!r}: a call is a (first, last) pair of layer names, got "
                    f"{call!r:.80}."
                )
            first, last = (self[name] for name in call)
            if first.index > last.index:
                raise UnknownNameError(
                    f"Network {self.name!r}: call {call!r} ends before it starts; give the "
                    "first layer it runs, then the last."
                )
            checked.append((first.name, last.name))
        return tuple(checked)

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
            raise UnknownNameError(f"no layer named {name!r}; layers: {names}.") from None

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
        return is_sequential([row.name for row in self.rows], self._inputs)

    @property
    def batch(self) -> sp.Expr:
        """The batch size (a symbol unless the input fixed it)."""
        return self.input.batch

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        """Symbols the network's formulas depend on."""
        return set(symbols_by_name(row_expressions(self.rows)).values())

    # -- totals ------------------------------------------------------------------------
    @property
    def weight_count(self) -> sp.Expr:
        """Trainable weights, all layers."""
        return carry(sp.Add(*(r.weights for r in self.rows)), self._checks, vouch=True)

    @property
    def bias_count(self) -> sp.Expr:
        """Trainable biases, all layers."""
        return carry(sp.Add(*(r.biases for r in self.rows)), self._checks, vouch=True)

    @property
    def parameter_count(self) -> sp.Expr:
        """Trainable parameters (weights and biases), all layers."""
        return carry(self.weight_count + self.bias_count, self._checks, vouch=True)

    @property
    def activation_count(self) -> sp.Expr:
        """Activation elements the forward pass keeps, batch included, the input excluded."""
        return carry(sp.Add(*(r.activations for r in self.rows[1:])), self._checks, vouch=True)

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
        return {
            f"{MODEL_LIMIT if limit else ''}layer {row.index}, {row.layer.label}, {axis}": size
            for row, axis, size, limit in self._constrained_sizes()
        }

    def _constrained_sizes(self) -> Iterator[tuple[LayerRow, str, sp.Expr, bool]]:
        """Yield each distinct size not known to be positive: row, words, size, whether a limit.

        The output sizes (a window that must fit), then the largest sizes a
        layer takes (a table of positions), which are limits of the model.
        """
        seen: set[sp.Expr] = set()  # hashed: deep floors compare in O(1) instead of walking
        for row in self.rows:
            for axis, size in enumerate(row.output_shape):
                size = sp.sympify(size)
                if size in seen:
                    continue
                seen.add(size)
                if size.is_positive is not True:
                    yield row, f"output dimension {axis}", size, False
            for words, size in row.layer.size_limits(row.input_shape):
                if size not in seen and size.is_positive is not True:
                    seen.add(size)
                    yield row, words, size, True

    def size_checks(self) -> tuple[SizeConstraint, ...]:
        """Return the size constraints as :class:`~memtheory.constraints.SizeConstraint` objects.

        The same sizes as :meth:`size_constraints`, each naming the network
        too; what ``within=net`` checks in :func:`~memtheory.evaluation.evaluate`.

        Examples
        --------
        >>> from memtheory.layers import Conv2d, Input
        >>> from memtheory.symbols import H
        >>> [c.where for c in Network([Input((1, H, H)), Conv2d(8, 5)], "cnn").size_checks()]
        ["layer 1 of 'cnn', Conv2d 'conv2d_1', output dimension 2"]
        """
        return self._checks

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
            constraints={c.where: c.size for c in self._checks},
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
        return storage.storage_owner(self[name], self._by_name)

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
        return storage.saved_tensors(self.rows, self._by_name)

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
        return summarize(self.name, self.rows, values)

    def evaluate(self, **values: object) -> NetworkSummary:
        """Alias of :meth:`summary`, for symmetry with memory breakdowns.

        Examples
        --------
        >>> from memtheory.layers import Dense, Input
        >>> Network([Input((4,)), Dense(3)]).evaluate(B=64).activation_count
        192
        """
        return self.summary(**values)
