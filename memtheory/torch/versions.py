"""The PyTorch release memtheory's exact figures were checked against (see the convention's module).

The constant, the warning and the check live in
:mod:`memtheory.conventions.autograd.torch_version`, which does not import
PyTorch, so that the autograd convention warns too; this module gives them
their place beside the other PyTorch tools.

Examples
--------
>>> CHECKED_TORCH_VERSION
'2.13.0'
"""

from memtheory.conventions.autograd.torch_version import (
    CHECKED_TORCH_VERSION,
    TorchVersionWarning,
    installed_torch_version,
    same_release,
    warn_if_unchecked_torch,
)

__all__ = [
    "CHECKED_TORCH_VERSION",
    "TorchVersionWarning",
    "installed_torch_version",
    "same_release",
    "warn_if_unchecked_torch",
]
