"""The optimizer state of a network: its bytes, and the tensor shapes factored state needs.

Adafactor keeps factored state (a row and a column per matrix), so its size
depends on each parameter tensor's shape, not only on the parameter count.
:func:`state_bytes` serves every convention
(:func:`memtheory.conventions.base.optimizer_state_bytes` and the autograd
convention).
"""

from __future__ import annotations

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.layers.base import Shape
from memtheory.layers.conv import Conv2d
from memtheory.layers.core import Dense
from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.normalization import BatchNorm2d
from memtheory.network import Network
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = ["parameter_shapes", "state_bytes"]


def parameter_shapes(network: Network) -> dict[str, Shape]:
    """Return each parameter tensor's shape (for Adafactor's factored state), by tensor name.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> parameter_shapes(Network([Input((784,), batch=64), Dense(256)]))
    {'dense_1.weight': (256, 784), 'dense_1.bias': (256,)}
    """
    shapes: dict[str, Shape] = {}
    for row in network.rows:
        layer, features = row.layer, row.input_shape[-1] if row.input_shape else 0
        if row.weights != 0:
            if isinstance(layer, Dense):
                shapes[f"{row.name}.weight"] = (layer.units, features)
            elif isinstance(layer, Conv2d):
                kh, kw = layer._kernel_size()
                in_channels = row.input_shape[1] / layer.groups
                shapes[f"{row.name}.weight"] = (layer.out_channels, in_channels, kh, kw)
            elif isinstance(layer, BatchNorm2d | LayerNorm):
                shapes[f"{row.name}.weight"] = (row.weights,)
            else:
                raise UnsupportedError(
                    f"Adafactor keeps factored state for matrices, so it needs the shape of "
                    f"{row.name}'s weight; the autograd convention knows the weight shapes of "
                    "Dense, Conv2d, BatchNorm2d and LayerNorm only."
                )
        if row.biases != 0:
            shapes[f"{row.name}.bias"] = (row.biases,)
    return shapes


def state_bytes(optimizer: Optimizer, network: Network, precision: Precision) -> sp.Expr:
    """Bytes of the parameter-shaped (or, for Adafactor, factored) optimizer state.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> from memtheory.optimizers import optimizer
    >>> from memtheory.precision import precision
    >>> net = Network([Input((784,), batch=64), Dense(256)])
    >>> state_bytes(optimizer("adafactor"), net, precision("fp32"))  # (256 + 784 + 256) x 4
    5184
    """
    if optimizer.factored_state_names:
        shapes = parameter_shapes(network).values()
        count = sp.Add(*(optimizer.state_elements(shape) for shape in shapes))
    elif optimizer.states_per_parameter == 0:  # sympy's 0 * x asks whether x is finite
        count = sp.S.Zero
    else:
        rows = network.rows
        count = optimizer.states_per_parameter * sp.Add(*(r.weights + r.biases for r in rows))
    return count * precision.optimizer_state.bytes
