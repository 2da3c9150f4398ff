"""Seeds and variants: each learner gets their own numbers, reproducibly.

A seed (a learner id, or a number) picks one value for each parameter of an
exercise from the values the exercise lists. The pick depends only on the
seed and the exercise id, through SHA-256 (never Python's ``hash()``, which
changes between runs), so the same seed always gives the same numbers, on
any machine. Without a seed (``None``, or ``"canonical"``) every parameter
takes its first value: the numbers printed in the book.

Examples
--------
>>> seed_from_learner("Ada Lovelace") == seed_from_learner("  ada lovelace ")
True
>>> draw_params({"n": (25, 27, 31)}, None, "ch03.q1")
{'n': 25}
>>> options = {"n": (25, 27, 31)}
>>> draw_params(options, "ada", "ch03.q1") == draw_params(options, "ada", "ch03.q1")
True
"""

from __future__ import annotations

import hashlib
import numbers
import random
from collections.abc import Callable, Mapping, Sequence

from memtheory.errors import UnsupportedError
from memtheory.exercises.errors import ExerciseDefinitionError

__all__ = [
    "CANONICAL",
    "SeedLike",
    "draw_params",
    "normalize_seed",
    "resolve_seed",
    "seed_from_learner",
    "variant_rng",
]

CANONICAL = "canonical"
"""The seed that selects the book's numbers (the same as no seed)."""

SeedLike = str | int | None

_MAX_TRIES = 1000


def normalize_seed(seed: SeedLike) -> str | None:
    """Return the seed as text, or ``None`` for the canonical numbers.

    ``42`` and ``"42"`` are the same seed.

    Examples
    --------
    >>> normalize_seed(42), normalize_seed(" 42 "), normalize_seed("Canonical")
    ('42', '42', None)
    """
    if seed is None:
        return None
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool | int):
        seed = int(seed)  # a NumPy integer
    if isinstance(seed, bool) or not isinstance(seed, str | int):
        raise UnsupportedError(f"a seed is a whole number or text, got {seed!r}.")
    text = str(seed).strip()
    if not text or text.lower() == CANONICAL:
        return None
    return text


def seed_from_learner(learner: str) -> int:
    """Derive a learner's seed from their id: the first 32 bits of SHA-256 of the id.

    Case and surrounding spaces do not matter.

    Examples
    --------
    >>> seed_from_learner("alice")
    735577801
    """
    digest = hashlib.sha256(learner.strip().casefold().encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


def resolve_seed(
    *, option: SeedLike = None, file_seed: SeedLike = None, learner: str | None = None
) -> tuple[str | None, str]:
    """Choose the seed: an explicit option, else the file's seed, else one derived from the learner.

    Returns
    -------
    seed : str or None
        ``None`` means the canonical numbers.
    source : str
        ``"option"``, ``"file"``, ``"learner"`` or ``"canonical"``.

    Examples
    --------
    >>> resolve_seed(file_seed=7, learner="alice")
    ('7', 'file')
    >>> resolve_seed(learner="alice")
    ('735577801', 'learner')
    >>> resolve_seed()
    (None, 'canonical')
    """
    if learner is not None and not isinstance(learner, str):
        raise UnsupportedError(
            f"a learner id is text, as in an answer file's learner = \"ada\"; got {learner!r} "
            f"({type(learner).__name__}): write learner={str(learner)!r}."
        )
    for value, source in ((option, "option"), (file_seed, "file")):
        if value is not None:
            seed = normalize_seed(value)
            return seed, source if seed is not None else "canonical"
    if learner is not None and learner.strip():
        return str(seed_from_learner(learner)), "learner"
    return None, "canonical"


def variant_rng(seed: str, exercise_id: str) -> random.Random:
    """Return a random generator for one exercise and one seed, from SHA-256 of both.

    Examples
    --------
    >>> variant_rng("7", "ch02.q1").random() == variant_rng("7", "ch02.q1").random()
    True
    """
    digest = hashlib.sha256(f"{seed}\x00{exercise_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw_params(
    params: Mapping[str, Sequence[object]],
    seed: SeedLike,
    exercise_id: str,
    constraint: Callable[[dict[str, object]], bool] | None = None,
) -> dict[str, object]:
    """Pick one value per parameter: the first ones without a seed, else drawn from the seed.

    A seeded draw never repeats the canonical combination (when another one
    exists) and satisfies ``constraint``.

    Parameters
    ----------
    params : mapping of str to sequence
        The values each parameter may take; the first is the canonical one.
    seed : str, int or None
    exercise_id : str
        Full id (``"ch02.q1"``), so that exercises draw independently.
    constraint : callable, optional
        Returns whether a combination is valid.

    Examples
    --------
    >>> draw_params({"k": (3, 5), "s": (1, 2)}, 1, "ch03.q2") != {"k": 3, "s": 1}
    True
    """
    canonical = {name: options[0] for name, options in params.items()}
    if constraint is not None and not constraint(canonical):
        raise ExerciseDefinitionError(
            f"{exercise_id}: the canonical parameters {canonical} break its constraint."
        )
    key = normalize_seed(seed)
    if key is None or all(len(options) == 1 for options in params.values()):
        return canonical
    rng = variant_rng(key, exercise_id)
    for _ in range(_MAX_TRIES):
        drawn = {name: rng.choice(list(options)) for name, options in params.items()}
        if drawn != canonical and (constraint is None or constraint(drawn)):
            return drawn
    raise ExerciseDefinitionError(f"{exercise_id}: no variant satisfies its constraint.")
