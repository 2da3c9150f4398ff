"""Answer at new sizes without sympy: a derived answer kept as plain numbers and printed again.

:mod:`~memtheory.estimate.answer_cache` answers a command line asked before;
the step read back from :mod:`~memtheory.estimate.derivation_cache` answers
any size, but unpickling it imports sympy (most of a second). When
``memtheory estimate`` derives an answer, :func:`keep` also writes a *replay
entry*: everything the report needs at any batch and sequence, as plain
Python data (:mod:`~memtheory.estimate.replay_entry` writes it): the integer
(or rational) coefficients of every component and moment over a few shared
terms, each term, the peak and the formula's branches as integer-arithmetic
Python source (:class:`~memtheory.estimate.compiled.CompiledFootprint`'s
printer), the formula strings already printed, and the text that does not
depend on the sizes. :func:`replayed` evaluates it at the sizes of a new
command line with Python integers and :class:`~fractions.Fraction` (exact,
as :class:`~memtheory.estimate.compiled.CompiledFootprint` is) and prints
what the derived path prints, byte for byte, importing no sympy.

An entry's key is the code's digest and the command line without ``--batch``
and ``--seq`` (given or not, anywhere: a size left out is its default) and
``--json`` (which changes only how the same answer is printed): every other
option may change the step's structure, so it is part of the key. An entry is written only where the
answer's structure is known not to change with those two sizes (no
``--global-batch``, no checkpointing, no context parallelism, no offload, a
step compiled into tables; on several devices, what the first, busiest one
holds). ``--gpus auto`` picks the device count at each size: its entry keeps
the peak per device of every data-parallel size its search tried, as integer
code in the sizes, and an entry as above for each size it found
(:func:`searched_at` searches again, as
:func:`~memtheory.estimate.devices.fewest_gpus` does); a count not kept yet is
derived, and its peak and answer are added to the entry. A size the
derived path would refuse (not positive, past the model's positions) or a
formula branch not printed when the entry was written is answered by the
derived path instead (:func:`replayed` returns None). A cache that cannot be
read or written is ignored.

Examples
--------
>>> sized(["llama-3-8b", "--lora", "16", "--seq", "4096", "--batch=2"])
(['llama-3-8b', '--lora', '16'], {'seq': 4096, 'batch': 2})
>>> sized(["gpt2", "--bat", "2"]) is None  # an abbreviation is not read here: derived instead
True
>>> format_bytes(3 * 2**29, "GiB"), format_bytes(10**9 + 5 * 10**6, "GB")
('1.50 GiB', '1.01 GB')
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from memtheory.estimate.cache_key import cache_directory, question_key, source_digest
from memtheory.estimate.fitting import fewest_fitting, largest_fitting
from memtheory.tables import Column, Table

__all__ = [
    "FORMAT",
    "answer_at",
    "answered_at",
    "chosen_leaves",
    "compiled_function",
    "leaf_chooser",
    "format_bytes",
    "keep",
    "record",
    "replayed",
    "report_text",
    "round_half_up",
    "search_line",
    "searched_at",
    "sized",
]

FORMAT = 1
"""Bumped when the layout of a replay entry changes."""

JSON_OPTIONS = ("--j", "--js", "--jso", "--json")
"""``--json`` as argparse reads it, abbreviated or not: the answer printed as JSON.

(The entry's own ``json`` says how the answer that wrote it was printed, not how
this command line asks for it.)"""

SIZES = {"--batch": "batch", "--seq": "seq"}
"""The options whose values an entry is evaluated at, by the name kept in :func:`sized`."""

_ENTRY = re.compile(r"[0-9a-f]{16}-replay-[0-9a-f]{64}\.json")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "GB": 10**9}

_LAST: dict[str, Any] = {}
"""What the last derived answer left for :func:`keep` (``record``'s entry and arguments)."""


def sized(arguments: Sequence[str]) -> tuple[list[str], dict[str, int]] | None:
    """Return the arguments without the sizes, and the sizes given; None where not readable here.

    ``--batch N``, ``--batch=N``, ``--seq N`` and ``--seq=N`` are read (the last
    of each, as argparse does) and taken out with ``--json``; the other
    arguments keep their order. None for a value that is
    not a whole number, an abbreviated size option, ``--`` or ``--sweep``.
    """
    kept: list[str] = []
    sizes: dict[str, int] = {}
    tokens = list(arguments)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        option, equals, value = token.partition("=")
        if token == "--" or option == "--sweep" or _abbreviated(option):
            return None
        if option in SIZES:
            if not equals:
                index += 1
                if index == len(tokens):
                    return None
                value = tokens[index]
            try:
                sizes[SIZES[option]] = int(value)  # as argparse's type=int reads it
            except ValueError:
                return None
        elif token != "--json":
            kept.append(token)
        index += 1
    return kept, sizes


def _abbreviated(option: str) -> bool:
    """Whether ``option`` is a shortened size option (argparse reads ``--bat`` as ``--batch``)."""
    return option.startswith("--") and len(option) > 2 and option not in SIZES and any(
        name.startswith(option) for name in SIZES
    )


def _path(arguments: Sequence[str]) -> tuple[Path, dict[str, int]] | None:
    """Return where the entry for these arguments is kept, and their sizes; None where none is."""
    directory = cache_directory()
    found = sized(arguments)
    if directory is None or found is None:
        return None
    kept, sizes = found
    key = question_key(f"estimate replay {FORMAT}", kept)
    if key is None:
        return None
    return directory / f"{source_digest()[:16]}-replay-{key}.json", sizes


def record(entry: dict[str, Any] | None) -> None:
    """Leave a derived answer's replay entry (or None: none can be made) for :func:`keep`."""
    _LAST.clear()
    if entry is not None:
        _LAST["entry"] = entry


def keep(arguments: Sequence[str]) -> None:
    """Write the entry :func:`record` left for the command line just answered; never raise.

    The branches of the formula already kept for these arguments are kept too.
    """
    entry = _LAST.pop("entry", None)
    found = _path(arguments)
    if entry is None or found is None:
        return
    path = found[0]
    entry = _merged(_read(path), entry)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
        ) as file:
            temporary = Path(file.name)
            # dumps, not dump: dump encodes in Python, chunk by chunk (7 ms against 1.5 ms
            # for a ZeRO-3 entry); the same text
            file.write(json.dumps(entry, separators=(",", ":")))
        os.replace(temporary, path)
        current = path.name.split("-", 1)[0]
        for stale in path.parent.glob("*-replay-*.json"):  # another code's: never read again
            if _ENTRY.fullmatch(stale.name) and not stale.name.startswith(current):
                stale.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        return


def _merged(old: dict[str, Any] | None, entry: dict[str, Any]) -> dict[str, Any]:
    """Return ``entry`` with what ``old`` (the same question's) knew that it does not.

    The formula's branches kept before; for ``--gpus auto``, the device counts
    whose peaks and answers were kept before (each is the same at any sizes).
    """
    if old is None or ("search" in old) != ("search" in entry):
        return entry
    if "search" not in entry:
        if old.get("tree") == entry["tree"]:
            entry["branches"] = {**old["branches"], **entry["branches"]}
        return entry
    static = [key for key in entry["search"] if key != "peaks"]
    if any(old["search"].get(key) != entry["search"][key] for key in static):
        return entry
    entry["search"]["peaks"] = {**old["search"]["peaks"], **entry["search"]["peaks"]}
    entry["answers"] = {
        **old["answers"],
        **{count: _merged(old["answers"].get(count), new)
           for count, new in entry["answers"].items()},
    }
    return entry


def _read(path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) and entry.get("format") == FORMAT else None


def replayed(arguments: Sequence[str]) -> int | None:
    """Print the answer of ``memtheory estimate ARGUMENTS`` from a replay entry; its exit status.

    None (nothing printed) where there is no entry, or the derived path must
    answer: a size it would refuse, or a formula branch the entry lacks.
    """
    found = _path(arguments)
    entry = None if found is None else _read(found[0])
    if entry is None or found is None:
        return None
    try:
        answered = answered_at(entry, found[1])
        if answered is None:
            return None
        answer, numbers, printed = answered
        as_json = any(token in JSON_OPTIONS for token in arguments)
        text = json.dumps(answer, indent=2) if as_json else report_text(printed, answer, numbers)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, SyntaxError,
            AttributeError):
        return None  # an entry written by hand or damaged: derive instead
    print(text)
    return 1 if printed["check"] and not answer["fits"] else 0


def compiled_function(source: str) -> Callable[..., Any]:
    """Compile one of the entry's functions: integer arithmetic in the sizes (see the module)."""
    return eval(source, {"math": math})  # noqa: S307


def answered_at(
    entry: dict[str, Any], sizes: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None:
    """Return ``--json``'s answer at ``sizes``, the numbers its text needs, and its entry.

    An entry of ``--gpus auto`` searches the device counts again at ``sizes``
    (:func:`searched_at`); the entry returned is the one of the count found,
    whose text is printed. None where the derived path must answer.
    """
    if "search" not in entry:
        answered = answer_at(entry, sizes)
        return None if answered is None else (*answered, entry)
    return searched_at(entry, sizes)


def searched_at(
    entry: dict[str, Any], sizes: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None:
    """Answer ``--gpus auto`` at ``sizes``: the fewest devices whose peak fits, then that answer.

    The entry keeps, for each data-parallel size seen, its peak per device as
    integer code in the sizes (``search["peaks"]``) and, for each size found,
    the answer there (``answers``, an entry as :func:`answer_at` reads). The
    search is :func:`~memtheory.estimate.fitting.fewest_fitting`, as
    :func:`~memtheory.estimate.devices.fewest_gpus` runs it. None where it
    needs a size the entry has not kept: the derived path answers. Where no count
    fits, the answer is the one on a single replica, as the derived path gives it.
    """
    search = entry["search"]
    names: list[str] = search["names"]
    kept = list(entry["answers"].values())
    given = _given(kept[0], sizes) if kept else None
    if given is None:
        return None
    values = dict(zip(("B", "S"), given, strict=True))
    at = [values[name] for name in names]
    tried: dict[int, int] = {}

    def fits(data: int) -> bool:
        source = search["peaks"].get(str(data))
        if source is None:
            raise _NotKeptError(data)  # a size not derived yet
        tried[data] = int(compiled_function(source)(*at))
        return tried[data] <= search["usable"]

    try:
        data = fewest_fitting(fits, search["most"], every=search["every"], whole=search["whole"])
    except _NotKeptError:
        return None
    found = entry["answers"].get(str(data or 1))  # none fits: the answer on one replica
    if found is None:
        return None
    answered = answer_at(found, sizes)
    if answered is None:
        return None
    answer, numbers = answered
    group = search["group"]
    answer["gpu_search"] = {
        "gpus": None if data is None else data * group, "counts": search["counts"],
        "tried": [{"gpus": d * group, "peak_bytes": p} for d, p in sorted(tried.items())],
    }
    return answer, numbers, found


class _NotKeptError(Exception):
    """The search needs the peak of a data-parallel size the entry has not kept."""


def _given(entry: dict[str, Any], sizes: dict[str, int]) -> tuple[int, int | None] | None:
    """Return the batch and sequence asked (their defaults where left out); None if refused."""
    batch = sizes.get("batch", 1)  # the parser's default
    sequence = sizes.get("seq", entry["default_sequence"])
    positions = entry["positions"]
    if batch < 1 or (sequence is not None and sequence < 1):
        return None  # refused by the derived path, with its message
    if "seq" in sizes and (entry["kind"] != "sequence" or (positions and sequence > positions)):
        return None
    return batch, sequence


def answer_at(
    entry: dict[str, Any], sizes: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Return ``--json``'s answer at ``sizes`` and the numbers the text needs beside it.

    None where the derived path must answer.
    """
    given_sizes = _given(entry, sizes)
    if given_sizes is None:
        return None
    batch, sequence = given_sizes
    positions = entry["positions"]
    values: dict[str, Any] = {"B": batch, "S": sequence}
    names: list[str] = entry["names"]
    given = [values[name] for name in names]
    plain = _moments(entry, given)
    split = len(entry["components"])
    components = dict(zip(entry["components"], plain[:split], strict=True))
    total = sum(plain[:split])
    moments = plain[split:]
    peak = max(moments) if moments else total
    usable = entry["usable"]
    peak_at = compiled_function(entry["peak"])
    max_batch = max_sequence = None
    if usable is not None:
        others = {k: v for k, v in values.items() if k != "B" and k in names}
        max_batch = _largest(peak_at, names, "B", others, usable, None)
        if entry["kind"] == "sequence" and "S" in names:
            max_sequence = _largest(peak_at, names, "S", {"B": batch}, usable, positions)
        if max_batch is None or max_sequence is None and "S" in names:
            return None  # beyond the search's ceiling: the derived path says why
    branch = _branch(entry, given)
    if branch is None:
        return None
    answer = entry["answer"]
    settings = answer["settings"]
    settings["batch"] = batch
    if entry["kind"] == "sequence":
        settings["sequence"] = sequence
    settings["global_batch"] = batch * settings["grad_accum"] * settings["data"]
    answer.update(
        components={name: int(value) for name, value in components.items()},
        total_bytes=int(total), peak_bytes=int(peak),
        fits=None if usable is None else bool(peak <= usable),
        max_batch=max_batch, max_sequence=max_sequence, formula_at_peak=branch,
        unit="GiB" if peak >= 2**30 else "MiB",
        component_shares={name: float(Fraction(value) / total) if total else 0.0
                          for name, value in components.items()},
        usable_share=None if usable is None else float(Fraction(peak) / usable),
    )
    numbers = {"moment": _moment(entry["labels"], moments, peak), "total": total, "peak": peak,
               "components": components}
    return answer, numbers


def _moments(entry: dict[str, Any], given: list[int]) -> list[int | Fraction]:
    """Return every component's and moment's bytes: the coefficients times the terms."""
    at = [compiled_function(term)(*given) for term in entry["terms"]]
    rows = [[Fraction(c) if isinstance(c, str) else c for c in row] for row in entry["rows"]]
    return [sum(c * t for c, t in zip(row, at, strict=True)) for row in rows]


def _moment(labels: list[str], moments: list[int | Fraction], peak: int | Fraction) -> str | None:
    """Return the first moment at the peak (as ``Footprint.peak_moment``); None without any."""
    return next((label for label, value in zip(labels, moments, strict=True) if value == peak),
                None)


def _largest(
    peak_at: Callable[..., int], names: list[str], symbol: str, values: dict[str, int],
    usable: int, stop: int | None,
) -> int | None:
    """Return the largest ``symbol`` whose peak fits, as the derived path's search finds it."""
    def peak(v: int) -> int:
        sizes = {**values, symbol: v}
        return int(peak_at(*(sizes[name] for name in names)))

    if set(names) != {*values, symbol}:
        return None
    return largest_fitting(peak, usable, stop)


def _branch(entry: dict[str, Any], given: list[int]) -> str | None:
    """Return the formula's moment that peaks at these sizes, as printed; None if not kept."""
    leaves = compiled_function(entry["leaves"])(*given)
    return entry["branches"].get(",".join(map(str, chosen_leaves(entry["tree"], leaves))))


def chosen_leaves(tree: Any, leaves: Sequence[int | Fraction]) -> list[int]:
    """Return the leaves of ``tree`` that its moment peaking at ``leaves``' values is made of.

    ``tree`` is a formula's maxima as nested lists (``["max", [...]]``, ``["add", [...]]``,
    ``["mul", [...]]``) over leaf indices; each maximum keeps its first argument at the
    largest value, as :attr:`~memtheory.estimate.answer.Estimate.formula_at_peak` does.

    Examples
    --------
    >>> chosen_leaves(["add", [0, ["max", [1, 2, 3]]]], [5, 7, 9, 9])
    [0, 2]
    """
    return _peaked(tree, leaves)[1]


def leaf_chooser(tree: Any) -> Callable[[Sequence[int | Fraction]], list[int]]:
    """Return :func:`chosen_leaves` of ``tree`` compiled once, for many sizes.

    Every node's value is computed by straight-line code written once (``n3 = max(v[0],
    n2)``); then the moment is read from the root down, into the first argument at the
    largest value of each maximum. A replay entry asks a ZeRO-3 step's tree (115 maxima)
    at 169 sizes: 40 ms node by node, about a fifth of that compiled.

    Examples
    --------
    >>> tree = ["add", [0, ["max", [1, ["mul", [2, 3]], 4]]]]
    >>> choose = leaf_chooser(tree)
    >>> choose([5, 7, 3, 3, 9]), chosen_leaves(tree, [5, 7, 3, 3, 9])
    ([0, 2, 3], [0, 2, 3])
    """
    places: dict[int, int] = {}
    lines: list[str] = []

    def written(node: Any) -> str:
        if isinstance(node, int):
            return f"v[{node}]"
        kind, children = node
        parts = [written(child) for child in children]
        value = {"max": f"max({', '.join(parts)})" if len(parts) > 1 else parts[0],
                 "add": " + ".join(parts), "mul": " * ".join(parts)}[kind]
        places[id(node)] = len(lines)
        lines.append(f"    n{len(lines)} = {value}")
        return f"n{len(lines) - 1}"

    written(tree)
    source = "def values(v):\n" + "\n".join(lines) + (
        f"\n    return ({', '.join(f'n{i}' for i in range(len(lines)))},)\n" if lines else
        "\n    return ()\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, "<replay tree>", "exec"), namespace)  # noqa: S102 - code written here
    values_of = namespace["values"]

    def choose(leaves: Sequence[int | Fraction]) -> list[int]:
        computed = values_of(leaves)
        chosen: list[int] = []

        def value(node: Any) -> int | Fraction:
            return leaves[node] if isinstance(node, int) else computed[places[id(node)]]

        def descend(node: Any) -> None:
            if isinstance(node, int):
                chosen.append(node)
                return
            kind, children = node
            if kind == "max":  # the first argument at the largest value, as max() picks it
                largest = value(node)
                descend(next(child for child in children if value(child) == largest))
            else:
                for child in children:
                    descend(child)

        descend(tree)
        return chosen

    return choose


def _peaked(node: Any, leaves: Sequence[int | Fraction]) -> tuple[int | Fraction, list[int]]:
    """Return the value of ``node`` and the leaves its peaking moment is made of (one pass)."""
    if isinstance(node, int):
        return leaves[node], [node]
    kind, children = node
    found = [_peaked(child, leaves) for child in children]
    if kind == "max":  # the first argument at the largest value, as max() picks it
        return max(found, key=lambda pair: pair[0])
    values = [value for value, _ in found]
    chosen = [leaf for _, part in found for leaf in part]
    return (sum(values) if kind == "add" else math.prod(values)), chosen


def round_half_up(value: Fraction, digits: int) -> Decimal:
    """Round exactly, halves away from zero (:func:`memtheory.units.round_half_up`, no sympy)."""
    exact = value * 10**digits
    magnitude = math.floor(abs(exact) + Fraction(1, 2))
    signed = magnitude if exact >= 0 else -magnitude
    return Decimal(f"{signed}E-{digits}") if digits > 0 else Decimal(signed)


def format_bytes(nbytes: int | Fraction, unit: str) -> str:
    """Format bytes in GiB, MiB or GB with two decimals (:func:`memtheory.units.format_bytes`)."""
    return f"{round_half_up(Fraction(nbytes) / _UNITS[unit], 2):f} {unit}"


def _table(answer: dict[str, Any], replay: dict[str, Any], unit: str) -> Table:
    """Return the component table :meth:`~memtheory.footprint.Footprint.table` prints."""
    total = replay["total"]
    rows = [
        (answer["component_titles"][name],
         str(round_half_up(Fraction(value) / _UNITS[unit], 2)),
         f"{round_half_up(Fraction(100 * value) / total, 1)}%" if total else "-")
        for name, value in replay["components"].items()
    ]
    footer = [("total", str(round_half_up(Fraction(total) / _UNITS[unit], 2)), "100%")]
    if replay["moment"] is not None:
        footer.append((f"peak live ({replay['moment']})",
                       str(round_half_up(Fraction(replay["peak"]) / _UNITS[unit], 2)), ""))
    columns = [Column("component"), Column(unit, align="right"), Column("share", "right")]
    return Table(columns, rows, footer=footer)


def report_text(entry: dict[str, Any], answer: dict[str, Any], numbers: dict[str, Any]) -> str:
    """Return the text :meth:`~memtheory.estimate.answer.Estimate.report` prints."""
    s, unit = answer["settings"], answer["unit"]
    total, peak = numbers["total"], numbers["peak"]
    sequence = entry["kind"] == "sequence"
    sizes = f"batch {s['batch']}" + (
        f", sequence {s['sequence']}" if sequence else f", image {s['image']}"
    )
    lines = [
        entry["title"],
        f"training step per device: {sizes}, {s['optimizer']}, {s['precision']}"
        + (f", {s['method']}" if s["method"] else "")
        + (f", {s['parallel']}" if s["parallel"] else ""),
        "",
        str(_table(answer, numbers, unit)),
        "",
        f"total {format_bytes(total, unit)} ({format_bytes(total, 'GB')}), "
        f"peak {format_bytes(peak, unit)} ({format_bytes(peak, 'GB')})",
    ]
    if entry["usable"] is not None:
        share = 100 * float(Fraction(peak) / entry["usable"])
        verdict = "fits" if answer["fits"] else "does NOT fit"
        lines.append(f"{entry['budget']}: {verdict} ({share:.0f}% of usable)")
        where = f"sequence {s['sequence']}" if sequence else f"image {s['image']}"
        lines.append(f"largest batch at {where}: {_limit(answer['max_batch'])}")
        if sequence:
            cap = f" (model limit {entry['positions']})" if entry["positions"] else ""
            lines.append(
                f"largest sequence at batch {s['batch']}: {_limit(answer['max_sequence'])}{cap}"
            )
    if answer.get("gpu_search") is not None:
        lines.append(search_line(answer, sequence))
    lines += ["", entry["symbols"], f"  {answer['formula_at_peak']}"]
    if isinstance(entry["tree"], list):  # a maximum resolved: not the whole formula
        lines.append(
            "  (the moment of the step that peaks at these sizes; the peak is the largest of "
            "several moments, all in --json's formula)"
        )
    lines.append(f"convention: {answer['convention_why'] or answer['convention_title']}")
    lines += [f"assumed: {line}" for line in answer["assumptions"]]
    lines += [f"note: {note}" for note in answer["notes"]]
    return "\n".join(lines)


def search_line(answer: dict[str, Any], sequence: bool) -> str:
    """Return ``--gpus auto``'s line (:meth:`~memtheory.estimate.answer.Estimate.search_line`)."""
    s, found = answer["settings"], answer["gpu_search"]
    where = f"batch {s['batch']} per GPU" + (f", sequence {s['sequence']}" if sequence else "")
    gpus, rows = found["gpus"], found["tried"]
    tried = "; ".join(f"{row['gpus']}: {format_bytes(row['peak_bytes'], 'GiB')}"
                      for row in rows if gpus is None or row["gpus"] <= 2 * gpus)
    said = gpus if gpus is not None else f"none up to {rows[-1]['gpus'] if rows else 1}"
    return (
        f"fewest GPUs ({found['counts']}, ZeRO-{s['zero']}, {where}): {said} "
        f"(peak per GPU at each count tried: {tried})"
    )


def _limit(value: int | None) -> str:
    return "none fits" if value == 0 else str(value)


if __name__ == "__main__":  # pragma: no cover - python -m memtheory.estimate.replay ARGS
    status = replayed(sys.argv[1:])
    sys.exit(3 if status is None else status)
