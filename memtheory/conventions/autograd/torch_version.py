"""The PyTorch version memtheory's exact figures were checked against, and a warning for others.

The autograd convention's kernel plans (which tensors each operation allocates
and saves, and what the optimizer step's temporaries are) were checked to the
byte against :func:`memtheory.torch.measure` on PyTorch
:data:`CHECKED_TORCH_VERSION`. Another PyTorch release may save different
tensors: :func:`memtheory.torch.trace`, :func:`memtheory.torch.track` and
:func:`memtheory.torch.measure` then warn once with a
:class:`TorchVersionWarning` (their figures stay what that PyTorch does; the
convention's predictions may no longer match them), and so does the
autograd convention itself when the installed PyTorch is another release
(read without importing it, :func:`installed_torch_version`).

This module does not import PyTorch (unless asked for ``torch.__version__``),
so the convention can use it without PyTorch.

Examples
--------
>>> CHECKED_TORCH_VERSION
'2.13.0'
>>> same_release("2.13.1+cpu"), same_release("2.12.0")
(True, False)
"""

from __future__ import annotations

import re
import sys
import warnings
from functools import cache
from importlib.util import find_spec
from pathlib import Path

__all__ = [
    "CHECKED_TORCH_VERSION",
    "TorchVersionWarning",
    "installed_torch_version",
    "same_release",
    "warn_if_unchecked_torch",
]

CHECKED_TORCH_VERSION = "2.13.0"
"""The PyTorch release the autograd convention's kernel plans were checked against."""

_warned: set[str] = set()


class TorchVersionWarning(UserWarning):
    """The installed PyTorch is not the release memtheory's exact figures were checked against.

    Measurements and traces still count what the installed PyTorch does; the
    autograd convention's predictions were checked on
    :data:`CHECKED_TORCH_VERSION` and may differ from them. Install
    ``torch==2.13.0`` (the ``torch`` extra) to compare them to the byte, or
    silence this with ``warnings.simplefilter("ignore", TorchVersionWarning)``.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_unchecked_torch("2.99.0")  # warns once per version
    >>> [warning.category.__name__ for warning in caught]
    ['TorchVersionWarning']
    >>> str(caught[0].message)
    "PyTorch 2.99.0 is installed, but memtheory's exact (autograd) convention was checked ..."
    """


def _release(version: str) -> tuple[int, int] | None:
    """Major and minor of a version string (``"2.13.0+cpu"`` -> ``(2, 13)``); None if unreadable."""
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


@cache
def installed_torch_version() -> str | None:
    """Return the installed PyTorch's version (None without PyTorch), without importing it.

    Read once per process from ``torch/version.py``, the file PyTorch's build
    writes its ``__version__`` into, found where ``import torch`` would find
    the package; where that file is missing or unreadable, from the package
    metadata. The file costs a path lookup; ``importlib.metadata`` costs
    about 50 ms of imports and a scan of every installed distribution, on
    every ``memtheory estimate`` that derives a step.

    Examples
    --------
    >>> installed_torch_version() is None or same_release(installed_torch_version()) in (
    ...     True, False)
    True
    """
    imported = sys.modules.get("torch")
    if imported is not None and isinstance(getattr(imported, "__version__", None), str):
        return str(imported.__version__)
    try:
        spec = find_spec("torch")
    except (ImportError, ValueError):  # a broken or half-imported package: ask the metadata
        spec = None
    else:
        if spec is None:
            return None
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        try:
            source = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        found = _BUILT_VERSION.search(source)
        if found is not None:
            return found.group(1)
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


_BUILT_VERSION = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
"""The line PyTorch's build writes into ``torch/version.py``: ``__version__ = '2.13.0+cpu'``."""


def same_release(version: str) -> bool:
    """Whether ``version`` has the major and minor of :data:`CHECKED_TORCH_VERSION`.

    Examples
    --------
    >>> same_release("2.13.0a0+git1234"), same_release("3.13.0"), same_release("nightly")
    (True, False, False)
    """
    return _release(version) == _release(CHECKED_TORCH_VERSION)


def warn_if_unchecked_torch(version: str | None = None) -> None:
    """Warn once per version when PyTorch's major.minor differs from the checked release.

    Parameters
    ----------
    version : str, optional
        The version to check; by default the installed ``torch.__version__``
        (PyTorch is imported then).

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_unchecked_torch("2.13.0")
    >>> caught
    []
    """
    if version is None:
        import torch

        version = str(torch.__version__)
    if same_release(version) or version in _warned:
        return
    _warned.add(version)
    warnings.warn(
        f"PyTorch {version} is installed, but memtheory's exact (autograd) convention was "
        f"checked against PyTorch {CHECKED_TORCH_VERSION}: measurements and traces count what "
        "this PyTorch does, and the convention's predictions may differ from them. Install "
        f"torch=={CHECKED_TORCH_VERSION} to compare them to the byte.",
        TorchVersionWarning,
        stacklevel=3,
    )
