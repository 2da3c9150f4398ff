"""TRL's fused, chunked LM head and the ``Trainer`` step beneath it: shared by its trainers.

TRL 1.16's ``SFTTrainer`` and ``DPOTrainer`` both patch the model with
``add_fused_lm_head`` (``trl/trainer/utils.py:1548-1700``): the (B, S, V)
logits are never built; ``ChunkedLogProbFunction``
(``trl/kernels/chunked_logprob.py:299-465``) projects tiles of at most
:data:`TRL_TOKEN_CHUNK` tokens by :data:`TRL_VOCAB_CHUNK` vocabulary columns.
Its backward is the step's peak on small models
(:func:`fused_head_backward_bytes`). Beneath it lies the ``hf-trainer`` (or
``peft-lora``) recipe's step up to the final norm
(:func:`trainer_step_to_norm`). :func:`~memtheory.finetuning.dpo_step_memory`
and :func:`~memtheory.finetuning.sft_step_memory` add up these two and what
their own batch and loss hold.

Examples
--------
>>> fused_head_backward_bytes(12, 32, 96) > 4 * 12 * TRL_VOCAB_CHUNK
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import dtype
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.finetuning.lora import LoRA
from memtheory.finetuning.memory import finetune_memory
from memtheory.finetuning.trl_plan import autocast_cache_bytes, first_layer_shortfall, recipe_plan
from memtheory.layers.base import elements
from memtheory.memory import training_memory
from memtheory.models import from_config
from memtheory.models.hf_config import ConfigLike, load_config
from memtheory.network import LayerRow, Network
from memtheory.recipes import Setup

__all__ = [
    "RECOMPUTE_NOT_COUNTED",
    "TRLStepEstimate",
    "TRL_PRECISIONS",
    "TrainerBeneath",
    "TRL_TOKEN_CHUNK",
    "TRL_VOCAB_CHUNK",
    "check_trl_step",
    "checkpointing_line",
    "recompute_lines",
    "lora_checkpoint_extra",
    "fused_head_backward_bytes",
    "recomputes_weight_copy",
    "trainer_step_beneath",
    "trainer_step_to_norm",
]

TRL_TOKEN_CHUNK = 4096
"""Rows of the fused head's tile (TRL 1.16 ``kernels/chunked_logprob.py`` ``TOKEN_CHUNK_SIZE``)."""

TRL_VOCAB_CHUNK = 32768
"""Tile columns (TRL 1.16 ``trainer/utils.py`` ``_CHUNKED_LOGPROB_CHUNK_SIZE``)."""

TRL_PRECISIONS = ("fp32", "autocast-bf16")
"""fp32 weights with TRL's ``bf16=False`` or ``bf16=True`` (``torch.autocast``)."""

RECOMPUTE_NOT_COUNTED = (
    "after the head is a lower estimate here: with adapters on the MLP's projections, a "
    "recomputed layer's forward (each frozen projection's bf16 weight copy made on top of the "
    "recomputation) is not modelled; the fused head's backward is exact"
)
"""The "assumed:" line of a checkpointed step with peft LoRA under autocast on the MLP too.

With peft's default targets (attention only) the recomputation is modelled
(:func:`recomputes_weight_copy`, :func:`trainer_step_beneath`): measured under
``track()`` (``tests/pytorch/test_trl_recipe.py``, ``test_dpo_recipe.py``), the
real step's most after the head lies in the last decoder layer's recomputed
forward, as its ``down_proj`` casts its frozen weight, and is 0 bytes off.
Adapters on ``gate_proj``, ``up_proj`` or ``down_proj`` (``all-linear``) change
what the recomputation makes last: not modelled, and said.
"""

_ATTENTION_TARGETS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})
"""LoRA targets whose recomputation is modelled: the attention's projections (peft's default)."""

_FINAL_NORM = "forward model.norm"
_HEAD_BACKWARD = "backward lm_head"

_FP32 = int(dtype("fp32").bytes)
_INDEX = int(dtype("int64").bytes)
_BF16 = int(dtype("bf16").bytes)
_BOOL = int(dtype("bool").bytes)


def fused_head_backward_bytes(
    tokens: int,
    hidden: int,
    vocabulary: int,
    *,
    weight_gradient: bool = True,
    autocast: bool = False,
) -> int:
    """Bytes TRL's fused LM head allocates at the most of its backward, on CPU.

    ``ChunkedLogProbFunction.backward`` (TRL 1.16 ``chunked_logprob.py:384-448``)
    makes an fp32 gradient of the hidden states (tokens x hidden) and, when the
    head is trained, of its weight (vocabulary x hidden), then the tile buffer
    (``min(tokens, TRL_TOKEN_CHUNK) x TRL_VOCAB_CHUNK`` in the compute dtype,
    whatever the vocabulary), and the torch fold ``_backward_tile``
    (``chunked_logprob.py:257-296``) holds seven fp32 tile-sized temporaries and
    one bool one at its most. Under autocast the hidden chunk and the weight
    tile are cast to bf16 too.

    Parameters
    ----------
    tokens : int
        Positions scored: on CPU every position but the last of each
        sequence, ``sequences * (sequence - 1)``.
    hidden, vocabulary : int
    weight_gradient : bool, default True
        False when the head is frozen (LoRA adapters elsewhere).
    autocast : bool, default False
        ``bf16=True`` (``torch.autocast``) over fp32 weights.

    Returns
    -------
    int

    Examples
    --------
    >>> fused_head_backward_bytes(24, 32, 96) - fused_head_backward_bytes(
    ...     24, 32, 96, weight_gradient=False) == 4 * 96 * 32
    True
    """
    for name, value in (("tokens", tokens), ("hidden", hidden), ("vocabulary", vocabulary)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"{name} must be a positive whole number, got {value!r}.")
    rows = min(tokens, TRL_TOKEN_CHUNK)
    width = min(vocabulary, TRL_VOCAB_CHUNK)
    compute = _BF16 if autocast else _FP32
    gradients = _FP32 * tokens * hidden + (_FP32 * vocabulary * hidden if weight_gradient else 0)
    tile_buffer = compute * rows * TRL_VOCAB_CHUNK
    temporaries = rows * width * (7 * _FP32 + _BOOL)
    if autocast:
        temporaries += _BF16 * (rows * hidden + width * hidden)
    return gradients + tile_buffer + temporaries


def check_trl_step(trainer: str, sizes: dict[str, int], *, lora: LoRA | None,
                   precision: str) -> None:
    """Refuse, with a memtheory error, what a TRL step function cannot answer.

    Parameters
    ----------
    trainer : str
        The asking function's name, for the message (``"sft_step_memory"``).
    sizes : dict of str to int
        The batch size (at least 1) under its name, then ``"sequence"`` (at least 2).
    lora : LoRA or None
    precision : str

    Examples
    --------
    >>> check_trl_step("sft_step_memory", {"batch": 2, "sequence": 1}, lora=None,
    ...                precision="fp32")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: sequence must be a whole number of at least 2, ...
    """
    for name, value in sizes.items():
        least = 2 if name == "sequence" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise InvalidArgumentError(
                f"{name} must be a whole number of at least {least}, got {value!r}: "
                "TRL scores the next token of each position but the last."
            )
    if precision not in TRL_PRECISIONS:
        raise InvalidArgumentError(
            f"precision must be one of {', '.join(map(repr, TRL_PRECISIONS))} (fp32 weights, "
            f"bf16=False or True), got {precision!r}: other weights' dtypes are not modelled "
            f"by {trainer}."
        )


def trainer_step_to_norm(
    config: ConfigLike,
    *,
    sequences: int,
    sequence: int,
    lora: LoRA | None,
    precision: str,
) -> tuple[int, int, dict[str, int]]:
    """Return the ``hf-trainer`` (or ``peft-lora``) recipe's step on CPU up to the final norm.

    Without checkpointing: :func:`trainer_step_beneath` with ``checkpointing=False``.

    Parameters
    ----------
    config : mapping, str or path
        What :func:`~memtheory.models.from_config` reads.
    sequences, sequence : int
        Rows of the batch and tokens per row.
    lora : LoRA or None
        peft adapters (the ``peft-lora`` recipe's step) or full fine-tuning.
    precision : {"fp32", "autocast-bf16"}

    Returns
    -------
    tuple of (int, int, dict)
        The live bytes at the end of the final norm's forward, the weights'
        bytes, and the configuration as read (``hidden_size``, ``vocab_size``).

    Raises
    ------
    UnsupportedError
        A model whose final norm is not ``model.norm`` (GPT-2's ``ln_f``): not
        modelled.

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> to_norm, weights, read = trainer_step_to_norm(tiny, sequences=2, sequence=7,
    ...                                               lora=None, precision="fp32")
    >>> weights == 4 * (2 * 96 * 32 + 32 + 2 * (3 * 32 * 32 + 3 * 32 * 40 + 2 * 32))
    True
    """
    beneath = trainer_step_beneath(config, sequences=sequences, sequence=sequence, lora=lora,
                                   precision=precision, checkpointing=False)
    return beneath.to_norm, beneath.weights, beneath.read


@dataclass(frozen=True)
class TrainerBeneath:
    """The ``hf-trainer`` (``peft-lora``) recipe's step beneath TRL's fused head, in bytes.

    Attributes
    ----------
    to_norm : int
        Live at the end of the final norm's forward (less what checkpointing
        does not keep, when it is on).
    weights : int
        The weights' bytes (trained and frozen).
    read : dict
        The configuration as read (``hidden_size``, ``vocab_size``, ...).
    after_head : int
        The recipe's most live after its head's backward (the decoder layers'
        backward, the embeddings', gradient clipping, the optimizer step),
        each moment as the checkpointed step holds it (``_after_head`` names
        each difference): less what checkpointing does not keep then, plus
        what it keeps beyond the recipe until the last layer's backward (the
        position ids; under peft :func:`lora_checkpoint_extra`), and under
        peft LoRA with autocast and checkpointing each layer's recomputation
        (``recompute``). 0 bytes off the real trainers' later moments at the
        tested sizes (:data:`RECOMPUTE_NOT_COUNTED` says where it is not modelled).
    layer_saving : int
        What checkpointing does not keep of one decoder layer through the
        forward: its saved tensors less its output (0 when it is off).
    layers : int
        Decoder layers.
    recompute : int
        What a layer's recomputation holds at its most beyond what the step
        held when it began (:func:`recomputes_weight_copy`; 0 where that is
        never the most, or not modelled).

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> beneath = trainer_step_beneath(tiny, sequences=2, sequence=7, lora=None,
    ...                                precision="fp32", checkpointing=False)
    >>> beneath.layers, beneath.layer_saving
    (2, 0)
    """

    to_norm: int
    weights: int
    read: dict[str, int]
    after_head: int
    layer_saving: int
    layers: int
    recompute: int = 0


_LAYER_ROW = re.compile(r"^backward model\.layers\.(\d+)\.")
_ACCUMULATE = re.compile(r" accumulate( \d+)?$")
_DECODER_ROW = re.compile(r"^model\.layers\.(\d+)\.")


def _decoder_layers(network: Network) -> list[list[LayerRow]]:
    """Return the rows of each decoder layer (``model.layers.{i}.``), in order."""
    groups: dict[int, list[LayerRow]] = {}
    for row in network.rows:
        match = _DECODER_ROW.match(row.name)
        if match:
            groups.setdefault(int(match.group(1)), []).append(row)
    return [groups[i] for i in sorted(groups)]


def _layer_saving(network: Network, timeline: Mapping[str, sp.Expr], read: Mapping[str, int],
                  settings: dict[str, object]) -> int:
    """One decoder layer's forward growth less its output, from the recipe's timeline.

    The growth is read between the ends of the last two layers (the first
    layer's share of the step's own bookkeeping differs); a one-layer model is
    read from the same configuration with two layers.
    """
    layers = _decoder_layers(network)
    if len(layers) < 2:
        twice = trainer_step_beneath({**read, "num_hidden_layers": 2}, **settings)  # type: ignore[arg-type]
        return twice.layer_saving
    last, before = (int(timeline[f"forward {rows[-1].name}"]) for rows in layers[-1:-3:-1])
    output = _FP32 * int(elements(layers[-1][-1].output_shape))  # the fp32 residual stream
    return last - before - output


def trainer_step_beneath(
    config: ConfigLike,
    *,
    sequences: int,
    sequence: int,
    lora: LoRA | None,
    precision: str,
    checkpointing: bool,
) -> TrainerBeneath:
    """Return the ``hf-trainer`` (``peft-lora``) recipe's step on CPU around TRL's fused head.

    With ``checkpointing``, as TRL's default turns it on: the ``Trainer`` calls
    ``activation_checkpointing_enable()`` (transformers 5.24 ``trainer.py:1503-1528``)
    with no kwargs, so ``{"use_reentrant": False}`` and every decoder layer
    (``modeling_utils.py:3151-3171``, ``modeling_layers.py``): each layer's
    forward runs under ``torch.utils.checkpoint`` and keeps only its input, its
    output the next one's (fp32: the residual stream, under autocast too). So
    at the final norm the step holds ``layers x layer_saving`` less than the
    recipe's (measured under ``track()``: each checkpointed layer adds exactly
    its output), plus the ``(1, sequence)`` int64 position ids that the
    checkpoints' closures hold (measured: ``8 x sequence`` bytes), plus what
    the recipe's first layer keeps less than the others
    (:func:`~memtheory.finetuning.trl_plan.first_layer_shortfall`: under peft
    in fp32 :func:`lora_checkpoint_extra`; under autocast also the bf16 copies
    of the frozen projections that read its input norm). In the backward the
    layer being recomputed holds what the recipe's holds, and the layers below
    it their inputs only.

    Under autocast, the recipe's timeline at the norm counts autocast's cache
    of weight casts that no node keeps (peft's first-layer ``lora_A``); TRL's
    fused head starts its backward after the forward, when that cache is
    empty: ``to_norm`` leaves it out
    (:func:`~memtheory.finetuning.trl_plan.autocast_cache_bytes`).

    Parameters
    ----------
    config : mapping, str or path
        What :func:`~memtheory.models.from_config` reads.
    sequences, sequence : int
        Rows of the batch and tokens per row.
    lora : LoRA or None
        peft adapters (the ``peft-lora`` recipe's step) or full fine-tuning.
    precision : {"fp32", "autocast-bf16"}
    checkpointing : bool
        Every decoder layer checkpointed (TRL's default), or none.

    Returns
    -------
    TrainerBeneath

    Raises
    ------
    UnsupportedError
        A model whose final norm is not ``model.norm`` (GPT-2's ``ln_f``): not
        modelled.

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> off, on = (trainer_step_beneath(tiny, sequences=2, sequence=7, lora=None,
    ...                                 precision="fp32", checkpointing=c) for c in (False, True))
    >>> off.to_norm - on.to_norm == on.layers * on.layer_saving - 8 * 7  # less the position ids
    True
    """
    read = load_config(config)  # a preset's name, a config.json or a mapping
    network = from_config(read, batch=sequences, sequence=sequence, loss=True, flash=True)
    if lora is None:
        step = training_memory(network, setup=Setup.recipe("hf-trainer", device="cpu"),
                               precision=precision)
    else:
        convention = Setup.recipe("peft-lora", device="cpu").convention()
        step = finetune_memory(network, lora=lora, optimizer="adamw", precision=precision,
                               convention=convention)
    weights = int(step.components["parameters"] + step.components.get("frozen_parameters", 0))
    if _FINAL_NORM not in step.timeline:
        raise UnsupportedError(
            f"model_type {read.get('model_type')!r} has no final norm named 'model.norm': "
            "TRL's step is modelled, and measured, on Llama-style decoders (Llama, Mistral, "
            "Qwen, ...), whose fused head takes that norm's output; ask for one of those."
        )
    layers = len(_decoder_layers(network))
    saving = 0
    if checkpointing:
        settings: dict[str, object] = {"sequences": sequences, "sequence": sequence,
                                       "lora": lora, "precision": precision,
                                       "checkpointing": True}
        saving = _layer_saving(network, step.timeline, read, settings)
    kept, cache = _beyond_recipe(read, layers, sequences, sequence, lora, precision,
                                 checkpointing)
    reduced = ({f"backward {row.name} (scale)": _FP32 * int(row.weights)
                for rows in _decoder_layers(network) for row in rows}
               if checkpointing else {})
    recompute = 0
    if checkpointing and recomputes_weight_copy(lora, precision, checkpointing):
        recompute = _recompute_growth(network, step.timeline, read, {
            "sequences": sequences, "sequence": sequence, "lora": lora,
            "precision": precision, "checkpointing": True})
    after = _after_head(list(step.timeline.items()), saving, layers, kept, reduced, recompute)
    return TrainerBeneath(int(step.timeline[_FINAL_NORM]) - cache - layers * saving + kept,
                          weights,
                          dict(read), after, saving, layers, recompute)


def recomputes_weight_copy(lora: LoRA | None, precision: str, checkpointing: bool) -> bool:
    """Whether a recomputed layer's forward can be the most after the head (and is modelled).

    With peft LoRA under autocast and checkpointing, each frozen projection
    casts its fp32 weight to bf16 again in the recomputation (autocast
    caches the casts of weights that need a gradient only), and the MLP's
    ``down_proj`` copy is made on top of everything the recomputation has
    rebuilt (:func:`trainer_step_beneath`). Modelled where the MLP has no
    adapters (peft's default targets); ``all-linear`` LoRA is not.

    Examples
    --------
    >>> recomputes_weight_copy(LoRA(4, 8), "autocast-bf16", True)
    True
    >>> recomputes_weight_copy(LoRA(4, 8, targets="all-linear"), "autocast-bf16", True)
    False
    """
    if lora is None or precision != "autocast-bf16" or not checkpointing:
        return False
    return all(pattern in _ATTENTION_TARGETS for pattern in lora.patterns)


def _recompute_growth(network: Network, timeline: Mapping[str, sp.Expr],
                      read: Mapping[str, int], settings: dict[str, object]) -> int:
    """Return what a layer's recomputation holds at its most beyond what was held before it.

    ``torch.utils.checkpoint`` (``use_reentrant=False``) recomputes a layer's
    forward when its backward first unpacks a saved tensor (``down_proj``'s,
    right after the layer's last residual ``add`` has passed its gradient
    on), and stops as soon as the last one is made (early stopping): under
    peft LoRA with autocast, ``down_proj``'s bf16 weight copy, cast right
    after the MLP's product. Measured under ``track()`` (the real
    ``SFTTrainer`` and ``DPOTrainer``, five sizes), the recomputation then
    holds:

    * the recipe's forward growth from the layer's input to the end of
      ``mlp.mul`` (its saved tensors, rebuilt, and the product);
    * ``down_proj``'s bf16 weight copy (``hidden x intermediate``);
    * one more ``sequences x sequence x hidden`` bf16 tensor than the
      recipe's forward holds there (measured: the size fits every case; which
      of the recomputation's casts it is, is not named here).

    All layers are alike, so the last one's is read (a one-layer model from
    the same configuration with two layers).
    """
    layers = _decoder_layers(network)
    if len(layers) < 2:
        twice = trainer_step_beneath({**read, "num_hidden_layers": 2}, **settings)  # type: ignore[arg-type]
        return twice.recompute
    rows = layers[-1]
    labels = list(timeline)
    start = labels[labels.index(f"forward {rows[0].name}") - 1]
    product = next(row for row in rows if row.name.endswith(".mlp.mul"))
    down = next(row for row in rows if row.name.endswith(".mlp.down_proj"))
    growth = int(timeline[f"forward {product.name}"]) - int(timeline[start])
    hidden = int(elements(rows[-1].output_shape))
    return growth + _BF16 * int(down.weights) + _BF16 * hidden


def _beyond_recipe(read: dict[str, int], layers: int, sequences: int, sequence: int,
                   lora: LoRA | None, precision: str, checkpointing: bool) -> tuple[int, int]:
    """Return what the TRL step keeps beyond the recipe's step, and the recipe's autocast cache.

    Kept, with checkpointing: the ``(1, sequence)`` int64 position ids that
    the checkpoints' closures hold, and what the recipe's first decoder layer
    keeps less than the others (:func:`~memtheory.finetuning.trl_plan.first_layer_shortfall`,
    read from a two-layer model when there is one layer). The cache
    (:func:`~memtheory.finetuning.trl_plan.autocast_cache_bytes`) at the
    final norm is freed by the fused head's backward.
    """
    plan = recipe_plan(read, sequences=sequences, sequence=sequence, lora=lora,
                       precision=precision)
    cache = autocast_cache_bytes(plan, _FINAL_NORM.removeprefix("forward "))
    if not checkpointing:
        return 0, cache
    if layers < 2:
        plan = recipe_plan({**read, "num_hidden_layers": 2}, sequences=sequences,
                           sequence=sequence, lora=lora, precision=precision)
    return _INDEX * sequence + first_layer_shortfall(plan), cache


def _after_head(moments: list[tuple[str, sp.Expr]], saving: int, layers: int, kept: int,
                reduced: Mapping[str, int], recompute: int = 0) -> int:
    """Return the most of the recipe's later moments, as the checkpointed step holds them.

    Each of the recipe's later moments, less what the checkpointed step does
    not hold then (measured under ``track()`` on the real trainers):

    * the recipe's head rows (``backward lm_head``, its autocast casts) are
      the fused head's moment, not these;
    * gradient accumulation rows (``... accumulate``) run before the layer
      they name is recomputed: the layer above's ``j + 1`` layers below it
      still keep their inputs only;
    * layer ``j`` recomputed, the ``j`` layers below it keep their inputs only;
    * ``kept`` (what the checkpoints' closures hold) is alive until the last
      decoder layer's backward has run, not in the embeddings' backward,
      gradient clipping or the optimizer step;
    * ``reduced``: at a checkpointed norm's ``(scale)`` row, the recipe holds
      its weight's gradient (sum-reduced from the broadcast product) beside
      the saved normalized input; in a recomputed layer that input, unpacked
      from the checkpoint, is its node's only reference and is freed when the
      node returns, before the engine reduces the gradient (``sum_to``), so
      the moment's most is the product's, the gradient's bytes less;
    * ``recompute`` (:func:`_recompute_growth`, 0 where it is not modelled):
      layer ``j``'s recomputation runs when its backward starts, on what the
      step holds just before (its ``j + 1`` layers below keeping their inputs
      only), and adds at its most this many bytes.
    """
    head = next(i for i, (name, _) in enumerate(moments) if name == _HEAD_BACKWARD)
    later = [(name, int(live)) for name, live in moments[head + 1:]
             if not name.startswith(_HEAD_BACKWARD)]
    last = max((i for i, (name, _) in enumerate(later) if _LAYER_ROW.match(name)), default=-1)
    after, below = 0, layers  # before any layer's backward (the norm's), none is recomputed
    recomputed = None
    for i, (name, live) in enumerate(later):
        match = _LAYER_ROW.match(name)
        held_by = kept if i <= last else 0
        if match and not _ACCUMULATE.search(name):
            if recompute and match.group(1) != recomputed:  # its first row: recomputed after it
                start = live - below * saving - reduced.get(name, 0) + held_by
                after = max(after, start + recompute)
            recomputed = match.group(1)
            below = int(match.group(1))  # layer j recomputed: the j below keep their inputs
        held = live - below * saving - reduced.get(name, 0) + held_by
        after = max(after, held)
    return after


def lora_checkpoint_extra(sequences: int, sequence: int, hidden: int) -> int:
    """Return what checkpointing keeps under peft beyond the ``peft-lora`` recipe's step.

    With adapters and checkpointing, TRL calls ``model.enable_input_require_grads()``
    (``sft_trainer.py:897-900``, ``dpo_trainer.py:717``), and the first layer
    runs under the checkpoint like the others. Measured under ``track()`` at
    (2, 7) and (3, 12) (``tests/pytorch/test_trl_recipe.py``), the step then
    holds beyond the recipe less the layers' saving:

    * the embeddings' output (``sequences x sequence x hidden`` fp32): the first
      layer's checkpointed input; without checkpointing nothing trainable reads
      it and it is freed;
    * ``sequences x sequence`` fp32: the first layer's saving is smaller than
      the others' by the input norm's ``rsqrt``, which it does not save when its
      input needs no gradient.

    (The ``(1, sequence)`` int64 position ids that every checkpointed step
    holds, full fine-tuning too, are :func:`trainer_step_beneath`'s.)

    Examples
    --------
    >>> lora_checkpoint_extra(3, 12, 32) + 8 * 12  # measured at (3, 12): 4,848 B
    4848
    """
    return _FP32 * sequences * sequence * (hidden + 1)


@dataclass(frozen=True)
class TRLStepEstimate:
    """A TRL trainer step's peak and the parts it adds up from, in bytes.

    What :func:`~memtheory.finetuning.dpo_step_memory` and
    :func:`~memtheory.finetuning.sft_step_memory` return. Each function's docstring
    names its parts; the peak is the larger of two moments: the fused head's
    backward, the sum of the parts that add up to it, and ``"after the head"``.
    The weights and ``"checkpointing keeps less, per layer"`` are listed for
    reference (the weights are inside ``up to the final norm``).

    Attributes
    ----------
    peak : int
        The step's peak.
    parts : dict of str to int
        What the peak adds up from, and the entries for reference.
    assumed : tuple of str
        What the estimate takes for granted, one line each.
    peak_moment : str
        ``"fused head backward"`` or ``"after the head"``: where the peak lies.

    Examples
    --------
    >>> step = TRLStepEstimate(peak=10, parts={"reference weights": 4}, assumed=("x",))
    >>> step.parts["reference weights"], step.assumed
    (4, ('x',))
    >>> TRLStepEstimate.at_most({"a": 3, "b": 4, "after the head": 6}, ("a", "b"), ()).peak
    7
    """

    peak: int
    parts: Mapping[str, int]
    assumed: tuple[str, ...]
    peak_moment: str = "fused head backward"

    @classmethod
    def at_most(cls, parts: Mapping[str, int], head: tuple[str, ...],
                assumed: tuple[str, ...]) -> TRLStepEstimate:
        """Return the step whose peak is the larger of the head's moment and the one after it.

        Parameters
        ----------
        parts : mapping of str to int
            The parts, ``"after the head"`` among them.
        head : tuple of str
            The parts that add up to the fused head's backward.
        assumed : tuple of str
        """
        at_head = sum(parts[name] for name in head)
        later = parts["after the head"]
        moment = "fused head backward" if at_head >= later else "after the head"
        return cls(peak=max(at_head, later), parts=parts, assumed=assumed, peak_moment=moment)


def recompute_lines(lora: LoRA | None, precision: str, checkpointing: bool) -> tuple[str, ...]:
    """Return :data:`RECOMPUTE_NOT_COUNTED` where it applies (MLP adapters, autocast, checkpoints).

    Examples
    --------
    >>> recompute_lines(None, "autocast-bf16", True), recompute_lines(LoRA(4, 8), "fp32", True)
    ((), ())
    >>> recompute_lines(LoRA(4, 8), "autocast-bf16", True)  # modelled: attention adapters only
    ()
    >>> len(recompute_lines(LoRA(4, 8, targets="all-linear"), "autocast-bf16", True))
    1
    """
    if (lora is not None and precision == "autocast-bf16" and checkpointing
            and not recomputes_weight_copy(lora, precision, checkpointing)):
        return (RECOMPUTE_NOT_COUNTED,)
    return ()


def checkpointing_line(checkpointing: bool) -> str:
    """Return the "assumed:" line that says how the step checkpoints.

    Examples
    --------
    >>> checkpointing_line(False)
    'gradient checkpointing off (gradient_checkpointing=False)'
    """
    if not checkpointing:
        return "gradient checkpointing off (gradient_checkpointing=False)"
    return ("gradient checkpointing on, TRL's default: every decoder layer, "
            "use_reentrant=False, as the Trainer's activation_checkpointing_enable() does")
