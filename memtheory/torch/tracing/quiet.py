"""Silence PyTorch's fake-tensor error log while trace turns those errors into its own.

Examples
--------
>>> import logging
>>> with quiet_fake_tensor_errors():
...     logging.getLogger("torch._subclasses.fake_tensor").level == logging.CRITICAL
True
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_fake_tensor_errors"]


@contextmanager
def quiet_fake_tensor_errors() -> Iterator[None]:
    """Keep fake tensors' logger from printing tracebacks that trace reports in its own words.

    Examples
    --------
    >>> with quiet_fake_tensor_errors():
    ...     pass
    """
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
