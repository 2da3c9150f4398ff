"""Where memtheory's caches live and which code wrote them, known without importing sympy.

Both caches of ``memtheory estimate`` (the derived steps,
:mod:`~memtheory.estimate.derivation_cache`, and the answers printed,
:mod:`~memtheory.estimate.answer_cache`) keep their entries in one directory,
each entry's name starting with :func:`source_digest`: the SHA-256 of every
memtheory source file and of the versions of Python and sympy. A change to any
of them is a new digest, and the entries of another digest are never read.

The directory is ``$MEMTHEORY_CACHE`` when that is set (``off``, ``0`` or an
empty value turn the disk cache off), else ``memtheory`` under
``$XDG_CACHE_HOME`` (default ``~/.cache``).

Examples
--------
>>> len(source_digest())
64
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Sequence
from functools import cache
from importlib.util import find_spec
from pathlib import Path

__all__ = ["ENVIRONMENT", "FORMAT", "cache_directory", "question_key", "source_digest"]

ENVIRONMENT = "MEMTHEORY_CACHE"
"""Environment variable: the cache directory, or ``off`` to keep nothing on disk."""

FORMAT = 2
"""Bumped when the layout of an entry changes."""

_OFF = frozenset({"", "0", "off", "no", "false", "none"})


def cache_directory() -> Path | None:
    """Return the directory of the disk cache, or None when ``$MEMTHEORY_CACHE`` turns it off.

    Examples
    --------
    >>> import os
    >>> os.environ["MEMTHEORY_CACHE"] = "off"
    >>> cache_directory() is None
    True
    >>> del os.environ["MEMTHEORY_CACHE"]
    """
    chosen = os.environ.get(ENVIRONMENT)
    if chosen is not None:
        return None if chosen.strip().lower() in _OFF else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "memtheory"


@cache
def source_digest() -> str:
    """Return the SHA-256 of memtheory's source files and of Python's and sympy's versions.

    Computed once per process. sympy's version is read from its ``release.py``
    (the file that states it), so that the digest is known without importing sympy.

    Examples
    --------
    >>> source_digest() == source_digest()
    True
    """
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(f"{FORMAT} {platform.python_version()}".encode())
    digest.update(_sympy_release())
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _sympy_release() -> bytes:
    """Return sympy's ``release.py`` (its ``__version__``), found without importing sympy."""
    spec = find_spec("sympy")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        release = Path(folder) / "release.py"
        if release.is_file():
            return release.read_bytes()
    return b"sympy release unknown"


def question_key(command: str, arguments: Sequence[str]) -> str | None:
    """Return the digest of a command line's question, or None where its answer is not kept.

    Parameters
    ----------
    command : str
        The subcommand as asked (``"estimate"``, ``"serve"``, ``"estimate --serve"``).
    arguments : sequence of str
        Its arguments.
    """
    parts: list[str] = [command]
    for argument in arguments:
        value = argument.partition("=")[2] if argument.startswith("-") else argument
        if argument in ("-h", "--help") or _traced(value):
            return None
        parts.append(argument)
        path = Path(value)
        try:
            if path.is_dir():  # a model's folder: the config.json it holds is what is read
                path = path / "config.json"
                parts.append("folder")
            if path.is_file():  # a model's config: its bytes are part of the question
                parts.append(hashlib.sha256(path.read_bytes()).hexdigest())
        except (OSError, ValueError):
            return None
    return hashlib.sha256(json.dumps([source_digest(), parts]).encode()).hexdigest()


def _traced(argument: str) -> bool:
    """Whether ``argument`` names Python code to trace (``file.py`` or ``file.py:factory``)."""
    return argument.strip().endswith(".py") or ".py:" in argument
