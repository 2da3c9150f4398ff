"""Each recipe that runs on one CPU is 0 bytes off the real step it describes.

``check_recipe`` prepares transformers' ``LlamaForCausalLM`` as the recipe
does (the checkpoint's dtype or fp32 under ``torch.autocast``; the recipe's
attention kernel; ``torch.optim.AdamW`` for-loop, foreach or fused; a loop
that holds the logits or, as the Trainer and Lightning do, only the loss),
measures a steady-state step and predicts it under the recipe's Setup. The
sizes are not the ones the conventions were checked at.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.recipes import RECIPES, Setup  # noqa: E402
from memtheory.torch.recipe_steps import CPU_RECIPES, TINY_LLAMA, check_recipe  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize(("batch", "sequence"), [(2, 6), (3, 11)])
@pytest.mark.parametrize("checkpoint", ["bf16", "fp32"])
@pytest.mark.parametrize("recipe", CPU_RECIPES)
def test_recipe_step_is_exact(recipe, checkpoint, batch, sequence):
    """The recipe's predicted peak equals the measured one, to the byte."""
    check = check_recipe(recipe, TINY_LLAMA, batch=batch, sequence=sequence,
                         checkpoint_dtype=checkpoint)
    assert check.difference == 0, (check.predicted_moment, check.predicted_peak)


def test_each_recipe_runs_what_it_says():
    """The Trainer trains a bf16 checkpoint in bf16 with fused AdamW; the plain loop foreach."""
    trainer = check_recipe("hf-trainer", batch=2, sequence=5, checkpoint_dtype="bf16")
    assert trainer.precision == "bf16" and trainer.measured.implementation == "fused"
    plain = check_recipe("pytorch-amp", batch=2, sequence=5)
    assert plain.precision == "autocast-bf16" and plain.measured.implementation == "foreach"
    assert plain.measured.weight_copies > 0 and trainer.measured.weight_copies == 0


def test_eager_and_sdpa_differ_by_what_eager_keeps():
    """Eager attention keeps S x S tensors that SDPA does not: at 16 positions it costs more."""
    sdpa = check_recipe("pytorch-fp32", batch=2, sequence=16)
    eager = check_recipe(Setup.recipe("pytorch-fp32", attention="eager"), batch=2, sequence=16)
    assert eager.difference == 0 and sdpa.difference == 0
    assert eager.measured.peak > sdpa.measured.peak


@pytest.mark.parametrize("recipe", sorted(set(RECIPES) - set(CPU_RECIPES)))
def test_recipes_that_need_a_gpu_or_several_say_so(recipe):
    """4-bit, sharded and master-weight recipes are refused with the reason, never faked."""
    with pytest.raises(UnsupportedError, match="cannot run here"):
        check_recipe(recipe)


TRAINS_IN = {
    # (recipe, checkpoint dtype) -> the dtype its weights train in, from catalog.py's sources:
    # plain PyTorch and Lightning train fp32 weights (under autocast for amp and bf16-mixed);
    # the Trainer keeps a bf16 checkpoint's dtype and runs autocast over an fp32 one.
    ("pytorch-fp32", "bf16"): "float32", ("pytorch-fp32", "fp32"): "float32",
    ("pytorch-amp", "bf16"): "float32", ("pytorch-amp", "fp32"): "float32",
    ("hf-trainer", "bf16"): "bfloat16", ("hf-trainer", "fp32"): "float32",
    ("lightning-bf16", "bf16"): "float32", ("lightning-bf16", "fp32"): "float32",
}


@pytest.mark.parametrize(("recipe", "checkpoint"), list(TRAINS_IN))
def test_the_checked_step_is_measure_with_the_setup(recipe, checkpoint):
    """check_recipe measures measure(model, batch, setup=recipe)'s step, every field equal.

    The model is built here, not by the runner: transformers' Llama from the
    same configuration in the dtype the recipe trains in, and a batch of the
    same shape; its measurement with ``setup=`` alone (measure's default
    warm-up) is the runner's, byte for byte, so the runner adds no mapping
    of its own.
    """
    import dataclasses

    import torch
    import transformers

    from memtheory.torch import measure

    assert set(CPU_RECIPES) == {name for name, _ in TRAINS_IN}
    batch, sequence = 2, 7
    checked = check_recipe(recipe, TINY_LLAMA, batch=batch, sequence=sequence,
                           checkpoint_dtype=checkpoint).measured
    values = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    config = transformers.LlamaConfig(attn_implementation="sdpa", use_cache=False, **values)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.to(getattr(torch, TRAINS_IN[recipe, checkpoint])).train()
    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (batch, sequence))
    measured = measure(model, {"input_ids": ids, "labels": ids.clone()}, setup=recipe)

    def fields(m):
        return {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}

    assert fields(checked) == fields(measured)
    assert checked.setup == Setup.recipe(recipe)
