"""Supervised fine-tuning as TRL's ``SFTTrainer`` runs it: the step's peak.

Read from TRL 1.16's installed source (``trl/trainer/sft_trainer.py``,
``sft_config.py``, ``base_config.py``, ``utils.py``,
``kernels/chunked_logprob.py``) and measured under ``memtheory.torch.track``:

* **The batch** (``DataCollatorForLanguageModeling.torch_call``,
  ``sft_trainer.py:168-227``): ``input_ids`` (line 195), ``labels`` (line 201,
  -100 on padding and, for prompt-completion data, on the prompt) and
  ``attention_mask`` (line 224), B x S int64 each, alive through the step.
* **A fused, chunked LM head** (``sft_trainer.py:1142-1147`` calls
  ``add_fused_lm_head(..., outputs=("log_probs", "entropy", "is_top1"))``;
  ``compute_loss``, ``sft_trainer.py:1611``, runs ``model(**inputs,
  fused_lm_head=True)``): no (B, S, V) logits; the per-token loss is
  ``-log_probs`` summed over the labelled tokens and divided by
  ``num_items_in_batch`` (``sft_trainer.py:1612-1618``), then multiplied by the
  number of processes (``average_tokens_across_devices``, line 1624). The
  ``entropy`` and ``mean_token_accuracy`` metrics are reduced to Python floats
  with ``.item()`` (``sft_trainer.py:1641-1644``) and hold nothing.
* **Defaults** (``base_config.py:55-75,108``, ``sft_config.py:222-294``):
  ``gradient_checkpointing=True`` (the ``Trainer``'s is False), ``bf16=True``
  unless ``fp16``, ``packing=False``, ``padding_free=False``,
  ``loss_type="nll"``; the optimizer is the ``Trainer``'s
  (``adamw_torch_fused``).

The autograd convention has no fused, chunked head, so no
:class:`~memtheory.recipes.Setup` expresses the step
(``Setup.recipe("trl-sft")`` refuses, with the reason), and the
``hf-trainer`` recipe, which keeps the logits' loss, is not its answer.
:func:`sft_step_memory` builds it from the convention's pieces instead: the
``hf-trainer`` (or ``peft-lora``) recipe's step up to the final norm, plus
what the SFT batch and the fused head hold beyond it (:func:`sft_head_bytes`),
plus the fused head's backward
(:func:`~memtheory.finetuning.fused_head_backward_bytes`), with every decoder
layer checkpointed (TRL's default, ``checkpointing=True``: each layer keeps
only its input through the forward) or none. On CPU, fp32 weights with
``bf16`` off or on (autocast), checkpointing on or off, that is 0 bytes off
the real ``SFTTrainer`` under ``track()`` (``tests/pytorch/test_trl_recipe.py``:
three sizes, full fine-tuning and peft LoRA), at both moments the peak can
lie: the head's backward and the rest of the backward and the optimizer
step (a large model's gradients), which is the recipe's later moments as
the TRL step holds them (:func:`~memtheory.finetuning.trainer_step_beneath`).
With peft LoRA under autocast and checkpointing (TRL's defaults with a
``peft_config``) the most after the head is the last layer's recomputation,
as its ``down_proj`` casts its frozen weight: modelled, and exact too
(adapters on the MLP are not modelled there: the step's ``assumed`` says so,
:data:`~memtheory.finetuning.trl_head.RECOMPUTE_NOT_COUNTED`). Anywhere else
it is an estimate: on CUDA with Triton
only the labelled positions are projected (``utils.py:1642-1645``) and the
fold runs in a kernel without the N x V' temporaries. On CPU every position
is projected, labelled or not, so a prompt-completion dataset
(``completion_only_loss``) holds the same.

Examples
--------
>>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
...         "num_key_value_heads": 2, "tie_word_embeddings": False}
>>> step = sft_step_memory(tiny, batch=2, sequence=7)
>>> step.peak_moment, step.peak - step.parts["up to the final norm"] == (
...     sft_head_bytes(2, 7, 32) + fused_head_backward_bytes(2 * 6, 32, 96))
('fused head backward', True)
"""

from __future__ import annotations

from memtheory.dtypes import dtype
from memtheory.finetuning.lora import LoRA
from memtheory.finetuning.trl_head import (
    TRLStepEstimate,
    check_trl_step,
    checkpointing_line,
    fused_head_backward_bytes,
    recompute_lines,
    trainer_step_beneath,
)
from memtheory.models.hf_config import ConfigLike
from memtheory.recipes import TRL_RECIPES

__all__ = ["SFT_UNSUPPORTED", "sft_head_bytes", "sft_step_memory"]

SFT_UNSUPPORTED = TRL_RECIPES["trl-sft"].why_no_setup
"""Why ``Setup.recipe("trl-sft")`` refuses (``memtheory estimate --recipe trl-sft`` answers)."""

_FP32 = int(dtype("fp32").bytes)
_INDEX = int(dtype("int64").bytes)

_PEAK_PARTS = ("up to the final norm", "batch and head beyond the recipe", "fused head backward")


def sft_head_bytes(batch: int, sequence: int, hidden: int) -> int:
    """Return what an SFT step holds at its fused head's backward beyond the recipe's at the norm.

    Set beside the ``hf-trainer`` (or ``peft-lora``) recipe's live bytes at the
    end of the final norm's forward (which count ``input_ids``, the labels,
    the Trainer's bookkeeping scalars and the norm's output), the real step
    (TRL 1.16, fp32 weights, CPU) holds, when the fused head starts its
    backward:

    * the collator's ``attention_mask``: one more ``batch x sequence`` int64
      tensor (``sft_trainer.py:224``);
    * not the final norm's output (``batch x sequence x hidden`` fp32: nothing
      saves it), but the fused head's saved copy of the shifted hidden states
      (``last_hidden_state[:, :-1].reshape(-1, H)``, ``utils.py:1618,1645``):
      ``N x hidden`` fp32, ``N = batch x (sequence - 1)``;
    * the fused head's saved targets (``labels.clamp(min=0).reshape(-1)``,
      ``utils.py:1648``: ``N`` int64), log Z and entropy (``N`` fp32 each,
      ``chunked_logprob.py:378-386``), and the incoming gradient of the
      per-token log-probabilities (``N`` fp32);
    * three fp32 scalars: the loss (``loss * (num_processes // tp_size)``,
      ``sft_trainer.py:1624``), accelerate's ``loss /
      gradient_accumulation_steps`` (``accelerator.py:2851``) and the
      backward's root gradient (``loss.backward()``, ``accelerator.py:2861``).
      The division by ``num_items_in_batch`` (line 1618), its clamped divisor
      and the ``masked_fill``'s mask (``utils.py:1660``) are freed by then:
      their backward has run.

    Found by naming every storage alive at that moment under ``track()``
    (the previous step's loss, the running loss, the token count and the
    previous gradient norm are the recipe's own, ``conventions/autograd/loops.py``).
    DPO's batch differs by its masks and scalars (:func:`~memtheory.finetuning.dpo_head_bytes`).

    Parameters
    ----------
    batch : int
        Sequences per step (``per_device_train_batch_size``).
    sequence : int
        Tokens per sequence (no padding).
    hidden : int
        The model's hidden size.

    Returns
    -------
    int

    Examples
    --------
    >>> sft_head_bytes(2, 7, 32)  # tests/pytorch/test_trl_recipe.py measures this size
    108
    >>> sft_head_bytes(3, 12, 32)
    576
    """
    tokens = batch * (sequence - 1)
    return (_INDEX * batch * sequence
            - _FP32 * batch * sequence * hidden + _FP32 * tokens * hidden
            + tokens * (_INDEX + 3 * _FP32)
            + 3 * _FP32)




def sft_step_memory(
    config: ConfigLike,
    *,
    batch: int,
    sequence: int,
    lora: LoRA | None = None,
    precision: str = "fp32",
    checkpointing: bool = True,
) -> TRLStepEstimate:
    """Return the peak of one ``SFTTrainer`` step (TRL 1.16, CPU path).

    The peak is the larger of two moments: the fused head's backward (the
    sum of ``"up to the final norm"``, ``"batch and head beyond the recipe"``
    and ``"fused head backward"``; a small model's peak, exact on CPU with
    checkpointing on or off) and ``"after the head"``, the rest of the
    backward and the optimizer step (the recipe's moments as the TRL step
    holds them, plus the collator's attention mask; exact on CPU too, see
    :func:`~memtheory.finetuning.trainer_step_beneath`). Where it lies is
    :attr:`~memtheory.finetuning.TRLStepEstimate.peak_moment`.

    Parameters
    ----------
    config : mapping, str or path
        A Hugging Face decoder configuration (``model_type`` included): a mapping,
        a ``config.json`` or a preset's name (``"llama-3-8b"``), as
        :func:`~memtheory.models.from_config` reads it.
    batch : int
        Sequences per step (``per_device_train_batch_size``).
    sequence : int
        Tokens of each sequence (no padding, no packing).
    lora : LoRA, optional
        peft adapters: the head is frozen, so no gradient of its weight.
    precision : {"fp32", "autocast-bf16"}, default "fp32"
        fp32 weights, with ``bf16=False`` or with ``bf16=True`` (TRL's
        default: ``torch.autocast`` in bf16, so the fused head's tile buffer is
        bf16 and its hidden chunk and weight tile are cast). With ``lora``
        under autocast each frozen projection whose input needs a gradient
        keeps its weight's bf16 copy (:class:`~memtheory.finetuning.Frozen`).
    checkpointing : bool, default True
        TRL's default (``SFTConfig.gradient_checkpointing=True``, which the
        ``Trainer`` applies as ``activation_checkpointing_enable()`` with
        ``use_reentrant=False`` on every decoder layer); ``False`` for
        ``gradient_checkpointing=False``.

    Returns
    -------
    TRLStepEstimate

    Raises
    ------
    InvalidArgumentError
        A size that is not a whole number (``sequence`` below 2), or another precision.
    UnsupportedError
        A model whose final norm is not ``model.norm`` (GPT-2's ``ln_f``).

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> full = sft_step_memory(tiny, batch=2, sequence=7)
    >>> lora = sft_step_memory(tiny, batch=2, sequence=7, lora=LoRA(4, 8))
    >>> full.parts["fused head backward"] - lora.parts["fused head backward"] == 4 * 96 * 32
    True
    >>> plain = sft_step_memory(tiny, batch=2, sequence=7, checkpointing=False)
    >>> plain.peak - full.peak == 2 * full.parts["checkpointing keeps less, per layer"] - 8 * 7
    True

    TRL's defaults with a ``peft_config``: LoRA under autocast, checkpointed.
    Each layer keeps its fp32 input only, so the head's backward starts on
    what fp32 LoRA holds (measured); with adapters on the MLP too, the line
    that says what is left out comes last:

    >>> mixed = sft_step_memory(tiny, batch=2, sequence=7, lora=LoRA(4, 8),
    ...                         precision="autocast-bf16")
    >>> mixed.parts["up to the final norm"] == lora.parts["up to the final norm"]
    True
    >>> every = sft_step_memory(tiny, batch=2, sequence=7, precision="autocast-bf16",
    ...                         lora=LoRA(4, 8, targets="all-linear"))
    >>> every.assumed[-1].startswith("after the head is a lower estimate")
    True
    """
    check_trl_step("sft_step_memory", {"batch": batch, "sequence": sequence}, lora=lora,
                   precision=precision)
    beneath = trainer_step_beneath(config, sequences=batch, sequence=sequence, lora=lora,
                                   precision=precision, checkpointing=checkpointing)
    read = beneath.read
    hidden = int(read["hidden_size"])
    parts = {
        "up to the final norm": beneath.to_norm,
        "batch and head beyond the recipe": sft_head_bytes(batch, sequence, hidden),
        "fused head backward": fused_head_backward_bytes(
            batch * (sequence - 1), hidden, int(read["vocab_size"]),
            weight_gradient=lora is None, autocast=precision == "autocast-bf16"),
        "after the head": beneath.after_head + _INDEX * batch * sequence,  # + attention_mask
        "checkpointing keeps less, per layer": beneath.layer_saving,
        "weights": beneath.weights,
    }
    assumed = (
        "trl-sft: TRL 1.16 SFTTrainer, loss_type nll, no packing, no padding-free",
        f"{batch} sequences of {sequence} tokens, no padding",
        "adapters: " + ("peft LoRA, the head frozen" if lora else "none: full fine-tuning"),
        "fused chunked LM head (no logits): the peak is its backward or the rest of the backward",
        f"CPU path, fp32 weights, {precision}",
        checkpointing_line(checkpointing),
        *recompute_lines(lora, precision, checkpointing),
    )
    return TRLStepEstimate.at_most(parts, _PEAK_PARTS, assumed)
