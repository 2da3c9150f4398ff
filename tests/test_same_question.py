"""One question, one answer: every front door answers the fixed questions alike under one Setup.

Each question is asked of the Python API (``estimate``), the command line
(``memtheory estimate --json``, through ``main``) and, where the question is
one step on one card, of ``training_memory(setup=)`` with ``max_value``; the
peak bytes, the verdict and the largest batch must agree exactly. The book's
chapter 18 asserts its ZeRO-3 plan against ``estimate`` in a hidden cell, and
the calculator's bundle is compared in ``tests/test_calculator.py``. The book's
own answers to the fixed questions (the values its prose glues) are read by
running the chapters' cells (``tests.book.cells``) and compared with the same
``estimate`` and ``memtheory estimate --json``.
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
from memtheory.units import format_bytes
from memtheory.whatif import max_value
from tests.book.cells import glued_values

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


# (chapter, glued name, estimate's arguments, what of the answer the glue shows)
BOOK_ANSWERS = [
    ("06", "vgg_adam_24",
     ("vgg16", {"batch": 32, "optimizer": "adam", "setup": "pytorch-fp32", "gpu": "RTX 4090"}),
     lambda answer: answer.max_batch),
    ("06", "accumulation_fits",
     ("vgg16", {"batch": 32, "optimizer": "adam", "setup": "pytorch-fp32", "gpu": "RTX 4090"}),
     lambda answer: answer.max_batch),
    ("12", "recipe_textbook_batch",
     ("gpt2", {"batch": 8, "sequence": 1024, "gpu": "RTX 4090",
               "setup": Setup(precision="fp32", attention="eager", device="cpu")}),
     lambda answer: answer.max_batch),
    ("12", "recipe_trainer_batch",
     ("gpt2", {"batch": 8, "sequence": 1024, "setup": "hf-trainer", "gpu": "RTX 4090"}),
     lambda answer: answer.max_batch),
    ("12", "recipe_trainer_peak",
     ("gpt2", {"batch": 8, "sequence": 1024, "setup": "hf-trainer", "gpu": "RTX 4090"}),
     lambda answer: format_bytes(answer.peak, "GiB")),
    ("13", "ch13_usable_24",
     ("gpt2-xl", {"batch": 1, "sequence": 1024, "setup": "pytorch-amp", "gpu": "RTX 4090"}),
     lambda answer: format_bytes(usable_memory("RTX 4090",
                                               reserve=answer.settings["reserve_bytes"]).usable,
                                 "GiB")),
    ("18", "tp_zero3_gpus",
     ("llama-3-8b", {"sequence": 4096, "gpus": "auto", "zero": 3, "gpu": "H100-80GB"}),
     lambda answer: answer.settings["gpus"]),
    ("18", "tp_zero3_peak",
     ("llama-3-8b", {"sequence": 4096, "gpus": "auto", "zero": 3, "gpu": "H100-80GB"}),
     lambda answer: format_bytes(answer.peak, "GiB")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("chapter", "name", "question", "shown"), BOOK_ANSWERS,
                         ids=[f"ch{a[0]}-{a[1]}" for a in BOOK_ANSWERS])
def test_the_book_gives_the_estimate(chapter, name, question, shown):
    """A value a chapter's prose glues for a fixed question is ``estimate``'s answer to it."""
    model, keywords = question
    assert glued_values(chapter)[name] == shown(estimate(model, **keywords))


@pytest.mark.slow
def test_the_book_and_the_command_line_agree_on_vgg16(capsys):
    """Chapter 6's VGG-16/Adam/24 GB batch is what ``memtheory estimate --json`` prints."""
    assert main(["estimate", "vgg16", "--batch", "32", "--optimizer", "adam", "--gpu",
                 "RTX 4090", "--recipe", "pytorch-fp32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert glued_values("06")["vgg_adam_24"] == data["max_batch"]


@pytest.mark.slow
def test_gpt2_xl_on_a_24_gb_card_gets_one_answer(capsys):
    """GPT-2 xl's model states exceed a 24 GB card's budget in chapter 13, the API and the CLI."""
    glued = glued_values("13")
    budget = usable_memory("RTX 4090").usable
    assert glued["ch13_usable_24"] == format_bytes(budget, "GiB")
    answer = estimate("gpt2-xl", batch=1, sequence=1024, optimizer="adam", gpu="RTX 4090",
                      setup="pytorch-amp")
    assert main(["estimate", "gpt2-xl", "--batch", "1", "--seq", "1024", "--optimizer", "adam",
                 "--gpu", "RTX 4090", "--recipe", "pytorch-amp", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert not answer.fits and not data["fits"] and data["max_batch"] == answer.max_batch == 0
