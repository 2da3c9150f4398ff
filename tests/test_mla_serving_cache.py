"""Serving DeepSeek: the KV cache per token is MLA's compressed latent, from the published configs.

vLLM's MLA backends cache, per token and layer, one "head" of
``kv_lora_rank + qk_rope_head_dim`` elements (the normalised latent and the
rotary key); transformers 5.24's ``DeepseekV3Attention.forward`` hands the same
two tensors to ``cache.update`` (``kv_nope`` of ``kv_lora_rank``, ``k_rot`` of
``qk_rope_head_dim``, one head each: ``modeling_deepseek_v3.py`` lines 449-460)
and expands them to each head's keys and values after the cache. So both
engines cache ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes`` per token.

The configurations are those of the model cards' ``config.json``:
``deepseek-ai/DeepSeek-V2-Lite`` (27 layers, 16 heads, kv_lora_rank 512,
q_lora_rank null, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
64 routed experts of 1408, 2 shared, 6 per token, first layer dense) and
``deepseek-ai/DeepSeek-V3`` (61 layers, 128 heads, kv_lora_rank 512,
q_lora_rank 1536, qk_rope_head_dim 64: memtheory's ``deepseek-v3`` preset).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.estimate import serving_memory
from memtheory.models.presets import PRESETS

V2_LITE = {"model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 2048,
           "intermediate_size": 10944, "num_hidden_layers": 27, "num_attention_heads": 16,
           "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": None,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
           "num_experts_per_tok": 6, "first_k_dense_replace": 1,
           "max_position_embeddings": 163840, "tie_word_embeddings": False}
"""deepseek-ai/DeepSeek-V2-Lite's config.json (the keys memtheory reads)."""

V3 = PRESETS["deepseek-v3"].config
MODELS = {"deepseek-v2-lite": V2_LITE, "deepseek-v3": "deepseek-v3"}


def _config(name: str) -> dict:
    return V2_LITE if name == "deepseek-v2-lite" else dict(V3)


def _per_token(config: dict, element: int) -> int:
    """The source formula: layers x (kv_lora_rank + qk_rope_head_dim) x element bytes."""
    return (config["num_hidden_layers"]
            * (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * element)


def test_the_cited_configs_give_the_cited_per_token_bytes():
    """The model cards' numbers: 27 x 576 x 2 = 31,104 B (V2-Lite), 61 x 576 x 2 = 70,272 B (V3)."""
    assert (V3["num_hidden_layers"], V3["kv_lora_rank"], V3["qk_rope_head_dim"]) == (61, 512, 64)
    assert _per_token(V2_LITE, 2) == 27 * (512 + 64) * 2
    assert _per_token(V3, 2) == 61 * (512 + 64) * 2


@pytest.mark.parametrize("name", list(MODELS))
def test_kv_cache_per_token_is_the_latent(name):
    """One block of 16 tokens in bf16: 16 x the latent's per-token bytes, far below per-head K+V."""
    config = _config(name)
    answer = serving_memory(MODELS[name], context=16, batch=1)
    assert answer.kv_per_sequence == 16 * _per_token(config, 2)
    # the decompressed keys and values of every head (what an engine caching them would hold)
    heads = config["num_attention_heads"]
    per_head = heads * (config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
                        + config["v_head_dim"])
    assert answer.kv_per_sequence < 16 * config["num_hidden_layers"] * per_head * 2


@pytest.mark.parametrize("name", list(MODELS))
def test_the_output_names_the_engines_and_the_form(name):
    """The assumptions say the cache is the compressed latent as vLLM's MLA caches it, per token."""
    config = _config(name)
    answer = serving_memory(MODELS[name], context=16, batch=1)
    notes = [line for line in answer.assumptions if line.startswith("latent attention KV cache")]
    assert len(notes) == 1
    assert "vLLM's MLA" in notes[0] and "transformers" in notes[0]
    assert f"{_per_token(config, 2)} bytes per token" in notes[0]
    assert f"{config['num_hidden_layers']} layers" in notes[0]


@settings(max_examples=5, deadline=None)
@given(context=st.integers(1, 40000), kv=st.sampled_from([(None, 2), ("fp8", 1)]))
def test_v2_lite_cache_follows_the_formula_in_whole_blocks(context, kv):
    """Any context and cache dtype: whole blocks of 16 tokens of the latent's per-token bytes."""
    kv_cache, element = kv
    answer = serving_memory(V2_LITE, context=context, batch=1, kv_cache=kv_cache)
    blocks = math.ceil(context / 16)
    assert answer.kv_per_sequence == blocks * 16 * _per_token(V2_LITE, element)
