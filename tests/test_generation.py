"""Inference of Llama-family models: KV cache (GQA, MQA, windows, pages), quantised weights, limits.

Every expected figure is derived in the test from the configuration's numbers
(the preset's config.json keys) and the layout the docstrings cite, never
copied from memtheory's output.
"""

from __future__ import annotations

import math

import pytest
import sympy as sp

from memtheory.errors import InvalidArgumentError, InvalidSizeError, UnknownNameError
from memtheory.models import PRESETS, gpt2, preset
from memtheory.symbols import B, S
from memtheory.techniques import (
    cache_layers,
    generation_memory,
    kv_cache_bytes,
    quantization,
    weight_bytes,
    working_memory,
)
from memtheory.whatif import max_batch, max_sequence_length


def _config(name: str) -> dict:
    return dict(PRESETS[name].config)


def test_grouped_query_cache_holds_only_the_key_value_heads():
    """Llama-3-8B: 2 x 32 layers x 8 kv heads x 128 x 2 bytes = 128 KiB per token."""
    c = _config("llama-3-8b")
    width = c["hidden_size"] // c["num_attention_heads"]
    per_token = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * width * 2
    assert per_token == 128 * 1024
    assert kv_cache_bytes(preset("llama-3-8b")) == per_token * B * S


def test_multi_head_and_multi_query_caches():
    """Llama-2-7B caches all 32 heads; Gemma-2B's multi-query attention one head of 256."""
    assert kv_cache_bytes(preset("llama-2-7b", batch=1, sequence=1)) == 2 * 32 * 32 * 128 * 2
    assert kv_cache_bytes(preset("gemma-2b", batch=1, sequence=1)) == 2 * 18 * 1 * 256 * 2


def test_sliding_window_caps_the_cache():
    """Mistral-7B-v0.1 caches at most its 4096-position window in every layer."""
    net = preset("mistral-7b-v0.1", batch=1, sequence=32768)
    per_position = 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(net) == per_position * 4096
    assert kv_cache_bytes(preset("mistral-7b-v0.1", batch=1, sequence=1000)) == per_position * 1000
    assert {layer.positions for layer in cache_layers(preset("mistral-7b-v0.1"))} == {
        sp.Min(4096, S)
    }


def test_paged_cache_rounds_positions_up_to_blocks():
    """8,001 positions in blocks of 16 take 501 blocks (8,016 positions) per sequence."""
    net = preset("llama-3-8b", batch=3, sequence=8001)
    per_position = 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(net, block_size=16) == 3 * per_position * math.ceil(8001 / 16) * 16
    assert kv_cache_bytes(net, block_size=1) == kv_cache_bytes(net)
    with pytest.raises(InvalidArgumentError, match="block_size"):
        kv_cache_bytes(net, block_size=0)


def test_int8_weights_are_a_byte_each_plus_fp32_row_scales():
    """LLM.int8(): every decoder linear matrix as int8 + one fp32 scale per output row."""
    c = _config("llama-2-7b")
    h, f, layers, vocab = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"],
                           c["vocab_size"])
    matrices = [(h, h)] * 4 + [(f, h), (f, h), (h, f)]  # q, k, v, o; gate, up; down (out, in)
    quantised = layers * sum(rows * cols + 4 * rows for rows, cols in matrices)
    kept = (2 * vocab * h + (2 * layers + 1) * h) * 2  # embeddings, lm_head, norms in fp16
    assert weight_bytes(preset("llama-2-7b"), quantization="int8") == quantised + kept


def test_int4_group_scales_follow_the_group_size():
    """GPTQ: half a byte per weight, per group an fp16 scale and a 4-bit zero, int32 g_idx."""
    rows, cols = 4096, 11008
    for group in (128, 64, 32):
        scheme = quantization("int4", group_size=group)
        # per group: 2 bytes of fp16 scale + 4 bits of zero point = 5/2 bytes
        expected = rows * cols // 2 + rows * math.ceil(cols / group) * 5 // 2 + cols * 4
        assert scheme.matrix_bytes(rows, cols) == expected
    assert quantization("awq").matrix_bytes(rows, cols) == (
        rows * cols // 2 + rows * (cols // 128) * 5 // 2
    )
    per_row = quantization("int4", group_size=None).matrix_bytes(rows, cols)
    assert per_row == rows * cols // 2 + rows * 5 // 2 + cols * 4


def test_quantization_errors():
    """Unknown schemes suggest a known one; a bad group size is named."""
    with pytest.raises(UnknownNameError, match="Did you mean"):
        quantization("gptq4")
    with pytest.raises(InvalidSizeError, match="group_size"):
        quantization("int4", group_size=0)


def test_generation_memory_without_prompt_is_weights_plus_cache():
    """Without a prompt the result is as before: fp16 weights plus the cache, peak = total."""
    memory = generation_memory(gpt2("small"))
    assert memory.total == 2 * gpt2("small").parameter_count + 2 * 12 * 768 * 2 * B * S
    assert memory.peak == memory.total
    assert "activations" not in memory.components


def test_prefill_peak_counts_scores_mask_and_logits():
    """Eager prefill of Llama-2-7B at 4096: the softmax's three S^2 tensors dominate."""
    net = preset("llama-2-7b", batch=1, sequence=4096)
    work = working_memory(net, prompt=4096)
    p, heads, h, width = 4096, 32, 4096, 128
    scores = heads * p * p * (2 + 4 + 4)  # masked fp16, its fp32 copy, fp32 probabilities
    attention = 2 * p * h * 2 + p * heads * width * 2 + scores
    whole_pass = p * h * 2 + 8 * p + p * p * 2 + 2 * p * width * 2
    assert work.prefill == whole_pass + attention
    flash = working_memory(net, prompt=4096, flash=True)
    assert flash.prefill < work.prefill / 5  # no S^2 tensor at all
    assert not any(
        isinstance(term, sp.Pow) and term.exp == 2 for term in sp.expand(
            working_memory(preset("llama-2-7b", batch=1), prompt=S, flash=True).prefill
        ).atoms(sp.Pow)
    )


def test_prefill_logits_all_positions_versus_generate():
    """Llama-3-8B: a plain forward's B x P x V logits outweigh its MLP; generate()'s do not."""
    p, h, f, vocab = 512, 4096, 14336, 128256
    net = preset("llama-3-8b", batch=1, sequence=p)
    full = working_memory(net, prompt=p, logits="all", flash=True)
    last = working_memory(net, prompt=p, logits="last", flash=True)
    logits_all = p * h * 2 + p * vocab * 2  # final hidden states and all logits, bf16/fp16
    mlp = 2 * p * h * 2 + 3 * p * f * 2  # residual, normed input; gate, up and product
    assert full.prefill - last.prefill == logits_all - mlp


def test_generation_timeline_prefill_and_decode():
    """With a prompt: components weights, kv_cache, activations; the peak is a phase's."""
    memory = generation_memory(preset("llama-3-8b", batch=1, sequence=8192), prompt=8192)
    assert set(memory.components) == {"weights", "kv_cache", "activations"}
    assert memory.peak_moment == "prefill"
    assert memory.peak == memory.weights + memory.prompt_cache + memory.prefill
    flash = generation_memory(
        preset("llama-3-8b", batch=64, sequence=8192), prompt=128, flash=True
    )
    assert flash.peak_moment == "decode"  # a long generation: the cache dominates


def test_max_context_and_batch_for_a_card():
    """The largest context on 24 GiB; the answer is the last that fits, and it is checked."""
    memory = generation_memory(preset("llama-3-8b", batch=1), prompt=S)
    longest = max_sequence_length(memory, "24 GiB")
    assert memory.evaluate(S=longest).peak <= 24 * 2**30 < memory.evaluate(S=longest + 1).peak
    flash = generation_memory(preset("llama-3.1-8b", batch=1), prompt=S, flash=True)
    assert max_sequence_length(flash, "80 GB") == 131072  # capped at max_position_embeddings
    batch = max_batch(generation_memory(preset("llama-3-8b", sequence=4096)), "80 GB")
    per_sequence = 128 * 1024 * 4096
    weights = 2 * 8_030_261_248
    assert batch == (80 * 10**9 - weights) // per_sequence


def test_prompt_longer_than_context_is_refused():
    """The network is built over the whole context; a longer prompt is an error naming it."""
    with pytest.raises(InvalidArgumentError, match="longer than the network's sequence"):
        generation_memory(preset("llama-2-7b", batch=1, sequence=100), prompt=200)
