"""Where the ``memtheory grade`` results go when no path is given: beside what was graded.

Examples
--------
>>> default_result_path(Path("work/answers.toml")).name
'answers.result.json'
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["default_exercises_path", "default_folder_paths", "default_result_path"]


def default_result_path(answers: Path) -> Path:
    """Where the result of an answer file goes by default: ``NAME.result.json`` beside it.

    Examples
    --------
    >>> default_result_path(Path("work/answers.toml")).as_posix()
    'work/answers.result.json'
    """
    return answers.with_name(f"{answers.stem}.result.json")


def default_folder_paths(folder: Path) -> tuple[Path, Path]:
    """Where a folder's results go by default: ``NAME.grades.json`` and ``.csv`` beside it.

    Never inside the folder, where a learner's file could stand.

    Examples
    --------
    >>> [p.name for p in default_folder_paths(Path("/course/submissions"))]
    ['submissions.grades.json', 'submissions.grades.csv']
    """
    absolute = folder.resolve()
    name = absolute.name or "submissions"
    return absolute.parent / f"{name}.grades.json", absolute.parent / f"{name}.grades.csv"


def default_exercises_path(folder: Path) -> Path:
    """Where a folder's per-exercise summary goes by default: ``NAME.exercises.csv`` beside it.

    Examples
    --------
    >>> default_exercises_path(Path("/course/submissions")).name
    'submissions.exercises.csv'
    """
    absolute = folder.resolve()
    return absolute.parent / f"{absolute.name or 'submissions'}.exercises.csv"
