"""Where grading results may be written: checked before any answer is graded.

A result goes only to a new path or over a regular file: never through a
symbolic link (whose target could be anything), never to a device such as
``/dev/full``, a pipe or a folder, and over an existing file only with
``--force`` (or when it is the answer file's own earlier result). The folder
it goes in must exist and be writable. Every check is made before grading,
so that a teacher learns of a bad ``--json`` path at once, not after
grading a class. Paths are compared with :func:`os.path.realpath`, which,
unlike :meth:`pathlib.Path.resolve` on Python 3.11, does not raise on a
symbolic link loop.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> folder = Path(tempfile.mkdtemp())
>>> check_output_paths([folder / "grades.json"], force=False)
>>> check_output_paths([Path("/dev/full")], force=True)
Traceback (most recent call last):
...
memtheory.exercises.errors.AnswerFileError: /dev/full is a device: results are written ...
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from memtheory.exercises.errors import AnswerFileError

__all__ = ["check_output_path", "check_output_paths", "same_file"]


def _kind(mode: int) -> str | None:
    """Return what a path that is not a regular file is, or ``None`` for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def same_file(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (after links), never raising on a link loop.

    Examples
    --------
    >>> same_file("/tmp/../tmp/x", "/tmp/x")
    True
    """
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        one, other = os.stat(first), os.stat(second)
    except (OSError, ValueError):
        return False
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def check_output_path(
    path: str | os.PathLike[str],
    *,
    force: bool,
    replaceable: Callable[[Path], bool] | None = None,
) -> None:
    """Refuse ``path`` as a place for a result unless it is new, or a regular file to replace.

    Parameters
    ----------
    path : path
    force : bool
        Replace a regular file that exists.
    replaceable : callable, optional
        ``replaceable(path)``: whether an existing regular file may be replaced without
        ``force`` (an answer file's own earlier result).

    Raises
    ------
    AnswerFileError
        If ``path`` is a symbolic link, a device, a pipe, a folder or a socket; a regular file
        that exists (without ``force``); or in a folder that does not exist or cannot be written.
    """
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise AnswerFileError(
            f"cannot check where the result goes ({target}): {error.strerror or error}."
        ) from None
    if info is not None:
        kind = _kind(info.st_mode)
        if kind is not None:
            raise AnswerFileError(
                f"{target} is {kind}: results are written only to regular files or new paths "
                "(--force replaces a regular file, never this). Choose another file with "
                "--json/--csv/--exercises."
            )
        if not force and not (replaceable is not None and replaceable(target)):
            raise AnswerFileError(
                f"{target} exists and is not replaced: pass --force to replace it, or choose "
                "another file with --json/--csv."
            )
    parent = target.parent
    if not parent.is_dir():
        raise AnswerFileError(f"cannot write {target}: the folder {parent} does not exist.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise AnswerFileError(f"cannot write {target}: the folder {parent} is not writable.")


def check_output_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    force: bool,
    replaceable: Callable[[Path], bool] | None = None,
    protect: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Check every result path (see :func:`check_output_path`), and that they differ.

    Parameters
    ----------
    protect : paths
        Files a result must never replace (the answer files).

    Raises
    ------
    AnswerFileError
        If a path cannot take a result, two paths are the same file, or a path is protected.

    Examples
    --------
    >>> check_output_paths(["/tmp/a.json", "/tmp/../tmp/a.json"], force=True)
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFileError: the JSON, CSV and per-exercise results must ...
    """
    real = [os.path.realpath(p) for p in paths]
    if len(set(real)) < len(real):
        raise AnswerFileError("the JSON, CSV and per-exercise results must go to different files.")
    guarded = list(protect)
    for path in paths:
        for answers in guarded:
            if same_file(path, answers):
                raise AnswerFileError(
                    f"refusing to write the result over {path}, which is an answer file."
                )
        check_output_path(path, force=force, replaceable=replaceable)
