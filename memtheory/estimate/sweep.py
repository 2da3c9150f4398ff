"""``memtheory estimate --sweep``: every combination of sizes and cards, answered in one call.

A sweep names one option and its values (``seq=512,1024,2048``); several
sweeps give every combination of their values. The step is derived once
(:mod:`memtheory.estimate.derivation_cache`): each point only puts its sizes
into the compiled formulas, so a hundred points cost about what one does.

Examples
--------
>>> sweeps = parse_sweeps(["seq=256,512", "gpu=T4,RTX 4090"])
>>> sweeps
(('sequence', (256, 512)), ('gpu', ('T4', 'RTX 4090')))
>>> points(sweeps)[:2]
[{'sequence': 256, 'gpu': 'T4'}, {'sequence': 256, 'gpu': 'RTX 4090'}]
>>> answers = sweep("gpt2", sweeps, batch=2)
>>> print(sweep_table(answers))  # doctest: +NORMALIZE_WHITESPACE
seq  gpu       peak (GiB)  usable (GiB)  fits  largest batch  largest seq
---  --------  ----------  ------------  ----  -------------  -----------
256  T4              2.18         14.50  yes              45         1024
256  RTX 4090        2.18         22.50  yes              74         1024
512  T4              2.75         14.50  yes              22         1024
512  RTX 4090        2.75         22.50  yes              37         1024
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memtheory.errors import InvalidArgumentError, MemtheoryError
from memtheory.tables import Column, Table
from memtheory.units import convert, round_half_up

if TYPE_CHECKING:
    from memtheory.estimate.answer import Estimate

__all__ = ["MOST_POINTS", "SWEEPABLE", "parse_sweeps", "points", "sweep", "sweep_table"]

MOST_POINTS = 10_000
"""The most combinations one sweep answers."""


def _whole(text: str) -> int:
    value = int(text)  # int() raises ValueError for text that is not a whole number
    if value < 1:
        raise InvalidArgumentError(f"{text!r} is not a positive whole number.")
    return value


def _gpus(text: str) -> int | str:
    return "auto" if text.lower() == "auto" else _whole(text)


def _text(text: str) -> str:
    return text


SWEEPABLE: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "batch": ("batch", _whole, "a positive whole number"),
    "seq": ("sequence", _whole, "a positive whole number"),
    "image": ("image", _whole, "a positive whole number"),
    "lora": ("lora", _whole, "a positive whole number (the rank)"),
    "gpus": ("gpus", _gpus, "a positive whole number or auto"),
    "gpu": ("gpu", _text, "a card's name"),
    "limit": ("limit", _text, 'a size such as "24 GB"'),
}
"""What ``--sweep NAME=...`` takes: NAME to (estimate's keyword, parser, what a value is)."""

_SHOWN = {keyword: name for name, (keyword, _, _) in SWEEPABLE.items()}


def parse_sweeps(specs: Sequence[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """Read ``NAME=V1,V2,...`` specs into (estimate keyword, values) pairs, in the order given.

    Raises
    ------
    InvalidArgumentError
        A spec without ``=``, a name that cannot be swept or is swept twice, an
        empty or repeated value, a value of the wrong kind, or more than
        :data:`MOST_POINTS` combinations.

    Examples
    --------
    >>> parse_sweeps(["batch=1,2,4"])
    (('batch', (1, 2, 4)),)
    >>> parse_sweeps(["batch=1,two"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --sweep batch=1,two: 'two' is not a positive whole ...
    """
    parsed: list[tuple[str, tuple[Any, ...]]] = []
    for spec in specs:
        name, equals, listed = spec.partition("=")
        name = name.strip().lower()
        if not equals or name not in SWEEPABLE:
            raise InvalidArgumentError(
                f"--sweep {spec}: write NAME=V1,V2,... with NAME one of "
                f"{', '.join(SWEEPABLE)} (e.g. --sweep seq=512,1024,2048)."
            )
        keyword, parse, kind = SWEEPABLE[name]
        if keyword in dict(parsed) or {keyword, *dict(parsed)} >= {"gpu", "limit"}:
            raise InvalidArgumentError(
                f"--sweep {spec}: {name} is swept already (or gpu and limit both are): give "
                "each option one --sweep, and a card either by name or by its memory."
            )
        words = [word.strip() for word in listed.split(",")]
        if not all(words):
            raise InvalidArgumentError(
                f"--sweep {spec}: a value is empty. Write e.g. --sweep {name}=1,2,4."
            )
        values = []
        for word in words:
            try:
                values.append(parse(word))
            except ValueError:
                raise InvalidArgumentError(
                    f"--sweep {spec}: {word!r} is not {kind}. Write e.g. --sweep {name}=1,2,4."
                ) from None
        if len(set(values)) != len(values):
            raise InvalidArgumentError(f"--sweep {spec}: a value is repeated.")
        parsed.append((keyword, tuple(values)))
    count = math.prod(len(listed) for _, listed in parsed)
    if count > MOST_POINTS:
        raise InvalidArgumentError(
            f"--sweep asks for {count:,} combinations; at most {MOST_POINTS:,} in one call."
        )
    return tuple(parsed)


def points(sweeps: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """Return every combination of the swept values, the last sweep varying fastest."""
    names = [keyword for keyword, _ in sweeps]
    return [dict(zip(names, combination, strict=True))
            for combination in itertools.product(*(values for _, values in sweeps))]


def sweep(
    model: str | Mapping[str, Any],
    sweeps: Sequence[tuple[str, Sequence[Any]]],
    **fixed: Any,
) -> list[tuple[dict[str, Any], Estimate]]:
    """Answer :func:`~memtheory.estimate.estimate` at every point of ``sweeps``.

    ``fixed`` are the keywords every point shares; a point's values replace
    them (a swept card replaces a fixed ``limit``, and a swept limit a fixed
    ``gpu``). A point that cannot be answered raises its error, naming the point.
    """
    from memtheory.estimate.plan import estimate

    answers = []
    for point in points(sweeps):
        keywords = {**fixed, **point}
        if "gpu" in point:
            keywords["limit"] = None
        if "limit" in point:
            keywords["gpu"] = None
        try:
            answers.append((point, estimate(model, **keywords)))
        except MemtheoryError as error:
            shown = ", ".join(f"{_SHOWN[k]}={v}" for k, v in point.items())
            raise type(error)(f"at {shown}: {error}") from None
    return answers


def sweep_table(answers: Sequence[tuple[Mapping[str, Any], Estimate]]) -> Table:
    """Tabulate a sweep: the swept values, the peak per device, the budget, what fits.

    Sizes in GiB (2^30 bytes) throughout, so that rows compare.
    """
    swept = list(answers[0][0]) if answers else []
    budget = any(answer.budget is not None for _, answer in answers)
    columns = [Column(_SHOWN[k], align="left" if k in ("gpu", "limit") else "right")
               for k in swept]
    columns.append(Column("peak (GiB)", align="right"))
    if budget:
        columns += [Column("usable (GiB)", align="right"), Column("fits"),
                    Column("largest batch", align="right"), Column("largest seq", align="right")]
    rows = []
    for point, answer in answers:
        row = [str(point[k]) for k in swept] + [_gib(answer.peak)]
        if budget:
            row += [
                "-" if answer.budget is None else _gib(answer.budget.usable),
                {True: "yes", False: "no", None: "-"}[answer.fits],
                _limit(answer.max_batch),
                _limit(answer.max_sequence),
            ]
        rows.append(tuple(row))
    return Table(columns, rows)


def _gib(value: Any) -> str:
    return f"{round_half_up(convert(value, 'GiB'), 2)}"


def _limit(value: int | None) -> str:
    return "-" if value is None else ("none fits" if value == 0 else str(value))
