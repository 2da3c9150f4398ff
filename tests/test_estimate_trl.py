"""``memtheory estimate --recipe trl-dpo`` / ``trl-sft``: the step functions' answer, to the byte.

Every expected number is the step function's (:func:`memtheory.finetuning.dpo_step_memory`,
:func:`~memtheory.finetuning.sft_step_memory`) called directly with the same
arguments; the functions themselves are checked against the real TRL trainers
in ``tests/pytorch/test_dpo_recipe.py`` and ``test_trl_recipe.py``.
"""

from __future__ import annotations

import inspect
import json

import pytest

from memtheory.cli import main
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.estimate import estimate
from memtheory.estimate.trl_step import NOT_TAKEN, TRL_DEFAULT_SEQUENCE
from memtheory.finetuning import LoRA, dpo_step_memory, sft_step_memory
from memtheory.gpus import usable_memory
from memtheory.recipes import TRL_RECIPES, Setup

TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "tie_word_embeddings": False, "max_position_embeddings": 64}
"""The recipes' tiny Llama (memtheory.torch.recipe_steps.TINY_LLAMA), with its positions."""


@pytest.fixture(autouse=True)
def _no_answer_cache(monkeypatch):
    """Every command line is derived, not read back from a kept answer."""
    monkeypatch.setenv("MEMTHEORY_CACHE", "off")


@pytest.fixture
def config(tmp_path):
    """The tiny Llama as a config.json the command line reads."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def _json(capsys, *arguments):
    """Run memtheory estimate ARGUMENTS --json; return its exit status and parsed output."""
    status = main(["estimate", *arguments, "--json"])
    return status, json.loads(capsys.readouterr().out)


CASES = [
    ("trl-dpo", ["--batch", "2", "--seq", "7"], {}),
    ("trl-dpo", ["--batch", "3", "--seq", "12", "--lora", "4", "--lora-alpha", "8"],
     {"lora": LoRA(4, 8)}),
    ("trl-dpo", ["--batch", "2", "--seq", "9", "--precision", "fp32", "--no-checkpointing"],
     {"precision": "fp32", "checkpointing": False}),
    ("trl-dpo", ["--batch", "2", "--seq", "7", "--precompute-ref-log-probs"],
     {"precompute_ref_log_probs": True}),
    ("trl-sft", ["--batch", "2", "--seq", "7"], {}),
    ("trl-sft", ["--batch", "3", "--seq", "12", "--lora", "4", "--lora-alpha", "8",
                 "--no-checkpointing"], {"lora": LoRA(4, 8), "checkpointing": False}),
]


@pytest.mark.parametrize(("recipe", "flags", "keywords"), CASES)
def test_the_cli_json_is_the_step_function_to_the_byte(capsys, config, recipe, flags, keywords):
    """--json's peak, parts and moment are the step function's, called with the same question."""
    status, answer = _json(capsys, config, "--recipe", recipe, *flags, "--limit", "4 GiB")
    assert status == 0
    batch, sequence = int(flags[1]), int(flags[3])
    keywords = {"precision": "autocast-bf16", **keywords}  # TRL's bf16=True
    if recipe == "trl-dpo":
        step = dpo_step_memory(TINY, pairs=batch, sequence=sequence, **keywords)
    else:
        step = sft_step_memory(TINY, batch=batch, sequence=sequence, **keywords)
    assert answer["peak_bytes"] == step.peak
    assert answer["settings"]["trl_parts"] == dict(step.parts)
    assert answer["settings"]["peak_moment"] == step.peak_moment
    assert answer["assumptions"] == list(step.assumed)
    assert answer["fits"] is bool(step.peak <= usable_memory(limit="4 GiB").usable)
    assert answer["settings"]["recipe"] == recipe


def test_the_components_add_up_to_the_heads_moment():
    """The table's components are the parts of the fused head's moment; their sum is that moment."""
    answer = estimate(TINY, setup="DPO", batch=2, sequence=7, lora=4)
    step = dpo_step_memory(TINY, pairs=2, sequence=7, lora=LoRA(4), precision="autocast-bf16")
    head = ("up to the final norm", "reference weights", "batch and head beyond the recipe",
            "fused head backward")
    assert dict(answer.memory.components) == {name: step.parts[name] for name in head}
    assert answer.memory.timeline["after the head"] == step.parts["after the head"]
    assert answer.peak == step.peak


def test_the_text_answer_has_the_verdict_and_the_assumptions(capsys, config):
    """The printed answer: the table, the card's verdict under its reserve, every assumed line."""
    assert main(["estimate", config, "--recipe", "trl-sft", "--seq", "7", "--gpu", "T4"]) == 0
    printed = capsys.readouterr().out
    step = sft_step_memory(TINY, batch=1, sequence=7, precision="autocast-bf16")
    assert "T4: " in printed and ": fits (" in printed
    for line in step.assumed:
        assert f"assumed: {line}" in printed
    assert f"  {step.peak}\n" in printed
    assert "not searched" in printed


def test_the_default_sequence_is_trls_max_length():
    """Without --seq the sequence is TRL 1.16's max_length (DPOConfig's and SFTConfig's)."""
    trl = pytest.importorskip("trl", reason="the default is read from TRL's configs")
    longer = {**TINY, "max_position_embeddings": 2048}
    answer = estimate(longer, setup="trl-sft")
    assert answer.settings["sequence"] == trl.DPOConfig.max_length == trl.SFTConfig.max_length
    assert answer.settings["sequence"] == TRL_DEFAULT_SEQUENCE
    step = sft_step_memory(longer, batch=1, sequence=TRL_DEFAULT_SEQUENCE,
                           precision="autocast-bf16")
    assert answer.peak == step.peak


def test_prompt_and_completion_are_the_sequence():
    """--prompt P --completion C answers as --seq P + C; a sum that disagrees is refused."""
    split = estimate(TINY, setup="trl-dpo", batch=2, prompt=3, completion=4)
    whole = estimate(TINY, setup="trl-dpo", batch=2, sequence=7)
    assert split.peak == whole.peak
    assert (split.settings["prompt"], split.settings["completion"]) == (3, 4)
    with pytest.raises(InvalidArgumentError, match="is not --prompt 3 \\+ --completion 4"):
        estimate(TINY, setup="trl-dpo", sequence=8, prompt=3, completion=4)
    with pytest.raises(InvalidArgumentError, match="go together"):
        estimate(TINY, setup="trl-dpo", prompt=3)


def _estimate_defaults():
    return {name: parameter.default
            for name, parameter in inspect.signature(estimate).parameters.items()}


def test_each_refused_option_is_refused_only_off_its_default():
    """NOT_TAKEN's defaults are estimate's own, so an option left alone is never refused."""
    defaults = _estimate_defaults()
    for name, (default, _) in NOT_TAKEN.items():
        assert defaults[name] == default, name


REFUSED = [
    ({"image": 224}, "--image"), ({"flash": False}, "--attention/--flash"),
    ({"optimizer": "sgd"}, "--optimizer"), ({"qlora": True}, "--qlora"),
    ({"gpus": 2}, "--gpus"), ({"zero": 3}, "--zero"), ({"tensor": 2}, "--tp"),
    ({"pipeline": 2}, "--pp"), ({"sequence_parallel": True}, "--sequence-parallel"),
    ({"offload": "optimizer"}, "--offload"), ({"context_parallel": 2}, "--cp"),
    ({"activation_offload": True}, "--activation-offload"), ({"grad_accum": 4}, "--grad-accum"),
    ({"global_batch": 8}, "--global-batch"), ({"convention": "breakdown"}, "--convention"),
    ({"lora_alpha": 8.0}, "--lora-alpha"),
]


@pytest.mark.parametrize(("recipe"), ["trl-dpo", "trl-sft"])
@pytest.mark.parametrize(("options", "flag"), REFUSED)
def test_an_option_the_trl_step_does_not_take_is_refused_with_the_reason(recipe, options, flag):
    """Every option with no effect on (or not modelled in) the TRL step is refused by its flag."""
    with pytest.raises(InvalidArgumentError, match=flag.replace("/", ".")) as refused:
        estimate(TINY, setup=recipe, sequence=7, **options)
    assert "Drop it" in str(refused.value) or "drop" in str(refused.value)


def test_trl_only_options_are_refused_elsewhere():
    """--precompute-ref-log-probs outside trl-dpo, --prompt outside the TRL recipes: refused."""
    with pytest.raises(InvalidArgumentError, match="--precompute-ref-log-probs applies"):
        estimate(TINY, setup="trl-sft", sequence=7, precompute_ref_log_probs=True)
    with pytest.raises(InvalidArgumentError, match="--prompt applies to --recipe"):
        estimate("gpt2", sequence=7, prompt=3, completion=4)
    with pytest.raises(InvalidArgumentError, match="--precompute-ref-log-probs applies"):
        estimate("gpt2", sequence=7, precompute_ref_log_probs=False)


def test_the_cli_refuses_setup_fields_for_a_trl_recipe(capsys, config):
    """--optimizer-impl, --logits and --loop change a Setup; the TRL step has none: exit 2."""
    assert main(["estimate", config, "--recipe", "trl-dpo", "--optimizer-impl", "foreach"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("memtheory estimate: --optimizer-impl not taken by --recipe")


def test_a_sequence_past_the_positions_is_refused():
    """--seq beyond the model's positions is refused, as for every other recipe."""
    with pytest.raises(InvalidArgumentError, match="at most 64 positions"):
        estimate(TINY, setup="trl-sft", sequence=65)


def test_a_model_without_a_llama_style_final_norm_is_refused(capsys):
    """GPT-2 (final norm ln_f) is not modelled: refused with the families that are."""
    assert main(["estimate", "gpt2", "--recipe", "trl-dpo", "--seq", "8"]) == 2
    assert "Llama-style decoders" in capsys.readouterr().err


def test_setup_recipe_still_says_what_answers_trl():
    """Setup.recipe("trl-dpo") is no Setup: it names the estimate front door that answers."""
    for name, entry in TRL_RECIPES.items():
        with pytest.raises(UnsupportedError, match=f"--recipe {name}"):
            Setup.recipe(name)
        assert entry.function in entry.why_no_setup


def test_sweep_answers_each_point(capsys, config):
    """--sweep with trl-dpo answers every point, each the step function's peak."""
    status, answers = _json(capsys, config, "--recipe", "trl-dpo", "--sweep", "seq=7,12")
    assert status == 0
    for point in answers:
        step = dpo_step_memory(TINY, pairs=1, sequence=point["sweep"]["sequence"],
                               precision="autocast-bf16")
        assert point["peak_bytes"] == step.peak


def test_serve_with_a_trl_recipe_is_refused(capsys):
    """--serve asks the serving question, which takes no --recipe: exit 2, saying so."""
    assert main(["estimate", "llama-3-8b", "--recipe", "trl-dpo", "--serve",
                 "--context", "1024"]) == 2
    assert "--recipe trl-dpo: not an option of the serving question" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["trl-dpo", "trl-sft"])
def test_the_issues_command_on_llama_3_8b(capsys, recipe):
    """Issue 25's question: llama-3-8b --lora 16 --seq 1024 on an H100, against the function."""
    status, answer = _json(capsys, "llama-3-8b", "--recipe", recipe, "--lora", "16",
                           "--seq", "1024", "--gpu", "H100-80GB")
    assert status == 0
    function = dpo_step_memory if recipe == "trl-dpo" else sft_step_memory
    size = {"pairs": 1} if recipe == "trl-dpo" else {"batch": 1}
    step = function("llama-3-8b", **size, sequence=1024, lora=LoRA(16),
                    precision="autocast-bf16")
    assert answer["peak_bytes"] == step.peak
    assert answer["settings"]["trl_parts"] == dict(step.parts)
    assert answer["fits"] is bool(step.peak <= usable_memory("H100-80GB").usable)
