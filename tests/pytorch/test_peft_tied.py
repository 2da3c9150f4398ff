"""The ``peft-lora`` recipe on tied-embedding models and on Falcon, against real peft + Trainer.

As ``tests/pytorch/test_peft_recipe.py`` does it for an untied Llama:
``peft.get_peft_model(model, LoraConfig(r=4, lora_alpha=8))`` (peft 0.21, its
own default ``target_modules`` where the test gives none) on a model built
from its configuration in bf16, two steps of transformers' ``Trainer`` with
``bf16=True`` and its fused AdamW inside :func:`memtheory.torch.track`,
against ``estimate(config, lora=4, setup="peft-lora")``.

* **Tied Llama** (``tie_word_embeddings=True``, as Llama-3.2-1B): 0 bytes off,
  with a bf16 base and with an fp32 base under autocast. The tied ``lm_head``
  reads the frozen embedding's matrix: no gradient joins it; autocast casts
  the fp32 matrix at every call (a copy its backward keeps), and makes none
  of a bf16 one.
* **Tied Gemma 1 and 2**: 0 bytes off. A frozen ``GemmaRMSNorm`` keeps its
  fp32 ``1 + w`` only (``mul`` saves a factor for the other's gradient).
* **Falcon** (tied by default; peft's default target ``query_key_value``):
  the ``hf-trainer`` step (transformers' default SDPA, autocast over bf16
  weights, fused AdamW, the loop's scalars) is 0 bytes off in the 7B
  multi-query layout (SDPA's math path) and the 40B
  ``new_decoder_architecture`` layout (CPU flash kernel, each layer's cast
  of the mask), and so is it with eager attention, at two sizes. LoRA on
  Falcon is 0 B off in four of six cases and under by 148 and 320 bytes in two
  (:data:`LORA_FALCON_UNDER`); the answer says it is not yet exact.
"""

from __future__ import annotations

import tempfile

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")
peft = pytest.importorskip("peft", reason="peft is in the optional 'torch' extra")

from memtheory.estimate import estimate  # noqa: E402
from memtheory.estimate.resolve import resolve_model  # noqa: E402
from memtheory.finetuning import default_targets  # noqa: E402
from memtheory.torch import track  # noqa: E402
from memtheory.torch.recipe_steps import TINY_LLAMA  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")

RANK = 4
TIED_LLAMA = {**TINY_LLAMA, "tie_word_embeddings": True}
FALCON = {"model_type": "falcon", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "max_position_embeddings": 256}
"""Falcon-7B's layout (multi-query, parallel attention, tied head), tiny."""
GEMMA = {**TIED_LLAMA, "model_type": "gemma", "head_dim": 8}
GEMMA2 = {**GEMMA, "model_type": "gemma2"}
"""Gemma 1 and 2, tiny (tied, as Gemma's checkpoints are); Gemma 2 runs eager soft-capped
attention (transformers does not give it SDPA)."""
CONFIGS = {"llama": transformers.LlamaConfig, "falcon": transformers.FalconConfig,
           "gemma": transformers.GemmaConfig, "gemma2": transformers.Gemma2Config}

FALCON_NEW = {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2}
"""Falcon-40B's layout (new_decoder_architecture: grouped key/value heads, broadcast), tiny."""
FALCON_OTHER = {**FALCON, "vocab_size": 40, "hidden_size": 40, "num_hidden_layers": 3}
"""A Falcon size no formula was tuned on: four heads of 10, three layers."""
LORA_FALCON_UNDER = {("7b", "sdpa", 2, 9): -148, ("40b", "eager", 3, 13): -320}
"""LoRA on Falcon, estimate's peak less the tracked peft + Trainer step, where it is not 0:
measured and pinned (PyTorch 2.13 CPU, transformers 5.24, peft 0.21.2); the answer says so.
The other cases below (7B eager at two sizes, 40B SDPA and eager at B=2, S=9) are 0 B off."""
"""Why LoRA on Falcon is an expected failure (measured, PyTorch 2.13 CPU)."""

def _model(config: dict, dtype=torch.bfloat16, attention: str | None = None):
    """The model of ``config`` in bf16, as ``from_pretrained`` loads a bf16 checkpoint.

    ``attention``: ``attn_implementation`` (default transformers' choice: SDPA where
    the family supports it).
    """
    values = {k: v for k, v in config.items() if k != "model_type"}
    if attention is not None:
        values["attn_implementation"] = attention
    torch.manual_seed(0)
    built = transformers.AutoModelForCausalLM.from_config(
        CONFIGS[config["model_type"]](use_cache=False, **values))
    return built.to(dtype)


def _train(model, config: dict, batch: int, sequence: int):
    """Track two steps of the Trainer with the recipe's bf16=True; return the tracker."""
    ids = torch.randint(0, config["vocab_size"], (2 * batch, sequence))
    rows = [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]
    with tempfile.TemporaryDirectory() as folder:
        args = transformers.TrainingArguments(
            output_dir=folder, max_steps=2, per_device_train_batch_size=batch, report_to=[],
            use_cpu=True, disable_tqdm=True, bf16=True, save_strategy="no",
            logging_strategy="no",
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
        with track(model) as tracker:
            trainer.train()
    return tracker


def _lora(config: dict, batch: int, sequence: int, targets=None, attention=None):
    """Peft's model (its default targets when ``targets`` is None), tracked; and the estimate.

    With ``attention="eager"`` the estimate is asked for eager attention (``flash=False``).
    """
    base = _model(config, attention=attention)
    assert base.get_output_embeddings().weight is base.get_input_embeddings().weight  # tied
    chosen = {} if targets is None else {"target_modules": targets}
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, **chosen))
    tracker = _train(model, config, batch, sequence)
    answer = estimate({**config, "torch_dtype": "bfloat16"}, batch=batch, sequence=sequence,
                      lora=RANK, lora_alpha=2 * RANK, lora_targets=targets, setup="peft-lora",
                      flash=False if attention == "eager" else None)
    assert answer.settings["trainable"] == sum(
        p.numel() for n, p in model.named_parameters() if "lora_" in n)
    return model, tracker, answer


def test_lora_on_a_tied_llama_is_0_bytes_off_the_tracked_step():
    """On a tied Llama with peft's default targets the autograd convention is exact.

    The frozen weights are the model's distinct parameters (the shared matrix once).
    """
    model, tracker, answer = _lora(TIED_LLAMA, 2, 9)
    assert answer.convention_name == "autograd"
    frozen = {p.data_ptr(): p.nbytes for p in model.parameters() if not p.requires_grad}
    assert int(answer.memory.components["frozen_parameters"]) == sum(frozen.values())
    assert int(answer.peak) == tracker.peak


def test_a_tied_llama_in_fp32_under_autocast_is_0_bytes_off():
    """An fp32 base under bf16=True: autocast's copy of the shared matrix at the head, exact.

    ``estimate(..., precision="autocast-bf16")`` (the CLI's ``--precision
    autocast-bf16``): the frozen tied head casts the embedding's fp32 matrix
    at every call, a copy of its own that its backward keeps.
    """
    base = _model(TIED_LLAMA, torch.float32)
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    tracker = _train(model, TIED_LLAMA, 2, 9)
    answer = estimate(TIED_LLAMA, batch=2, sequence=9, lora=RANK, lora_alpha=2 * RANK,
                      setup="peft-lora", precision="autocast-bf16")
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


@pytest.mark.slow  # one Trainer run
def test_all_linear_on_a_tied_llama_at_other_sizes_is_0_bytes_off():
    """Every linear map adapted, sizes nothing was tuned on."""
    _, tracker, answer = _lora(TIED_LLAMA, 3, 13, "all-linear")
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


@pytest.mark.parametrize("config", [GEMMA, GEMMA2], ids=["gemma", "gemma2"])
def test_lora_on_tied_gemma_is_0_bytes_off(config):
    """Gemma's frozen norms keep ``1 + w`` alone (fp32); with the tied head, exact."""
    _, tracker, answer = _lora(config, 2, 9)
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


@pytest.mark.slow  # one Trainer run each
@pytest.mark.parametrize("config", [GEMMA, GEMMA2], ids=["gemma", "gemma2"])
def test_all_linear_on_tied_gemma_at_other_sizes_is_0_bytes_off(config):
    """Every linear map adapted, sizes nothing was tuned on."""
    _, tracker, answer = _lora(config, 3, 7, "all-linear")
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


def _full(config: dict, batch: int, sequence: int, attention: str | None = None):
    """The fully fine-tuned Trainer step of ``config``, tracked; and the hf-trainer estimate."""
    tracker = _train(_model(config, attention=attention), config, batch, sequence)
    answer = estimate({**config, "torch_dtype": "bfloat16"}, batch=batch, sequence=sequence,
                      setup="hf-trainer", flash=False if attention == "eager" else None)
    return tracker, answer


@pytest.mark.parametrize("config", [FALCON, FALCON_NEW], ids=["7b", "40b"])
def test_falcon_eager_trainer_step_is_0_bytes_off(config):
    """Eager Falcon under the Trainer (autocast over bf16 weights, fused AdamW): exact."""
    tracker, answer = _full(config, 2, 9, "eager")
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


@pytest.mark.slow  # one Trainer run each
@pytest.mark.parametrize("config", [FALCON, FALCON_NEW], ids=["7b", "40b"])
def test_falcon_eager_trainer_step_at_another_size_is_0_bytes_off(config):
    """The same at a size nothing was tuned on: other widths, depth, batch and length."""
    tracker, answer = _full({**config, **FALCON_OTHER}, 3, 13, "eager")
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


@pytest.mark.parametrize(("extra", "batch", "sequence"),
                         [({}, 2, 9), pytest.param(FALCON_OTHER, 3, 13, marks=pytest.mark.slow)],
                         ids=["tiny", "untuned"])
@pytest.mark.parametrize("config", [FALCON, FALCON_NEW], ids=["7b", "40b"])
def test_falcon_hf_trainer_step_with_sdpa_is_0_bytes_off(config, extra, batch, sequence):
    """The recipe as it is (SDPA, transformers' default): exact in both layouts.

    The 7B layout's SDPA runs PyTorch's math path, the 40B layout's the flash kernel.
    """
    tracker, answer = _full({**config, **extra}, batch, sequence)
    assert answer.settings["attention"] == "sdpa"
    assert answer.convention_name == "autograd"
    assert int(answer.peak) == tracker.peak


@pytest.mark.parametrize(("config", "layout", "attention", "batch", "sequence"), [
    (FALCON, "7b", "sdpa", 2, 9),
    (FALCON_NEW, "40b", "sdpa", 2, 9),
    (FALCON, "7b", "eager", 2, 9),
    (FALCON_NEW, "40b", "eager", 2, 9),
    pytest.param({**FALCON, **FALCON_OTHER}, "7b", "eager", 3, 13, marks=pytest.mark.slow),
    pytest.param({**FALCON_NEW, **FALCON_OTHER}, "40b", "eager", 3, 13, marks=pytest.mark.slow),
], ids=["7b-sdpa", "40b-sdpa", "7b-eager", "40b-eager", "7b-eager-other", "40b-eager-other"])
def test_lora_on_falcon_is_exact_or_its_gap_pinned_and_said(config, layout, attention, batch,
                                                          sequence):
    """LoRA on peft's default target of Falcon under the Trainer: 0 B off, or the pinned gap.

    Either way the answer is the autograd convention's, and it says LoRA on Falcon
    is not yet exact (the gaps are under the real step).
    """
    _, tracker, answer = _lora(config, batch, sequence, attention=attention)
    assert answer.convention_name == "autograd"
    gap = LORA_FALCON_UNDER.get((layout, attention, batch, sequence), 0)
    assert int(answer.peak) - tracker.peak == gap
    assert "LoRA on Falcon: measured" in answer.why


def test_falcon_takes_peft_default_target():
    """Falcon: peft adapts its fused query_key_value, as memtheory does, under SDPA."""
    model, _, answer = _lora(FALCON, 2, 9)
    assert model.config._attn_implementation == "sdpa"
    chosen = model.peft_config["default"].target_modules
    network = resolve_model(FALCON, batch=2, sequence=9).network
    assert set(chosen) == set(default_targets(network, "falcon")[0]) == {"query_key_value"}
    assert answer.convention_name == "autograd"
