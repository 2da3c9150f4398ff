"""DeepSeek's latent-attention cache: layers x B x S x (kv_lora_rank + qk_rope_head_dim) x bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.errors import UnsupportedError
from memtheory.layers.latent_attention import LatentAttention
from memtheory.models import from_config
from memtheory.symbols import B, S
from memtheory.techniques.kv_cache import cache_layers, kv_cache_bytes

CONFIG = {"model_type": "deepseek_v3", "vocab_size": 96, "hidden_size": 32,
          "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
          "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "kv_lora_rank": 8, "q_lora_rank": 12, "qk_rope_head_dim": 4,
          "qk_nope_head_dim": 4, "v_head_dim": 6, "first_k_dense_replace": 1}


def test_symbolic_cache_is_the_latent_plus_the_rotary_key():
    """In B and S: every layer caches kv_lora_rank + qk_rope_head_dim elements per position."""
    per_position = CONFIG["kv_lora_rank"] + CONFIG["qk_rope_head_dim"]
    expected = CONFIG["num_hidden_layers"] * B * S * per_position * 2
    assert kv_cache_bytes(from_config(CONFIG), dtype="bf16") == expected


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 64), sequence=st.integers(1, 4096),
       dtype=st.sampled_from([("fp32", 4), ("bf16", 2), ("fp8_e4m3", 1)]))
def test_cache_bytes_follow_the_formula(batch, sequence, dtype):
    """Any batch, length and dtype: layers x B x S x (latent + rotary) x element bytes."""
    name, element = dtype
    network = from_config(CONFIG, batch=batch, sequence=sequence)
    layers = cache_layers(network)
    assert len(layers) == CONFIG["num_hidden_layers"]
    assert all(layer.latent for layer in layers)
    expected = (CONFIG["num_hidden_layers"] * batch * sequence
                * (CONFIG["kv_lora_rank"] + CONFIG["qk_rope_head_dim"]) * element)
    assert kv_cache_bytes(network, dtype=name) == expected


def test_latent_attention_without_its_latent_width_is_refused():
    """A LatentAttention built without latent_dim: a refusal naming latent_dim, the fix."""
    from memtheory.techniques.cache_layers import _latent

    with pytest.raises(UnsupportedError, match="latent_dim=kv_lora_rank"):
        _latent("attention", LatentAttention(4, 4, 4, 8), (B, S, 4 * 8))
