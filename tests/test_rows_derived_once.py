"""Equal layers at equal input shapes are derived once: the same rows, and fewer derivations.

A layer's formulas depend on its kind, its options and the shapes reaching it, not on its
name, so :func:`memtheory.network.rows.derive_rows` keeps them by those (a deep stack's
identical blocks are derived once). The reference is every row derived afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import memtheory as mt
from memtheory.finetuning import LoRA, apply_lora
from memtheory.layers import Dense
from memtheory.models import from_config, gpt2, resnet
from memtheory.network import rows as rows_module

LLAMA = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2}


def _networks():
    llama = from_config(LLAMA, batch=2, sequence=8, loss=True)
    return {
        "GPT-2 small": gpt2("small"),
        "Llama-style, 3 layers": llama,
        "the same with LoRA": apply_lora(llama, LoRA(rank=4)),
        "ResNet-50, symbolic H": resnet((3, 4, 6, 3), image_size=mt.symbols.H),
        "pooled CNN": mt.Network([
            mt.Input((3, mt.symbols.H, mt.symbols.H)),
            *[layer for _ in range(4) for layer in (mt.Conv2d(8, 3, padding=1), mt.MaxPool2d(2))],
            mt.Flatten(), mt.Dense(10)]),
    }


def _fresh_rows(network):
    """Every row derived again with nothing kept (the memo's key refused)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows_module, "_key", lambda layer, shapes: None)
        return list(rows_module.derive_rows(network.name, network.layers, network._inputs))


NAMES = ["GPT-2 small", "Llama-style, 3 layers", "the same with LoRA", "ResNet-50, symbolic H",
         "pooled CNN"]


@pytest.mark.parametrize("name", NAMES)
def test_rows_kept_by_their_options_are_the_rows_derived_afresh(name):
    """Every field of every row (shapes, counts, buffers, saved tensors) is the same."""
    network = _networks()[name]
    assert list(network.rows) == _fresh_rows(network)


def test_identical_blocks_are_derived_once(monkeypatch):
    """Ten equal Dense layers, each named apart, at one shape: one derivation, ten rows."""
    calls = []
    original = Dense.weight_count

    def counted(self, shape):
        calls.append(self.name)
        return original(self, shape)

    monkeypatch.setattr(Dense, "weight_count", counted)
    monkeypatch.setattr(rows_module, "_SEEN", {})
    network = mt.Network([mt.Input((7,)), *[Dense(7) for _ in range(10)]])
    assert calls == ["dense_1"] and len(rows_module._SEEN) == 2  # the input, one Dense
    assert [row.name for row in network.rows[1:]] == [f"dense_{i}" for i in range(1, 11)]
    assert len({row.layer.name for row in network.rows}) == 11  # each row keeps its own layer
    assert len({row.weights for row in network.rows[1:]}) == 1
    mt.Network([mt.Input((5,)), *[Dense(7) for _ in range(3)]])  # another input shape
    assert calls == ["dense_1", "dense_1"]  # at (B, 5); then at (B, 7), as kept
    assert len(rows_module._SEEN) == 4


def test_layers_that_differ_in_any_option_or_its_type_are_derived_apart(monkeypatch):
    """bias=False against True, and an option's value as 1 or True: never shared."""

    @dataclass(frozen=True)
    class Scaled(Dense):
        scale: object = 1

    monkeypatch.setattr(rows_module, "_SEEN", {})
    network = mt.Network([mt.Input((4,)), Dense(4, bias=True), Dense(4, bias=False),
                          Scaled(4, scale=1), Scaled(4, scale=True)])
    assert [row.biases for row in network.rows[1:3]] == [4, 0]
    assert len(rows_module._SEEN) == 5  # the input and four layers, none shared


def test_a_shape_error_still_names_the_layer_and_its_position():
    """Kept formulas do not hide a layer that cannot take its input: the message is its own."""
    layers = [mt.Input((3, 8, 8)), mt.Conv2d(4, 3), mt.Conv2d(4, 3), mt.Conv2d(4, 3),
              mt.Conv2d(4, 3)]
    with pytest.raises(mt.errors.ShapeError, match="layer 4 of"):
        mt.Network(layers)
