"""``benchmarks/recipes.py``'s quick path: its table holds the recipes to 0 B and the peers right.

The benchmark runs in-process (loaded from its file, as ``make bench`` runs
it) at its ``--quick`` size: the recipes' tiny Llama, every recipe that runs
on one CPU. The predicted and tracked columns must be equal (the recipe tests
hold these steps to 0 bytes: ``test_recipe_steps.py``, ``test_trainer_recipe.py``,
``test_lightning_recipe.py``), and every peer column must be its formula at a
parameter count computed here from the configuration, not read from the
benchmark. No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
pytest.importorskip("transformers", reason="needs Hugging Face transformers")
pytest.importorskip("lightning.pytorch", reason="needs PyTorch Lightning (the 'torch' extra)")

from memtheory.recipes import RECIPES, REFUSED_RECIPES  # noqa: E402
from memtheory.torch.recipe_steps import CPU_RECIPES, TINY_LLAMA  # noqa: E402
from memtheory.validation.peers import accelerate_peak, deepspeed_zero3  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "recipes_benchmark", ROOT / "benchmarks" / "recipes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def benchmark():
    """The benchmark module and its quick rows (one model, one size, every CPU recipe)."""
    module = _benchmark()
    return module, module.recipe_rows(quick=True)


def _llama_counts() -> tuple[int, int]:
    """TINY_LLAMA's parameters and its largest single module, from the config's shapes.

    Embedding and (untied) output head V x H each; per layer q and o H x H,
    k and v H x (kv_heads * head_dim), gate, up and down H x I, two RMSNorm
    weights H; a final norm H. The largest module is the embedding or the head.
    """
    c = TINY_LLAMA
    hidden, vocabulary = c["hidden_size"], c["vocab_size"]
    head_dim = hidden // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * head_dim
    assert c["tie_word_embeddings"] is False
    layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * c["intermediate_size"] + 2 * hidden
    total = 2 * vocabulary * hidden + c["num_hidden_layers"] * layer + hidden
    return total, vocabulary * hidden


@pytest.mark.slow  # a Trainer and a Lightning fit on CPU: about 10-20 s on the shared machine
def test_quick_rows_are_every_cpu_recipe_on_the_tiny_llama_0_bytes_off(benchmark):
    """One row per CPU recipe, each predicted to the byte of its tracked real step."""
    _, rows = benchmark
    assert [r.recipe for r in rows] == list(CPU_RECIPES)
    assert {(r.family, r.batch, r.sequence) for r in rows} == {("llama", 2, 8)}
    for row in rows:
        assert row.tracked > 0
        assert row.predicted == row.tracked, (row.recipe, row.moment)
        assert row.off == 0 and row.verdict == "0 B off"


@pytest.mark.slow
def test_the_peer_columns_are_their_formulas_at_the_models_counts(benchmark):
    """16 and 18 B/param, accelerate and DeepSpeed ZeRO-3 at P and L computed from the config.

    accelerate's Adam peak is 16P for float32 weights and 8P for bfloat16
    (``estimate_training_usage``: the step stage, 4x and 2x the fp32 size 4P);
    the Trainer keeps the bf16 checkpoint, the other recipes train fp32 weights.
    """
    _, rows = benchmark
    parameters, largest = _llama_counts()
    for row in rows:
        assert (row.parameters, row.largest_layer) == (parameters, largest)
        assert row.per_parameter_16 == 16 * parameters
        assert row.per_parameter_18 == 18 * parameters
        weights = "bfloat16" if row.recipe == "hf-trainer" else "float32"
        assert row.accelerate_dtype == weights
        assert row.accelerate == {"float32": 16, "bfloat16": 8}[weights] * parameters
        assert row.accelerate == accelerate_peak(parameters, weights)
        assert row.deepspeed_zero3 == 4 * largest + 18 * parameters
        assert row.deepspeed_zero3 == deepspeed_zero3(parameters, largest)[0]


@pytest.mark.slow
def test_the_table_and_json_show_the_same_rows(benchmark):
    """The printed table has each row's bytes; the JSON carries off and verdict per row."""
    module, rows = benchmark
    shown = str(module.table(rows))
    for row in rows:
        assert f"{row.tracked:,}" in shown and row.recipe in shown
    data = json.loads(module.as_json(rows, {}))
    assert [(d["recipe"], d["predicted"], d["tracked"], d["off"]) for d in data["rows"]] == [
        (r.recipe, r.predicted, r.tracked, r.off) for r in rows]
    assert len(module.verdict_lines(rows)) == len(rows)


def test_every_recipe_not_run_on_cpu_is_named_with_its_reason():
    """Each catalog recipe outside CPU_RECIPES, and each refused stack, is listed with why."""
    module = _benchmark()
    reasons = module.not_on_cpu()
    off_cpu = set(RECIPES) - set(CPU_RECIPES) - set(module.LIBRARY_RECIPES)
    assert set(reasons) == off_cpu | set(REFUSED_RECIPES)
    for name in off_cpu:
        assert "cannot run here" in reasons[name]
    assert "bitsandbytes" in reasons["qlora"] and "several devices" in reasons["fsdp2-bf16"]
    assert "CUDA" in reasons["qlora"]  # bitsandbytes' 4-bit kernels need a GPU


def test_a_row_off_names_its_difference(monkeypatch):
    """A row that is not 0 B off says by how much and which side, with its recipe's reason."""
    module = _benchmark()
    assert "peft-lora" not in module.NAMED_DIFFERENCES  # 0 B off: test_peft_recipe.py
    monkeypatch.setitem(module.NAMED_DIFFERENCES, "peft-lora", "a named difference")
    fields = dict(model="m", family="llama", batch=1, sequence=2, recipe="peft-lora", runner="x",
                  precision="fp32", implementation="for-loop", parameters=1, largest_layer=1,
                  moment="", accelerate=16, accelerate_dtype="float32", deepspeed_zero3=22,
                  per_parameter_16=16, per_parameter_18=18, cpu_s=0.0, wall_s=0.0)
    under = module.Row(predicted=1000, tracked=1234, **fields)
    assert under.off == -234
    assert under.verdict == "234 B under: a named difference"
    unknown = module.Row(predicted=10, tracked=4, **{**fields, "recipe": "pytorch-fp32"})
    assert unknown.verdict == "6 B over: not named"
