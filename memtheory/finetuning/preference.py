"""DPO with a frozen reference model, as TRL's ``DPOTrainer`` runs it: the step's peak.

Read from TRL 1.16's installed source (``trl/trainer/dpo_trainer.py``,
``dpo_config.py``, ``utils.py``, ``kernels/chunked_logprob.py``):

* **One forward of 2B sequences.** ``DataCollatorForPreference``
  (``dpo_trainer.py:146-190``) puts the B prompt+chosen sequences and then the B
  prompt+rejected ones in one ``input_ids`` batch of 2B rows (right-padded), with
  a ``completion_mask``; ``_compute_loss`` (``dpo_trainer.py:1285-1340``) runs
  the policy on it once and splits the summed log-probabilities with
  ``chunk(2)``.
* **The reference forward comes second, under no_grad** (``dpo_trainer.py:1318-1338``),
  while the policy's saved activations are alive: for full fine-tuning
  ``self.ref_model``, a second, frozen copy of the weights (made from the
  checkpoint, ``dpo_trainer.py:908-929``, or the ``ref_model`` passed); under
  peft no copy: the same model with its adapters disabled (``use_adapter``).
  ``precompute_ref_log_probs=False`` by default (``dpo_config.py:227``).
* **A fused, chunked LM head** (``dpo_trainer.py:957-962``, ``utils.py:1548-1650``):
  neither forward builds the (2B, S, V) logits; ``ChunkedLogProbFunction``
  (``chunked_logprob.py:299-465``) projects tiles of at most ``TOKEN_CHUNK_SIZE``
  tokens by ``_CHUNKED_LOGPROB_CHUNK_SIZE`` vocabulary columns and keeps
  per-token log-probabilities, entropy, mean logit and top-1 flag (the entropy,
  ``logits/*`` and ``mean_token_accuracy`` metrics are reduced to floats with
  ``.item()``, ``dpo_trainer.py:1537-1601``, and hold nothing). Its backward is
  the step's peak on small models.
* **The loss** is ``-logsigmoid(beta * delta)`` (``loss_type=["sigmoid"]``,
  ``beta=0.1``, ``dpo_config.py:245-298``) over B scalars: a few bytes.
* Defaults inherited from TRL's base config: ``gradient_checkpointing=True``,
  ``bf16=True`` unless ``fp16``, ``learning_rate=1e-6``; ``padding_free=False``;
  the optimizer is the ``Trainer``'s (``adamw_torch_fused``).

The autograd convention has no fused, chunked head, so no :class:`~memtheory.recipes.Setup`
expresses the step (``Setup.recipe("trl-dpo")`` refuses, with the reason).
:func:`dpo_step_memory` builds it from the convention's pieces instead: the
``hf-trainer`` (or ``peft-lora``) recipe's step over 2B sequences up to the
final norm, plus the reference weights, plus what the DPO batch and the fused
head hold beyond it (:func:`dpo_head_bytes`), plus the fused head's backward
(:func:`fused_head_backward_bytes`), with every decoder layer of the policy
checkpointed (TRL's default, ``checkpointing=True``; the reference forward runs
with checkpointing disabled, ``dpo_trainer.py:1327``) or none. On CPU, fp32
weights with ``bf16`` off or on (autocast), checkpointing on or off, that is 0
bytes off the real ``DPOTrainer`` under ``memtheory.torch.track``
(``tests/pytorch/test_dpo_recipe.py``: two sizes, full fine-tuning and peft
LoRA), at the head's backward and at the rest of the backward and the
optimizer step (the recipe's later moments as the TRL step holds them, where
a large model's gradients put the peak), and, with peft LoRA under autocast
and checkpointing (TRL's defaults with a ``peft_config``), at the last
layer's recomputation, as its ``down_proj`` casts its frozen weight (adapters
on the MLP are not modelled there: the step's ``assumed`` says so,
:data:`~memtheory.finetuning.trl_head.RECOMPUTE_NOT_COUNTED`). Anywhere else
it is an estimate: on CUDA with Triton only the completion tokens are
projected (``utils.py:1642-1645``) and the fold runs in a kernel without the
N x V' temporaries.

Examples
--------
>>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
...         "num_key_value_heads": 2, "tie_word_embeddings": False}
>>> step = dpo_step_memory(tiny, pairs=2, sequence=7)
>>> step.parts["reference weights"] == step.parts["policy weights"]
True
>>> step.peak - step.parts["up to the final norm"] - step.parts["reference weights"] == (
...     dpo_head_bytes(4, 7, 32) + fused_head_backward_bytes(4 * 6, 32, 96))
True
"""

from __future__ import annotations

from memtheory.conventions.autograd.loops import loop_scalars
from memtheory.dtypes import dtype
from memtheory.finetuning.lora import LoRA
from memtheory.finetuning.trl_head import (
    TRL_TOKEN_CHUNK,
    TRL_VOCAB_CHUNK,
    TRLStepEstimate,
    check_trl_step,
    checkpointing_line,
    fused_head_backward_bytes,
    recompute_lines,
    trainer_step_beneath,
)
from memtheory.models.hf_config import ConfigLike
from memtheory.recipes import TRL_RECIPES

__all__ = [
    "DPO_UNSUPPORTED",
    "NO_TOKEN_COUNT",
    "TRL_TOKEN_CHUNK",
    "TRL_VOCAB_CHUNK",
    "dpo_head_bytes",
    "dpo_step_memory",
    "fused_head_backward_bytes",
]

DPO_UNSUPPORTED = TRL_RECIPES["trl-dpo"].why_no_setup
"""Why ``Setup.recipe("trl-dpo")`` refuses (``memtheory estimate --recipe trl-dpo`` answers)."""

_FP32 = int(dtype("fp32").bytes)
_INDEX = int(dtype("int64").bytes)

NO_TOKEN_COUNT = int(loop_scalars("hf-trainer", loss_bytes=_FP32,
                                  gradient_bytes=_FP32).whole_step["num_items_in_batch"])
"""Bytes the ``hf-trainer`` recipe holds through the step that a DPO step does not.

The ``Trainer`` counts the batch's tokens (``num_items_in_batch``, a 0-dim
tensor) only when the batch has ``"labels"`` (transformers 5.24
``trainer.py:2316-2318``); ``DataCollatorForPreference`` gives ``input_ids``,
``attention_mask`` and ``completion_mask`` and no labels, so a DPO step holds
it at no moment (measured under ``track()``: 4 bytes fewer at the fused head's
backward and at every later moment).
"""


def dpo_head_bytes(sequences: int, sequence: int, hidden: int) -> int:
    """Return what a DPO step holds at its fused head's backward beyond the recipe's at the norm.

    Set beside the ``hf-trainer`` (or ``peft-lora``) recipe's live bytes at the
    end of the final norm's forward, over the same ``sequences`` rows, the
    real step (TRL 1.16, fp32, CPU) holds, when the policy's fused head starts
    its backward:

    * one more ``sequences x sequence`` int64 tensor: the collator's
      ``input_ids``, ``attention_mask`` and ``completion_mask`` are alive
      (``dpo_trainer.py:146-190``), the labels (the recipe's targets) are not
      (``_compute_loss`` made them, ``dpo_trainer.py:1297``, and has returned);
    * not the final norm's output (``sequences x sequence x hidden`` fp32),
      but the fused head's saved copy of the shifted hidden states
      (``last_hidden_state[:, :-1].reshape(-1, H)``, ``utils.py:1617,1643``):
      ``N x hidden`` fp32, ``N = sequences x (sequence - 1)``;
    * the fused head's saved targets (``N`` int64), log Z and entropy (``N``
      fp32 each, ``chunked_logprob.py:380``), and the incoming gradient of the
      per-token log-probabilities (``N`` fp32);
    * 8 bytes of scalars, net: three fp32 scalars alive as the backward
      starts (the loss, the Trainer's scaled copy of it, and its gradient,
      ``ones_like``), less the ``hf-trainer`` recipe's ``num_items_in_batch``
      (:data:`NO_TOKEN_COUNT`), which this step never makes.

    The reference forward (under ``no_grad``) leaves nothing behind by then.

    Parameters
    ----------
    sequences : int
        Rows of the batch: twice the preference pairs.
    sequence : int
        Tokens per row.
    hidden : int
        The model's hidden size.

    Returns
    -------
    int

    Examples
    --------
    >>> dpo_head_bytes(4, 7, 32)  # tests/pytorch/test_dpo_recipe.py measures this size
    200
    """
    fp32, index = _FP32, _INDEX
    tokens = sequences * (sequence - 1)
    return (index * sequences * sequence
            - fp32 * sequences * sequence * hidden + fp32 * tokens * hidden
            + tokens * (index + 3 * fp32)
            + 3 * fp32 - NO_TOKEN_COUNT)


_PEAK_PARTS = ("up to the final norm", "reference weights", "batch and head beyond the recipe",
               "fused head backward")




def dpo_step_memory(
    config: ConfigLike,
    *,
    pairs: int,
    sequence: int,
    lora: LoRA | None = None,
    precision: str = "fp32",
    checkpointing: bool = True,
    precompute_ref_log_probs: bool = False,
) -> TRLStepEstimate:
    """Return the peak of one ``DPOTrainer`` step (TRL 1.16, CPU path).

    The peak is the larger of the fused head's backward (the sum of
    ``"up to the final norm"``, ``"reference weights"``, ``"batch and head
    beyond the recipe"`` and ``"fused head backward"``) and ``"after the
    head"`` (the rest of the backward and the optimizer step: the recipe's
    moments as the TRL step holds them, plus the reference weights and the
    collator's extra mask, less :data:`NO_TOKEN_COUNT`); both exact on CPU.

    Parameters
    ----------
    config : mapping, str or path
        A Hugging Face decoder configuration (``model_type`` included): a mapping,
        a ``config.json`` or a preset's name (``"llama-3-8b"``), as
        :func:`~memtheory.models.from_config` reads it.
    pairs : int
        Preference pairs per step (``per_device_train_batch_size``): the
        forward sees ``2 * pairs`` sequences.
    sequence : int
        Prompt plus completion tokens of each sequence (no padding).
    lora : LoRA, optional
        peft adapters: the reference is the same model with its adapters
        disabled, so no second copy of the weights.
    precision : {"fp32", "autocast-bf16"}, default "fp32"
        fp32 weights, with ``bf16=False`` or with ``bf16=True`` (TRL's
        default: ``torch.autocast`` in bf16, so the fused head's tile buffer is
        bf16 and its hidden chunk and weight tile are cast). With ``lora``
        under autocast each frozen projection whose input needs a gradient
        keeps its weight's bf16 copy (:class:`~memtheory.finetuning.Frozen`).
    checkpointing : bool, default True
        TRL's default (``DPOConfig.gradient_checkpointing=True``: every decoder
        layer, ``use_reentrant=False``); ``False`` for ``gradient_checkpointing=False``.
    precompute_ref_log_probs : bool, default False
        TRL's ``DPOConfig.precompute_ref_log_probs`` (default False,
        ``dpo_config.py:227``). True: the reference log-probabilities are
        computed over the dataset before training (``dpo_trainer.py:1013-1031``),
        so no reference model is loaded (``dpo_trainer.py:908-914``: no
        ``"reference weights"``) and none runs in the step
        (``dpo_trainer.py:1318-1319``); the batch carries them instead
        (``ref_chosen_logps`` and ``ref_rejected_logps``, ``pairs`` fp32 each,
        ``dpo_trainer.py:177-180, 203-206``), alive through the step. Modelled from the
        source, not measured; the pass that precomputes them (the policy's
        forward under ``no_grad``, before the optimizer has any state) holds
        less than a training step.

    Returns
    -------
    TRLStepEstimate

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> step = dpo_step_memory(tiny, pairs=2, sequence=7, lora=LoRA(4, 8))
    >>> step.parts["reference weights"], step.assumed[2]
    (0, 'reference: the same weights, adapters disabled (peft)')

    Under autocast (TRL's ``bf16=True``) without checkpointing, every frozen
    projection whose input needs a gradient keeps its weight's bf16 copy
    until the backward:

    >>> mixed = dpo_step_memory(tiny, pairs=2, sequence=7, lora=LoRA(4, 8),
    ...                         precision="autocast-bf16", checkpointing=False)
    >>> mixed.peak_moment, mixed.parts["reference weights"]
    ('fused head backward', 0)

    With the reference log-probabilities precomputed, full fine-tuning loads
    no reference model; the batch carries 2 x pairs fp32 log-probabilities:

    >>> full = dpo_step_memory(tiny, pairs=2, sequence=7)
    >>> early = dpo_step_memory(tiny, pairs=2, sequence=7, precompute_ref_log_probs=True)
    >>> full.peak - early.peak == full.parts["reference weights"] - 2 * 2 * 4
    True
    """
    check_trl_step("dpo_step_memory", {"pairs": pairs, "sequence": sequence}, lora=lora,
                   precision=precision)
    sequences = 2 * pairs
    beneath = trainer_step_beneath(config, sequences=sequences, sequence=sequence, lora=lora,
                                   precision=precision, checkpointing=checkpointing)
    read, weights = beneath.read, beneath.weights
    reference = weights if lora is None and not precompute_ref_log_probs else 0
    carried = 2 * pairs * _FP32 if precompute_ref_log_probs else 0  # ref_*_logps in the batch
    hidden = int(read["hidden_size"])
    tokens = sequences * (sequence - 1)
    head = fused_head_backward_bytes(tokens, hidden, int(read["vocab_size"]),
                                     weight_gradient=lora is None,
                                     autocast=precision == "autocast-bf16")
    parts = {
        "up to the final norm": beneath.to_norm,
        "reference weights": reference,
        "batch and head beyond the recipe": dpo_head_bytes(sequences, sequence, hidden) + carried,
        "fused head backward": head,
        # the reference weights, one more int64 mask than the recipe's batch, no token count
        "after the head": (beneath.after_head + reference + _INDEX * sequences * sequence
                           - NO_TOKEN_COUNT + carried),
        "checkpointing keeps less, per layer": beneath.layer_saving,
        "policy weights": weights,
    }
    assumed = (
        "trl-dpo: TRL 1.16 DPOTrainer, loss_type sigmoid, "
        f"precompute_ref_log_probs={precompute_ref_log_probs}",
        f"{sequences} sequences (chosen and rejected) in one forward, {sequence} tokens each, "
        "no padding",
        "reference: " + _reference_line(lora, precompute_ref_log_probs),
        "fused chunked LM head (no logits): the peak is its backward or the rest of the backward",
        f"CPU path, fp32 weights, {precision}",
        checkpointing_line(checkpointing),
        *recompute_lines(lora, precision, checkpointing),
    )
    return TRLStepEstimate.at_most(parts, _PEAK_PARTS, assumed)


def _reference_line(lora: LoRA | None, precomputed: bool) -> str:
    """Return what stands for the reference model, in words (after ``"reference: "``)."""
    if precomputed:
        return ("log-probabilities precomputed before training (modelled from the source): "
                "no reference model, 2 x pairs fp32 log-probabilities in the batch")
    if lora is not None:
        return "the same weights, adapters disabled (peft)"
    return "a frozen copy of the weights, forward under no_grad"
