"""``trace`` and ``measure`` take a Setup: the same step as its keywords, exact, and refusals.

A tiny Hugging Face Llama is built from a configuration (no download), as
``tests/pytorch/test_recipe_steps.py`` builds it, in the dtype the recipe
trains in (``hf-trainer`` keeps the checkpoint's dtype: bf16 and fp32 both
run). For each CPU recipe, ``trace(..., setup=R)`` evaluated at a size it was
not traced at equals ``measure(..., setup=R)`` to the byte, and each equals
the same call with the keywords the recipe stands for, written out here from
the recipe's sources (``memtheory/recipes/catalog.py``): PyTorch's default
optimizer on CUDA is foreach, the Trainer's ``adamw_torch_fused``, the
Trainer's loop keeps only the loss.
"""

from __future__ import annotations

import pickle
from functools import cache

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from torch import nn  # noqa: E402

from memtheory.errors import InvalidArgumentError, UnsupportedError  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch import measure, trace  # noqa: E402
from memtheory.torch.setup_step import setup_step  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_VOCABULARY = 61
_CONFIG = {
    "vocab_size": _VOCABULARY, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "max_position_embeddings": 64, "tie_word_embeddings": False,
}
_TRACED = {"B": 2, "S": 5}
_MEASURED = {"B": 3, "S": 7}


def _llama(dtype=torch.float32, attention="sdpa"):
    """A one-layer LlamaForCausalLM in ``dtype``, in training mode, the same weights each time."""
    config = transformers.AutoConfig.for_model("llama", attn_implementation=attention, **_CONFIG)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).to(dtype).train()


def _batch(batch, sequence):
    """A Hugging Face batch: token ids, and the same ids as labels (the model computes its loss)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, _VOCABULARY, (batch, sequence), generator=generator)
    return {"input_ids": ids, "labels": ids.clone()}


def _adamw(**implementation):
    return lambda parameters: torch.optim.AdamW(parameters, **implementation)


_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

CASES = {
    # recipe, the model's dtype: the keywords the recipe stands for (catalog.py's sources)
    ("pytorch-fp32", "fp32"): {"optimizer": _adamw(foreach=True), "keeps_outputs": True},
    ("pytorch-amp", "fp32"): {"optimizer": _adamw(foreach=True), "keeps_outputs": True,
                              "autocast": torch.bfloat16},
    ("hf-trainer", "bf16"): {"optimizer": _adamw(fused=True), "keeps_outputs": False},
    ("hf-trainer", "fp32"): {"optimizer": _adamw(fused=True), "keeps_outputs": False,
                             "autocast": torch.bfloat16},
}


@cache
def _traced(recipe, dtype, explicit):
    """Trace the recipe's step at the traced sizes, by its Setup or by its keywords."""
    keywords = CASES[recipe, dtype] if explicit else {"setup": recipe}
    return trace(_llama(_DTYPES[dtype]), _batch(*_TRACED.values()), _TRACED,
                 check_conditions=False, **keywords)


def _measured(recipe, dtype, explicit):
    keywords = CASES[recipe, dtype] if explicit else {"setup": recipe}
    return measure(_llama(_DTYPES[dtype]), _batch(*_MEASURED.values()), warmup_steps=1,
                   **keywords)


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "dtype"), list(CASES))
def test_trace_with_a_setup_is_measure_with_it(recipe, dtype):
    """trace(setup=R), evaluated at sizes it did not trace, is measure(setup=R) to the byte."""
    at = _traced(recipe, dtype, False).evaluate(**_MEASURED)
    measured = _measured(recipe, dtype, False)
    assert {k: int(v) for k, v in at.components.items()} == measured.components
    assert at.peak == measured.peak
    assert at.inference_peak == measured.inference_peak


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "dtype"), list(CASES))
def test_a_setup_is_the_keywords_it_stands_for(recipe, dtype):
    """With setup=R, trace and measure give what they give with R's keywords written out."""
    by_setup, by_keywords = _traced(recipe, dtype, False), _traced(recipe, dtype, True)
    assert dict(by_setup.components) == dict(by_keywords.components)
    assert (by_setup.peak - by_keywords.peak).expand() == 0
    assert by_setup.loop == by_keywords.loop
    measured, written = _measured(recipe, dtype, False), _measured(recipe, dtype, True)
    assert measured.components == written.components and measured.peak == written.peak
    assert (measured.implementation, measured.autocast) == (written.implementation,
                                                            written.autocast)


@pytest.mark.slow
def test_the_results_remember_and_print_the_setup():
    """Both results keep the Setup and print its assumed lines, as the CLI prints a Setup's."""
    traced = _traced("hf-trainer", "bf16", False)
    measured = _measured("hf-trainer", "bf16", False)
    setup = Setup.recipe("hf-trainer")
    for result in (traced, measured):
        assert result.setup == setup
        assert result.assumed[: len(setup.describe("bf16"))] == tuple(setup.describe("bf16"))
        for line in setup.describe("bf16"):
            assert f"assumed: {line}" in str(result)
    assert measured.implementation == "fused" and measured.autocast is None
    assert not measured.loop.keeps_outputs
    assert any(line.startswith("device cuda: the step runs CPU kernels") for line in
               traced.assumed)
    assert traced.evaluate(B=4, S=9).setup == setup


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).train()


def _mlp_call(**keywords):
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    return {"loss": nn.CrossEntropyLoss(), "target": y, **keywords}, x


def test_a_plain_module_says_what_is_assumed_and_keeps_it_when_pickled():
    """A plain module's attention is not checked, and says so; the Setup survives pickling."""
    keywords, x = _mlp_call(setup="pytorch-amp")
    traced = trace(_mlp(), x, {"B": 6}, check_conditions=False, **keywords)
    again = pickle.loads(pickle.dumps(traced))
    assert again.setup == Setup.recipe("pytorch-amp") and again.assumed == traced.assumed
    assert any(line.startswith("attention sdpa: not checked") for line in traced.assumed)
    assert "assumed: attention sdpa: not checked" in str(traced)


def test_trace_casts_its_fake_weights_and_leaves_the_model_as_it_is():
    """setup='pytorch-fp32' on a bf16 module traces fp32 weights; the module stays bf16."""
    keywords, x = _mlp_call(setup="pytorch-fp32")
    model = _mlp().to(torch.bfloat16)
    cast = trace(model, x.to(torch.bfloat16), {"B": 6}, check_conditions=False, **keywords)
    keywords, x = _mlp_call(setup="pytorch-fp32")
    plain = trace(_mlp(), x, {"B": 6}, check_conditions=False, **keywords)
    assert cast.peak == plain.peak
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_measure_refuses_a_model_in_another_dtype():
    """Measure runs the model as it is: a bf16 module under pytorch-fp32 is refused, with a fix."""
    keywords, x = _mlp_call(setup="pytorch-fp32")
    with pytest.raises(InvalidArgumentError, match=r"model\.to\(torch\.float32\)") as error:
        measure(_mlp().to(torch.bfloat16), x.to(torch.bfloat16), **keywords)
    assert "changed(precision='bf16')" in str(error.value)


REFUSED = {
    # the Setup, then what its message names: the field and the fix
    "zero": (Setup.recipe("pytorch-amp", zero=3), ("zero=3", "changed(zero=0)")),
    "offload": (Setup.recipe("pytorch-amp", offload="optimizer"),
                ("offload='optimizer'", "changed(offload='none')")),
    "quantization": (Setup.recipe("qlora"), ("quantization='nf4'", "changed(quantization=None)")),
    "master weights": (Setup.recipe("pytorch-amp", precision="mixed-bf16"),
                       ("precision='mixed-bf16'", "changed(precision='bf16')")),
    "optimizer": (Setup.recipe("pytorch-amp", optimizer="adamw-8bit"),
                  ("optimizer='adamw-8bit'", "changed(optimizer='adamw')")),
    "precision": (Setup.recipe("pytorch-amp", precision="fp8_e4m3"),
                  ("precision='fp8_e4m3'", "changed(precision='fp32')")),
}


@pytest.mark.parametrize("front_door", ["trace", "measure"])
@pytest.mark.parametrize("field", list(REFUSED))
def test_what_one_cpu_process_cannot_run_is_refused(field, front_door):
    """Sharding, offload, 4-bit, master weights, a non-torch optimizer: refused by name."""
    setup, named = REFUSED[field]
    keywords, x = _mlp_call(setup=setup)
    with pytest.raises(UnsupportedError) as error:
        if front_door == "trace":
            trace(_mlp(), x, {"B": 6}, **keywords)
        else:
            measure(_mlp(), x, **keywords)
    for words in named:
        assert words in str(error.value)


CONTRADICTED = {
    # an explicit keyword that says otherwise, and what the message names
    "autocast": ("pytorch-fp32", {"autocast": torch.bfloat16}, "autocast=torch.bfloat16"),
    "keeps_outputs": ("hf-trainer", {"keeps_outputs": True}, "keeps_outputs=True"),
    "optimizer name": ("pytorch-amp", {"optimizer": "sgd"}, "optimizer='sgd'"),
    "optimizer factory": ("pytorch-amp", {"optimizer": _adamw(foreach=True)}, "factory"),
}


@pytest.mark.parametrize("front_door", ["trace", "measure"])
@pytest.mark.parametrize("case", list(CONTRADICTED))
def test_a_keyword_that_contradicts_the_setup_is_refused(case, front_door):
    """setup='pytorch-fp32', autocast=bf16 (and the like): refused, naming both and the fix."""
    recipe, given, named = CONTRADICTED[case]
    keywords, x = _mlp_call(setup=recipe, **given)
    with pytest.raises(InvalidArgumentError) as error:
        if front_door == "trace":
            trace(_mlp(), x, {"B": 6}, **keywords)
        else:
            measure(_mlp(), x, **keywords)
    message = str(error.value)
    assert named in message and f"setup {recipe}" in message and "drop " in message


def test_trace_refuses_a_dtype_the_setup_does_not_train_in():
    """setup='pytorch-fp32', dtype='bf16' names both."""
    keywords, x = _mlp_call(setup="pytorch-fp32", dtype="bf16")
    with pytest.raises(InvalidArgumentError, match=r"dtype=torch\.bfloat16 contradicts setup "
                                                   r"pytorch-fp32") as error:
        trace(_mlp(), x, {"B": 6}, **keywords)
    assert "drop dtype=" in str(error.value)


def test_an_optimizer_instance_must_be_the_setups():
    """hf-trainer runs fused AdamW: a for-loop AdamW instance is refused; a fused one is used."""
    model = _mlp()
    with pytest.raises(InvalidArgumentError, match=r"AdamW \(for-loop\).*adamw \(fused\)"):
        setup_step("hf-trainer", model, optimizer=torch.optim.AdamW(model.parameters(),
                                                                    foreach=False))
    fused = torch.optim.AdamW(model.parameters(), fused=True)
    assert setup_step("hf-trainer", model, optimizer=fused).optimizer is fused


def test_keywords_that_agree_with_the_setup_are_accepted():
    """Saying what the Setup says is not a contradiction."""
    step = setup_step("pytorch-amp", _mlp(), autocast=torch.bfloat16, dtype=torch.float32,
                      optimizer="adamw", keeps_outputs=True)
    assert (step.autocast, step.implementation, step.keeps_outputs) == (torch.bfloat16,
                                                                        "foreach", True)


def test_a_hugging_face_model_with_other_attention_is_refused_and_not_changed():
    """An eager model under an SDPA recipe: both named, the fix given, the model left eager."""
    model = _llama(attention="eager")
    with pytest.raises(InvalidArgumentError) as error:
        trace(model, _batch(2, 5), _TRACED, setup="pytorch-fp32")
    message = str(error.value)
    assert "attn_implementation='eager'" in message and "attention='sdpa'" in message
    assert "changed(attention='eager')" in message
    assert model.config._attn_implementation == "eager"


def test_checkpointing_must_be_as_the_model_has_it():
    """checkpointing=True on a model without it, and the reverse: refused with the call to make."""
    model = _llama()
    with pytest.raises(InvalidArgumentError, match=r"_checkpointing_enable\(\)"):
        measure(model, _batch(2, 5), setup=Setup.recipe("pytorch-fp32", checkpointing=True))
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()
    with pytest.raises(InvalidArgumentError, match=r"_checkpointing_disable\(\)") as error:
        trace(model, _batch(2, 5), _TRACED, setup="pytorch-fp32")
    assert "changed(checkpointing=True)" in str(error.value)


def test_adapter_dtype_must_match_the_models_adapters():
    """peft-lora on a model without adapters, and bf16 adapters under fp32: refused by name."""
    with pytest.raises(InvalidArgumentError, match=r"no LoRA adapters") as error:
        measure(_llama(torch.bfloat16), _batch(2, 5), setup="peft-lora")
    assert "changed(adapter_dtype=None)" in str(error.value)

    class Adapted(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(8, 4)
            self.lora_A = nn.Linear(8, 2, bias=False).to(torch.bfloat16)

    with pytest.raises(InvalidArgumentError, match=r"adapters are torch\.bfloat16"):
        setup_step("pytorch-fp32", Adapted())


def test_track_checks_the_model_against_the_setup_and_keeps_it():
    """track(setup=) refuses a for-loop AdamW under hf-trainer and records the Setup it checked."""
    from memtheory.torch import track

    model = _mlp()
    with pytest.raises(InvalidArgumentError, match=r"AdamW \(for-loop\).*adamw \(fused\)"):
        track(model, torch.optim.AdamW(model.parameters(), foreach=False), setup="hf-trainer")
    with pytest.raises(InvalidArgumentError, match=r"pass the model"):
        track(setup="hf-trainer")
    fused = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(6, 8)
    with track(model, fused, inputs=x, setup="hf-trainer") as tracker:
        model(x).sum().backward()
        fused.step()
    assert tracker.footprint.setup == Setup.recipe("hf-trainer")
    assert tracker.footprint.assumed[0] == Setup.recipe("hf-trainer").describe("fp32")[0]


def test_adapters_cast_with_the_weights_are_accepted():
    """A bf16 module with bf16 adapters under pytorch-fp32: trace casts both, nothing refused."""

    class Adapted(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(8, 4)
            self.lora_A = nn.Linear(8, 2, bias=False)

    step = setup_step("pytorch-fp32", Adapted().to(torch.bfloat16))
    assert step.dtype == torch.float32
    with pytest.raises(InvalidArgumentError, match="model.to"):
        setup_step("pytorch-fp32", Adapted().to(torch.bfloat16), casts=False)
