"""Answer files: what a learner writes by hand.

An answer file is TOML::

    learner = "ada"          # optional: the variant's seed is derived from it
    seed = 17                # optional: overrides the learner's seed
    [answers]
    "ch02.q1" = "78,500"
    "ch02.q2" = 896
    "ch01.q1" = "72.76 MiB"
    "ch03.q5" = "floor((H - 3)/2) + 1"
    "ch05.q3" = "b"

Ids should be quoted (``"ch02.q1"``); unquoted dotted keys (``ch02.q1 = 5``)
and tables (``[answers.ch02]`` with ``q1 = 5``) are read too. The file is
only ever read: grading never changes it. Only a regular file of at most
:data:`MAX_FILE_BYTES` with at most :data:`MAX_ANSWERS` answers is read (a
pipe, a device or a huge file is refused without blocking), and when the file
is graded as part of a folder a symbolic link that leads out of the folder is
not followed. What each answer may look like is stated in
:mod:`memtheory.exercises.parsing`.

Examples
--------
>>> document = parse_answer_document({"learner": "ada", "answers": {"ch02": {"q1": 78500}}})
>>> document.learner, document.answers
('ada', {'ch02.q1': 78500})
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from memtheory.exercises.errors import AnswerFileError

__all__ = [
    "MAX_ANSWERS",
    "MAX_FILE_BYTES",
    "MAX_ID_LENGTH",
    "MAX_KEY_DEPTH",
    "AnswerFile",
    "parse_answer_document",
    "read_answer_file",
    "read_regular_file",
]

MAX_FILE_BYTES = 1 << 20
"""Largest answer file read, in bytes (1 MiB: a full set of answers takes a few KiB)."""

MAX_ANSWERS = 1000
"""Most answers one file may hold (every exercise set together has far fewer exercises)."""

MAX_ID_LENGTH = 200
"""Longest learner id or seed, in characters."""

MAX_KEY_DEPTH = 8
"""Deepest nesting of tables under ``[answers]`` (an id needs two levels: ``ch02``, ``q1``)."""

_SET_TABLE = re.compile(r"^ch\d+$", re.IGNORECASE)
_KNOWN_KEYS = {"learner", "seed", "sets", "answers"}


@dataclass(frozen=True)
class AnswerFile:
    """The contents of an answer file.

    Attributes
    ----------
    path : str or None
    learner : str or None
    seed : str, int or None
    sets : tuple of str or None
        Sets named by the file's ``sets`` key, if any.
    answers : dict
        Answer by exercise id, as written (text or number).
    notes : tuple of str
        What was ignored, and why.

    Examples
    --------
    >>> AnswerFile(None, "ada", None, None, {"ch02.q1": 78500}).learner
    'ada'
    """

    path: str | None
    learner: str | None
    seed: str | int | None
    sets: tuple[str, ...] | None
    answers: dict[str, object]
    notes: tuple[str, ...] = field(default=())


def _flatten(prefix: str, table: Mapping[str, object], out: dict[str, object], where: str) -> None:
    """Add the answers of ``table`` to ``out`` by dotted id; refuse keys nested too deeply.

    Iterative, so a key nested a thousand levels deep (``a.a.a... = 1``, which the TOML
    parser builds without recursing) is refused with a message, not a RecursionError.
    """
    pending: list[tuple[str, Mapping[str, object], int]] = [(prefix, table, 0)]
    while pending:
        name_so_far, current, depth = pending.pop()
        if depth > MAX_KEY_DEPTH:
            raise AnswerFileError(
                f"{where}: a key is nested more than {MAX_KEY_DEPTH} levels deep "
                f'({name_so_far[:60]}...); an answer id has two parts, e.g. "ch02.q1".',
                reason="keys nested too deeply",
            )
        tables = []
        for key, value in current.items():
            name = f"{name_so_far}.{key}" if name_so_far else str(key)
            if isinstance(value, Mapping):
                tables.append((name, value, depth + 1))
            else:
                out[name] = value
            if len(out) > MAX_ANSWERS:
                raise AnswerFileError(
                    f"{where}: more than {MAX_ANSWERS} answers; an answer file holds at most "
                    f"{MAX_ANSWERS}.",
                    reason="too many answers",
                )
        pending.extend(reversed(tables))


def _learner(learner: object, where: str) -> str | None:
    """Check the ``learner`` key: text of at most :data:`MAX_ID_LENGTH` characters, or absent."""
    if learner is not None and not isinstance(learner, str):
        raise AnswerFileError(
            f'{where}: learner must be text, e.g. learner = "ada"; got {learner!r:.60}.',
            reason="bad keys",
        )
    if isinstance(learner, str) and len(learner) > MAX_ID_LENGTH:
        raise AnswerFileError(
            f"{where}: the learner id has {len(learner)} characters; the limit is {MAX_ID_LENGTH}.",
            reason="bad keys",
        )
    return learner


def _seed(seed: object, where: str) -> int | str | None:
    """Check the ``seed`` key: a whole number or text, or absent."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int | str):
        raise AnswerFileError(
            f"{where}: seed must be a whole number or text, got {seed!r:.60}.", reason="bad keys"
        )
    if len(str(seed)) > MAX_ID_LENGTH:
        raise AnswerFileError(
            f"{where}: the seed is longer than {MAX_ID_LENGTH} characters.", reason="bad keys"
        )
    return seed


def _sets(sets: object, where: str) -> tuple[str, ...] | None:
    """Check the ``sets`` key: a set id or a list of them, or absent."""
    if sets is None:
        return None
    if isinstance(sets, str):
        sets = [sets]
    if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
        raise AnswerFileError(
            f'{where}: sets must be a list of set ids, e.g. sets = ["ch02"].', reason="bad keys"
        )
    return tuple(sets)


def _other_keys(data: Mapping[str, object], answers: dict[str, object], where: str) -> list[str]:
    """Read ``[ch02]``-style tables into ``answers``; return a note for each other unknown key."""
    notes = []
    for key, value in data.items():
        if key in _KNOWN_KEYS:
            continue
        if _SET_TABLE.match(key) and isinstance(value, Mapping):
            _flatten(key, value, answers, where)
        else:
            notes.append(f"ignored the key {key!r} outside [answers]")
    return notes


def parse_answer_document(data: Mapping[str, object], path: str | None = None) -> AnswerFile:
    """Read the keys of a parsed answer file.

    Raises
    ------
    AnswerFileError
        If ``learner``, ``seed`` or ``sets`` has the wrong type, or ``answers`` is not a table.

    Examples
    --------
    >>> parse_answer_document({"seed": [1]})
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFileError: answer file: seed must be a whole number ...
    """
    where = path or "answer file"
    learner = _learner(data.get("learner"), where)
    seed = _seed(data.get("seed"), where)
    sets = _sets(data.get("sets"), where)
    answers: dict[str, object] = {}
    table = data.get("answers", {})
    if not isinstance(table, Mapping):
        raise AnswerFileError(
            f'{where}: answers must be a table: a line [answers], then "ch02.q1" = ...',
            reason="bad keys",
        )
    _flatten("", table, answers, where)
    if len(answers) > MAX_ANSWERS:
        raise AnswerFileError(
            f"{where}: {len(answers)} answers; an answer file holds at most {MAX_ANSWERS}.",
            reason="too many answers",
        )
    notes = _other_keys(data, answers, where)
    return AnswerFile(path, learner, seed, sets, answers, tuple(notes))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def read_regular_file(
    path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None
) -> bytes:
    r"""Read a regular file of at most :data:`MAX_FILE_BYTES`, never blocking on a pipe or device.

    Parameters
    ----------
    path : path
    within : path, optional
        A folder the file must be in once symbolic links are followed (a link
        that leads out of it is refused).

    Raises
    ------
    AnswerFileError
        If the file is missing, not a regular file, a link out of ``within``, or too large.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.toml").write_text("x = 1")
    >>> read_regular_file(folder / "a.toml", within=folder)
    b'x = 1'
    >>> (folder / "zero.toml").symlink_to("/dev/zero")
    >>> read_regular_file(folder / "zero.toml", within=folder)
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.AnswerFileError: zero.toml is a symbolic link to /dev/zero, ...
    """
    file = Path(path)
    name = file.name if within is not None else str(file)
    try:
        target = Path(os.path.realpath(file))
        if within is not None and not _inside(target, Path(os.path.realpath(within))):
            raise AnswerFileError(
                f"{name} is a symbolic link to {target}, outside the folder graded; not read.",
                reason="link out of the folder",
            )
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        descriptor = os.open(target, flags)
    except OSError as error:
        raise _os_error(name, error) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            kind = _file_kind(info.st_mode)
            raise AnswerFileError(f"{name} is not a regular file ({kind}); not read.", reason=kind)
        if info.st_size > MAX_FILE_BYTES:
            raise AnswerFileError(
                f"{name} is {info.st_size} bytes; an answer file may have at most "
                f"{MAX_FILE_BYTES} bytes.",
                reason="too large",
            )
        raw = os.read(descriptor, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise _os_error(name, error) from None
    finally:
        os.close(descriptor)
    if len(raw) > MAX_FILE_BYTES:
        raise AnswerFileError(
            f"{name} has more than {MAX_FILE_BYTES} bytes; not read.", reason="too large"
        )
    return raw


def _file_kind(mode: int) -> str:
    """Return a few words for what a file that is not regular is."""
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a pipe"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _os_error(name: str, error: OSError) -> AnswerFileError:
    """Return the answer-file error for an OSError met opening or reading ``name``."""
    if error.errno == errno.ELOOP:
        return AnswerFileError(
            f"{name} is a symbolic link that loops (or leads through too many links); not read.",
            reason="link loop",
        )
    if error.errno == errno.ENOENT:
        return AnswerFileError(
            f"cannot read the answer file {name}: no such file (a broken link?).",
            reason="missing",
        )
    if error.errno == errno.EISDIR:
        return AnswerFileError(
            f"{name} is not a regular file (a folder); not read.", reason="a folder"
        )
    return AnswerFileError(
        f"cannot read the answer file {name}: {error.strerror or error}.", reason="cannot read"
    )


def read_answer_file(
    path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None
) -> AnswerFile:
    r"""Read an answer file (TOML), without ever changing it.

    Parameters
    ----------
    path : path
    within : path, optional
        The folder being graded: a symbolic link out of it is not followed.

    Raises
    ------
    AnswerFileError
        If the file cannot be read (see :func:`read_regular_file`), is not
        UTF-8, is not valid TOML, or has keys of the wrong type.

    Examples
    --------
    >>> import tempfile
    >>> file = Path(tempfile.mkdtemp()) / "answers.toml"
    >>> _ = file.write_text('learner = "ada"\n[answers]\n"ch02.q1" = "78,500"\n')
    >>> read_answer_file(file).answers
    {'ch02.q1': '78,500'}
    """
    file = Path(path)
    raw = read_regular_file(file, within=within)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AnswerFileError(
            f"{file}: not UTF-8 text; save the answers as UTF-8.", reason="not UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise AnswerFileError(
            f"{file}: not valid TOML ({error}). "
            'Write one answer per line, e.g. "ch02.q1" = "78,500".',
            reason="not TOML",
        ) from None
    except RecursionError:
        raise AnswerFileError(
            f"{file}: its tables or lists are nested too deeply.", reason="nested too deeply"
        ) from None
    return parse_answer_document(data, str(file))
