"""LoRA's default targets per model family, as peft 0.21 chooses them, through every front door."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from memtheory.cli import main
from memtheory.errors import UnsupportedError
from memtheory.estimate import estimate
from memtheory.estimate.resolve import resolve_model
from memtheory.finetuning import (
    PEFT_DEFAULT_TARGETS,
    PEFT_STAND_INS,
    default_targets,
    linear_maps,
    match_targets,
)

TINY = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "max_position_embeddings": 128}
FALCON = {"model_type": "falcon", **TINY}
LLAMA = {"model_type": "llama", **TINY, "intermediate_size": 40, "num_key_value_heads": 2}
PHI3 = {**LLAMA, "model_type": "phi3", "pad_token_id": 0}


def _network(config):
    """The network memtheory builds for ``config``."""
    return resolve_model(config, batch=1, sequence=8).network


def _peft_mapping() -> dict:
    """Peft's own LoRA mapping, read from its installed utils/constants.py (not imported)."""
    spec = importlib.util.find_spec("peft")
    if spec is None or spec.origin is None:
        pytest.skip("peft is an optional extra")
    source = (Path(spec.origin).parent / "utils" / "constants.py").read_text()
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"
            for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("peft's constants.py has no LoRA target mapping")


def test_the_table_is_peft_s_own():
    """PEFT_DEFAULT_TARGETS is peft's mapping, entry by entry (its one regex entry left out)."""
    theirs = _peft_mapping()
    lists = {k: tuple(v) for k, v in theirs.items() if not isinstance(v, str)}
    assert PEFT_DEFAULT_TARGETS == lists
    assert set(theirs) - set(lists) == {"gemma4"}


def test_falcon_adapts_its_fused_query_key_value_projection():
    """Falcon's default is the one fused projection per layer, which memtheory names alike."""
    network = _network(FALCON)
    targets, source = default_targets(network, "falcon")
    assert targets == PEFT_DEFAULT_TARGETS["falcon"]
    assert "peft 0.21" in source
    names = match_targets(network, targets)
    assert len(names) == TINY["num_hidden_layers"]
    assert all(name.endswith(".query_key_value") for name in names)


def test_estimate_on_falcon_uses_and_prints_peft_s_default(capsys):
    """The CLI answers Falcon LoRA (it refused on q_proj) and prints the targets and source."""
    answer = estimate(FALCON, sequence=8, lora=4)
    hidden, heads = TINY["hidden_size"], TINY["num_attention_heads"]
    qkv = hidden + 2 * hidden // heads  # multi-query: all query heads, one key and value head
    assert answer.settings["trainable"] == TINY["num_hidden_layers"] * 4 * (hidden + qkv)
    assert any(line.startswith("LoRA targets query_key_value: peft 0.21")
               for line in answer.assumptions)
    assert main(["estimate", "llama-3.2-1b", "--lora", "4", "--seq", "64"]) == 0
    shown = capsys.readouterr().out
    assert "LoRA r=4 on q_proj, v_proj" in shown and "peft 0.21's default for llama" in shown


def test_asked_targets_win_over_the_default():
    """--lora-targets is taken as given; QLoRA keeps all-linear."""
    asked = estimate(FALCON, sequence=8, lora=4, lora_targets="dense_h_to_4h")
    assert not any(line.startswith("LoRA targets") for line in asked.assumptions)
    maps = linear_maps(_network(FALCON))
    width = [v for k, v in maps.items() if k.endswith("dense_h_to_4h")]
    assert asked.settings["trainable"] == sum(4 * (int(a) + int(b)) for a, b in width)


def test_gpt2_s_c_attn_stands_in_as_query_and_value_with_the_same_trainable_count():
    """Peft's c_attn (one r x h, 3h x r adapter) is modelled as q_proj + v_proj, said so."""
    answer = estimate("gpt2", sequence=64, lora=8)
    hidden, layers = 768, 12  # GPT-2 small (openai-community/gpt2 config.json)
    peft_count = layers * 8 * (hidden + 3 * hidden)
    assert answer.settings["trainable"] == peft_count
    line = next(line for line in answer.assumptions if line.startswith("LoRA targets"))
    assert "c_attn" in line and line.startswith("LoRA targets q_proj, v_proj")
    assert PEFT_STAND_INS["c_attn"][0] == ("q_proj", "v_proj")


def test_a_family_peft_has_no_default_for_is_refused_naming_the_fix():
    """Peft raises for phi3 without target_modules; memtheory says so and how to name them."""
    assert "phi3" not in PEFT_DEFAULT_TARGETS
    with pytest.raises(UnsupportedError, match="no default LoRA target_modules.*--lora-targets"):
        estimate(PHI3, sequence=8, lora=4)
    asked = estimate(PHI3, sequence=8, lora=4, lora_targets="all-linear")
    assert asked.settings["trainable"] > 0


def test_a_default_naming_no_map_is_refused_with_the_maps_that_exist():
    """A default that matches nothing and has no stand-in names the model's linear maps."""
    network = _network(LLAMA)
    table = dict(PEFT_DEFAULT_TARGETS)
    try:
        PEFT_DEFAULT_TARGETS["llama"] = ("Wqkv",)
        with pytest.raises(UnsupportedError, match="'Wqkv'.*q_proj"):
            default_targets(network, "llama")
    finally:
        PEFT_DEFAULT_TARGETS.clear()
        PEFT_DEFAULT_TARGETS.update(table)


def test_without_a_family_the_lora_paper_s_choice():
    """A builder or traced module has no model_type: the query and value projections."""
    targets, source = default_targets(_network(LLAMA), None)
    assert targets == ("q_proj", "v_proj") and "LoRA paper" in source
