"""Write a derived answer down as plain data, for :mod:`~memtheory.estimate.replay` to print again.

:func:`replay_entry` takes an :class:`~memtheory.estimate.answer.Estimate` just
derived (sympy is loaded then) and returns what
:func:`~memtheory.estimate.replay.replayed` needs to print the same answer at
any batch and sequence without sympy: the step's coefficient tables
(:class:`~memtheory.estimate.compiled.CompiledFootprint`'s), its terms, peak
and the formula's branches as integer-arithmetic Python source, the formula
printed once for each branch that peaks somewhere on a grid of sizes, and the
answer's text that does not depend on the sizes. For a ``--gpus auto`` answer
it writes that entry for the device count found, beside the peak per device of
every data-parallel size the search tried (integer code in the sizes), so that
the replay searches again. It returns None for an answer
whose structure may change with the sizes (see the replay module), and for one
whose entry, replayed at the answer's own sizes, does not print the same text
and JSON (nothing is kept that would answer differently).

Examples
--------
>>> from memtheory.estimate import estimate
>>> answer = estimate("mobilenet-v2", batch=8, gpu="T4")
>>> entry = replay_entry(answer, check=False, asked_json=False, printed=answer.report())
>>> entry["names"], str(answer.formula_at_peak) in entry["branches"].values()
(['B'], True)
>>> replay_entry(estimate("gpt2", gpu="T4"), check=False, asked_json=False, printed="") is None
True
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import sympy as sp

from memtheory.errors import EvaluationError
from memtheory.estimate import replay
from memtheory.estimate.answer import Estimate
from memtheory.estimate.compiled import UNSORTED, CompiledFootprint, position_limit
from memtheory.estimate.devices import MOST_GPUS
from memtheory.evaluation.formula_text import formula_text
from memtheory.evaluation.integer_code import ExactPythonPrinter, polynomial_code
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.techniques.parallel import ParallelMemory

__all__ = ["replay_entry"]

GRID_BATCHES = tuple(2**k for k in range(12))
"""Batches at which the formula's branches are printed (and the answer's own)."""

GRID_SEQUENCES = tuple(2**k for k in range(18))
"""Sequences at which the formula's branches are printed (up to the model's positions)."""


class _UnsupportedError(Exception):
    """The answer cannot be replayed: its entry is not written."""


def replay_entry(
    answer: Estimate, *, check: bool, asked_json: bool, printed: str
) -> dict[str, Any] | None:
    """Return ``answer`` as a replay entry, or None where it cannot be replayed exactly.

    Parameters
    ----------
    answer : Estimate
        Just derived, with its compiled step (:attr:`Estimate.compiled`).
    check : bool
        Whether ``--check`` was asked (the exit status is the verdict).
    asked_json : bool
        Whether the answer was printed as JSON.
    printed : str
        What was printed, compared with the entry replayed at the same sizes.
    """
    try:
        if answer.search is None:
            entry = _entry(answer, check=check, asked_json=asked_json)
        else:
            entry = _searched(answer, check=check, asked_json=asked_json)
    except (_UnsupportedError, EvaluationError, TypeError, ValueError):
        return None
    sizes = {"batch": answer.settings["batch"]}
    if answer.model.kind == "sequence":
        sizes["seq"] = answer.settings["sequence"]
    replayed = replay.answered_at(entry, sizes)
    if replayed is None:
        return None
    again, numbers, kept = replayed
    if again.get("gpu_search") != answer.to_dict()["gpu_search"]:
        return None  # every count tried, not only those printed, as the derived search tried
    text = json.dumps(again, indent=2) if asked_json else replay.report_text(kept, again, numbers)
    return entry if text == printed else None


def _searched(answer: Estimate, *, check: bool, asked_json: bool) -> dict[str, Any]:
    """Return the entry of a ``--gpus auto`` answer: each count's peak, the count found's answer."""
    search = answer.search
    s = answer.settings
    group = s["tensor"] * s["pipeline"]
    if search is None or search.gpus not in (s["data"] * group, None) or (
        search.gpus is None and s["data"] != 1
    ):
        raise _UnsupportedError  # the answer is at the count found, or on one replica (none)
    found = _entry(answer, check=check, asked_json=asked_json, searched=True)
    peaks = {}
    for data, split in search.splits:
        compiled = _checked(split, answer)
        if compiled.names != found["names"] or compiled.peak_source is None:
            raise _UnsupportedError
        peaks[str(data)] = compiled.peak_source
    return {
        "format": replay.FORMAT,
        "search": {
            "names": found["names"], "usable": found["usable"], "group": group,
            "most": MOST_GPUS // group, "every": search.counts == "any",
            "whole": s["zero"] == 0 and s["offload"] == "none", "counts": search.counts,
            "peaks": peaks,
        },
        "answers": {str(s["data"]): found},
    }


def _checked(compiled: Any, answer: Estimate) -> Any:
    """Return ``compiled``, compiled again where only the model's position limit kept it slow."""
    positions = answer.model.positions
    if isinstance(compiled, CompiledFootprint) and not compiled.fast and positions is not None:
        # the model's position limit (GPT-2's, BERT's) is checked by the replay: S <= positions
        compiled = CompiledFootprint(
            compiled.footprint,
            checked=position_limit(positions),
        )
    if not isinstance(compiled, CompiledFootprint) or not compiled.fast:
        raise _UnsupportedError
    return compiled


def _entry(
    answer: Estimate, *, check: bool, asked_json: bool, searched: bool = False
) -> dict[str, Any]:
    """Return the entry of one answer at its device count (``searched``: found by the search)."""
    if answer.compiled is None or answer.compiled.footprint is not answer.symbolic:
        raise _UnsupportedError
    compiled = _checked(answer.compiled, answer)
    s = answer.settings
    if (
        not isinstance(answer.symbolic, MemoryBreakdown | ParallelMemory)
        or getattr(answer.symbolic, "host", None) is not None or answer.host is not None
        or (answer.search is not None) != searched or s["checkpointing"]
        or s["activation_offload"] or s["context_parallel"] != 1
    ):
        raise _UnsupportedError
    names = ["B", "S"] if answer.model.kind == "sequence" else ["B"]
    usable = None if answer.budget is None else sp.sympify(answer.budget.usable)
    if compiled.names != names or (usable is not None and not usable.is_Integer):
        raise _UnsupportedError
    formula = sp.sympify(answer.formula)
    if not {x.name for x in formula.free_symbols} <= set(names):
        raise _UnsupportedError
    tables = compiled.coefficient_tables  # a split's: every stage's; one device is the first's
    if not tables or compiled.peak_source is None:
        raise _UnsupportedError
    sources, rows, memory = tables[0][1:]
    leaves: list[sp.Expr] = []
    tree = _tree(formula, leaves)
    entry: dict[str, Any] = {
        "format": replay.FORMAT,
        "names": names,
        "kind": answer.model.kind,
        "positions": answer.model.positions,
        "default_sequence": _default_sequence(answer),
        "terms": sources,
        "rows": [[_plain(c) for c in row] for row in rows],
        "components": list(memory.components),
        "labels": list(memory.timeline),
        "peak": compiled.peak_source,
        "leaves": _source(leaves, names),
        "tree": tree,
        "branches": {},
        "usable": None if usable is None else int(usable),
        "budget": None if answer.budget is None else answer.budget.describe(),
        "title": f"{answer.model.name}: {s['parameters']:,} parameters, "
        f"{s['trainable']:,} trainable",
        "symbols": _symbols_line(answer),
        "answer": answer.to_dict(),
        "check": check,
        "json": asked_json,
    }
    entry["branches"] = _branches(entry, answer, leaves)
    return json.loads(json.dumps(entry))  # plain data only (a tuple is a list, as read back)


def _default_sequence(answer: Estimate) -> int | None:
    """Return the sequence asked without ``--seq`` (:func:`~memtheory.estimate.estimate`'s)."""
    if answer.model.kind != "sequence":
        return None
    return min(512, answer.model.positions or 512)


def _symbols_line(answer: Estimate) -> str:
    symbols = ", ".join(answer.symbol_names)
    return f"peak per device in bytes ({symbols or 'no symbols'}; B = batch, S = sequence):"


def _tree(expression: sp.Expr, leaves: list[sp.Expr]) -> Any:
    """Return the formula's maxima as nested lists, the expressions without one as leaf indices."""
    if isinstance(expression, sp.Max):
        return ["max", [_tree(arg, leaves) for arg in expression.args]]
    if not expression.has(sp.Max):
        leaves.append(expression)
        return len(leaves) - 1
    if isinstance(expression, sp.Add):
        return ["add", [_tree(arg, leaves) for arg in expression.args]]
    if isinstance(expression, sp.Mul):
        return ["mul", [_tree(arg, leaves) for arg in expression.args]]
    raise _UnsupportedError


def _branches(entry: dict[str, Any], answer: Estimate, leaves: list[sp.Expr]) -> dict[str, str]:
    """Return the formula printed for each choice of branches that peaks on the grid.

    The answer's own is :attr:`~memtheory.estimate.answer.Estimate.formula_at_peak`;
    the others are rebuilt from their leaves as it rebuilds them (each maximum
    replaced by its argument), which the entry's check at the answer's sizes confirms.
    """
    values_at = replay.compiled_function(entry["leaves"])
    choose = replay.leaf_chooser(entry["tree"])
    points = {(answer.settings["batch"], answer.settings["sequence"])}
    positions = answer.model.positions
    sequences = [s for s in GRID_SEQUENCES if positions is None or s <= positions]
    points |= {(b, s) for b in GRID_BATCHES for s in sequences}
    own = _key(entry, answer.settings["batch"], answer.settings["sequence"], values_at, choose)
    branches = {own: answer.printed_formulas[1]}
    for batch, sequence in points:
        key = _key(entry, batch, sequence, values_at, choose)
        if key not in branches:
            chosen = iter(int(leaf) for leaf in key.split(","))
            branches[key] = formula_text(_rebuilt(entry["tree"], leaves, chosen))
    return branches


def _key(
    entry: dict[str, Any], batch: int, sequence: int | None, values_at: Any, choose: Any
) -> str:
    values = {"B": batch, "S": sequence}
    return ",".join(map(str, choose(values_at(*(values[n] for n in entry["names"])))))


def _rebuilt(node: Any, leaves: list[sp.Expr], chosen: Any) -> sp.Expr:
    """Return the moment made of the ``chosen`` leaves (in order), as ``_branch`` builds it."""
    if isinstance(node, int):
        if next(chosen) != node:
            raise _UnsupportedError  # the leaves were not chosen from this tree
        return leaves[node]
    kind, children = node
    if kind == "max":
        leaf = next(chosen)
        (child,) = [c for c in children if leaf in _leaves_of(c)]
        return _rebuilt(child, leaves, itertools.chain([leaf], chosen))
    parts = [_rebuilt(child, leaves, chosen) for child in children]
    return sp.Add(*parts) if kind == "add" else sp.Mul(*parts)


def _leaves_of(node: Any) -> set[int]:
    if isinstance(node, int):
        return {node}
    return set().union(*(_leaves_of(child) for child in node[1]))


def _source(expressions: list[sp.Expr], names: list[str]) -> str:
    """Return the source of a function of the sizes returning every expression (integer code)."""
    printer = ExactPythonPrinter(UNSORTED)
    done: dict[int, tuple[sp.Basic, str | None]] = {}
    codes = []
    for expression in map(sp.sympify, expressions):
        code = polynomial_code(expression, done)
        codes.append(printer.doprint(expression) if code is None else code)
    return f"lambda {', '.join(names)}: ({', '.join(codes)},)"


def _plain(coefficient: object) -> int | str:
    return coefficient if type(coefficient) is int else str(coefficient)
