"""Every trainable tensor of a network, named and shaped as PyTorch would register it.

Examples
--------
>>> from memtheory.layers import Dense, Input
>>> from memtheory.network import Network
>>> net = Network([Input((4,)), Dense(3, name="fc")])
>>> parameter_shapes(net)
(('fc.weight', (3, 4)), ('fc.bias', (3,)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtheory.layers.base import Shape

if TYPE_CHECKING:
    from memtheory.network.network import Network

__all__ = ["parameter_shapes"]


def parameter_shapes(network: Network) -> tuple[tuple[str, Shape], ...]:
    """Return ``(layer.parameter, shape)`` for every trainable tensor, in layer order.

    Within a layer the order is PyTorch's registration order (``weight`` before
    ``bias``), so the list lines up with ``named_parameters()`` of a module
    whose submodules are registered in the order the network runs them.

    Parameters
    ----------
    network : Network

    Returns
    -------
    tuple of (str, shape)
        Their elements sum to ``network.parameter_count``.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> from memtheory.network import Network
    >>> parameter_shapes(Network([Input((784,)), Dense(10)]))
    (('dense_1.weight', (10, 784)), ('dense_1.bias', (10,)))
    """
    return tuple(
        (f"{row.name}.{name}", shape)
        for row in network.rows
        for name, shape in row.layer.parameter_shapes(row.input_shape)
    )
