"""Chapter 16, language models end to end: the vocabulary, the loss's fp32 copy, Llama's blocks."""

import sympy as sp

from memtheory.conventions.autograd import forward_storages
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Quantity
from memtheory.exercises.derivation import note_lines, quantity_text, shown
from memtheory.exercises.steps_residual import (
    decoder_network,
    decoder_parameters,
    loss_saved_bytes,
    step_peak,
    vocabulary_parameters,
)
from memtheory.exercises.technique_steps import kv_cache
from memtheory.models import PRESETS


def _config(p, **change):
    return {**PRESETS[p.model].config, **change}


def _saved_by(storages, prefix):
    """Bytes kept for backward by the storages of layers whose name starts with ``prefix``."""
    return sp.Add(*(s.nbytes for s in storages if s.layer.startswith(prefix) and s.kept_by))


def _one_layer(how, p, **change):
    network = decoder_network(
        how, _config(p, num_hidden_layers=1, **change), batch=1, sequence=p.sequence, loss=True
    )
    return forward_storages(network, precision="bf16")


def _mlp_saved(p, how):
    storages = _one_layer(how, p)
    kept = [s for s in storages if s.layer.startswith("model.layers.0.mlp.") and s.kept_by]
    note_lines(
        ["The MLP's storages kept for backward (bf16, 2 bytes an element):"]
        + [
            f"  {s.layer.removeprefix('model.layers.0.mlp.')} {s.role}: "
            f"{quantity_text(s.nbytes)} bytes"
            for s in kept
        ]
    )
    return shown("Their sum, in bytes", sp.Add(*(s.nbytes for s in kept)))


def _logits_side(how, p):
    vocabulary = PRESETS[p.model].config["vocab_size"]
    return _logits_and_loss(how, 1, p.sequence, vocabulary)


def _logits_and_loss(how, batch, sequence, vocabulary):
    logits = shown(
        f"bf16 logits: {batch} x {sequence:,} x {vocabulary:,} x 2 bytes",
        batch * sequence * vocabulary * 2,
    )
    loss = loss_saved_bytes(how, (batch, sequence, vocabulary), "bf16")
    return shown(
        f"Output side: {quantity_text(logits)} + {quantity_text(loss)} bytes", logits + loss
    )


_SIDES = (
    "the output side (the bf16 logits and what the loss keeps)",
    "one transformer layer",
)


def _larger(p, how):
    layer = shown(
        "One transformer layer keeps for backward (the autograd convention's storages), bytes",
        _saved_by(_one_layer(how, p), "model.layers.0."),
    )
    return _SIDES[0] if _logits_side(how, p) > layer else _SIDES[1]


_SHRINKS = (
    "the key/value cache only",
    "the keys and values saved for the backward pass only",
    "both",
    "neither",
)


def _what_gqa_shrinks(p, how):
    config = PRESETS[p.model].config
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    width = config["hidden_size"] // heads
    shape = {"layers": 1, "heads": heads, "head_dim": width, "sequence": p.sequence, "batch": 1}
    cache = kv_cache(how, **shape, kv_heads=kv) < kv_cache(how, **shape)

    def kept(storages):
        return sum(
            s.nbytes
            for s in storages
            if s.layer.endswith("self_attn.attention") and s.role in ("keys", "values")
        )

    saved = kept(_one_layer(how, p)) < kept(_one_layer(how, p, num_key_value_heads=heads))
    return _SHRINKS[{(True, False): 0, (False, True): 1, (True, True): 2}.get((cache, saved), 3)]


def _cache(p, how):
    config = PRESETS[p.model].config
    heads = config["num_attention_heads"]
    return kv_cache(
        how,
        layers=config["num_hidden_layers"],
        heads=heads,
        head_dim=config["hidden_size"] // heads,
        kv_heads=config["num_key_value_heads"],
        sequence=p.sequence,
        batch=p.batch,
    )


SET = ExerciseSet(
    id="ch16",
    title="Language models end to end",
    intro="A decoder maps token ids through an embedding (V x D), L blocks (RMSNorm, attention "
    "with rotary positions and grouped key/value heads, RMSNorm, a SwiGLU MLP) and an output "
    "head (D x V, its own matrix unless tied) to B x S x V logits; Hugging Face's loss upcasts "
    "them to fp32 and keeps fp32 log-probabilities for the backward pass. Presets are the models' "
    "published config.json values (memtheory.models.PRESETS).",
    exercises=(
        Exercise(
            id="q1",
            title="parameters from a configuration",
            question="How many parameters does {model} have, from its published configuration "
            "(memtheory.models.PRESETS)?",
            params={"model": ("llama-3-8b", "mistral-7b-v0.1", "llama-2-7b", "qwen2-7b")},
            answer=Integer(),
            solve=lambda p, how: decoder_parameters(how, PRESETS[p.model].config),
            misconceptions=("assumed_tied_embeddings", "gqa_full_width_projections"),
        ),
        Exercise(
            id="q2",
            title="the vocabulary's parameters",
            question="How many parameters do the token embedding and the output head of "
            "{model} hold together?",
            params={"model": ("llama-3-8b", "llama-2-7b", "gemma-2b", "qwen2-7b")},
            answer=Integer(),
            solve=lambda p, how: vocabulary_parameters(how, PRESETS[p.model].config),
            misconceptions=("assumed_tied_embeddings",),
        ),
        Exercise(
            id="q3",
            title="the logits and the loss",
            question="A bf16 language model with a vocabulary of {vocabulary} tokens is trained "
            "on batches of {batch} sequences of {sequence} tokens with Hugging Face's causal-LM "
            "loss. How much memory do the bf16 logits and what the loss keeps for the backward "
            "pass take together?",
            params={
                "vocabulary": (128256, 32000, 256000, 152064),
                "batch": (4, 1, 8),
                "sequence": (4096, 2048, 8192),
            },
            answer=Quantity("GiB"),
            solve=lambda p, how: _logits_and_loss(how, p.batch, p.sequence, p.vocabulary),
            misconceptions=("logits_in_model_dtype", "mib_vs_mb"),
        ),
        Exercise(
            id="q4",
            title="which side dominates",
            question="{model} is trained in bf16 on one sequence of {sequence} tokens (eager "
            "attention). Which keeps more memory for the backward pass?",
            params={"model": ("llama-3-8b", "llama-2-7b"), "sequence": (2048, 512, 8192)},
            answer=Choice(_SIDES),
            solve=_larger,
            misconceptions=("logits_in_model_dtype",),
        ),
        Exercise(
            id="q5",
            title="the key/value cache with grouped heads",
            question="{model} generates in bf16 for a batch of {batch} sequences of {sequence} "
            "tokens. How large is its key/value cache?",
            params={
                "model": ("llama-3-8b", "mistral-7b-v0.1", "llama-2-70b", "llama-3.1-70b"),
                "batch": (8, 1, 16, 32),
                "sequence": (8192, 4096, 2048),
            },
            answer=Quantity("GiB"),
            solve=_cache,
            misconceptions=("kv_ignored_shared_heads", "kv_forgot_values", "kv_fp32", "mib_vs_mb"),
        ),
        Exercise(
            id="q6",
            title="what grouped-query attention saves",
            question="{model} has fewer key/value heads than query heads. Compared with the same "
            "model with one key/value head per query head, what does that make smaller: the "
            "key/value cache when generating, the keys and values eager attention saves for the "
            "backward pass in training (one sequence of {sequence} tokens), both, or neither?",
            params={"model": ("llama-3-8b", "mistral-7b-v0.1"), "sequence": (1024, 256)},
            answer=Choice(_SHRINKS),
            solve=_what_gqa_shrinks,
        ),
        Exercise(
            id="q7",
            title="the peak of a training step",
            question="{model} is trained in bf16 (weights, gradients and AdamW's state all "
            "bf16) on one sequence of {sequence} tokens with eager attention. What is the peak "
            "of a training step, as PyTorch keeps it?",
            params={"model": ("llama-3-8b", "llama-2-7b"), "sequence": (2048, 1024, 4096)},
            answer=Quantity("GiB"),
            solve=lambda p, how: step_peak(
                how,
                decoder_network(
                    how, PRESETS[p.model].config, batch=1, sequence=p.sequence, loss=True
                ),
                optimizer="adamw",
                precision="bf16",
            ),
            misconceptions=("breakdown_for_autograd", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q8",
            title="SwiGLU's saved activations",
            question="Per token, how many bytes does one SwiGLU MLP of {model} save for the "
            "backward pass in bf16 (gate projection, its SiLU, up projection, their product)?",
            params={"model": ("llama-3-8b", "llama-2-7b", "mistral-7b-v0.1"), "sequence": (1,)},
            answer=Integer(unit="B"),
            solve=_mlp_saved,
        ),
    ),
)
