"""Slow measurements computed once per checkout and kept on disk, keyed by the code behind them.

A fixture that measures many PyTorch steps (the zoo: minutes on a shared 2-core machine) stores
its results as JSON in pytest's cache (``.pytest_cache/d/memtheory/<name>.json``, ignored by
git) beside what produced them: the SHA-256 of every memtheory source file that was loaded when they
were computed (the code that can have run) and of the test module that computes them, and the
versions the caller names (PyTorch, sympy) with Python's. A later run in the same checkout reuses
the results while all of that is unchanged; a change to any of those files recomputes them.
``pytest --cache-clear`` measures afresh; ``-p no:cacheprovider`` neither reads nor writes.

The value comes back through ``json`` in both cases, so a fresh run and a cached one hand the
tests the same thing.

``make test`` runs pytest in several worker processes (pytest-xdist) that share the cache
directory: an entry is written to a temporary file beside it and moved into place with
``os.replace``, so a reader sees the old entry or the new one, never half of one, and an entry
that cannot be read is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["cached_on_disk"]

FORMAT = 1
"""Bumped when the layout of a cache entry changes."""


def _digest(path: Path) -> str | None:
    """SHA-256 of a file's bytes, or None if it cannot be read (deleted, renamed)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _package_dir() -> Path | None:
    """The directory of the memtheory package this run imported (a worktree's or main's)."""
    module = sys.modules.get("memtheory")
    origin = getattr(module, "__file__", None)
    return Path(origin).resolve().parent if origin else None


def _sources(package: Path, extra: Path) -> dict[str, str | None]:
    """Every memtheory module loaded now, and ``extra``: absolute path to SHA-256."""
    files = {extra.resolve()}
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None)
        if origin and Path(origin).resolve().is_relative_to(package):
            files.add(Path(origin).resolve())
    return {str(path): _digest(path) for path in sorted(files)}


def _unchanged(sources: dict[str, str | None]) -> bool:
    """Whether every recorded file still has the recorded contents."""
    return bool(sources) and all(
        digest is not None and _digest(Path(path)) == digest for path, digest in sources.items()
    )


def _load(path: Path) -> Any:
    """The JSON data in ``path``, or None when it is missing or cannot be read whole."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _store(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically: a temporary file, then ``os.replace``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def cached_on_disk(
    request: pytest.FixtureRequest,
    name: str,
    compute: Callable[[], Any],
    *,
    key: dict[str, Any],
) -> Any:
    """Return ``compute()`` (JSON data), from pytest's cache when the code behind it is unchanged.

    Parameters
    ----------
    request : pytest.FixtureRequest
        The fixture's request: its config holds the cache (its ``mkdir`` gives the directory
        of the entries), its path is the test module.
    name : str
        The entry's name, unique among cached fixtures (``"zoo-comparisons"``).
    compute : callable
        Measures and returns JSON-serialisable data; called only on a miss.
    key : dict
        JSON data that must also match: the versions of the libraries the result depends on,
        the cases asked for.
    """
    versions = {**key, "python": sys.version, "machine": platform.machine(), "format": FORMAT}
    cache = getattr(request.config, "cache", None)
    package = _package_dir()
    entry = cache.mkdir("memtheory") / f"{name}.json" if cache is not None else None
    if entry is not None and package is not None:
        stored = _load(entry)
        if (
            isinstance(stored, dict)
            and stored.get("key") == json.loads(json.dumps(versions))
            and _unchanged(stored.get("sources", {}))
        ):
            return stored["value"]
    value = json.loads(json.dumps(compute()))
    package = _package_dir()  # compute() may be what imported memtheory
    if entry is not None and package is not None:
        sources = _sources(package, Path(request.path))
        _store(entry, {"key": versions, "sources": sources, "value": value})
    return value
