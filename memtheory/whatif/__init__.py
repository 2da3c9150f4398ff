"""What-if questions: the largest batch that fits, what the memory is most sensitive to, scenarios.

==============  ======================================================================
module          job
==============  ======================================================================
limits          memory limits (``"24 GiB"``) and the bytes compared with them (peak or total)
solve           the largest value of a size that fits: batch, sequence length, any size
sensitivity     derivatives and elasticities of the memory at a point
scenarios       a table of optimizer x precision x checkpointing x ZeRO stage
==============  ======================================================================

Limits are bytes or labelled sizes (``"24 GiB"``, ``"80 GB"``). Every function
that takes a model takes ``optimizer=``, ``precision=``, ``convention=`` by
keyword, and ``by="peak"`` (the most bytes alive at once, the default) or
``by="total"`` (the sum of the components): see :mod:`memtheory.whatif.limits`.
Used in the book's chapters "Batch size" and "Checkpointing, sharding and offload".

Examples
--------
>>> from memtheory import Dense, Input, Network
>>> net = Network([Input((784,)), Dense(100), Dense(10)])
>>> max_batch(net, "1 MiB", optimizer="sgd")
102
"""

from memtheory.errors import DoesNotFitError
from memtheory.whatif.limits import By, LimitLike, Quantity, memory_limit, total_bytes
from memtheory.whatif.scenarios import Scenario, ScenarioComparison, compare_scenarios
from memtheory.whatif.sensitivity import Sensitivity, SymbolSensitivity, sensitivity
from memtheory.whatif.solve import max_batch, max_sequence_length, max_value, max_value_formula

__all__ = [
    "By",
    "DoesNotFitError",
    "LimitLike",
    "Quantity",
    "Scenario",
    "ScenarioComparison",
    "Sensitivity",
    "SymbolSensitivity",
    "compare_scenarios",
    "max_batch",
    "max_sequence_length",
    "max_value",
    "max_value_formula",
    "memory_limit",
    "sensitivity",
    "total_bytes",
]
