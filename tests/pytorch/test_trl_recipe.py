"""TRL's ``SFTTrainer`` under ``track()``: not the ``hf-trainer`` step, and why, to the byte.

TRL 1.16's ``SFTTrainer`` subclasses transformers' ``Trainer`` but changes the
step in two ways (read from the installed source):

* **Defaults** (``trl/trainer/base_config.py:55-75,108``, ``sft_config.py:140``):
  ``gradient_checkpointing=True`` (the Trainer's is False), ``bf16=True``
  unless ``fp16`` is set (autocast over the checkpoint's weights),
  ``logging_steps=10``, ``learning_rate=2e-5``. The optimizer is the
  Trainer's (``adamw_torch_fused``).
* **A fused LM head** (``sft_trainer.py:1142-1147`` calls
  ``trl/trainer/utils.py:1548`` ``add_fused_lm_head``; ``compute_loss``,
  ``sft_trainer.py:1560-1677``, calls ``model(**inputs, fused_lm_head=True)``):
  the (B, S, V) logits are never built. ``ChunkedLogProbFunction``
  (``trl/kernels/chunked_logprob.py:299-465``) projects the hidden states in
  tiles of ``TOKEN_CHUNK_SIZE`` (4096) tokens by ``_CHUNKED_LOGPROB_CHUNK_SIZE``
  (32768) vocabulary columns and keeps per-token log-probabilities, entropy
  and top-1 flags (the ``entropy`` and ``mean_token_accuracy`` metrics,
  ``sft_trainer.py:1639-1644``, are reduced to Python floats with ``.item()``
  and hold nothing). Its tile buffer ``mm_buf`` is ``min(N, 4096) x 32768``
  in the compute dtype *whatever the vocabulary*: on a small model it is the
  largest tensor of the step.

The ``hf-trainer`` recipe is 0 bytes off the real ``Trainer``
(``tests/pytorch/test_trainer_recipe.py``); the SFT step is not that step, so
:func:`memtheory.finetuning.sft_step_memory` builds it from the recipe's
pieces, and these tests check each piece and the whole to the byte:

* the fused head's backward (the step's peak on these models) allocates, on
  top of what is alive when it starts, an fp32 gradient of the hidden states
  (N x H) and, unless the head is frozen (LoRA), of the head's weight (V x H),
  the tile buffer, and on CPU the torch fallback ``_backward_tile``
  (``chunked_logprob.py:257-296``), which holds seven fp32 N x V' temporaries
  and one bool one at its most (V' the tile's width, here V). Under autocast
  the hidden chunk and the weight tile are cast to bf16 as well (the bf16
  tile's fp32 copy is freed before the most). Sized here from the source,
  independently of the library.
* what is alive when it starts is the ``hf-trainer`` (``peft-lora``) recipe's
  step up to the final norm plus
  :func:`~memtheory.finetuning.sft_head_bytes`: the collator's attention mask,
  the head's saved copy of the shifted hidden states in place of the norm's
  output, its saved targets, log Z and entropy, the incoming gradient, and
  three scalars (the loss, accelerate's scaled loss, the root gradient). The
  108 B and 576 B that an earlier version of this file left as "within the
  head's saved tensors" at the two sizes are exactly those.

Checked at the sizes that named them and at one more, (4, 9), never used to
find them; full fine-tuning and peft LoRA (rank 4 on ``q_proj``/``v_proj``)
in fp32, full fine-tuning under autocast, gradient checkpointing on (TRL's
default: every decoder layer keeps only its input, ``use_reentrant=False``)
and off. The moment after the head's backward (the rest of the backward, the
optimizer step) is exact too, in every one of these cases.

Other SFTConfig defaults (``sft_config.py:222-294``): ``packing=False``,
``padding_free=False``, ``completion_only_loss=None`` (labels -100 on the
prompt of a prompt-completion dataset; on CPU every position is still
projected, on CUDA only the labelled ones), ``assistant_only_loss=False``,
``loss_type="nll"``, ``activation_offloading=False``. Label smoothing or a
``compute_loss_func`` bring back the full logits plus a second, no-grad fused
forward for the metrics (``sft_trainer.py:1593-1609``): not measured here.

Not a recipe: ``Setup.recipe("trl-sft")`` refuses by name and points to
``sft_step_memory`` (the autograd convention has no fused, chunked LM head).
On CUDA with Triton the fold runs in a kernel (no N x V' temporaries) and
only the labelled positions are projected (``utils.py:1642-1645``,
``hidden_states[mask]``): the CPU numbers here are the CPU path's. N is
B x (S - 1): every position is scored on CPU, labelled or not.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")
trl = pytest.importorskip("trl", reason="TRL is in the optional 'torch' extra (trl>=1.16)")
datasets = pytest.importorskip("datasets", reason="TRL's SFTTrainer takes a datasets.Dataset")
peft = pytest.importorskip("peft", reason="the LoRA case needs peft")

from memtheory import training_memory  # noqa: E402
from memtheory.dtypes import dtype  # noqa: E402
from memtheory.finetuning import LoRA, sft_step_memory  # noqa: E402
from memtheory.finetuning.trl_head import RECOMPUTE_NOT_COUNTED, recompute_lines  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch import track  # noqa: E402
from memtheory.torch.recipe_steps import TINY_LLAMA  # noqa: E402
from tests.pytorch.trl_support import fused_backward_start  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TINY = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
"""The recipes' tiny Llama (memtheory.torch.recipe_steps), as LlamaConfig's keywords."""
SIZES = [(2, 7), (3, 12)]
"""(batch, sequence): not the sizes the Trainer's recipe test uses."""
FRESH = (4, 9)
"""A size never used to find sft_head_bytes' terms: checked, not tuned for."""
RANK, TARGETS = 4, ("q_proj", "v_proj")
"""peft's LoRA: rank 4 on peft's default Llama targets; alpha is LoraConfig's default, 8."""


def _chunk_sizes() -> tuple[int, int]:
    """TRL's token and vocabulary tile sizes, read from the installed library."""
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    return chunked_logprob.TOKEN_CHUNK_SIZE, utils._CHUNKED_LOGPROB_CHUNK_SIZE


def _tokenizer():
    """A word-level tokenizer over the tiny vocabulary, built in memory (no download)."""
    from tokenizers import Tokenizer, models

    vocabulary = {f"t{i}": i for i in range(TINY["vocab_size"])}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="t0"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="t0",
                                                eos_token="t1")


def _run(tmp_path, batch: int, sequence: int, autocast: bool | None, lora: bool = False,
         checkpointing: bool = False):
    """Track two steps of the real SFTTrainer on fp32 weights.

    ``autocast=None`` keeps TRL's defaults: bf16 autocast and checkpointing on.
    """
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**TINY))
    ids = torch.randint(2, TINY["vocab_size"], (2 * batch, sequence))
    rows = datasets.Dataset.from_list([{"input_ids": row.tolist()} for row in ids])
    precision = {} if autocast is None else {"bf16": autocast,
                                             "gradient_checkpointing": checkpointing}
    args = trl.SFTConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=batch, report_to=[],
        use_cpu=True, disable_tqdm=True, save_strategy="no", logging_strategy="no", **precision,
    )
    adapters = {"peft_config": peft.LoraConfig(r=RANK, target_modules=list(TARGETS))} if lora \
        else {}
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=rows,
                             processing_class=_tokenizer(), **adapters)
    assert model.config._attn_implementation == "sdpa"
    with track(trainer.model, record=True) as tracker:
        trainer.train()
    assert model.is_gradient_checkpointing is (autocast is None or checkpointing)
    return trainer, tracker


_RUNS: dict[tuple[int, int, bool | None, bool, bool], tuple] = {}


@pytest.fixture
def tracked(tmp_path) -> Iterator:
    """Track the real SFTTrainer once per size and case (runs are shared between tests)."""

    def run(batch: int, sequence: int, autocast: bool | None, lora: bool = False,
            checkpointing: bool = False):
        key = (batch, sequence, autocast, lora, checkpointing)
        if key not in _RUNS:
            _RUNS[key] = _run(tmp_path, batch, sequence, autocast, lora, checkpointing)
        return _RUNS[key]

    yield run


def _fused_backward_bytes(batch: int, sequence: int, autocast: bool, lora: bool = False) -> int:
    """What the fused head's backward allocates at its most, sized from the source."""
    token_chunk, vocabulary_chunk = _chunk_sizes()
    hidden, vocabulary = TINY["hidden_size"], TINY["vocab_size"]
    tokens = batch * (sequence - 1)
    width = min(vocabulary, vocabulary_chunk)
    fp32, bf16, flag = dtype("fp32").bytes, dtype("bf16").bytes, dtype("bool").bytes
    compute = bf16 if autocast else fp32
    rows = min(tokens, token_chunk)  # the tile's rows: one chunk of tokens
    gradients = fp32 * (tokens * hidden + (0 if lora else vocabulary * hidden))
    tile_buffer = compute * rows * vocabulary_chunk
    temporaries = rows * width * (7 * fp32 + flag)
    if autocast:  # the hidden chunk and the weight tile, cast to bf16 (chunked_logprob.py:420-423)
        temporaries += bf16 * (rows * hidden + width * hidden)
    return int(gradients + tile_buffer + temporaries)


def _prediction(batch: int, sequence: int, precision: str):
    network = from_config({"model_type": "llama", **TINY}, batch=batch, sequence=sequence,
                          loss=True, flash=True)
    return training_memory(network, setup=Setup.recipe("hf-trainer"), precision=precision)


def test_sft_defaults_differ_from_the_trainers(tmp_path):
    """SFTConfig turns on checkpointing and bf16 autocast; the optimizer is the Trainer's."""
    sft = trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    plain = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert (sft.gradient_checkpointing, plain.gradient_checkpointing) == (True, False)
    assert (sft.bf16, plain.bf16) == (True, False)
    assert sft.optim == plain.optim
    assert sft.learning_rate < plain.learning_rate
    assert (sft.packing, sft.padding_free, sft.loss_type) == (False, False, "nll")


def test_the_collator_keeps_ids_labels_and_mask(tracked):
    """One SFT batch: input_ids, labels and attention_mask, B x S int64 each (no padding)."""
    batch, sequence = SIZES[0]
    trainer, _ = tracked(batch, sequence, False)
    inputs = next(iter(trainer.get_train_dataloader()))
    assert sorted(inputs) == ["attention_mask", "input_ids", "labels"]
    for tensor in inputs.values():
        assert (tuple(tensor.shape), tensor.dtype) == ((batch, sequence), torch.int64)


@pytest.mark.parametrize(("batch", "sequence"), SIZES)
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "autocast-bf16"])
def test_the_fused_heads_backward_is_the_peak_and_is_sized(tracked, batch, sequence, autocast):
    """The SFT step peaks in the fused head's backward, by exactly its buffers and temporaries."""
    _, tracker = tracked(batch, sequence, autocast)
    start = fused_backward_start(tracker)
    before = tracker.timeline[start - 1][2]
    assert tracker.peak - before == _fused_backward_bytes(batch, sequence, autocast)
    assert tracker.peak_moment.startswith("backward (2)")


@pytest.mark.parametrize(("batch", "sequence"), [*SIZES, FRESH])
@pytest.mark.parametrize(("lora", "autocast"), [
    pytest.param(False, False, id="full-fp32"), pytest.param(True, False, id="lora-fp32"),
    pytest.param(False, True, id="full-autocast-bf16"),
    pytest.param(True, True, id="lora-autocast-bf16", marks=pytest.mark.slow),  # two more runs
])
@pytest.mark.parametrize("checkpointing", [True, False], ids=["checkpointed", "plain"])
def test_the_sft_step_is_exact_on_cpu(tracked, batch, sequence, lora, autocast, checkpointing):
    """sft_step_memory is 0 bytes off the real SFTTrainer's peak, and so is what lies beneath."""
    trainer, tracker = tracked(batch, sequence, autocast, lora, checkpointing)
    step = sft_step_memory(TINY_LLAMA, batch=batch, sequence=sequence,
                           lora=LoRA(RANK, 2 * RANK, targets=TARGETS) if lora else None,
                           precision="autocast-bf16" if autocast else "fp32",
                           checkpointing=checkpointing)
    start = fused_backward_start(tracker)
    before = tracker.timeline[start - 1][2]
    assert step.parts["fused head backward"] == _fused_backward_bytes(batch, sequence, autocast,
                                                                      lora)
    assert before == step.peak - step.parts["fused head backward"]
    assert tracker.peak == step.peak
    assert step.peak_moment == "fused head backward"
    assert step.parts["weights"] == sum(p.nbytes for p in trainer.model.parameters())
    # after the head: the rest of the backward and the optimizer step, exact too
    later = _after_the_head(tracker, start, before, batch, sequence, lora)
    # with peft LoRA under autocast and checkpointing the most after the head is the last
    # layer's recomputation, as down_proj casts its frozen weight: modelled, 0 B off too
    assert RECOMPUTE_NOT_COUNTED not in step.assumed
    assert not recompute_lines(LoRA(RANK, 2 * RANK, targets=TARGETS) if lora else None,
                               "autocast-bf16" if autocast else "fp32", checkpointing)
    assert step.parts["after the head"] == later


def _after_the_head(tracker, start: int, before: int, batch: int, sequence: int,
                    lora: bool) -> int:
    """The most live in step two once the fused head's tile and temporaries are freed."""
    tokens = batch * (sequence - 1)
    gradients = dtype("fp32").bytes * tokens * TINY["hidden_size"] + (
        0 if lora else dtype("fp32").bytes * TINY["vocab_size"] * TINY["hidden_size"])
    operations = tracker.timeline
    end = next(i for i in range(start, len(operations))
               if operations[i][2] <= before + gradients and i > start + 1)
    return max(live for phase, _, live in operations[end:]
               if phase in ("backward (2)", "optimizer step (2)"))


@pytest.mark.parametrize(("batch", "sequence"), SIZES)
def test_the_hf_trainer_recipe_is_not_the_sft_step(tracked, batch, sequence):
    """The hf-trainer recipe's answer is below the SFT step by about the tile buffer."""
    _, tracker = tracked(batch, sequence, False)
    predicted = _prediction(batch, sequence, "fp32")
    tokens = batch * (sequence - 1)
    token_chunk, vocabulary_chunk = _chunk_sizes()
    tile_buffer = dtype("fp32").bytes * min(tokens, token_chunk) * vocabulary_chunk
    assert tracker.peak - int(predicted.peak) > tile_buffer - (
        int(predicted.peak) - int(predicted.timeline["forward model.norm"]))


def test_with_trls_defaults_the_step_is_exact(tracked):
    """SFTConfig's own defaults (checkpointing on, bf16 autocast): sft_step_memory's default."""
    batch, sequence = SIZES[0]
    trainer, tracker = tracked(batch, sequence, None)
    assert trainer.args.gradient_checkpointing_kwargs in (None, {})  # use_reentrant=False
    _, plain = tracked(batch, sequence, True)
    before = tracker.timeline[fused_backward_start(tracker) - 1][2]
    assert tracker.peak - before == _fused_backward_bytes(batch, sequence, True)
    assert tracker.peak < plain.peak
    step = sft_step_memory(TINY_LLAMA, batch=batch, sequence=sequence, precision="autocast-bf16")
    assert tracker.peak == step.peak
    position_ids = 8 * sequence  # (1, S) int64, held by the checkpoints
    assert plain.peak - tracker.peak == TINY["num_hidden_layers"] * step.parts[
        "checkpointing keeps less, per layer"] - position_ids


@pytest.mark.parametrize(("batch", "sequence"), SIZES)
def test_lora_under_autocast_reaches_the_head_as_in_fp32(tracked, batch, sequence):
    """Checkpointed LoRA under bf16 autocast holds at the head what fp32 LoRA does.

    Measured: each checkpointed layer keeps only its fp32 input, so no frozen
    weight's bf16 copy is alive when the fused head's backward starts, and
    that backward adds its autocast tiles (no weight gradient).
    ``sft_step_memory`` says the same, from its own parts.
    """
    _, autocast = tracked(batch, sequence, True, True, True)
    _, fp32 = tracked(batch, sequence, False, True, True)
    before = autocast.timeline[fused_backward_start(autocast) - 1][2]
    assert before == fp32.timeline[fused_backward_start(fp32) - 1][2]
    assert autocast.peak - before == _fused_backward_bytes(batch, sequence, True, lora=True)
    steps = [sft_step_memory(TINY_LLAMA, batch=batch, sequence=sequence,
                             lora=LoRA(RANK, 2 * RANK, targets=TARGETS), precision=precision)
             for precision in ("autocast-bf16", "fp32")]
    assert steps[0].peak - steps[0].parts["fused head backward"] == before
    assert steps[0].parts["up to the final norm"] == steps[1].parts["up to the final norm"]
