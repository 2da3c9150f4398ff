"""Every family from_config builds: memtheory's parameter counts against transformers, exactly.

transformers (5.24) builds each configuration on the ``meta`` device (nothing
allocated, nothing downloaded) and counts ``model.parameters()`` (a tied
matrix once); memtheory builds the same configuration with ``from_config``.
Two tiny configurations per family check every tensor's shape; the
published ``config.json`` of one real model per family (copied below from the
Hub repository named beside it, every key as published) checks the full size,
and that the preset of that model reads to the same network.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory.models import PRESETS, from_config  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_SMALL = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}

_FALCON = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4}
_DEEPSEEK = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 3, "num_attention_heads": 4, "moe_intermediate_size": 16,
             "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
             "kv_lora_rank": 8, "q_lora_rank": 12, "qk_rope_head_dim": 4,
             "qk_nope_head_dim": 4, "v_head_dim": 6, "first_k_dense_replace": 1}
_MOE = {**_SMALL, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}

TINY = [
    # Mistral, Gemma 1, OLMo, OLMo 2 and 3, Gemma 3, GPT-NeoX, Falcon, Qwen2-MoE, Qwen3-MoE,
    # OLMoE, DeepSeek V2 and V3 (latent attention, routed and shared experts)
    {"model_type": "mistral", **_SMALL},
    {"model_type": "gemma", **_SMALL, "head_dim": 8},
    {"model_type": "olmo", **_SMALL},
    {"model_type": "olmo2", **_SMALL},
    {"model_type": "olmo3", **_SMALL, "num_hidden_layers": 4},
    {"model_type": "gemma3_text", **_SMALL, "head_dim": 8},
    {"model_type": "gemma3_text", **_SMALL, "head_dim": 16, "tie_word_embeddings": False,
     "attention_bias": True},
    {"model_type": "gpt_neox", **_SMALL},
    {"model_type": "gpt_neox", **_SMALL, "use_parallel_residual": False, "rotary_pct": 1.0,
     "tie_word_embeddings": True},
    {"model_type": "falcon", **_FALCON},  # Falcon-7B's layout: multi-query, one norm, parallel
    {"model_type": "falcon", **_FALCON, "new_decoder_architecture": True, "num_kv_heads": 2,
     "bias": True, "tie_word_embeddings": False},  # Falcon-40B's layout
    {"model_type": "falcon", **_FALCON, "multi_query": False, "parallel_attn": False,
     "ffn_hidden_size": 40},
    {"model_type": "qwen2_moe", **_MOE, "shared_expert_intermediate_size": 24},
    {"model_type": "qwen2_moe", **_MOE, "shared_expert_intermediate_size": 24,
     "mlp_only_layers": [0], "num_hidden_layers": 3},
    {"model_type": "qwen3_moe", **_MOE, "decoder_sparse_step": 2},
    {"model_type": "olmoe", **_MOE},
    {"model_type": "deepseek_v2", **_DEEPSEEK},
    {"model_type": "deepseek_v2", **_DEEPSEEK, "q_lora_rank": None, "n_shared_experts": 2,
     "first_k_dense_replace": 0},
    {"model_type": "deepseek_v3", **_DEEPSEEK, "n_group": 2, "topk_group": 1},
    {"model_type": "deepseek_v3", **_DEEPSEEK, "q_lora_rank": None, "attention_bias": True,
     "tie_word_embeddings": True, "n_group": 2, "topk_group": 1},
    {"model_type": "qwen3", **_SMALL},  # Qwen3's default head_dim of 128, not hidden / heads
    {"model_type": "qwen3", **_SMALL, "head_dim": 16, "attention_bias": True,
     "tie_word_embeddings": True},
    {"model_type": "phi3", **_SMALL, "pad_token_id": 0},
    {"model_type": "phi3", **_SMALL, "pad_token_id": 0, "num_key_value_heads": 4,
     "num_hidden_layers": 3, "tie_word_embeddings": True},
    {"model_type": "gemma2", **_SMALL, "head_dim": 16},
    {"model_type": "gemma2", **_SMALL, "head_dim": 8, "attention_bias": True,
     "tie_word_embeddings": False, "final_logit_softcapping": None},
]

# Every key of each config.json as published (2024-2025), from the repository named.
PUBLISHED = {
    "qwen3-8b": {  # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36,
        "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936,
    },
    "phi-3-mini": {  # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
        "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000,
        "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
        "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "sliding_window": 2047, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.2", "use_cache": True, "vocab_size": 32064,
    },
    "gemma-2-2b": {  # https://huggingface.co/google/gemma-2-2b/blob/main/config.json
        "architectures": ["Gemma2ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2,
        "cache_implementation": "hybrid", "eos_token_id": 1, "final_logit_softcapping": 30.0,
        "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
        "initializer_range": 0.02, "intermediate_size": 9216, "max_position_embeddings": 8192,
        "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26,
        "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
        "torch_dtype": "float32", "transformers_version": "4.42.4", "use_cache": True,
        "vocab_size": 256000,
    },
}

_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
_UNREAD = ("architectures", "torch_dtype", "transformers_version")


def _hf(config: dict) -> tuple[int, list[tuple[int, ...]]]:
    """Return the parameter count and sorted tensor shapes transformers builds (on meta)."""
    values = {k: v for k, v in config.items() if k not in ("model_type", *_UNREAD)}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **values)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    shapes = sorted(tuple(p.shape) for p in model.parameters())
    return sum(p.numel() for p in model.parameters()), shapes


@pytest.mark.parametrize("config", TINY, ids=lambda c: c["model_type"])
def test_tiny_configs_match_transformers_tensor_for_tensor(config):
    """Each tiny configuration: the total and every parameter tensor's shape agree."""
    count, theirs = _hf(config)
    net = from_config(config)
    ours = sorted(
        tuple(int(d) for d in shape)
        for row in net.rows
        for _, shape in row.layer.parameter_shapes(row.input_shape)
    )
    assert net.parameter_count == count
    assert ours == theirs


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configs_match_transformers_and_the_preset(name):
    """Qwen3-8B, Phi-3-mini, Gemma-2-2B as published: transformers' total, and the preset's."""
    published = PUBLISHED[name]
    count, _ = _hf(published)
    assert from_config(published).parameter_count == count
    assert from_config(name).parameter_count == count
    assert PRESETS[name].dtype == _DTYPES[published["torch_dtype"]]
