"""Every-layer checkpointing (Hugging Face's gradient_checkpointing_enable()), breakdown convention.

Measured against transformers' Llama in tests/pytorch/test_checkpointing_measured.py;
here the model's structure, with every number derived from the configuration.
"""

from __future__ import annotations

import pytest

from memtheory import Dense, Input, Network
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.estimate.step import step_memory
from memtheory.models import from_config
from memtheory.techniques.checkpointing import every_layer, repeated_layers

BATCH, SEQUENCE, HIDDEN, HEADS, KV, WIDTH = 2, 16, 32, 4, 2, 8
CONFIG = {"model_type": "llama", "vocab_size": 50, "hidden_size": HIDDEN,
          "intermediate_size": 40, "num_attention_heads": HEADS, "num_key_value_heads": KV,
          "max_position_embeddings": 128, "tie_word_embeddings": False}


def _llama(layers: int, flash: bool = False):
    return from_config({**CONFIG, "num_hidden_layers": layers}, batch=BATCH, sequence=SEQUENCE,
                       flash=flash, loss=True)


def test_one_more_layer_keeps_one_more_hidden_state():
    """Each checkpointed layer adds only its input (B x S x h) to what the step keeps."""
    kept = [every_layer(_llama(n)).kept for n in (2, 3, 4)]
    assert kept[1] - kept[0] == kept[2] - kept[1] == BATCH * SEQUENCE * HIDDEN


def test_eager_attention_is_counted_once_not_per_layer():
    """Eager minus flash: one recomputed layer's Q, K, V copies and scores, whatever the depth."""
    per_head = BATCH * HEADS * SEQUENCE * WIDTH
    scores = BATCH * HEADS * SEQUENCE * SEQUENCE
    for layers in (2, 3):
        gap = every_layer(_llama(layers)).kept - every_layer(_llama(layers, flash=True)).kept
        assert gap == 3 * per_head + scores


def test_checkpointing_true_is_every_layer_for_decoders():
    """step_memory(checkpointing=True) keeps every_layer's activations, x2 in fp32."""
    network = _llama(3)
    step = step_memory(network, optimizer="sgd", precision="fp32", checkpointing=True)
    kept = every_layer(network)
    assert step.memory["activations"] == kept.kept * 4 + kept.masks
    assert step.memory["activation_gradients"] == kept.kept * 4
    assert "gradient_checkpointing_enable" in step.memory.notes[-1]


def test_checkpointing_true_falls_back_to_the_best_interval_without_decoder_layers():
    """An MLP has no decoder layers: True means chapter 13's best interval there."""
    network = Network([Input((10,), batch=4), *[Dense(10) for _ in range(9)]])
    step = step_memory(network, optimizer="sgd", precision="fp32", checkpointing=True)
    assert step.memory.notes[-1].startswith("activation checkpointing every 3 unit(s)")
    with pytest.raises(UnsupportedError, match="repeated layers"):
        step_memory(network, optimizer="sgd", precision="fp32", checkpointing="every-layer")


def test_repeated_layers_follow_hugging_face_names():
    """model.layers.{i} rows group into one tuple per decoder layer, in order."""
    layers = repeated_layers(_llama(3))
    assert [rows[0].name for rows in layers] == [
        f"model.layers.{i}.input_layernorm" for i in range(3)
    ]


def test_unknown_checkpointing_is_refused():
    """A misspelt checkpointing value names the ones it takes."""
    with pytest.raises(InvalidArgumentError, match="every-layer"):
        step_memory(_llama(2), checkpointing="every_layer")
