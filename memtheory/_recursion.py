"""Sizes nested too deeply for sympy: Python's recursion limit as a clear memtheory error.

Every downsampling layer (pooling, a strided convolution) over a symbolic size
wraps the size in one more ``floor``. sympy walks such expressions recursively
(``is_number``, assumption queries), a few Python frames per level, so at
about 150 nested floors it reaches Python's default recursion limit of 1000
and raises ``RecursionError`` from deep inside sympy. :func:`nesting_guard`
turns that into an :class:`~memtheory.errors.UnsupportedError` saying what to do.

Examples
--------
>>> with nesting_guard("Network 'deep'"):
...     raise RecursionError
Traceback (most recent call last):
...
memtheory.errors.UnsupportedError: Network 'deep' reached Python's recursion limit (...) ...
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from memtheory.errors import UnsupportedError

__all__ = ["nesting_guard"]


@contextmanager
def nesting_guard(what: str) -> Iterator[None]:
    """Re-raise a ``RecursionError`` inside the block as an :class:`UnsupportedError`.

    Parameters
    ----------
    what : str
        What was being built or derived, for the message (``"Network 'vgg'"``).
    """
    try:
        yield
    except RecursionError:
        raise UnsupportedError(
            f"{what} reached Python's recursion limit ({sys.getrecursionlimit()}) inside sympy: "
            "its symbolic sizes nest too many floors (each pooling or strided layer over a "
            "symbolic size adds one, and sympy walks them recursively; about 150 fit the default "
            "limit). Give the spatial size as a number (Input((3, 224, 224))), or raise the "
            "limit before building the network, e.g. sys.setrecursionlimit(20_000)."
        ) from None
