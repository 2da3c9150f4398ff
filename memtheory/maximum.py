"""Old home of :mod:`memtheory.max_pruning` (the symbolic Max pruner), for torch/tracing's imports.

Import from :mod:`memtheory.max_pruning`; this module only re-exports it until
``memtheory.torch.tracing`` does too.

Examples
--------
>>> from memtheory import max_pruning
>>> maximum is max_pruning.maximum
True
"""

from memtheory.max_pruning import maximum, provably_nonnegative, undominated

__all__ = ["maximum", "provably_nonnegative", "undominated"]
