"""Networks: layers wired with shape inference, and their per-layer tables.

A :class:`Network` is a list of layers in the order they run. By default each
layer reads the output of the one before it (a sequential network). A
:class:`Node` wraps a layer to make it read earlier layers by name instead: a
residual shortcut, or a merge layer (:class:`~memtheory.layers.Add`,
:class:`~memtheory.layers.Concat`) that reads several. Shapes flow from the
:class:`~memtheory.layers.Input` through every layer, so each layer's formulas
see the exact (possibly symbolic) shape that reaches it.

One module per job:

- :mod:`~memtheory.network.graph`: :class:`Node`, layer names, who reads whom;
- :mod:`~memtheory.network.calls`: which layers run inside one module call;
- :mod:`~memtheory.network.rows`: shape inference, one :class:`LayerRow` per layer;
- :mod:`~memtheory.network.storage`: whose storage each :class:`SavedTensor` is;
- :mod:`~memtheory.network.summary`: the :class:`NetworkSummary` and its table;
- :mod:`~memtheory.network.network`: the :class:`Network` that puts them together.

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

from memtheory.network.calls import module_calls
from memtheory.network.graph import Node
from memtheory.network.network import Network
from memtheory.network.parameters import parameter_shapes
from memtheory.network.rows import LayerRow
from memtheory.network.storage import SavedTensor
from memtheory.network.summary import NetworkSummary

__all__ = [
    "LayerRow",
    "Network",
    "NetworkSummary",
    "Node",
    "SavedTensor",
    "module_calls",
    "parameter_shapes",
]
