"""One question, one answer: every front door answers the fixed questions alike under one Setup.

Each question is asked of the Python API (``estimate``), the command line
(``memtheory estimate --json``, through ``main``) and, where the question is
one step on one card, of ``training_memory(setup=)`` with ``max_value``; the
peak bytes, the verdict and the largest batch must agree exactly. The book's
chapter 18 asserts its ZeRO-3 plan against ``estimate`` in a hidden cell, and
the calculator's bundle is compared in ``tests/test_calculator.py``.
"""

from __future__ import annotations

import json

import pytest

from memtheory import training_memory
from memtheory.cli import main
from memtheory.estimate import estimate, resolve_model
from memtheory.gpus import usable_memory
from memtheory.recipes import Setup
from memtheory.symbols import B, S
from memtheory.whatif import max_value

QUESTIONS = [
    # (name, model, API keywords, CLI arguments)
    ("VGG-16, Adam, 24 GB card", "vgg16",
     {"batch": 32, "optimizer": "adam", "gpu": "RTX 4090"},
     ["--batch", "32", "--optimizer", "adam", "--gpu", "RTX 4090"]),
    ("GPT-2 small, batch 8, sequence 1024", "gpt2",
     {"batch": 8, "sequence": 1024, "gpu": "RTX 4090"},
     ["--batch", "8", "--seq", "1024", "--gpu", "RTX 4090"]),
    ("Llama-3-8B LoRA on a 4090", "llama-3-8b",
     {"sequence": 4096, "lora": 16, "gpu": "RTX 4090"},
     ["--seq", "4096", "--lora", "16", "--gpu", "RTX 4090"]),
    ("Llama-3-8B ZeRO-3, fewest H100s", "llama-3-8b",
     {"sequence": 4096, "gpus": "auto", "zero": 3, "gpu": "H100-80GB"},
     ["--seq", "4096", "--gpus", "auto", "--zero", "3", "--gpu", "H100-80GB"]),
    ("Mixtral-8x7B QLoRA on 80 GB", "mixtral-8x7b",
     {"sequence": 2048, "qlora": True, "gpu": "A100-80GB"},
     ["--seq", "2048", "--qlora", "--gpu", "A100-80GB"]),
]
RECIPES = ["auto", "pytorch-amp", "hf-trainer"]


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize(("name", "model", "keywords", "argv"), QUESTIONS,
                         ids=[q[0] for q in QUESTIONS])
def test_api_and_command_line_agree(capsys, name, model, keywords, argv, recipe):
    """The API and ``--json`` give the same recipe, peak, verdict, limits and device count."""
    answer = estimate(model, setup=None if recipe == "auto" else recipe, **keywords)
    assert main(["estimate", model, *argv, "--recipe", recipe, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["recipe"] == answer.settings["recipe"]
    assert data["peak_bytes"] == int(answer.peak)
    assert (data["fits"], data["max_batch"], data["max_sequence"]) == (
        answer.fits, answer.max_batch, answer.max_sequence)
    assert data["settings"]["gpus"] == answer.settings["gpus"]


@pytest.mark.parametrize("recipe", ["pytorch-amp", "pytorch-fp32", "hf-trainer"])
@pytest.mark.parametrize(("model", "sizes"), [("vgg16", {"H": 224}), ("gpt2", {"S": 1024})])
def test_the_library_gives_the_estimate_for_one_card(model, sizes, recipe):
    """training_memory(setup=) on the resolved model, and max_value, are estimate's numbers.

    ``hf-trainer`` keeps the checkpoint's dtype; both checkpoints are fp32, so
    the library is told the precision the recipe comes to for them.
    """
    setup = Setup.recipe(recipe)
    resolved = resolve_model(model, batch=B, sequence=S, flash=setup.flash)
    memory = training_memory(resolved.network, setup=setup,
                             precision=setup.precision_for(resolved.dtype))
    batch = 4
    keywords = {"image": 224} if "H" in sizes else {"sequence": sizes["S"]}
    answer = estimate(model, batch=batch, setup=setup, gpu="RTX 4090", **keywords)
    others = {k: v for k, v in sizes.items() if k != "H"}
    assert memory.evaluate(B=batch, **others).peak == answer.peak
    usable = usable_memory("RTX 4090", reserve=setup.reserve_bytes).usable
    assert max_value(memory, "B", usable, by="peak", **others) == answer.max_batch
