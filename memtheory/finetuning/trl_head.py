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

from collections.abc import Mapping
from dataclasses import dataclass

from memtheory.dtypes import dtype
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.finetuning.lora import LoRA
from memtheory.finetuning.memory import finetune_memory
from memtheory.memory import training_memory
from memtheory.models import from_config
from memtheory.models.hf_config import ConfigLike, load_config
from memtheory.recipes import Setup

__all__ = [
    "TRLStepEstimate",
    "TRL_PRECISIONS",
    "TRL_TOKEN_CHUNK",
    "TRL_VOCAB_CHUNK",
    "check_trl_step",
    "fused_head_backward_bytes",
    "trainer_step_to_norm",
]

TRL_TOKEN_CHUNK = 4096
"""Rows of the fused head's tile (TRL 1.16 ``kernels/chunked_logprob.py`` ``TOKEN_CHUNK_SIZE``)."""

TRL_VOCAB_CHUNK = 32768
"""Tile columns (TRL 1.16 ``trainer/utils.py`` ``_CHUNKED_LOGPROB_CHUNK_SIZE``)."""

TRL_PRECISIONS = ("fp32", "autocast-bf16")
"""fp32 weights with TRL's ``bf16=False`` or ``bf16=True`` (``torch.autocast``)."""

_FINAL_NORM = "forward model.norm"

_FP32 = int(dtype("fp32").bytes)
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
    if lora is not None and precision != "fp32":
        raise UnsupportedError(
            f"{trainer}(lora=..., precision={precision!r}): peft adapters under bf16 "
            "autocast are not modelled (the frozen layers' autocast weight copies); ask "
            "precision='fp32' (bf16=False in TRL's config)."
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
    return int(step.timeline[_FINAL_NORM]), weights, dict(read)


@dataclass(frozen=True)
class TRLStepEstimate:
    """A TRL trainer step's peak and the parts it adds up from, in bytes.

    What :func:`~memtheory.finetuning.dpo_step_memory` and
    :func:`~memtheory.finetuning.sft_step_memory` return. Each function's docstring
    names its parts; the peak is the sum of all of them but the weights, which
    are listed for reference (they are inside ``up to the final norm``).

    Attributes
    ----------
    peak : int
        The step's peak: the sum of its parts, the weights' entry excepted.
    parts : dict of str to int
        What the peak adds up from, and the weights' bytes.
    assumed : tuple of str
        What the estimate takes for granted, one line each.

    Examples
    --------
    >>> step = TRLStepEstimate(peak=10, parts={"reference weights": 4}, assumed=("x",))
    >>> step.parts["reference weights"], step.assumed
    (4, ('x',))
    """

    peak: int
    parts: Mapping[str, int]
    assumed: tuple[str, ...]
