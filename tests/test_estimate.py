"""``memtheory estimate``: the same numbers as the library, the limits checked, good errors.

Every number is derived here from the library's own functions called directly
(training_memory, finetune_memory, parallel_memory, usable_memory), or from
the card's capacity, so the command adds no formula of its own.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import sympy as sp

from memtheory import training_memory
from memtheory.cli import main
from memtheory.conventions.autograd import AutogradConvention
from memtheory.dtypes import dtype
from memtheory.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from memtheory.estimate import estimate, resolve_model
from memtheory.finetuning import LoRA, finetune_memory
from memtheory.gpus import DEFAULT_RESERVE, gpu
from memtheory.models import gpt2
from memtheory.recipes import Setup
from memtheory.symbols import B, S
from memtheory.techniques import parallel_memory
from tests.hugging_face_gpt2 import hf_gpt2


def test_full_training_matches_training_memory():
    """By default a language model gets the hf-trainer recipe, and its table is training_memory's.

    GPT-2's checkpoint is fp32, so ``Trainer(bf16=True)`` runs torch.autocast
    over it; the Trainer's optimizer is fused AdamW, its attention SDPA (no
    S x S tensors: ``flash=True``), its loop keeps only the loss, with the
    Trainer's bookkeeping scalars (``loop="hf-trainer"``).
    """
    answer = estimate("gpt2", batch=2, sequence=256)
    direct = training_memory(
        hf_gpt2("small", batch=2, sequence=256, loss=True, flash=True), optimizer="adamw",
        precision="autocast-bf16",
        convention=AutogradConvention("fused", keeps_logits=False, loop="hf-trainer"),
    )
    assert dict(answer.memory.components) == dict(direct.components)
    assert answer.memory.total == direct.total and answer.peak == direct.peak
    assert answer.convention_name == "autograd" and answer.settings["precision"] == "autocast-bf16"
    assert answer.settings["recipe"] == "hf-trainer"


def test_a_setup_reproduces_the_plain_loop():
    """Setup fields reach the step: eager attention, for-loop AdamW, the logits kept."""
    plain = Setup(precision="autocast-bf16", attention="eager", device="cpu", keeps_logits=True)
    answer = estimate("gpt2", batch=2, sequence=256, setup=plain)
    direct = training_memory(hf_gpt2("small", batch=2, sequence=256, loss=True), optimizer="adamw",
                             precision="autocast-bf16", convention="autograd")
    assert answer.peak == direct.peak and answer.memory.total == direct.total
    assert answer.settings["optimizer_implementation"] == "for-loop"
    assert answer.settings["recipe"] == "custom"


def test_keywords_override_the_recipe_and_the_answer_says_so():
    """flash=False over hf-trainer is eager attention; the recipe's name records the change."""
    answer = estimate("gpt2", batch=1, sequence=128, setup="hf-trainer", flash=False)
    direct = training_memory(
        hf_gpt2("small", batch=1, sequence=128, loss=True), optimizer="adamw",
        precision="autocast-bf16",
        convention=AutogradConvention("fused", keeps_logits=False, loop="hf-trainer"),
    )
    assert answer.peak == direct.peak
    assert answer.settings["recipe"] == "hf-trainer (attention=eager)"
    assert any(line.startswith("attention: eager") for line in answer.assumptions)


def test_peft_adapters_in_fp32_double_their_bf16_bytes():
    """Peft keeps adapters in fp32: parameters, gradients and AdamW state twice the bf16 bytes.

    At the peak (the loss's backward, no gradient alive yet) the step also
    holds autocast's bf16 copies of the adapter weights and each adapter's
    own bf16 copy of its input (peft 0.21 ``_cast_input_dtype``; exact
    against the real step in ``tests/pytorch/test_peft_recipe.py``).
    """
    fp32 = estimate("llama-3-8b", lora=16, sequence=256, setup="peft-lora")
    bf16 = estimate("llama-3-8b", lora=16, sequence=256, setup="hf-trainer")
    for name in ("parameters", "gradients", "optimizer_state"):
        assert fp32.memory.components[name] == 2 * bf16.memory.components[name]
    grown = sum(bf16.memory.components[n] for n in ("parameters", "optimizer_state"))
    # the Trainer's gradient norm is taken in the gradients' dtype: fp32 (4 bytes), not bf16 (2)
    norm = fp32.memory.components["loop_scalars"] - bf16.memory.components["loop_scalars"]
    assert norm == dtype("fp32").bytes - dtype("bf16").bytes
    assert fp32.memory.peak_moment == bf16.memory.peak_moment == "backward loss (log_softmax)"
    # every adapter weight's bf16 copy, but the first layer's lora_A on q and v (16 x 4096
    # each): their input, the normed frozen embedding, needs no gradient
    copies = bf16.memory.components["parameters"] - 2 * 16 * 4096 * dtype("bf16").bytes
    assert fp32.memory.timeline_parts[fp32.memory.peak_moment]["weight_copies"] == copies
    # q and v each keep a bf16 copy of the normed hidden states, which nothing else keeps:
    # one more than the shared input, per layer and token (32 layers, 256 tokens, 4096 wide)
    inputs = 32 * 256 * 4096 * dtype("bf16").bytes
    assert fp32.peak - bf16.peak == grown + norm + copies + inputs


def test_lora_matches_finetune_memory_and_the_limits_are_exact():
    """LoRA r=8 on a T4: the largest batch b fits, b + 1 does not (budget = card - reserve)."""
    answer = estimate("gpt2", batch=4, sequence=512, lora=8, gpu="T4", setup="hf-trainer")
    symbolic = finetune_memory(gpt2("small", batch=B, sequence=S, loss=True, flash=True),
                               lora=LoRA(8), convention=answer.convention_name)
    assert answer.convention_name == "breakdown"  # GPT-2's packed attention under LoRA
    usable = gpu("T4").memory - DEFAULT_RESERVE
    assert answer.memory.total == symbolic.evaluate(B=4, S=512).total
    b = answer.max_batch
    assert symbolic.evaluate(B=b, S=512).total <= usable < symbolic.evaluate(B=b + 1, S=512).total
    assert answer.max_sequence == 1024  # the model's limit: memory would allow more
    assert answer.fits


def test_zero3_is_parallel_memory_per_device():
    """--gpus 8 --zero 3 is parallel_memory over 8 data-parallel devices.

    Under the Trainer, FSDP (accelerate's MixedPrecision) gathers the weights
    in bf16, so autocast keeps no bf16 copies; a plain PyTorch loop with
    torch.autocast over FSDP's fp32 weights keeps them.
    """
    answer = estimate("gpt2-medium", batch=1, sequence=128, gpus=8, zero=3)
    net = hf_gpt2("medium", batch=B, sequence=S, loss=True, flash=True)
    memory = training_memory(net, optimizer="adamw", precision="autocast-bf16",
                             convention=AutogradConvention("fused", keeps_logits=False,
                                                           loop="hf-trainer"))
    copies = memory.components["weight_copies"]
    without = replace(memory, components={k: v for k, v in memory.components.items()
                                          if k != "weight_copies"})
    direct = parallel_memory(without, data=8, zero=3, network=net).evaluate(B=1, S=128)
    assert answer.memory.total == direct.total
    kept = estimate("gpt2-medium", batch=1, sequence=128, gpus=8, zero=3,
                    setup=Setup.recipe("hf-trainer", sharded_autocast_copies=True))
    assert kept.memory.total - answer.memory.total == copies.xreplace({B: 1, S: 128})


@pytest.mark.slow
def test_nothing_fits_says_zero():
    """A model that cannot fit reports max batch 0 and 'does NOT fit'."""
    answer = estimate("gpt2-xl", batch=1, sequence=1024, limit="4 GB")
    assert answer.max_batch == 0 and answer.fits is False
    assert "does NOT fit" in answer.report()


def test_formula_is_in_b_and_s():
    """The formula is the symbolic peak; it evaluates to the printed peak."""
    answer = estimate("bert-base-mlm", batch=3, sequence=128)
    assert {s.name for s in answer.formula.free_symbols} == {"B", "S"}
    assert answer.formula.xreplace({B: 3, S: 128}) == answer.peak


def test_vision_models_take_an_image_size():
    """ResNet-50 at 160 pixels: the formula keeps only B."""
    answer = estimate("resnet50", batch=8, image=160, gpu="L4")
    assert {s.name for s in answer.formula.free_symbols} == {"B"}
    assert answer.max_sequence is None and answer.max_batch > 8


def test_json_output_for_scripts(capsys):
    """--json prints bytes as integers, the budget with its reserve, and the convention."""
    assert main(["estimate", "gpt2", "--lora", "8", "--gpu", "RTX 4090", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["budget"]["reserve_bytes"] == DEFAULT_RESERVE
    assert data["budget"]["memory_bytes"] == 24 * 2**30
    assert data["peak_bytes"] == sum(data["components"].values())
    assert data["convention"] in ("autograd", "breakdown") and data["convention_why"]
    assert isinstance(data["max_batch"], int)


def test_text_output_shows_table_budget_limits_formula(capsys):
    """The report has the table, total and peak with units, the reserve, the limits, the formula."""
    assert main(["estimate", "gpt2", "--batch", "2", "--seq", "256", "--gpu", "A10G"]) == 0
    out = capsys.readouterr().out
    for text in ("component", "total", "peak", "GiB", "GB)", "1.50 GiB reserve",
                 "largest batch at sequence 256", "largest sequence at batch 2", "B*S",
                 "convention: autograd: exact", "assumed: recipe hf-trainer",
                 "assumed: precision autocast-bf16", "assumed: attention: SDPA"):
        assert text in out


def test_help_lists_the_options(capsys):
    """--help shows every option of the issue."""
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    out = capsys.readouterr().out
    for option in ("--batch", "--seq", "--image", "--optimizer", "--precision", "--lora",
                   "--qlora", "--gpus", "--zero", "--tp", "--checkpointing", "--gpu", "--limit",
                   "--json", "--reserve", "--recipe", "--optimizer-impl", "--attention",
                   "--logits"):
        assert option in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gtp2"], "Did you mean 'gpt2'"),
        (["gpt2", "--gpus", "auto", "--zero", "3"], "--gpu"),
        (["gpt2", "--seq", "4096"], "at most 1024"),
        (["gpt2", "--gpus", "3", "--tp", "2"], "multiple"),
        (["gpt2", "--gpu", "RTX 4090 Ti"], "Did you mean 'RTX 4090'"),
        (["gpt2", "--optimizer", "adamm"], "Did you mean 'adam'"),
        (["gpt2", "--qlora", "--convention", "autograd"], "breakdown"),
        (["model.py:build"], "no such file"),
    ],
)
def test_errors_name_the_fix(capsys, argv, message):
    """Bad input exits with status 2 and a message that says what to do."""
    assert main(["estimate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_resolve_model_is_the_one_entry_point():
    """Builders by any spelling; unknown names raise the registry's error."""
    assert resolve_model("GPT-2").network.parameter_count == 124_439_808
    assert resolve_model("vit_b_16", batch=1).kind == "image"
    with pytest.raises(UnknownNameError):
        resolve_model("no-such-model")


def test_bad_arguments_are_memtheory_errors():
    """Sizes and devices are checked before any work."""
    with pytest.raises(InvalidArgumentError, match="batch"):
        estimate("gpt2", batch=0)
    with pytest.raises(UnsupportedError, match="checkpointing"):
        estimate("gpt2", checkpointing=True, convention="autograd")
    with pytest.raises(InvalidArgumentError, match="auto"):
        estimate("gpt2", gpus="many", gpu="T4")


def test_checkpointing_reduces_activations():
    """Checkpointing keeps fewer activation bytes than storing every output."""
    plain = estimate("gpt2", batch=2, sequence=256, convention="breakdown")
    kept = estimate("gpt2", batch=2, sequence=256, checkpointing=True)
    assert kept.convention_name == "breakdown" and "checkpointing" in kept.why
    assert kept.memory["activations"] < plain.memory["activations"]
    assert kept.memory["parameters"] == plain.memory["parameters"]
    assert sp.sympify(kept.memory.total).is_number


def test_configs_go_through_from_config_when_it_exists(monkeypatch, tmp_path):
    """A config.json path reaches memtheory.models.from_config(path, batch=, sequence=)."""
    import memtheory.models as models

    seen = {}

    def from_config(spec, *, batch, sequence, flash=False, loss=False, **options):
        seen["spec"] = spec
        return hf_gpt2("small", batch=batch, sequence=sequence, loss=True, flash=flash)

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"n_positions": 1024}))
    monkeypatch.setattr(models, "from_config", from_config, raising=False)
    answer = estimate(str(config), batch=2, sequence=128, gpu="L4")
    assert seen["spec"] == str(config)
    assert answer.model.source == "config" and answer.model.positions == 1024
    assert answer.memory.total == estimate("gpt2", batch=2, sequence=128).memory.total


def test_python_factories_build_the_network_of_the_module(tmp_path):
    """file.py:factory runs for real: the returned stack becomes a Network over a symbolic batch."""
    torch = pytest.importorskip("torch", reason="file.py:factory needs the torch extra")
    factory = tmp_path / "my_model.py"
    factory.write_text(
        "import torch\nfrom torch import nn\n\n"
        "def build():\n"
        "    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))\n"
        "    return model, torch.randn(8, 16)\n"
    )
    answer = estimate(f"{factory}:build", batch=64, gpu="T4")
    expected = sum(p.numel() for p in torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).parameters())
    assert answer.model.source == "trace"
    assert answer.settings["parameters"] == expected
    assert answer.fits
    assert main(["estimate", f"{factory}:build", "--batch", "64", "--gpu", "T4"]) == 0


def test_python_factories_with_their_own_forward_are_refused_with_the_way(tmp_path, capsys):
    """A module with its own forward() is refused, pointing to memtheory.torch.trace."""
    pytest.importorskip("torch", reason="file.py:factory needs the torch extra")
    factory = tmp_path / "custom.py"
    factory.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Twice(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        return self.fc(self.fc(x))\n\n"
        "def build():\n"
        "    return Twice(), torch.randn(4, 8)\n\n"
        "def alone():\n"
        "    return Twice()\n"
    )
    assert main(["estimate", f"{factory}:build"]) == 2
    assert "memtheory.torch.trace" in capsys.readouterr().err
    assert main(["estimate", f"{factory}:alone"]) == 2
    assert "(module, example_input)" in capsys.readouterr().err


def test_notebooks_show_the_table_and_the_verdict():
    """The answer renders as HTML: the component table, then the budget and the limits."""
    html = estimate("gpt2", batch=2, sequence=128, gpu="T4")._repr_html_()
    assert "<table" in html and "fits" in html and "largest batch" in html
