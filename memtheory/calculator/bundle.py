"""Everything the calculator page needs, derived and compiled at build time (:func:`bundle`).

Per model and choice: the components, the total and the peak's candidates
compiled to exact JavaScript (:mod:`memtheory.calculator.js_printer`), each
model's floors and ceilings computed once (its atoms), and the source
calculator's two examples (:func:`source_examples`).

Examples
--------
>>> sorted(source_examples())
['bert', 'resnet', 'summary']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sympy as sp

from memtheory.calculator.choice_steps import assumptions, resolved_model, step
from memtheory.calculator.choices import (
    ATTENTIONS,
    CALCULATOR_MODELS,
    CONVENTIONS,
    NO_ATTENTION,
    OPTIMIZERS,
    RECIPES,
    attentions_of,
    calculator_model,
    choice_key,
)
from memtheory.calculator.js_printer import exact_js
from memtheory.calculator.peaks import nondecreasing_in_batch, peak_candidates
from memtheory.calculator.size_limits import batchnorm_counts, smallest_size
from memtheory.errors import UnsupportedError
from memtheory.footprint import COMPONENT_TITLES
from memtheory.gpus import GPUS
from memtheory.max_pruning import provably_nonnegative
from memtheory.recipes import Setup, default_recipe
from memtheory.worked_examples import memory_calculator

__all__ = ["bundle", "source_examples"]


class _Atoms:
    """The floors and ceilings of one model's formulas, each computed once as ``a[i]``."""

    def __init__(self) -> None:
        self.symbols: dict[sp.Expr, sp.Symbol] = {}
        self.code: list[str] = []

    def replace(self, expression: sp.Expr) -> sp.Expr:
        """``expression`` with every floor and ceiling replaced by its atom symbol."""
        expression = sp.sympify(expression)
        found = sorted(
            expression.atoms(sp.floor, sp.ceiling) - set(self.symbols), key=sp.count_ops
        )
        for atom in found:
            if atom in self.symbols:
                continue
            inner = atom.func(*(self.replace(arg) for arg in atom.args), evaluate=False)
            if not provably_nonnegative(atom):
                raise UnsupportedError(f"the calculator needs {atom} >= 0 to search the batch.")
            symbol = sp.Symbol(f"a[{len(self.code)}]", integer=True, nonnegative=True)
            self.code.append(exact_js(inner))
            self.symbols[atom] = symbol
        return expression.xreplace(self.symbols)


_LONGEST = 600
"""A peak formula longer than this many characters is not printed on the page (the page says
how many moments it is the largest of)."""


def _short_text(candidates: Iterable[sp.Expr]) -> str | None:
    """Return ``Max(candidates)`` printed, or None when longer than :data:`_LONGEST`.

    Printing a ``Max`` of a hundred long polynomials takes seconds and is
    thrown away: the candidates are printed one by one until they are too long.
    """
    found, length = [], 0
    for candidate in candidates:
        length += len(str(candidate))
        if length > _LONGEST:
            return None
        found.append(candidate)
    printed = str(sp.Max(*found, evaluate=False)) if len(found) > 1 else str(found[0])
    return printed if len(printed) <= _LONGEST else None


class _Table:
    """Strings kept once, referred to by index (formulas repeat across choices)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.items)
            self.items.append(text)
        return self.index[text]


def bundle(models: Iterable[str] | None = None) -> dict[str, Any]:
    """Derive everything the calculator page needs, as JSON-ready data with compiled formulas.

    Parameters
    ----------
    models : iterable of str, optional
        Keys of :data:`CALCULATOR_MODELS` (all by default).

    Returns
    -------
    dict
        ``models`` (per model: title, kind, size symbol and range, default
        batch, the name ``memtheory estimate`` takes and the recipe it takes by
        default (:func:`~memtheory.recipes.default_recipe`), the checkpoint's dtype,
        parameter count, ``atoms`` (its floors and ceilings, compiled),
        ``batchnorm`` (:func:`batchnorm_counts` as ``[code index, label's text
        index]``), ``min_size_batch1`` (the smallest size batch 1 can train
        at), and per :func:`choice_key`: ``components`` as ``[name, code
        index]``, ``total`` and ``peak`` (``[code index, moment label's text
        index]`` per candidate), the formulas as ``text`` indices, the
        precision used, ``assumed`` (text indices of :func:`assumptions`) and
        ``why`` (the convention in words)), ``code`` (JavaScript over
        :data:`RUNTIME`), ``text``, ``titles`` (component titles),
        ``optimizers``, ``recipes`` (label, attention and reserve in bytes
        per recipe), ``attentions``, ``conventions``, ``gpus`` (name, bytes,
        as stated) and ``examples`` (:func:`source_examples`).

    Examples
    --------
    >>> data = bundle(["stackexchange-cnn"])
    >>> choice = data["models"]["stackexchange-cnn"]["choices"]["adamw|pytorch-fp32|-|breakdown"]
    >>> [name for name, _code in choice["components"]][:2]
    ['parameters', 'gradients']
    """
    keys = list(models) if models is not None else list(CALCULATOR_MODELS)
    code, text = _Table(), _Table()
    out: dict[str, Any] = {}
    for key in keys:
        model = calculator_model(key)
        choices: dict[str, Any] = {}
        atoms = _Atoms()

        def compiled(expression: sp.Expr) -> int:
            return code.add(exact_js(atoms.replace(expression)))  # noqa: B023 (used at once)

        for optimizer in OPTIMIZERS:
            for recipe in RECIPES:
                for attention in attentions_of(model):
                    said = [text.add(line) for line in assumptions(key, optimizer, recipe,
                                                                   attention)]
                    for convention in CONVENTIONS:
                        found = step(key, optimizer, recipe, attention, convention)
                        memory = found.memory
                        candidates = peak_candidates(key, optimizer, recipe, attention,
                                                     convention)
                        for candidate, _ in candidates:
                            if not nondecreasing_in_batch(atoms.replace(candidate)):
                                raise UnsupportedError(
                                    f"{model.title}: a peak candidate may decrease as the batch "
                                    "grows, so the page's search for the largest batch would "
                                    f"not be exact: {candidate}"
                                )
                        peak_text = _short_text(c for c, _ in candidates)
                        choices[choice_key(optimizer, recipe, attention, convention)] = {
                            "components": [
                                [name, compiled(value)]
                                for name, value in memory.components.items()
                            ],
                            "total": compiled(memory.total),
                            "peak": [[compiled(c), text.add(moment)] for c, moment in candidates],
                            "total_text": text.add(str(memory.total)),
                            "peak_text": None if peak_text is None else text.add(peak_text),
                            "precision": found.precision,
                            "assumed": said,
                            "why": text.add(found.why),
                        }
        resolved = resolved_model(key, False)
        out[key] = {
            "title": model.title,
            "kind": model.kind,
            "symbol": model.size_symbol.name,
            "default_size": model.default_size,
            "min_size": smallest_size(key, batch=2),
            "min_size_batch1": smallest_size(key, batch=1),
            "max_size": model.max_size,
            "default_batch": model.default_batch,
            "note": model.note,
            "estimate_name": model.estimate_name,
            "recipe": default_recipe(kind=model.kind, lora=False, qlora=False),
            "dtype": resolved.dtype,
            "parameters": text.add(str(resolved.network.parameter_count)),
            "batchnorm": [[compiled(count), text.add(label)]
                          for count, label in batchnorm_counts(key)],
            "choices": choices,
            "atoms": atoms.code,
        }
    recipes = {}
    for name, label in RECIPES.items():
        chosen = Setup.recipe(name)
        recipes[name] = {"label": label, "attention": chosen.attention,
                         "reserve": int(chosen.reserve_bytes)}
    return {
        "models": out,
        "code": code.items,
        "text": text.items,
        "optimizers": OPTIMIZERS,
        "recipes": recipes,
        "attentions": ATTENTIONS,
        "conventions": CONVENTIONS,
        "titles": dict(COMPONENT_TITLES),
        "gpus": [[card.name, card.memory, card.stated] for card in GPUS.values()],
        "examples": source_examples(),
    }


def source_examples() -> dict[str, Any]:
    """Return the source calculator's two examples: the page's settings for each, and its slips.

    Each example names the choice that loads it on the page (the closest the
    page offers: the pytorch-amp recipe, ``torch.autocast`` in bf16, for the
    source's fp16 mixed precision, counted as a breakdown as the source
    counts) and lists the source's printed figures beside memtheory's exact
    value and the explanation, from :func:`memtheory.worked_examples.memory_calculator`.

    Examples
    --------
    >>> examples = source_examples()
    >>> examples["bert"]["settings"]["model"], examples["bert"]["settings"]["batch"]
    ('bert-base', 32)
    """
    example = memory_calculator()
    rows: dict[str, list[list[str]]] = {"bert": [], "resnet": []}
    for figure in example.figures:
        group = "bert" if figure.label.startswith("BERT") else "resnet"
        label = figure.label.split(": ", 1)[1]
        value = figure.memtheory_value
        rows[group].append([
            label,
            "" if figure.printed is None
            else f"{figure.printed} {figure.written_unit or figure.unit}",
            "" if value is None else f"{value} {figure.unit}",
            figure.explanation,
        ])
    return {
        "bert": {
            "title": "BERT-base, AdamW, batch 32, sequence 128",
            "source": example.inputs["BERT-base"],
            "settings": {"model": "bert-base", "optimizer": "adamw", "recipe": "pytorch-amp",
                         "attention": "sdpa", "convention": "breakdown",
                         "batch": 32, "size": 128},
            "slips": rows["bert"],
        },
        "resnet": {
            "title": "ResNet-50, Adam, batch 64, 224 x 224 images",
            "source": example.inputs["ResNet-50"],
            "settings": {"model": "resnet50", "optimizer": "adamw", "recipe": "pytorch-amp",
                         "attention": NO_ATTENTION, "convention": "breakdown",
                         "batch": 64, "size": 224},
            "slips": rows["resnet"],
        },
        "summary": example.summary,
    }
