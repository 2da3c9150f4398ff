"""Answer again: what ``memtheory estimate`` (or ``serve``) printed, kept for the same question.

The derived step is kept by :mod:`~memtheory.estimate.derivation_cache`, but
reading it back and putting sizes into it needs sympy, whose import alone
costs most of a second. :func:`answered` keeps the whole answer of a command
line (its standard output and error, and its exit status) as JSON in the same
directory, keyed by the code's digest
(:func:`~memtheory.estimate.cache_key.source_digest`) and the command line;
asked the same question again, the command prints it without importing sympy
or deriving anything. An argument that names a file (a ``config.json``) is
keyed by the file's bytes too (a folder by its ``config.json``'s); a traced
``file.py:factory`` (code that is not memtheory's) is never kept, nor is an
answer refused (exit status 2).
A cache that cannot be read or written is ignored: the answer is derived again.
The same ``estimate`` question at a new ``--batch`` or ``--seq`` is answered
from a replay entry (:mod:`~memtheory.estimate.replay`), without sympy too,
where the derived answer left one.

Examples
--------
>>> question_key("estimate", ["gpt2", "--batch", "8"]) == question_key(
...     "estimate", ["gpt2", "--batch", "8"])
True
>>> question_key("estimate", ["my_model.py:build"]) is None
True
>>> question_key("serve", ["llama-3-8b", "--draft=draft.py:build"]) is None
True
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memtheory.estimate.cache_key import cache_directory, question_key, source_digest

__all__ = ["answered", "question_key"]

KEPT_STATUSES = (0, 1)
"""Exit statuses whose answer is kept: an answer (1 is ``--check``'s "does not fit")."""

_ENTRY = re.compile(r"[0-9a-f]{16}-answer-[0-9a-f]{64}\.json")
"""The name of an answer: the code's digest (16 digits), the question's (64)."""


def answered(command: str, arguments: Sequence[str], run: Callable[[], int]) -> int:
    """Print the answer of ``run()`` (the command asked) from the cache, or run it and keep it.

    Parameters
    ----------
    command, arguments
        The command line (see :func:`question_key`).
    run : callable
        Answers it: prints and returns the exit status.

    Returns
    -------
    int
        The exit status, the kept one when the answer was read back.
    """
    path = _path(command, arguments)
    kept = _read(path)
    if kept is not None:
        sys.stdout.write(kept["stdout"])
        sys.stderr.write(kept["stderr"])
        return int(kept["status"])
    if path is None:
        return run()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = _replayed_or_run(command, arguments, run, err)
    finally:  # what was printed is printed, whatever happened
        sys.stdout.write(out.getvalue())
        sys.stderr.write(err.getvalue())
    if status in KEPT_STATUSES:
        _write(path, {"stdout": out.getvalue(), "stderr": err.getvalue(), "status": status})
    return status


def _replayed_or_run(
    command: str, arguments: Sequence[str], run: Callable[[], int], err: io.StringIO
) -> int:
    """Answer ``estimate`` at new sizes from a replay entry (no sympy), else run it (and keep one).

    See :mod:`~memtheory.estimate.replay`. An answer that printed anything on
    standard error (a warning) leaves no entry: the entry prints standard output only.
    """
    if command != "estimate":
        return run()
    from memtheory.estimate import replay

    status = replay.replayed(arguments)
    if status is not None:
        return status
    replay.record(None)
    status = run()
    if status in KEPT_STATUSES and not err.getvalue():
        replay.keep(arguments)
    return status


def _path(command: str, arguments: Sequence[str]) -> Path | None:
    """Return where the answer of this command line is kept, or None where it is not."""
    directory = cache_directory()
    if directory is None:
        return None
    key = question_key(command, arguments)
    return None if key is None else directory / f"{source_digest()[:16]}-answer-{key}.json"


def _read(path: Path | None) -> dict[str, Any] | None:
    """Return the answer kept at ``path``, or None if there is none or it cannot be read whole."""
    if path is None:
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or set(kept) != {"stdout", "stderr", "status"}:
        return None
    if not (isinstance(kept["stdout"], str) and isinstance(kept["stderr"], str)
            and kept["status"] in KEPT_STATUSES):
        return None
    return kept


def _write(path: Path, kept: dict[str, object]) -> None:
    """Keep an answer at ``path`` (written whole or not at all); never raise."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
        ) as file:
            temporary = Path(file.name)
            file.write(json.dumps(kept))  # the C encoder (json.dump encodes in Python)
        os.replace(temporary, path)
        current = path.name.split("-", 1)[0]
        for entry in path.parent.glob("*-answer-*.json"):  # another code's: never read again
            if _ENTRY.fullmatch(entry.name) and not entry.name.startswith(current):
                entry.unlink(missing_ok=True)
    except OSError:
        return
