"""OLMo 2 and OLMo 3 under the autograd convention against measure() on transformers.

The harness of ``test_family_autograd.py`` (``hf_decoders.decoder_step``):
transformers 5.24 builds ``Olmo2ForCausalLM`` / ``Olmo3ForCausalLM`` from a
tiny configuration with eager attention, ``memtheory.torch.measure`` runs
its training step on CPU, memtheory predicts it from ``from_config``.

What OLMo adds to Llama's layers: RMS norms that scale in fp32 before the
cast back (:class:`~memtheory.layers.upcast_norm.UpcastRMSNorm`) over the
whole query and key projections and after each block, rotary tables left in
fp32 with the rotation computed in fp32 and cast back
(``RotaryTable(fp32=True)``, ``Rotary(upcast=True)``), and in OLMo 3 one
pair of tables per attention kind (sliding, full: its fourth layer).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import compared, decoder_step  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.models import from_config  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TINY = {"vocab_size": 50, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "tie_word_embeddings": False}
BIGGER = {**TINY, "vocab_size": 64, "hidden_size": 48, "intermediate_size": 56,
          "num_hidden_layers": 4, "num_attention_heads": 6, "num_key_value_heads": 3}
"""A second size: other widths and head counts, and four layers (OLMo 3's fourth is full
attention, the first three sliding: two pairs of rotary tables)."""


def _differences(config: dict, precision: str, optimizer: str, batch: int, sequence: int):
    """Return predicted minus measured bytes of each component and the peak that differ."""
    predicted, measured = decoder_step(config, precision, optimizer, batch, sequence)
    got, want = compared(predicted, measured)
    return {name: got[name] - want[name] for name in got if got[name] != want[name]}, predicted


def test_olmo2_bf16_step_is_exact():
    """OLMo 2 in bf16 (fp32 norm copies, fp32 rotary tables): every component and the peak."""
    differ, _ = _differences({**TINY, "model_type": "olmo2"}, "bf16", "adam", 2, 6)
    assert differ == {}


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "optimizer"),
                         [("fp32", "adam"), ("bf16", "sgd"), ("autocast", "adamw")])
@pytest.mark.parametrize("size", [TINY, BIGGER], ids=["tiny", "bigger"])
@pytest.mark.parametrize("family", ["olmo2", "olmo3"])
def test_olmo_training_step_is_exact(family, size, precision, optimizer):
    """OLMo 2 and 3 at two sizes, fp32, bf16 and autocast: every component and the peak."""
    differ, _ = _differences({**size, "model_type": family}, precision, optimizer, 2, 6)
    assert differ == {}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["olmo2", "olmo3"])
def test_olmo_peak_inside_attention_backward_is_exact(family):
    """At 160 bf16 positions the step peaks in the softmax's backward, exactly."""
    differ, predicted = _differences({**TINY, "model_type": family, "vocab_size": 16},
                                     "bf16", "sgd", 2, 160)
    assert predicted.peak_moment.startswith("backward model.layers.1.self_attn.attention")
    assert differ == {}


@pytest.mark.parametrize("size", [TINY, BIGGER], ids=["tiny", "bigger"])
@pytest.mark.parametrize("family", ["olmo2", "olmo3"])
def test_rotary_buffers_are_transformers_buffers(family, size):
    """The rotary tables' buffers are the bytes of the model's on meta (OLMo 3: per kind)."""
    config = {**size, "model_type": family}
    values = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(family, **values))
    theirs = sum(b.numel() * b.element_size() for b in model.buffers())
    network = from_config(config, batch=2, sequence=6, loss=True)
    memory = mt.training_memory(network, optimizer="sgd", precision="fp32",
                                convention=AutogradConvention())
    assert memory.components["buffers"] == theirs


@pytest.mark.parametrize("family", ["olmo2", "olmo3"])
def test_bf16_rotary_tables_are_fp32(family):
    """In bf16 OLMo's saved cos and sin are fp32: 2 S d bytes more than bf16 tables would be."""
    from dataclasses import replace

    from memtheory.models.decoder import decoder
    from memtheory.models.hf_config import decoder_config

    config = decoder_config({**TINY, "model_type": family})
    saved = {}
    for fp32 in (True, False):
        network = decoder(replace(config, rotary_fp32=fp32), batch=2, sequence=6, loss=True)
        memory = mt.training_memory(network, optimizer="sgd", precision="bf16",
                                    convention=AutogradConvention())
        saved[fp32] = memory.components["saved_activations"]
    head_dim = TINY["hidden_size"] // TINY["num_attention_heads"]
    assert saved[True] - saved[False] == 2 * 6 * head_dim * (4 - 2)  # cos, sin: S x d each
