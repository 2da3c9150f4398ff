"""Steps of chapters 15 and 16 (residual networks, normalisation, language models), and mistakes.

An exercise's solver calls these steps with its ``how``
(:class:`~memtheory.exercises.reasoning.Reasoning`); the correct reasoning
has no step of its own and gets memtheory's answer, and each misconception
defined here overrides one step, so that the same solver recomputes the
answer with that one step wrong. Importing this module registers the
misconceptions in :data:`~memtheory.exercises.misconceptions.MISCONCEPTIONS`
(by name, once), as :mod:`memtheory.exercises.technique_steps` does.

Examples
--------
>>> from memtheory.exercises.reasoning import CORRECT
>>> from memtheory.layers import BatchNorm2d
>>> buffer_bytes(CORRECT, BatchNorm2d(), (1, 64, 8, 8))
520
>>> from memtheory.exercises import MISCONCEPTIONS
>>> way = MISCONCEPTIONS["bn_forgot_batch_count"].ways[0]
>>> buffer_bytes(way, BatchNorm2d(), (1, 64, 8, 8))
512
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy as sp

from memtheory.conventions import ConventionLike
from memtheory.dtypes import DTypeLike, dtype
from memtheory.exercises.derivation import (
    note,
    note_lines,
    note_memory,
    note_tensors,
    quantity_text,
)
from memtheory.exercises.misconceptions import Misconception, register
from memtheory.exercises.reasoning import Reasoning, own_step
from memtheory.layers import LanguageModelLoss, Layer
from memtheory.layers.base import Shape
from memtheory.layers.saved_storages import saved_storages
from memtheory.memory import inference_memory, training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.models import from_config
from memtheory.network import Network

__all__ = [
    "RESIDUAL_MISCONCEPTIONS",
    "buffer_bytes",
    "decoder_network",
    "decoder_parameters",
    "inference_peak",
    "loss_saved_bytes",
    "saved_activation_bytes",
    "saved_bytes",
    "step_peak",
    "trained_parameters",
    "vocabulary_parameters",
]


def _convention(how: Reasoning) -> ConventionLike:
    own = own_step(how, "accounting")
    return own() if own else "autograd"


_CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "tie_word_embeddings",
)


# -- the steps ---------------------------------------------------------------------------------
def buffer_bytes(
    how: Reasoning, layer: Layer, shape: Shape, model_dtype: DTypeLike = "fp32"
) -> int:
    """Bytes of a layer's buffers (BatchNorm's running mean, variance and batch count).

    Buffers of unspecified dtype are in the model's dtype ``model_dtype``.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.layers import BatchNorm2d
    >>> buffer_bytes(CORRECT, BatchNorm2d(), (1, 8, 4, 4), "bf16")  # 2 x 8 x 2 + 8
    40
    """
    specs = layer.buffers(shape)
    own = own_step(how, "buffers")
    if own:
        specs = own(specs)
    default = dtype(model_dtype)
    note_tensors(f"Buffers of {type(layer).__name__} on an input {_shape(shape)}", specs, default)
    return int(sum(sp.Mul(*s.shape) * (s.dtype or default).bytes for s in specs))


def saved_bytes(how: Reasoning, layer: Layer, shape: Shape, model_dtype: DTypeLike = "fp32") -> int:
    """Bytes a layer keeps for its backward pass in training: its saved storages.

    The storages are :func:`memtheory.layers.saved_storages.saved_storages`
    of an input of dtype ``model_dtype``.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.layers import LayerNorm
    >>> saved_bytes(CORRECT, LayerNorm(), (1, 1, 768), "bf16")  # 768 x 2 + 2 x 2
    1540
    """
    default = dtype(model_dtype)
    specs = saved_storages(layer, shape, dtype=model_dtype)
    own = own_step(how, "saved")
    if own:
        specs = own(specs, default)
    note_tensors(
        f"Saved for backward by {type(layer).__name__} on a {default.name} input {_shape(shape)}",
        specs,
        default,
    )
    return int(sum(sp.Mul(*s.shape) * (s.dtype or default).bytes for s in specs))


def trained_parameters(how: Reasoning, network: Network) -> sp.Expr:
    """Trainable parameters of ``network`` as the learner counts them.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import resnet18
    >>> trained_parameters(CORRECT, resnet18(batch=1))
    11689512
    """
    own = own_step(how, "with_buffers")
    count = how.parameter_count(network)
    return own(count, network) if own else count


def _shape(shape: Shape) -> str:
    return "(" + ", ".join(sp.sstr(d) for d in shape) + ")"


def _training(
    how: Reasoning, network: Network, *, optimizer: str = "sgd", precision: str = "fp32"
) -> MemoryBreakdown:
    chosen = how.optimizer(optimizer)
    memory = training_memory(
        network,
        optimizer=chosen,
        precision=how.precision(precision),
        convention=how.convention(_convention(how)),
    )
    note_memory(f"A training step of {network.name} with {chosen.title} in {precision}", memory)
    return memory


def saved_activation_bytes(how: Reasoning, network: Network, **options: Any) -> sp.Expr:
    """Bytes of activations a training step keeps (the autograd convention's saved activations).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import resnet18
    >>> saved_activation_bytes(CORRECT, resnet18(batch=1, image_size=32), optimizer="sgd") > 0
    True
    """
    c = _training(how, network, **options).components
    return c["saved_activations"] if "saved_activations" in c else c["activations"]


def step_peak(how: Reasoning, network: Network, **options: Any) -> sp.Expr:
    """Return the most bytes alive in a training step (without a timeline: the total).

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import resnet18
    >>> net = resnet18(batch=1, image_size=32)
    >>> memory = _training(CORRECT, net, optimizer="sgd")
    >>> step_peak(CORRECT, net, optimizer="sgd") < sum(memory.components.values())
    True
    """
    memory = _training(how, network, **options)
    return memory.peak if memory.timeline else memory.total


def inference_peak(how: Reasoning, network: Network, precision: str = "fp32") -> sp.Expr:
    """Return the most bytes alive in an eval-mode forward pass under ``no_grad``.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import resnet18
    >>> inference_peak(CORRECT, resnet18(batch=1, image_size=32)) > 0
    True
    """
    memory = inference_memory(
        network, precision=how.precision(precision), convention=how.convention(_convention(how))
    )
    note_memory(f"A no_grad forward pass of {network.name} in {precision}", memory)
    return memory.peak if memory.timeline else memory.total


def loss_saved_bytes(how: Reasoning, shape: Shape, model_dtype: DTypeLike = "bf16") -> int:
    """Bytes the causal-LM loss keeps for backward on ``(batch, sequence, vocabulary)`` logits.

    :class:`~memtheory.layers.LanguageModelLoss` as Hugging Face computes it:
    fp32 log-probabilities whatever the model's dtype, the shifted int64 labels
    and a one-element total weight. With one row the shifted labels are a view
    of the padded ``(1, S + 1)`` labels, which the loss then keeps.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> loss_saved_bytes(CORRECT, (2, 1, 10), "bf16")  # 2 x 10 x 4 + 4 + 2 x 8
    100
    >>> loss_saved_bytes(CORRECT, (1, 1, 10), "bf16")  # 10 x 4 + 4 + 2 x 8: padded labels
    60
    """
    own = own_step(how, "loss_upcast")
    loss = LanguageModelLoss(upcast=own() if own else True)
    return saved_bytes(how, loss, shape, model_dtype)


def decoder_network(how: Reasoning, config: Mapping[str, Any], **sizes: Any) -> Network:
    """Build a decoder from a Hugging Face configuration ``config``, as the learner reads it.

    :func:`memtheory.models.from_config` with ``sizes`` (``batch``,
    ``sequence``, ``loss``) passed on.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import PRESETS
    >>> decoder_network(CORRECT, PRESETS["llama-2-7b"].config, batch=1).parameter_count
    6738415616
    """
    own = own_step(how, "read_config")
    read = own(dict(config)) if own else dict(config)
    note(
        "From the configuration: "
        + ", ".join(f"{key} = {read[key]}" for key in _CONFIG_KEYS if key in read)
    )
    return from_config(read, **sizes)


def decoder_parameters(how: Reasoning, config: Mapping[str, Any]) -> sp.Expr:
    """Parameters of the decoder :func:`decoder_network` builds.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import PRESETS
    >>> decoder_parameters(CORRECT, PRESETS["llama-3-8b"].config)
    8030261248
    """
    network = decoder_network(how, config, batch=1, sequence=1)
    _note_parameters(network, network.rows)
    return network.parameter_count


def _note_parameters(network: Network, rows: Any) -> None:
    """Record the parameters of ``rows``, grouped by the kind of layer, and their sum."""
    groups: dict[str, tuple[int, sp.Expr]] = {}
    for row in rows:
        count = row.layer.parameter_count(row.input_shape)
        if count:
            seen, total = groups.get(row.layer.kind, (0, sp.Integer(0)))
            groups[row.layer.kind] = (seen + 1, total + count)
    lines = [f"Parameters of {network.name}, by kind of layer:"]
    lines += [f"  {n} x {kind}: {quantity_text(total)}" for kind, (n, total) in groups.items()]
    lines.append(f"  total: {quantity_text(sum((t for _, t in groups.values()), sp.Integer(0)))}")
    note_lines(lines)


def vocabulary_parameters(how: Reasoning, config: Mapping[str, Any]) -> sp.Expr:
    """Parameters of the token embedding and the output head together.

    Examples
    --------
    >>> from memtheory.exercises.reasoning import CORRECT
    >>> from memtheory.models import PRESETS
    >>> vocabulary_parameters(CORRECT, PRESETS["llama-2-7b"].config) == 2 * 32000 * 4096
    True
    """
    network = decoder_network(how, config, batch=1, sequence=1)
    rows = [r for r in network.rows if r.layer.kind in ("Embedding", "Unembedding")]
    _note_parameters(network, rows)
    return sp.Add(*(r.layer.parameter_count(r.input_shape) for r in rows))


# -- the mistakes ------------------------------------------------------------------------------
class _NoBatchCount(Reasoning):
    detail = "the running mean and variance, without the int64 count of batches"

    def buffers(self, specs: Any) -> Any:
        return tuple(s for s in specs if s.shape != ())


class _NoStatistics(Reasoning):
    detail = "the input kept, but not the per-channel or per-position statistics"

    def saved(self, specs: Any, model: Any) -> Any:
        return tuple(s for s in specs if s.role != "statistics")


class _AllInModelDtype(Reasoning):
    detail = "every saved tensor in the model's dtype"

    def saved(self, specs: Any, model: Any) -> Any:
        from dataclasses import replace

        return tuple(replace(s, dtype=model) for s in specs)


class _BuffersAsParameters(Reasoning):
    detail = "the running means and variances counted as parameters"

    def with_buffers(self, count: sp.Expr, network: Network) -> sp.Expr:
        extra = sp.Integer(0)
        for row in network.rows:
            kept = row.layer.buffers(row.input_shape)
            extra += sum(sp.Mul(*s.shape) for s in kept if s.shape != ())
        return count + extra


class _Breakdown(Reasoning):
    detail = "the breakdown convention: every layer's output kept, and counted twice in training"

    def accounting(self) -> str:
        return "breakdown"


class _LogitsInModelDtype(Reasoning):
    detail = "the loss's log-probabilities counted in the model's dtype, not fp32"

    def loss_upcast(self) -> bool:
        return False


class _AssumedTied(Reasoning):
    detail = "the output head counted as sharing the embedding's matrix"

    def read_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return {**config, "tie_word_embeddings": True}


class _FullWidthKeyValues(Reasoning):
    detail = "one key/value head per query head in the projections"

    def read_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return {**config, "num_key_value_heads": config["num_attention_heads"]}


RESIDUAL_MISCONCEPTIONS = (
    Misconception(
        "bn_forgot_batch_count",
        "left out BatchNorm's count of batches",
        "BatchNorm2d keeps three buffers: the running mean and variance (C values each, in the "
        "model's dtype) and num_batches_tracked, one int64 (8 bytes).",
        (_NoBatchCount(),),
    ),
    Misconception(
        "norm_forgot_statistics",
        "kept the input of a normalisation but not its statistics",
        "Batch, layer and RMS normalisation also save the mean and/or inverse standard deviation "
        "they computed (per channel for BatchNorm, per position for LayerNorm and RMSNorm).",
        (_NoStatistics(),),
    ),
    Misconception(
        "norm_saved_in_model_dtype",
        "counted every saved tensor of a normalisation in the model's dtype",
        "Some normalisations compute in fp32 inside a bf16 model (RMSNorm in Llama's code "
        "upcasts its input): what they save in fp32 costs 4 bytes per value.",
        (_AllInModelDtype(),),
    ),
    Misconception(
        "running_stats_as_parameters",
        "counted BatchNorm's running statistics as trained parameters",
        "The running mean and variance are buffers: updated in the forward pass, never trained, "
        "so they have no gradient and no optimizer state. Only the scale and shift are parameters.",
        (_BuffersAsParameters(),),
    ),
    Misconception(
        "breakdown_for_autograd",
        "counted every layer's output (and the x2) instead of what autograd keeps",
        "Autograd keeps what each operation's backward reads: an in-place ReLU or addition adds "
        "nothing, a shortcut keeps its input until the addition's backward, and the gradients "
        "of activations are freed as the backward goes; inference keeps only the live tensors.",
        (_Breakdown(),),
    ),
    Misconception(
        "logits_in_model_dtype",
        "kept the loss's log-probabilities in the model's dtype",
        "Hugging Face's causal-LM loss upcasts the B x S x V logits to fp32 and keeps fp32 "
        "log-probabilities for the backward pass: 4 bytes per logit whatever the model's dtype, "
        "on top of the logits themselves.",
        (_LogitsInModelDtype(),),
    ),
    Misconception(
        "assumed_tied_embeddings",
        "counted the output head as the embedding's matrix",
        "Llama-style models (tie_word_embeddings = false) have an output head of their own: "
        "another V x D matrix beside the token embedding.",
        (_AssumedTied(),),
    ),
    Misconception(
        "gqa_full_width_projections",
        "gave the key and value projections one head per query head",
        "With grouped-query attention the key and value projections are D x (kv_heads x "
        "head_dim), not D x D.",
        (_FullWidthKeyValues(),),
    ),
)
"""The misconceptions of chapters 15 and 16, registered on import."""

register(RESIDUAL_MISCONCEPTIONS)
