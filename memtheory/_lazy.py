"""Names a package imports on first use, so that it imports without its optional dependency.

``memtheory.torch`` and ``memtheory.validation`` need PyTorch for what they
hold, but not to be imported: their module ``__getattr__`` hands a name to
:func:`lazy_attribute`, which imports the module the name lives in then, and
turns a missing PyTorch into an :class:`ImportError` that says how to install it.

Examples
--------
>>> lazy_attribute("memtheory.units", {"UNITS": "memtheory.units"}, "UNITS")["GiB"] == 2**30
True
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from memtheory.errors import UnknownAttributeError

__all__ = ["lazy_attribute"]


def lazy_attribute(package: str, homes: Mapping[str, str], name: str) -> Any:
    """Return ``name`` of ``package``, importing its module (``homes[name]``) on first use.

    Raises
    ------
    UnknownAttributeError
        For a name the package does not have.
    ImportError
        Where the module needs PyTorch and it is not installed: with the command
        that installs it.

    Examples
    --------
    >>> lazy_attribute("memtheory.units", {}, "nothing")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownAttributeError: module 'memtheory.units' has no attribute 'nothing'
    """
    if name not in homes:
        raise UnknownAttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        module = import_module(homes[name])
    except ImportError as error:
        if error.name != "torch" and "torch" not in str(error):
            raise
        raise ImportError(
            f"{package} needs PyTorch: pip install 'memtheory[torch]' (torch==2.13.0). "
            "The rest of memtheory works without it."
        ) from error
    return getattr(module, name)
