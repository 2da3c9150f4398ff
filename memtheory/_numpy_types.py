"""NumPy's types for ``isinstance`` checks, without importing NumPy.

A value can only be a NumPy scalar or array if NumPy has been imported, so a
check for one needs NumPy's types only where ``numpy`` is in ``sys.modules``.
Checking this way keeps ``import numpy`` (about 0.1 s of CPU) off the paths
that never see an array: ``memtheory estimate`` reading a step back, and
``import memtheory`` with its first use (issue 26). A module that computes with
NumPy in a few functions names it through :class:`LazyNumpy`, which imports it
on first use.

Examples
--------
>>> import numpy as np
>>> isinstance(np.bool_(True), (bool, *numpy_types("bool_")))
True
>>> isinstance("yes", (bool, *numpy_types("bool_")))
False
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any

__all__ = ["LazyNumpy", "numpy_types"]


def numpy_types(*names: str) -> tuple[type, ...]:
    """Return NumPy's types ``names`` if NumPy is imported, else ``()`` (nothing is one of them).

    Parameters
    ----------
    *names : str
        NumPy types: ``"bool_"``, ``"generic"``, ``"ndarray"``.

    Examples
    --------
    >>> import numpy as np
    >>> numpy_types("bool_", "ndarray") == (np.bool_, np.ndarray)
    True
    """
    numpy = sys.modules.get("numpy")
    return () if numpy is None else tuple(getattr(numpy, name) for name in names)


class LazyNumpy:
    """Stands for ``numpy`` in a module's globals until first used, then puts NumPy there.

    Parameters
    ----------
    namespace : mapping
        The module's ``globals()``.
    name : str, default "np"
        The name it is bound to there.

    Examples
    --------
    >>> namespace = {}
    >>> namespace["np"] = LazyNumpy(namespace)
    >>> int(namespace["np"].int64(3))
    3
    >>> namespace["np"].__name__  # the module itself from then on
    'numpy'
    """

    def __init__(self, namespace: MutableMapping[str, Any], name: str = "np") -> None:
        self._namespace = namespace
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        import numpy

        self._namespace[self._name] = numpy
        return getattr(numpy, attribute)
