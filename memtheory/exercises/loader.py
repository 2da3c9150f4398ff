"""Finding and loading the exercise sets.

The sets are Python modules in a folder (one per book chapter, e.g.
``exercises/ch02_parameters.py``), each defining ``SET``, an
:class:`~memtheory.exercises.model.ExerciseSet`. The folder is, in order:

1. the path given explicitly (``--sets DIR`` on the command line);
2. the environment variable ``MEMTHEORY_EXERCISES``;
3. the sets installed with the package (``memtheory/exercise_sets``, from the wheel);
4. ``exercises/`` in the repository checkout next to the package.

Trust boundary: loading a folder imports every ``*.py`` in it (not starting
with ``_``), which runs that code with the caller's permissions. A folder of
sets is code to trust as much as any script you run; answer files, by
contrast, are data that the grader only reads.

Examples
--------
>>> sets = load_sets()
>>> "ch02" in sets
True
>>> find_variant("ch02.q1").id
'ch02.q1'
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import sys
from pathlib import Path

import memtheory
from memtheory.exercises.errors import (
    ExerciseDefinitionError,
    ExerciseSetsNotFoundError,
    UnknownExerciseError,
)
from memtheory.exercises.model import ExerciseSet, Variant
from memtheory.exercises.variants import SeedLike

__all__ = ["ENV_VAR", "find_sets_dir", "find_variant", "get_set", "load_sets", "normalize_id"]

ENV_VAR = "MEMTHEORY_EXERCISES"
"""Environment variable naming the folder of exercise sets."""

PathLike = str | os.PathLike[str]

_CACHE: dict[tuple[Path, tuple[tuple[str, int], ...]], dict[str, ExerciseSet]] = {}


def _checkout_dir() -> Path:
    return Path(memtheory.__file__).resolve().parents[1] / "exercises"


def _installed_dir() -> Path:
    return Path(memtheory.__file__).resolve().parent / "exercise_sets"


def find_sets_dir(path: PathLike | None = None) -> Path:
    """Find the folder of sets: ``path``, else ``$MEMTHEORY_EXERCISES``, else the checkout's.

    Raises
    ------
    ExerciseSetsNotFoundError
        If the chosen folder does not exist, or none is found.

    Examples
    --------
    >>> find_sets_dir().name
    'exercises'
    """
    for candidate, origin in ((path, "the given path"), (os.environ.get(ENV_VAR) or None, ENV_VAR)):
        if candidate is not None:
            folder = Path(candidate).expanduser()
            if not folder.is_dir():
                raise ExerciseSetsNotFoundError(
                    f"{origin} {str(folder)!r} is not a folder of exercise sets."
                )
            return folder.resolve()
    if _installed_dir().is_dir():
        return _installed_dir()
    default = _checkout_dir()
    if default.is_dir():
        return default
    raise ExerciseSetsNotFoundError(
        "no exercise sets found: pass --sets DIR (or sets_dir=...), set the environment variable "
        f"{ENV_VAR}, or install memtheory with its sets "
        f"(looked in {_installed_dir()} and {default})."
    )


def _import(file: Path) -> ExerciseSet:
    name = f"_memtheory_exercise_set_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ExerciseDefinitionError(f"cannot import {file}.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(name, None)
        raise ExerciseDefinitionError(
            f"{file.name} failed to load: {type(error).__name__}: {error}"
        ) from error
    found = getattr(module, "SET", None)
    if not isinstance(found, ExerciseSet):
        raise ExerciseDefinitionError(f"{file.name} defines no SET (an ExerciseSet).")
    return found


def load_sets(path: PathLike | None = None) -> dict[str, ExerciseSet]:
    """Every exercise set of the folder, by id, sorted (loaded once while the files are unchanged).

    Files whose names start with ``_`` are helpers, not sets.

    Examples
    --------
    >>> list(load_sets())[:2]
    ['ch01', 'ch02']
    """
    folder = find_sets_dir(path)
    files = sorted(f for f in folder.glob("*.py") if not f.name.startswith("_"))
    key = (folder, tuple((f.name, f.stat().st_mtime_ns) for f in files))
    if key not in _CACHE:
        sets: dict[str, ExerciseSet] = {}
        for file in files:
            loaded = _import(file)
            if loaded.id in sets:
                raise ExerciseDefinitionError(
                    f"two files define the set {loaded.id!r} ({file.name})."
                )
            sets[loaded.id] = loaded
        _CACHE[key] = dict(sorted(sets.items()))
    return _CACHE[key]


def normalize_id(exercise_id: str) -> str:
    """Tidy an exercise id as a learner may write it: case, spaces, ``ch2`` for ``ch02``.

    Examples
    --------
    >>> normalize_id(" CH2.Q3 ")
    'ch02.q3'
    """
    text = "".join(str(exercise_id).split()).lower()
    return re.sub(r"^ch(\d)(?=\.|$)", r"ch0\1", text)


def get_set(set_id: str, path: PathLike | None = None) -> ExerciseSet:
    """One exercise set by id.

    Examples
    --------
    >>> get_set("ch2").id
    'ch02'
    """
    sets = load_sets(path)
    key = normalize_id(set_id)
    if key not in sets:
        close = difflib.get_close_matches(key, list(sets), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UnknownExerciseError(f"no exercise set {set_id!r}{hint}; sets: {', '.join(sets)}.")
    return sets[key]


def find_variant(exercise_id: str, seed: SeedLike = None, path: PathLike | None = None) -> Variant:
    """Return the exercise ``"ch02.q3"`` with its parameters drawn for ``seed``.

    Raises
    ------
    UnknownExerciseError
        If no exercise has this id; the message suggests the closest one.

    Examples
    --------
    >>> find_variant("ch02.q99")
    Traceback (most recent call last):
    ...
    memtheory.exercises.errors.UnknownExerciseError: no exercise 'ch02.q99' (did you mean ...
    """
    sets = load_sets(path)
    key = normalize_id(exercise_id)
    set_id, _, short = key.partition(".")
    if set_id in sets and short in {e.id for e in sets[set_id].exercises}:
        return sets[set_id].variant(short, seed)
    every = [full for s in sets.values() for full in s.ids]
    close = difflib.get_close_matches(key, every, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UnknownExerciseError(
        f"no exercise {exercise_id!r}{hint}; ids look like 'ch02.q1' (sets: {', '.join(sets)})."
    )
