"""What the recipe's storage plan says about a TRL step that the recipe's timeline does not.

TRL's step (:func:`~memtheory.finetuning.trainer_step_beneath`) is read from
the ``hf-trainer`` (``peft-lora``) recipe's timeline at its final norm. Two of
its storages are not where the TRL step has them, and the autograd
convention's storage plan (:func:`~memtheory.conventions.autograd.storage_plan.step_plan`)
names both:

* **autocast's cache** (:func:`autocast_cache_bytes`): under ``torch.autocast``
  the casts of trainable weights that no backward node keeps (peft's
  ``lora_A`` of a first layer whose input needs no gradient) stay in the
  cache until the forward ends. The recipe's timeline at the norm counts
  them; when TRL's fused head starts its backward the forward has ended and
  they are freed.
* **the first decoder layer** (:func:`first_layer_shortfall`): with
  checkpointing, TRL makes the embeddings' output need a gradient
  (``enable_input_require_grads``), so the first layer keeps what every other
  layer keeps; in the recipe, where nothing before it is trained (peft), it
  keeps less: its input, its input norm's ``rsqrt`` and, under autocast, the
  bf16 copies of the frozen projections that read that norm (``q``, ``k``,
  ``v``: a frozen ``Linear`` keeps its weight's autocast copy only for its
  input's gradient), and its ``lora_A`` casts, which its nodes keep and not
  the cache.

Examples
--------
>>> from memtheory.finetuning.lora import LoRA
>>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
...         "num_key_value_heads": 2, "tie_word_embeddings": False}
>>> plan = recipe_plan(tiny, sequences=2, sequence=7, lora=LoRA(4, 8), precision="autocast-bf16")
>>> autocast_cache_bytes(plan, "model.norm")  # layer 0's lora_A casts: 2 x (4 x 32) bf16
512
"""

from __future__ import annotations

import re

from memtheory.conventions.autograd.storage_plan import StepPlan, holders_of, step_plan
from memtheory.errors import UnknownNameError
from memtheory.finetuning.lora import LoRA, apply_lora
from memtheory.models import from_config
from memtheory.models.hf_config import ConfigLike, load_config
from memtheory.precision import precision as as_precision
from memtheory.recipes import Setup

__all__ = ["autocast_cache_bytes", "first_layer_shortfall", "recipe_plan"]

_DECODER_ROW = re.compile(r"^model\.layers\.(\d+)\.")


def recipe_plan(config: ConfigLike, *, sequences: int, sequence: int, lora: LoRA | None,
                precision: str) -> StepPlan:
    """Return the storage plan of the ``hf-trainer`` (``peft-lora``) recipe's step on CPU.

    The step :func:`~memtheory.finetuning.trainer_step_beneath` reads its
    timeline from: the model as :func:`~memtheory.models.from_config` builds
    it (a loss, flash attention), peft's adapters applied when ``lora`` is given.

    Parameters
    ----------
    config : mapping, str or path
        What :func:`~memtheory.models.from_config` reads.
    sequences, sequence : int
        Rows of the batch and tokens per row.
    lora : LoRA or None
    precision : {"fp32", "autocast-bf16"}

    Returns
    -------
    StepPlan

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> recipe_plan(tiny, sequences=2, sequence=7, lora=None, precision="fp32").rows[-1].row.name
    'loss'
    """
    network = from_config(load_config(config), batch=sequences, sequence=sequence, loss=True,
                          flash=True)
    recipe = "hf-trainer" if lora is None else "peft-lora"
    keeps = Setup.recipe(recipe, device="cpu").convention().keeps_logits
    tuned = network if lora is None else apply_lora(network, lora)
    return step_plan(tuned, as_precision(precision), training=True, keeps_logits=keeps)


def autocast_cache_bytes(plan: StepPlan, until: str) -> int:
    """Return the bytes in autocast's cache, and nowhere else, once the row ``until`` has run.

    Autocast's casts of parameters (leaves that need a gradient) that no
    backward node keeps: the recipe's timeline holds them until the forward
    ends (``conventions/autograd/timeline.py``, ``run_forward``). 0 without
    autocast, and 0 for full fine-tuning of a decoder, whose every
    projection's input needs a gradient.

    Parameters
    ----------
    plan : StepPlan
        From :func:`recipe_plan`.
    until : str
        A row's name (``"model.norm"``).

    Returns
    -------
    int

    Examples
    --------
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> full = recipe_plan(tiny, sequences=2, sequence=7, lora=None, precision="autocast-bf16")
    >>> autocast_cache_bytes(full, "model.norm")
    0
    """
    holders = holders_of(plan)
    cached = 0
    for entry in plan.rows:
        cached += sum(int(nbytes) for key, nbytes in entry.copies.items() if not holders.get(key))
        if entry.row.name == until:
            return cached
    raise UnknownNameError(
        f"no row named {until!r} in the plan; its rows: "
        f"{', '.join(entry.row.name for entry in plan.rows[:8])}, ...",
        name=until,
    )


def _saved_by_layer(plan: StepPlan) -> dict[int, int]:
    """Bytes the backward nodes of each decoder layer's rows keep (``model.layers.{i}.``)."""
    keys: dict[int, set[str]] = {}
    for entry in plan.rows:
        match = _DECODER_ROW.match(entry.row.name)
        if match:
            keys.setdefault(int(match.group(1)), set()).update(entry.saved)
    return {layer: sum(int(plan.sizes[key]) for key in saved) for layer, saved in keys.items()}


def first_layer_shortfall(plan: StepPlan) -> int:
    """Return what the recipe's first decoder layer keeps less than its last one.

    The checkpointed TRL step's first layer keeps what the others keep (the
    embeddings' output needs a gradient); the recipe's keeps less when nothing
    before it is trained (peft's adapters). In fp32 that is its input and its
    input norm's ``rsqrt`` (:func:`~memtheory.finetuning.trl_head.lora_checkpoint_extra`,
    measured); under autocast also the bf16 copies of the frozen projections
    that read the norm, and the ``lora_A`` weights' casts (which the recipe's
    first layer leaves in autocast's cache, :func:`autocast_cache_bytes`).
    0 for full fine-tuning, and for a model of one layer (ask the same model
    with two).

    Parameters
    ----------
    plan : StepPlan
        From :func:`recipe_plan`.

    Returns
    -------
    int

    Examples
    --------
    >>> from memtheory.finetuning.trl_head import lora_checkpoint_extra
    >>> tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    ...         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...         "num_key_value_heads": 2, "tie_word_embeddings": False}
    >>> fp32, autocast = (first_layer_shortfall(recipe_plan(tiny, sequences=2, sequence=7,
    ...                                                     lora=LoRA(4, 8), precision=p))
    ...                   for p in ("fp32", "autocast-bf16"))
    >>> fp32 == lora_checkpoint_extra(2, 7, 32)
    True
    >>> copies = 2 * (32 * 32 + 2 * 16 * 32)  # q_proj, k_proj, v_proj in bf16
    >>> autocast - fp32 == copies + 2 * (2 * 4 * 32)  # and the lora_A casts, cached instead
    True
    """
    saved = _saved_by_layer(plan)
    if len(saved) < 2:
        return 0
    return saved[max(saved)] - saved[min(saved)]
