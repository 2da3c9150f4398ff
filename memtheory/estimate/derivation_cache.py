"""Derive once: a model's symbolic step kept in memory and on disk, keyed by the code and question.

Deriving a training step's memory symbolically (building the network, following
the step tensor by tensor, simplifying the peak) costs seconds; putting sizes
into the result costs milliseconds. :func:`remembered` keeps what a derivation
returned, for the rest of the process and in a file under the user's cache
directory, so that ``memtheory estimate`` (and every point of ``--sweep``)
derives a question once.

An entry's key is the code's digest (:func:`~memtheory.estimate.cache_key.source_digest`:
every memtheory source file, the versions of Python and sympy) and the question
(the model, the setup, the options that change the formulas). A change to the
code or to any of those is a new key; the entries of other code are deleted
when a new one is written. The directory is
:func:`~memtheory.estimate.cache_key.cache_directory`. A cache that cannot be
read, written or unpickled is ignored: the answer is derived again, never refused.

Examples
--------
>>> calls = []
>>> def derive():
...     calls.append(1)
...     return 6 * 7
>>> remembered(("doc example", 1), derive, disk=False), remembered(("doc example", 1), derive)
(42, 42)
>>> len(calls)
1
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import os
import pickle
import re
import tempfile
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

import sympy as sp
from sympy.core.basic import Basic

from memtheory.estimate.cache_key import ENVIRONMENT, cache_directory, source_digest

__all__ = ["ENVIRONMENT", "cache_directory", "remembered", "source_digest"]

_MEMORY: dict[str, Any] = {}
T = TypeVar("T")


def remembered(
    key: Hashable,
    derive: Callable[[], T],
    *,
    disk: bool = True,
    keep: Callable[[T], bool] | None = None,
) -> T:
    """Return ``derive()``, derived once per ``key`` and code: from memory, then disk, then anew.

    Parameters
    ----------
    key : hashable
        Everything the derivation depends on besides memtheory's code, with a
        ``repr`` that is the same in every process (strings, numbers, tuples).
    derive : callable
        Computes the value; it must be picklable to be kept on disk.
    disk : bool, default True
        Whether to read and write the disk cache (it is kept in memory either way).
    keep : callable, optional
        Whether a value just derived may be written to disk (default: yes).
    """
    code = source_digest()
    name = f"{code[:16]}-{hashlib.sha256(f'{code} {key!r}'.encode()).hexdigest()}"
    if name in _MEMORY:
        return _MEMORY[name]
    directory = cache_directory() if disk else None
    path = None if directory is None else directory / f"{name}.pickle"
    found = _read(path)
    if found is not None:
        _MEMORY[name] = found
        return found
    value = derive()
    _MEMORY[name] = value
    if keep is None or keep(value):
        _write(path, value)
    return value


def _read(path: Path | None) -> Any:
    """Return the entry at ``path``, or None if there is none or it cannot be read whole."""
    if path is None:
        return None
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - a missing, truncated or stale entry is derived again
        return None


def _write(path: Path | None, value: object) -> None:
    """Keep ``value`` at ``path`` (written whole or not at all); never raise."""
    if path is None:
        return
    try:
        data = dumps(value)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as file:
            temporary = Path(file.name)
            file.write(data)
        os.replace(temporary, path)
        _forget_stale(path)
    except Exception:  # noqa: BLE001 - an unwritable directory or an unpicklable value
        return


def _forget_stale(path: Path) -> None:
    """Delete the entries another version of memtheory's code wrote beside ``path``.

    Every entry's name starts with its code's digest: those that differ from ``path``'s
    are never read again.
    """
    current = path.name.split("-", 1)[0]
    for entry in path.parent.glob("*-*.pickle"):
        if _ENTRY.fullmatch(entry.name) and not entry.name.startswith(current):
            entry.unlink(missing_ok=True)


_ENTRY = re.compile(r"[0-9a-f]{16}-[0-9a-f]{64}\.pickle")
"""The name of an entry: the code's digest (16 digits), the key's (64)."""


def dumps(value: object) -> bytes:
    """Pickle ``value`` so that its sympy sums, products and maxima load without re-simplifying.

    sympy pickles ``Add(a, b)`` as a call ``Add(a, b)``, which flattens, sorts
    and (for ``Max``) compares its arguments again on loading: seconds for a
    step's timeline. Here they are rebuilt from their arguments as they are.
    An integer (a ZeRO-3 step's four entries hold 13,385) is pickled as
    ``Integer(p)``: 35 ms of writing them became 23 ms, and 133 ms of reading
    them back 100 ms, with the same bytes' length.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> peak = sp.Max(3 * B * S + 2, 4 * B * S + 1 + S)
    >>> pickle.loads(dumps(peak)) == peak
    True
    >>> loaded = pickle.loads(dumps([sp.Integer(7), -sp.Integer(2) ** 70, sp.S.Zero, sp.S.One]))
    >>> loaded == [7, -(2**70), 0, 1], [type(n).__name__ for n in loaded]
    (True, ['Integer', 'Integer', 'Zero', 'One'])
    """
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def _associative(
    cls: type[sp.Add] | type[sp.Mul], args: tuple[Basic, ...], commutative: Any
) -> Any:
    return cls._from_args(args, commutative)


def _lattice(cls: type[sp.Max] | type[sp.Min], args: tuple[Basic, ...]) -> Any:
    built = Basic.__new__(cls, *args)
    built._argset = frozenset(args)
    return built


class _Pickler(pickle.Pickler):
    dispatch_table = copyreg.dispatch_table

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is sp.Integer:  # a step holds thousands: Integer(p), not Basic's generic reduce
            return sp.Integer, (obj.p,)
        if kind is sp.Add or kind is sp.Mul:
            return _associative, (kind, obj.args, obj.is_commutative)
        if kind is sp.Max or kind is sp.Min:
            return _lattice, (kind, obj.args)
        return NotImplemented
