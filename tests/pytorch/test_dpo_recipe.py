"""TRL's ``DPOTrainer`` under ``track()``: two passes, a frozen reference, a fused head.

One real DPO step (TRL 1.16) on the recipes' tiny Llama, built from its
configuration (no download), on a pre-tokenized in-memory preference dataset
(``prompt_ids``, ``chosen_ids``, ``rejected_ids``; the trainer's text
preparation is skipped, the collator is TRL's own), full fine-tuning (with a
``deepcopy`` of the model as ``ref_model``, as TRL would load a second copy of
the checkpoint, ``dpo_trainer.py:908-929``) and peft LoRA (no reference model:
adapters disabled). fp32 weights, ``bf16`` off or on (autocast), gradient
checkpointing on (TRL's default) and off: the steps
:func:`memtheory.finetuning.dpo_step_memory` models, and with TRL's own
defaults (last test).

What is checked exact (0 bytes): the batch of 2B sequences, the reference
weights (a second copy, or none under peft), the fused LM head's backward,
which is the step's peak (:func:`~memtheory.finetuning.fused_head_backward_bytes`),
and the whole peak: :func:`~memtheory.finetuning.dpo_step_memory`, the
``hf-trainer`` (``peft-lora``) recipe's step over 2B sequences up to the final
norm plus the reference weights plus :func:`~memtheory.finetuning.dpo_head_bytes`
plus that backward. The reference forward runs under ``no_grad`` after the
policy's and leaves nothing behind by the backward.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")
trl = pytest.importorskip("trl", reason="TRL is in the optional 'torch' extra (trl>=1.16)")
datasets = pytest.importorskip("datasets", reason="TRL's DPOTrainer takes a datasets.Dataset")
peft = pytest.importorskip("peft", reason="the LoRA case needs peft")

from memtheory.dtypes import dtype  # noqa: E402
from memtheory.finetuning import (  # noqa: E402
    TRL_TOKEN_CHUNK,
    TRL_VOCAB_CHUNK,
    LoRA,
    dpo_step_memory,
    fused_head_backward_bytes,
)
from memtheory.finetuning.trl_head import RECOMPUTE_NOT_COUNTED, recompute_lines  # noqa: E402
from memtheory.torch import track  # noqa: E402
from memtheory.torch.recipe_steps import TINY_LLAMA  # noqa: E402
from tests.pytorch.trl_support import fused_backward_start  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TINY = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
"""The recipes' tiny Llama (memtheory.torch.recipe_steps), as LlamaConfig's keywords."""
SIZES = [(2, 3, 4), (3, 5, 7)]
"""(pairs, prompt, completion): not the sizes any other recipe test uses."""
RANK, TARGETS = 4, ("q_proj", "v_proj")
"""peft's LoRA: rank 4 on peft's default Llama targets; alpha is LoraConfig's default, 8."""


class _Pretokenized(trl.DPOTrainer):
    """DPOTrainer on rows that are already token ids: its text preparation is skipped."""

    def _prepare_dataset(self, dataset, *args, **kwargs):
        """Return the rows as they are: TRL's collator reads their token ids."""
        return dataset


def _tokenizer():
    """A word-level tokenizer over the tiny vocabulary, built in memory: TRL reads its pad id."""
    from tokenizers import Tokenizer, models

    vocabulary = {f"t{i}": i for i in range(TINY["vocab_size"])}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="t0"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="t0",
                                                eos_token="t1")


def _rows(pairs: int, prompt: int, completion: int) -> list[dict[str, list[int]]]:
    """Enough preference rows for two steps, every sequence prompt + completion long."""
    generator = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:
        return torch.randint(2, TINY["vocab_size"], (n,), generator=generator).tolist()

    return [{"prompt_ids": ids(prompt), "chosen_ids": ids(completion),
             "rejected_ids": ids(completion)} for _ in range(2 * pairs)]


def _trainer(tmp_path, pairs: int, prompt: int, completion: int, lora: bool,
             autocast: bool = False, checkpointing: bool = False, precompute: bool = False):
    """The real DPOTrainer: fp32 weights, bf16 autocast or not, checkpointing off, two steps.

    ``precompute``: ``precompute_ref_log_probs=True`` and no ``ref_model``, as a user
    asks it: TRL loads no reference model then (``dpo_trainer.py:908-914``).
    """
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**TINY))
    args = trl.DPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=pairs, report_to=[],
        use_cpu=True, disable_tqdm=True, save_strategy="no", logging_strategy="no",
        bf16=autocast, gradient_checkpointing=checkpointing,
        precompute_ref_log_probs=precompute,
    )
    reference = (
        {"peft_config": peft.LoraConfig(r=RANK, target_modules=list(TARGETS))} if lora
        else {} if precompute else {"ref_model": copy.deepcopy(model)}
    )
    return _Pretokenized(model=model, args=args, processing_class=_tokenizer(),
                         train_dataset=datasets.Dataset.from_list(_rows(pairs, prompt,
                                                                        completion)),
                         **reference)


_RUNS: dict[tuple[int, int, int, bool, bool, bool, bool], tuple] = {}


@pytest.fixture
def tracked(tmp_path) -> Iterator:
    """Track two steps of the real DPOTrainer, once per size and case, the reference counted."""

    def run(pairs: int, prompt: int, completion: int, lora: bool, autocast: bool = False,
            checkpointing: bool = False, precompute: bool = False):
        key = (pairs, prompt, completion, lora, autocast, checkpointing, precompute)
        if key not in _RUNS:
            trainer = _trainer(tmp_path, pairs, prompt, completion, lora, autocast,
                               checkpointing, precompute)
            reference = () if trainer.ref_model is None else tuple(
                trainer.ref_model.parameters())
            with track(trainer.model, record=True, inputs=reference) as tracker:
                trainer.train()
            _RUNS[key] = (trainer, tracker)
        return _RUNS[key]

    yield run


def test_dpo_defaults_are_read_from_the_installed_trl(tmp_path):
    """Sigmoid loss, beta 0.1, reference log-probs not precomputed, TRL's base-config defaults."""
    dpo = trl.DPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    plain = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert (dpo.loss_type, dpo.beta, dpo.precompute_ref_log_probs) == (["sigmoid"], 0.1, False)
    assert (dpo.padding_free, dpo.sync_ref_model) == (False, False)
    assert (dpo.gradient_checkpointing, plain.gradient_checkpointing) == (True, False)
    assert (dpo.bf16, plain.bf16) == (True, False)
    assert dpo.optim == plain.optim


def test_the_tile_sizes_are_the_installed_trls():
    """The tile sizes memtheory uses are the ones TRL's fused head uses."""
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    assert (TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK) == (
        chunked_logprob.TOKEN_CHUNK_SIZE, utils._CHUNKED_LOGPROB_CHUNK_SIZE)


@pytest.mark.parametrize(("pairs", "prompt", "completion"), SIZES)
def test_chosen_and_rejected_are_one_forward_of_2b_sequences(tmp_path, pairs, prompt,
                                                              completion):
    """TRL's collator stacks B chosen then B rejected sequences into one batch."""
    trainer = _trainer(tmp_path, pairs, prompt, completion, lora=False)
    batch = next(iter(trainer.get_train_dataloader()))
    assert tuple(batch["input_ids"].shape) == (2 * pairs, prompt + completion)
    chosen, rejected = batch["completion_mask"].chunk(2)
    assert chosen.sum() == rejected.sum() == pairs * completion


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_reference_is_a_second_copy_or_the_adapters_off(tracked, lora):
    """Full fine-tuning keeps a second copy of the weights; peft keeps none."""
    trainer, tracker = tracked(*SIZES[0], lora)
    if lora:
        assert trainer.ref_model is None
        return
    policy = sum(p.nbytes for p in trainer.model.parameters())
    reference = sum(p.nbytes for p in trainer.ref_model.parameters())
    assert reference == policy
    assert not {p.data_ptr() for p in trainer.model.parameters()} & {
        p.data_ptr() for p in trainer.ref_model.parameters()}
    assert tracker.footprint.components["input"] >= reference


@pytest.mark.parametrize(("pairs", "prompt", "completion"), SIZES)
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "autocast-bf16"])
def test_the_fused_heads_backward_is_the_peak_and_is_sized(tracked, pairs, prompt, completion,
                                                           lora, autocast):
    """The DPO step peaks in the policy's fused-head backward, by exactly its buffers."""
    _, tracker = tracked(pairs, prompt, completion, lora, autocast)
    start = fused_backward_start(tracker)
    before = tracker.timeline[start - 1][2]
    sequence = prompt + completion
    assert tracker.peak - before == fused_head_backward_bytes(
        2 * pairs * (sequence - 1), TINY["hidden_size"], TINY["vocab_size"],
        weight_gradient=not lora, autocast=autocast)
    assert tracker.peak_moment.startswith("backward (2)")
    reference_forward = max(live for phase, _, live in tracker.timeline
                            if phase == "forward (4)")  # step two: policy (3), reference (4)
    assert reference_forward < tracker.peak


@pytest.mark.parametrize(("pairs", "prompt", "completion"), SIZES)
@pytest.mark.parametrize(("lora", "autocast"), [
    pytest.param(False, False, id="full-fp32"), pytest.param(True, False, id="lora-fp32"),
    pytest.param(False, True, id="full-autocast-bf16"),
    pytest.param(True, True, id="lora-autocast-bf16", marks=pytest.mark.slow),  # two more runs
])
@pytest.mark.parametrize("checkpointing", [True, False], ids=["checkpointed", "plain"])
def test_the_dpo_step_is_exact_on_cpu(tracked, pairs, prompt, completion, lora, autocast,
                                      checkpointing):
    """dpo_step_memory is 0 bytes off the real DPOTrainer's peak, and so is what lies beneath."""
    trainer, tracker = tracked(pairs, prompt, completion, lora, autocast, checkpointing)
    assert trainer.model.is_gradient_checkpointing is checkpointing
    sequence = prompt + completion
    step = dpo_step_memory(TINY_LLAMA, pairs=pairs, sequence=sequence,
                           lora=LoRA(RANK, 2 * RANK, targets=TARGETS) if lora else None,
                           precision="autocast-bf16" if autocast else "fp32",
                           checkpointing=checkpointing)
    before = tracker.timeline[fused_backward_start(tracker) - 1][2]
    assert before == step.peak - step.parts["fused head backward"]
    assert tracker.peak == step.peak
    assert step.parts["policy weights"] == sum(p.nbytes for p in trainer.model.parameters())
    # after the head: the recipe's later moments with the reference and the extra mask, exact
    tokens = 2 * pairs * (sequence - 1)
    fp32 = dtype("fp32").bytes
    gradients = fp32 * tokens * TINY["hidden_size"] + (
        0 if lora else fp32 * TINY["vocab_size"] * TINY["hidden_size"])
    start = fused_backward_start(tracker)
    operations = tracker.timeline
    end = next(i for i in range(start + 2, len(operations))
               if operations[i][2] <= before + gradients)
    later = max(live for phase, _, live in operations[end:]
                if phase in ("backward (2)", "optimizer step (2)"))
    # with peft LoRA under autocast and checkpointing the most after the head is the last
    # layer's recomputation, as down_proj casts its frozen weight: modelled, 0 B off too
    assert RECOMPUTE_NOT_COUNTED not in step.assumed
    assert not recompute_lines(LoRA(RANK, 2 * RANK, targets=TARGETS) if lora else None,
                               "autocast-bf16" if autocast else "fp32", checkpointing)
    assert step.parts["after the head"] == later


def test_with_trls_defaults_the_step_is_exact(tracked, tmp_path):
    """DPOConfig's defaults (checkpointing on, bf16 autocast): dpo_step_memory's default, 0 B."""
    pairs, prompt, completion = SIZES[0]
    assert trl.DPOConfig(output_dir=str(tmp_path), use_cpu=True,
                         report_to=[]).gradient_checkpointing_kwargs in (None, {})
    _, tracker = tracked(pairs, prompt, completion, False, True, True)
    _, plain = tracked(pairs, prompt, completion, False, True, False)
    step = dpo_step_memory(TINY_LLAMA, pairs=pairs, sequence=prompt + completion,
                           precision="autocast-bf16")
    assert tracker.peak == step.peak
    position_ids = 8 * (prompt + completion)  # (1, S) int64, held by the checkpoints
    assert plain.peak - tracker.peak == TINY["num_hidden_layers"] * step.parts[
        "checkpointing keeps less, per layer"] - position_ids
    _, adapters = tracked(pairs, prompt, completion, True, True, True)  # and with a peft_config
    lora = dpo_step_memory(TINY_LLAMA, pairs=pairs, sequence=prompt + completion,
                           lora=LoRA(RANK, 2 * RANK, targets=TARGETS), precision="autocast-bf16")
    assert (adapters.peak, lora.peak_moment) == (lora.peak, "fused head backward")


def test_precomputed_reference_log_probs_are_exact(tracked):
    """precompute_ref_log_probs=True: no reference model, its log-probs in the batch; 0 B off."""
    pairs, prompt, completion = SIZES[1]
    trainer, tracker = tracked(pairs, prompt, completion, False, False, True, True)
    assert trainer.ref_model is None
    step = dpo_step_memory(TINY_LLAMA, pairs=pairs, sequence=prompt + completion,
                           precision="fp32", precompute_ref_log_probs=True)
    assert step.parts["reference weights"] == 0
    assert tracker.peak == step.peak
