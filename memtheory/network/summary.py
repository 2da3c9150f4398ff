"""A network's per-layer table and totals, symbolic or with numbers substituted.

Examples
--------
>>> from memtheory.layers import Dense, Input
>>> from memtheory.network import Network
>>> summary = summarize("tiny", Network([Input((4,)), Dense(3)]).rows, {"B": 2})
>>> summary.parameter_count, summary.activation_count
(15, 6)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sympy as sp

from memtheory.errors import KernelTooLargeError, ShapeError
from memtheory.evaluation import substitution
from memtheory.layers.base import describe_shape, elements
from memtheory.layers.merge import Merge
from memtheory.network.rows import LayerRow, row_expressions
from memtheory.tables import Column, Table

__all__ = ["NetworkSummary", "summarize"]


@dataclass(frozen=True)
class NetworkSummary:
    """A network's per-layer table and totals, symbolic or evaluated.

    ``str(summary)`` prints the table.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> from memtheory.network import Network
    >>> Network([Input((784,)), Dense(10)]).summary().parameter_count
    7850
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

    def table(self) -> Table:
        """Tabulate the layers: type, config, output shape, weights, biases, activations.

        Examples
        --------
        >>> from memtheory import Dense, Input, Network
        >>> print(Network([Input((4,)), Dense(3)], name="tiny").summary(B=2).table())
        tiny
        #  layer    type   config  output shape  weights  biases  activations
        -  -------  -----  ------  ------------  -------  ------  -----------
        0  input    Input  4       (2, 4)              0       0            8
        1  dense_1  Dense  3       (2, 3)             12       3            6
        -  -------  -----  ------  ------------  -------  ------  -----------
        total                                         12       3            6
        parameters: 15; activations exclude the input.

        In a network with shortcuts or merges, a layer that does not read the
        row above it says what it reads in its config (``from x, conv``).
        """
        columns = [
            Column("#"),
            Column("layer"),
            Column("type"),
            Column("config"),
            Column("output shape"),
            Column("weights", align="right"),
            Column("biases", align="right"),
            Column("activations", align="right"),
        ]
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
        note = f"parameters: {_count_text(self.parameter_count)}; activations exclude the input."
        return Table(columns, body, footer=[total], title=self.name, notes=[note])

    def __str__(self) -> str:
        return self.table().text()

    def _repr_html_(self) -> str:
        return self.table().html()


def summarize(
    network: str, rows: Sequence[LayerRow], values: Mapping[str, object]
) -> NetworkSummary:
    """Return the summary of ``rows`` with ``values`` substituted (by symbol name).

    Parameters
    ----------
    network : str
        The network's name: the table's title, and named in messages.
    rows : sequence of LayerRow
        The network's rows, in running order.
    values : mapping of str to number
        Numbers for some or all of the free symbols (``{"B": 64}``). Every
        layer's output must then have positive sizes.

    Raises
    ------
    KernelTooLargeError
        If, for these values, a layer's output would have no positions.
    ShapeError
        If, for these values, a merge's inputs no longer fit together.
    """
    values = dict(values)
    mapping = substitution(row_expressions(rows), values) if values else {}
    evaluated = tuple(row.substitute(mapping) for row in rows)
    for row in evaluated:
        for size in row.output_shape:
            if size.is_number and size < 1:
                raise KernelTooLargeError(
                    f"layer {row.index} of {network!r}, {row.layer.label}: for "
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
                    f"layer {row.index} of {network!r}: for {_values_text(values)}: {error}"
                ) from None
    return NetworkSummary(network, evaluated)


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
