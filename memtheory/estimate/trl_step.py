"""``estimate(..., setup="trl-dpo")`` and ``"trl-sft"``: TRL's trainers through the front door.

No :class:`~memtheory.recipes.Setup` expresses a TRL step (its fused, chunked
LM head is not the autograd convention's), so :func:`~memtheory.estimate.estimate`
hands these two recipes (:data:`~memtheory.recipes.TRL_RECIPES`) to
:func:`trl_estimate`, which asks :func:`~memtheory.finetuning.dpo_step_memory`
or :func:`~memtheory.finetuning.sft_step_memory` and returns the same
:class:`~memtheory.estimate.answer.Estimate` every other recipe gets: the
parts of the fused head's moment as components, the two moments the peak can
lie at as the timeline, the card's verdict, the functions' ``assumed`` lines.
The bytes are the functions', to the byte.

The sizes: ``batch`` is ``per_device_train_batch_size`` (preference pairs for
DPO: the forward sees twice as many rows); ``sequence`` is prompt plus
completion, as TRL 1.16 truncates them together (``max_length=1024`` in
``DPOConfig`` and ``SFTConfig``, its default here; there is no
``max_prompt_length``), or ``prompt + completion`` when those are given. On
the CPU path every position is scored, so how a sequence splits into prompt
and completion does not change the peak.

Options the TRL step does not take are refused with the reason
(:data:`NOT_TAKEN`); the largest batch and sequence are not searched (each
size is a derivation of its own: ask several with ``--sweep``).

Examples
--------
>>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
...         "num_key_value_heads": 2, "tie_word_embeddings": False,
...         "max_position_embeddings": 64}
>>> from memtheory.finetuning import dpo_step_memory
>>> answer = trl_estimate("trl-dpo", {"model": tiny, "batch": 2, "sequence": 7,
...                                   "limit": "1 GiB", "reserve": 0})
>>> answer.peak == dpo_step_memory(tiny, pairs=2, sequence=7, precision="autocast-bf16").peak
True
>>> answer.fits, answer.settings["recipe"]
(True, 'trl-dpo')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Self

import sympy as sp

from memtheory.errors import InvalidArgumentError
from memtheory.estimate.answer import Estimate
from memtheory.estimate.options import check_sizes
from memtheory.estimate.resolve import model_type, resolve_model
from memtheory.finetuning import (
    LoRA,
    TRLStepEstimate,
    default_targets,
    dpo_step_memory,
    sft_step_memory,
)
from memtheory.footprint import Footprint
from memtheory.gpus import usable_memory
from memtheory.recipes import TRL_RECIPES, trl_recipe_name

__all__ = ["NOT_TAKEN", "TRL_DEFAULT_SEQUENCE", "TRLFootprint", "check_not_trl", "trl_estimate",
           "trl_recipe_name"]

TRL_DEFAULT_SEQUENCE = 1024
"""Tokens per sequence when none is given: TRL 1.16's ``max_length`` (``dpo_config.py:195-201``,
``sft_config.py:202-205``)."""

_STEP = ("the TRL step is modelled on one GPU, one micro-batch per optimizer step, as "
         "memtheory.finetuning.{function} does")

NOT_TAKEN: dict[str, tuple[object, str]] = {
    "image": (None, "TRL's trainers here are language models: give --seq"),
    "flash": (None, "the TRL step runs transformers' default attention, SDPA (no S x S "
              "scores kept), the only one modelled"),
    "optimizer": (None, "the TRL step's optimizer is the Trainer's adamw_torch_fused, the only "
                  "one modelled"),
    "qlora": (False, "a bitsandbytes 4-bit base is not modelled in the TRL step: ask "
              "--lora RANK (fp32 base, TRL's default dtype) or the qlora recipe"),
    "gpus": (None, _STEP),
    "zero": (None, _STEP),
    "tensor": (1, _STEP),
    "pipeline": (1, _STEP),
    "sequence_parallel": (False, _STEP),
    "offload": (None, _STEP),
    "context_parallel": (1, _STEP),
    "activation_offload": (False, _STEP),
    "grad_accum": (None, _STEP),
    "global_batch": (None, _STEP),
    "counts": ("powers of two", _STEP),
    "convention": ("auto", "the TRL step is built from the autograd convention's pieces and "
                   "TRL's fused head, whatever the convention asked"),
}
"""Options of :func:`~memtheory.estimate.estimate` a TRL recipe does not take: the default
that leaves them unused, and why another value is refused."""

_FLAGS = {"image": "--image", "flash": "--attention/--flash", "optimizer": "--optimizer",
          "qlora": "--qlora", "gpus": "--gpus", "zero": "--zero", "tensor": "--tp",
          "pipeline": "--pp", "sequence_parallel": "--sequence-parallel",
          "offload": "--offload", "context_parallel": "--cp",
          "activation_offload": "--activation-offload", "grad_accum": "--grad-accum",
          "global_batch": "--global-batch", "counts": "--gpu-counts",
          "convention": "--convention", "precompute_ref_log_probs": "--precompute-ref-log-probs",
          "prompt": "--prompt", "completion": "--completion"}
"""How the command line spells each option, for the messages."""

_TRL_ONLY = ("prompt", "completion", "precompute_ref_log_probs")


def check_not_trl(options: Mapping[str, Any]) -> None:
    """Refuse the TRL recipes' own options under any other recipe.

    Examples
    --------
    >>> check_not_trl({"prompt": None, "completion": None, "precompute_ref_log_probs": None})
    >>> check_not_trl({"precompute_ref_log_probs": True})
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --precompute-ref-log-probs applies to --recipe ...
    """
    for name in _TRL_ONLY:
        if options.get(name) is not None:
            which = "trl-dpo" if name == "precompute_ref_log_probs" else "trl-dpo and trl-sft"
            raise InvalidArgumentError(
                f"{_FLAGS[name]} applies to --recipe {which} (TRL's trainers) only; it changes "
                "nothing in this recipe's step: drop it, or ask --recipe trl-dpo."
            )


def _check_taken(name: str, options: Mapping[str, Any]) -> None:
    """Refuse each option the TRL step ``name`` does not take, with the reason."""
    function = TRL_RECIPES[name].function
    for option, (default, why) in NOT_TAKEN.items():
        value = options.get(option, default)
        if value != default:
            raise InvalidArgumentError(
                f"{_FLAGS[option]} is not taken by --recipe {name}: "
                f"{why.format(function=function)}. Drop it, or ask another recipe."
            )
    if name == "trl-sft" and options.get("precompute_ref_log_probs") is not None:
        raise InvalidArgumentError(
            "--precompute-ref-log-probs applies to --recipe trl-dpo: TRL's SFTTrainer has no "
            "reference model. Drop it."
        )
    if options.get("lora") is None:
        for option, flag in (("lora_alpha", "--lora-alpha"), ("lora_targets", "--lora-targets")):
            if options.get(option) is not None:
                raise InvalidArgumentError(
                    f"{flag} shapes LoRA adapters, and none were asked: add --lora RANK, or "
                    f"drop {flag}."
                )


def _sequence(options: Mapping[str, Any]) -> tuple[int, int | None, int | None]:
    """Return the tokens per sequence, from ``sequence`` or ``prompt + completion``."""
    sequence, prompt, completion = (options.get(k) for k in ("sequence", "prompt", "completion"))
    if (prompt is None) != (completion is None):
        raise InvalidArgumentError(
            "--prompt and --completion go together (their sum is the sequence): give both, "
            "or --seq alone."
        )
    if prompt is None:
        return (TRL_DEFAULT_SEQUENCE if sequence is None else sequence), None, None
    for flag, value in (("--prompt", prompt), ("--completion", completion)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"{flag} must be a positive whole number, got {value!r}.")
    if sequence is not None and sequence != prompt + completion:
        raise InvalidArgumentError(
            f"--seq {sequence} is not --prompt {prompt} + --completion {completion}: give "
            "--seq alone, or --prompt and --completion."
        )
    return prompt + completion, prompt, completion


@dataclass(frozen=True)
class TRLFootprint(Footprint):
    """A TRL step as a :class:`~memtheory.footprint.Footprint`: in bytes, no symbols.

    The components are the parts of the fused head's backward; the timeline
    has that moment and ``"after the head"``, so the peak is the step's.

    Examples
    --------
    >>> step = TRLStepEstimate.at_most({"a": 3, "b": 4, "after the head": 6}, ("a", "b"), ())
    >>> footprint = TRLFootprint.of(step, ("a", "b"))
    >>> footprint.total, footprint.peak, footprint.peak_moment
    (7, 7, 'fused head backward')
    """

    components: Mapping[str, sp.Expr]
    timeline: Mapping[str, sp.Expr] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, step: TRLStepEstimate, head: tuple[str, ...]) -> TRLFootprint:
        """Return ``step`` with the parts named ``head`` (its fused head's moment) as components."""
        parts = {name: sp.Integer(step.parts[name]) for name in head}
        return cls(parts, {"fused head backward": sum(parts.values(), sp.Integer(0)),
                           "after the head": sp.Integer(step.parts["after the head"])})

    def evaluate(self, **values: object) -> Self:
        """Return itself: there is nothing to substitute."""
        return self


_HEAD_PARTS = {
    "trl-dpo": ("up to the final norm", "reference weights", "batch and head beyond the recipe",
                "fused head backward"),
    "trl-sft": ("up to the final norm", "batch and head beyond the recipe",
                "fused head backward"),
}


def trl_estimate(name: str, options: Mapping[str, Any]) -> Estimate:
    """Answer :func:`~memtheory.estimate.estimate` for the TRL recipe ``name``.

    Parameters
    ----------
    name : {"trl-dpo", "trl-sft"}
    options : mapping
        :func:`~memtheory.estimate.estimate`'s arguments by name (``model``,
        ``batch``, ``sequence``, ``prompt``, ``completion``, ``precision``,
        ``lora``, ``lora_alpha``, ``lora_targets``, ``checkpointing``,
        ``precompute_ref_log_probs``, ``gpu``, ``limit``, ``reserve``; the
        others only at the values that leave them unused, :data:`NOT_TAKEN`).

    Returns
    -------
    Estimate
        ``settings["trl_parts"]`` is every part the step function returned,
        ``settings["peak_moment"]`` where the peak lies.

    Raises
    ------
    InvalidArgumentError
        An option the TRL step does not take, with the reason; a sequence
        past the model's positions; a precision other than fp32 weights with
        or without autocast.
    """
    _check_taken(name, options)
    model = options["model"]
    batch = options.get("batch", 1)
    sequence, prompt, completion = _sequence(options)
    precision = options.get("precision") or "autocast-bf16"  # TRL's bf16=True
    checkpointing = options.get("checkpointing")
    checkpointing = True if checkpointing is None else bool(checkpointing)  # TRL's default
    precompute = bool(options.get("precompute_ref_log_probs"))
    rows = 2 * batch if name == "trl-dpo" and isinstance(batch, int) else batch
    resolved = resolve_model(model, batch=rows, sequence=sequence, flash=True)
    check_sizes(resolved, sequence, None)
    lora = None
    if options.get("lora") is not None:  # peft's default targets for the family, as TRL's
        targets = options.get("lora_targets") or default_targets(  # LoraConfig leaves them
            resolved.network, model_type(model))[0]
        lora = LoRA(options["lora"], options.get("lora_alpha"), targets=targets)
    if name == "trl-dpo":
        step = dpo_step_memory(model, pairs=batch, sequence=sequence, lora=lora,
                               precision=precision, checkpointing=checkpointing,
                               precompute_ref_log_probs=precompute)
    else:
        step = sft_step_memory(model, batch=batch, sequence=sequence, lora=lora,
                               precision=precision, checkpointing=checkpointing)
    memory = TRLFootprint.of(step, _HEAD_PARTS[name])
    gpu, limit, reserve = (options.get(k) for k in ("gpu", "limit", "reserve"))
    budget = None
    if gpu or limit:
        budget = (usable_memory(gpu, limit=limit) if reserve is None
                  else usable_memory(gpu, limit=limit, reserve=reserve))
    parameters = int(resolved.network.parameter_count)
    method = ""
    trainable = parameters
    if lora is not None:
        from memtheory.finetuning import apply_lora

        trainable = int(apply_lora(resolved.network, lora).parameter_count)  # adapters only
        method = f"LoRA r={lora.rank} on {', '.join(lora.patterns)}"
    recipe = TRL_RECIPES[name]
    settings = {
        "batch": batch, "sequence": sequence, "image": None, "recipe": name,
        "setup": {"trainer": f"TRL 1.16 {recipe.trainer}", "function":
                  f"memtheory.finetuning.{recipe.function}", "sources": list(recipe.sources)},
        "prompt": prompt, "completion": completion,
        "precompute_ref_log_probs": precompute if name == "trl-dpo" else None,
        "flash": True, "attention": "sdpa", "optimizer": "adamw",
        "optimizer_implementation": "fused", "keeps_logits": False, "precision": precision,
        "method": method, "checkpointing": checkpointing, "gpus": 1, "gpus_asked": 1,
        "context_parallel": 1, "data": 1, "zero": 0, "tensor": 1, "pipeline": 1,
        "sequence_parallel": False, "offload": "none", "parallel": "", "grad_accum": 1,
        "global_batch": batch, "activation_offload": False,
        "parameters": parameters, "trainable": trainable,
        "reserve_bytes": int(budget.reserve) if budget else None,
        "trl_parts": {part: int(value) for part, value in step.parts.items()},
        "peak_moment": step.peak_moment,
    }
    notes = (
        "largest batch and sequence: not searched for a TRL recipe (each size is a derivation "
        "of its own); ask several with --sweep batch=1,2,4 or --sweep seq=512,1024",
    )
    why = (f"{name}: memtheory.finetuning.{recipe.function}, the hf-trainer (peft-lora) "
           f"recipe's autograd step up to the final norm plus TRL's fused head; "
           f"{recipe.verified.removesuffix('.py')} checks it on CPU")
    return Estimate(
        resolved, settings, memory, memory, budget, None, None,
        f"TRL {recipe.trainer} step ({recipe.function})", notes, None, "trl-step", why,
        step.assumed,
    )
