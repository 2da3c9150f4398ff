"""``memtheory.recipes``: one Setup for every assumption, named recipes, and the CLI's --recipe.

The recipes' defaults are checked against the installed libraries where they
are installed (transformers' ``TrainingArguments.optim`` and attention, peft's
adapter dtype), so a new release that changes a default fails here.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory.cli import main
from memtheory.conventions.autograd import AutogradConvention
from memtheory.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from memtheory.estimate import estimate
from memtheory.gpus import DEFAULT_RESERVE
from memtheory.recipes import AS_LOADED, RECIPES, Setup, default_recipe, recipe, setup_from

setups = st.builds(
    Setup,
    precision=st.sampled_from(["fp32", "bf16", "autocast-bf16", "mixed-bf16", AS_LOADED]),
    optimizer_implementation=st.sampled_from([None, "for-loop", "foreach", "fused"]),
    attention=st.sampled_from(["eager", "sdpa"]),
    device=st.sampled_from(["cuda", "cpu"]),
    keeps_logits=st.booleans(),
    zero=st.sampled_from([0, 1, 2, 3]),
    sharded_autocast_copies=st.booleans(),
    adapter_dtype=st.sampled_from([None, "fp32", "bf16"]),
)


@given(setups)
def test_every_setup_says_each_choice(setup):
    """The assumed lines name the precision, optimizer implementation, attention and the logits."""
    text = str(setup)
    assert f"{setup.implementation} implementation" in text
    assert ("SDPA" in text) == (setup.attention == "sdpa")
    assert ("keeps only the loss" in text) != setup.keeps_logits
    assert all(line.startswith("assumed: ") for line in text.splitlines())
    assert ("ZeRO stage" in text) == bool(setup.zero)


@given(setups)
def test_the_convention_carries_the_loop_and_the_optimizer(setup):
    """setup.convention() is the exact convention with the setup's implementation and loop."""
    chosen = setup.convention()
    assert isinstance(chosen, AutogradConvention)
    assert (chosen.implementation, chosen.keeps_logits) == (setup.implementation,
                                                           setup.keeps_logits)


@given(setups)
def test_to_dict_is_json_and_round_trips_the_fields(setup):
    """to_dict() is JSON-ready; a Setup built from it (reserve as bytes) is equal but for it."""
    data = json.loads(json.dumps(setup.to_dict()))
    assert data["reserve"] == int(setup.reserve_bytes)
    fields = {k: v for k, v in data.items() if k != "optimizer_implementation"}
    fields["optimizer_implementation"] = setup.optimizer_implementation
    assert setup_from(fields) == setup.changed(reserve=data["reserve"])


def test_pytorch_picks_its_implementation_by_device():
    """torch.optim's default: for-loop on CPU, foreach on CUDA, unless foreach/fused is given."""
    assert Setup(device="cpu").implementation == "for-loop"
    assert Setup(device="cuda").implementation == "foreach"
    assert Setup(device="cpu", optimizer_implementation="fused").implementation == "fused"


def test_as_loaded_follows_the_checkpoint_and_sharding():
    """A bf16 checkpoint trains in bf16; fp32 under autocast; sharded, fp32 whatever it was."""
    hf = Setup.recipe("hf-trainer")
    assert [hf.precision_for(d) for d in ("bf16", "fp16", "fp32", None)] == [
        "bf16", "fp16", "autocast-bf16", "autocast-bf16"]
    assert hf.changed(zero=2).precision_for("bf16") == "autocast-bf16"
    assert Setup(precision="fp32").precision_for("bf16") == "fp32"


def test_changed_records_what_differs_from_the_recipe():
    """A recipe's copy is named after it, with each changed field once (the last value)."""
    hf = Setup.recipe("hf-trainer")
    assert hf.changed(keeps_logits=False) is hf  # the recipe's own value: nothing changed
    twice = hf.changed(attention="eager").changed(attention="sdpa", zero=3)
    assert twice.label == "hf-trainer (attention=sdpa, zero=3)"
    assert Setup().label == "custom"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"zero": 4}, "zero must be one of"),
        ({"zero": True}, "zero must be one of"),
        ({"attention": "flash"}, "attention must be one of"),
        ({"keeps_logits": "yes"}, "keeps_logits must be one of"),
        ({"precision": 16}, "precision must be a name"),
        ({"optimizer": ""}, "optimizer must be a name"),
        ({"reserve": "lots"}, "reserve must be"),
        ({"reserve": -1}, "zero or more"),
        ({"offload": "disk"}, "offload must be one of"),
        ({"loop": "keras"}, "loop must be one of plain, hf-trainer"),
    ],
)
def test_bad_fields_are_refused_with_the_fix(fields, message):
    """A field of the wrong type or value gets a memtheory error naming it and the choices."""
    with pytest.raises(InvalidArgumentError, match=message):
        Setup(**fields)


def test_unmodelled_choices_are_refused_not_ignored():
    """zero_grad(set_to_none=False) is not modelled: refused, saying what is."""
    with pytest.raises(UnsupportedError, match="set_to_none=True"):
        Setup(zero_grad_set_to_none=False)
    with pytest.raises(InvalidArgumentError, match="no field 'flash'"):
        Setup().changed(flash=True)


def test_recipes_by_any_spelling_and_unknown_ones_suggest():
    """Aliases find recipes; a near miss suggests the closest name."""
    assert recipe("Trainer").name == "hf-trainer" and recipe("zero3").name == "deepspeed-zero3"
    with pytest.raises(UnknownNameError, match="hf-trainer"):
        recipe("hf-trainr")


def test_every_recipe_cites_its_sources_and_how_it_is_checked():
    """Each recipe names library files and versions, and whether it is exact or modelled."""
    for entry in RECIPES.values():
        assert entry.setup.name == entry.name and entry.setup.source
        assert entry.sources and all(any(ch.isdigit() for ch in s) for s in entry.sources)
        assert entry.verified.startswith(("exact on CPU", "modelled"))
        assert entry.setup.reserve_bytes == DEFAULT_RESERVE


def test_the_default_recipe_follows_the_question():
    """Language models get the Trainer, LoRA peft, QLoRA the NF4 recipe, vision a plain loop."""
    assert default_recipe(kind="sequence", lora=False, qlora=False) == "hf-trainer"
    assert default_recipe(kind="sequence", lora=True, qlora=False) == "peft-lora"
    assert default_recipe(kind="sequence", lora=True, qlora=True) == "qlora"
    assert default_recipe(kind="image", lora=False, qlora=False) == "pytorch-amp"


def test_hf_recipe_matches_the_installed_transformers():
    """TrainingArguments' default optimizer is the fused AdamW the hf-trainer recipe assumes."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir="unused", report_to=[])
    assert str(args.optim.value) == "adamw_torch_fused"
    assert Setup.recipe("hf-trainer").implementation == "fused"
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, vocab_size=32)
    model = transformers.AutoModelForCausalLM.from_config(config)
    assert model.config._attn_implementation == "sdpa"
    assert Setup.recipe("hf-trainer").attention == "sdpa"


def test_peft_recipe_matches_the_installed_peft():
    """The peft library upcasts bf16 adapters to fp32 (the peft-lora recipe's adapter dtype)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, vocab_size=32)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    tuned = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    dtypes = {p.dtype for n, p in tuned.named_parameters() if "lora_" in n}
    assert dtypes == {torch.float32}
    assert Setup.recipe("peft-lora").adapter_dtype == "fp32"


def test_cli_recipe_and_overrides_reach_the_answer(capsys):
    """--recipe picks the setup, --optimizer-impl and --logits change it, --json shows it."""
    argv = ["estimate", "gpt2", "--seq", "128", "--recipe", "pytorch-amp",
            "--optimizer-impl", "for-loop", "--logits", "dropped", "--attention", "eager",
            "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    settings = data["settings"]
    assert settings["recipe"] == "pytorch-amp (optimizer_implementation=for-loop, " \
        "keeps_logits=False, attention=eager)"
    assert settings["setup"]["optimizer_implementation"] == "for-loop"
    direct = estimate("gpt2", sequence=128, setup=Setup(
        precision="autocast-bf16", optimizer_implementation="for-loop", keeps_logits=False,
        attention="eager"))
    assert data["peak_bytes"] == int(direct.peak)


def test_cli_unknown_recipe_is_a_clear_error(capsys):
    """An unknown --recipe exits 2 with the known names."""
    assert main(["estimate", "gpt2", "--recipe", "megatron"]) == 2
    assert "unknown recipe 'megatron'" in capsys.readouterr().err


@pytest.mark.parametrize("loop", ["plain", "hf-trainer", "lightning"])
def test_cli_loop_flag_is_the_setup_with_that_loop(capsys, loop):
    """--loop changes only the recipe's loop: the answer is estimate() under that Setup."""
    assert main(["estimate", "gpt2", "--seq", "128", "--recipe", "pytorch-amp", "--loop", loop,
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["setup"]["loop"] == loop
    direct = estimate("gpt2", sequence=128, setup=Setup.recipe("pytorch-amp").changed(loop=loop))
    assert data["peak_bytes"] == int(direct.peak)


def test_cli_loop_flag_changes_the_answer(capsys):
    """Lightning's loop keeps the previous gradients through the forward: a higher peak."""
    peaks = {}
    for loop in ("plain", "lightning"):
        assert main(["estimate", "gpt2", "--seq", "128", "--recipe", "pytorch-amp",
                     "--loop", loop, "--json"]) == 0
        peaks[loop] = json.loads(capsys.readouterr().out)["peak_bytes"]
    assert peaks["lightning"] > peaks["plain"]


def test_training_memory_under_a_setup_is_the_estimate_step():
    """training_memory(setup=) is the step estimate() derives under the same setup."""
    from memtheory import training_memory
    from tests.hugging_face_gpt2 import hf_gpt2

    setup = Setup.recipe("pytorch-amp")
    network = hf_gpt2("small", batch=2, sequence=64, loss=True, flash=setup.flash)
    direct = training_memory(network, setup=setup)
    answer = estimate("gpt2", batch=2, sequence=64, setup=setup)
    assert direct.peak == answer.peak and direct.total == answer.memory.total


def test_training_memory_refuses_a_network_built_for_another_attention():
    """A network built eager under an SDPA setup is refused, naming the fix."""
    from memtheory import training_memory
    from memtheory.models import gpt2

    with pytest.raises(InvalidArgumentError, match="flash=True"):
        training_memory(gpt2("small", batch=1, sequence=16, loss=True), setup="hf-trainer")


@pytest.mark.parametrize(
    ("change", "plain"),
    [({"checkpointing": True}, {"checkpointing": False}),
     ({"zero": 3}, {"zero": 0}),
     ({"offload": "optimizer"}, {"offload": "none"}),
     ({"quantization": "nf4"}, {"quantization": None})],
    ids=lambda fields: ",".join(f"{k}={v}" for k, v in fields.items()),
)
def test_training_memory_refuses_what_one_plain_step_leaves_out(change, plain):
    """A setup asking for checkpointing, ZeRO, offload or quantization is refused by name.

    One replica's plain step applies none of them; before, the answer left them out and
    printed the setup as if it had (checkpointing=True gave the same peak as without).
    The setup changed back is answered, and equals the recipe's own step.
    """
    from memtheory import training_memory
    from memtheory.models import gpt2

    base = Setup.recipe("pytorch-amp")
    network = gpt2("small", batch=1, sequence=32, loss=True, flash=base.flash)
    field = next(iter(change))
    with pytest.raises(InvalidArgumentError, match=f"{field}=") as refused:
        training_memory(network, setup=base.changed(**change))
    assert "memtheory." in str(refused.value)  # names the front door that applies it
    again = training_memory(network, setup=base.changed(**change).changed(**plain))
    assert again.peak == training_memory(network, setup=base).peak


@pytest.mark.parametrize("name", ["deepspeed-zero3", "fsdp2-bf16", "qlora"])
def test_recipes_that_shard_or_quantize_are_not_one_plain_step(name):
    """training_memory(setup=NAME) refuses the recipes whose step it would not carry out."""
    from memtheory import inference_memory, training_memory
    from memtheory.models import gpt2

    setup = Setup.recipe(name)
    network = gpt2("small", batch=1, sequence=32, loss=True, flash=setup.flash)
    with pytest.raises(InvalidArgumentError, match="does not apply"):
        training_memory(network, setup=setup)
    with pytest.raises(InvalidArgumentError, match="does not apply"):
        inference_memory(network, setup=setup)


def test_qlora_leaves_fused_experts_unquantized_as_transformers_does():
    """Hugging Face's transformers 5 fuses Mixtral's experts: no nn.Linear to quantize.

    bitsandbytes' ``replace_with_bnb_linear`` swaps ``nn.Linear`` modules only
    and keeps the output layer (``lm_head``) as it is, so a QLoRA Mixtral keeps
    its experts, router, embeddings and head in bf16. The frozen bytes are
    derived here from the real model's modules (built on the meta device):
    NF4's half byte per weight of each other ``nn.Linear``, two bytes for the rest.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from memtheory.finetuning import LoRA, finetune_memory
    from memtheory.models import from_config

    config = transformers.MixtralConfig(
        hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, vocab_size=40,
        tie_word_embeddings=False)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    experts = model.model.layers[0].mlp.experts
    assert not any(isinstance(m, torch.nn.Linear) for m in experts.modules())
    quantized = kept = 0
    for name, module in model.named_modules():
        for parameter in module.parameters(recurse=False):
            if isinstance(module, torch.nn.Linear) and name != "lm_head":
                quantized += (parameter.numel() + 1) // 2
            else:
                kept += 2 * parameter.numel()
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "num_local_experts", "num_experts_per_tok", "vocab_size",
            "tie_word_embeddings", "max_position_embeddings")
    values = {"model_type": "mixtral",
              **{k: v for k, v in config.to_dict().items() if k in keys}}
    network = from_config(values, batch=1, sequence=8, loss=True)
    qlora = finetune_memory(network, lora=LoRA(2, targets="all-linear"), quantization="nf4",
                            precision="bf16")
    assert qlora["frozen_parameters"] == quantized + kept


def test_a_family_without_sdpa_runs_eager_under_the_trainer():
    """Gemma 2 in transformers has no SDPA path: the Trainer recipe's step is eager, and why."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma2 import modeling_gemma2

    assert modeling_gemma2.Gemma2PreTrainedModel._supports_sdpa is False
    answer = estimate("gemma-2-2b", sequence=256)
    assert answer.settings["attention"] == "eager"
    assert any("_supports_sdpa = False" in line for line in answer.assumptions)
    assert estimate("gemma-2-2b", sequence=256, flash=True).settings["attention"] == "sdpa"
    assert transformers is not None


def test_the_trainer_recipes_run_the_trainers_loop():
    """hf-trainer and the peft recipes built on it hold the Trainer's scalars; plain loops none."""
    assert {name for name, entry in RECIPES.items() if entry.setup.loop == "hf-trainer"} == {
        "hf-trainer", "peft-lora", "qlora"}
    assert Setup.recipe("hf-trainer").convention().loop == "hf-trainer"
