"""The autograd convention, as a package (its modules follow in the next commit).

Examples
--------
>>> from memtheory.conventions.autograd import AutogradConvention
>>> AutogradConvention()
AutogradConvention(implementation='for-loop')
"""

from __future__ import annotations

from memtheory.conventions.autograd.storage_plan import (
    IMPLEMENTATIONS,
    AutogradConvention,
    ForwardStorage,
    Implementation,
    autocast_precision,
    forward_storages,
)

__all__ = [
    "IMPLEMENTATIONS",
    "AutogradConvention",
    "ForwardStorage",
    "Implementation",
    "autocast_precision",
    "forward_storages",
]
