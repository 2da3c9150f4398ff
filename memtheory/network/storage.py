"""Storage ownership: whose memory a layer's output is, and what the backward pass keeps.

A layer that stores its output owns that storage; a view (Flatten), an
in-place layer (``ReLU(inplace=True)``) or an identity writes into its first
input's, so the owner is found upstream. Two layers that save the same storage
share one :class:`SavedTensor`, so it is counted once; a saved tensor that is a
view of another (``TensorSpec.view_of``) adds none. Both read each layer's
:meth:`~memtheory.layers.Layer.autograd` description, as the autograd
convention does.

Examples
--------
>>> from memtheory.layers import Conv2d, Input, ReLU
>>> from memtheory.network import Network
>>> net = Network([Input((3, 8, 8)), Conv2d(4, 3), ReLU(inplace=True)])
>>> rows = {row.name: row for row in net.rows}
>>> storage_owner(rows["relu_1"], rows)
'conv2d_1'
>>> [(t.saver, t.owner) for t in saved_tensors(net.rows, rows)]
[('conv2d_1', 'input'), ('relu_1', 'conv2d_1')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DType
from memtheory.layers.base import TensorSpec
from memtheory.network.rows import LayerRow

__all__ = ["SavedTensor", "saved_tensors", "storage_owner"]


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

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> from memtheory.network import Network
    >>> kept = Network([Input((784,)), Dense(10)]).saved_tensors()[0]
    >>> kept.saver, kept.owner, kept.spec.shape
    ('dense_1', 'input', (B, 784))
    """

    saver: str
    owner: str
    spec: TensorSpec

    def nbytes(self, default: DType) -> sp.Expr:
        """Bytes, with ``default`` standing in for an unspecified dtype."""
        return self.spec.nbytes(default)


def storage_owner(row: LayerRow, rows: Mapping[str, LayerRow]) -> str:
    """Return the name of the layer whose memory holds ``row``'s output.

    Parameters
    ----------
    row : LayerRow
        The layer.
    rows : mapping of str to LayerRow
        Every row of its network, by layer name.
    """
    while row.inputs and _aliases(row):
        row = rows[row.inputs[0]]
    return row.name


def _aliases(row: LayerRow) -> bool:
    """Whether the row's output is its first input's storage (its autograd description)."""
    return row.layer.autograd(row.input_shapes or (row.input_shape,)).aliases_input


def saved_tensors(
    ordered: Iterable[LayerRow], rows: Mapping[str, LayerRow]
) -> tuple[SavedTensor, ...]:
    """Return every tensor the backward pass keeps, each storage counted once.

    Parameters
    ----------
    ordered : iterable of LayerRow
        The network's rows in running order.
    rows : mapping of str to LayerRow
        The same rows by layer name.
    """
    found: list[SavedTensor] = []
    seen: set[tuple[str, ...]] = set()
    for row in ordered:
        for position, spec in enumerate(row.saved):
            if spec.view_of is not None:
                continue  # a view of another saved tensor of this layer: no storage of its own
            if spec.role == "input" and row.inputs:
                owner = storage_owner(rows[row.inputs[spec.operand]], rows)
                key: tuple[str, ...] = (owner,)
            elif spec.role == "output":
                owner = storage_owner(row, rows)
                key = (owner,)
            else:
                owner = row.name
                key = (owner, str(position))
            if key not in seen:
                seen.add(key)
                found.append(SavedTensor(row.name, owner, spec))
    return tuple(found)
