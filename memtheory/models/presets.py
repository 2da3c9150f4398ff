"""Named configurations of well-known models, written out from their published ``config.json``.

Each :class:`Preset` holds the keys of the model's configuration that
memtheory reads, copied from the ``config.json`` of the Hugging Face Hub
repository named in its ``source`` (the keys that change no memory, such as
``rope_theta`` or token ids, are left out, except the dtype the weights were
published in). :data:`PRESETS` looks them up by name, with aliases and "did
you mean"; :func:`memtheory.models.preset` builds one, and
:func:`memtheory.models.from_config` accepts a preset name wherever it accepts a
configuration.

Examples
--------
>>> PRESETS["Llama 3 8B"].name, PRESETS["llama3-8b"].config["num_key_value_heads"]
('llama-3-8b', 8)
>>> PRESETS["gpt2"].config["n_layer"]
12
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memtheory.errors import UnknownPresetError
from memtheory.registry import Registry

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    """A well-known model's configuration and where it was published.

    Attributes
    ----------
    name : str
        Canonical name (``"llama-3-8b"``).
    config : mapping
        The ``config.json`` keys memtheory reads.
    source : str
        The Hugging Face Hub repository whose ``config.json`` the numbers come from.
    dtype : str
        The dtype its weights were published in (``torch_dtype``).

    Examples
    --------
    >>> PRESETS["gpt2"].dtype, PRESETS["gpt2"].config["n_embd"]
    ('fp32', 768)
    """

    name: str
    config: Mapping[str, Any]
    source: str
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))


def _hub(repository: str) -> str:
    return f"https://huggingface.co/{repository}/blob/main/config.json"


def _llama(**keys: Any) -> dict[str, Any]:
    return {"model_type": "llama", "tie_word_embeddings": False, **keys}


_ENTRIES: tuple[Preset, ...] = (
    Preset(
        "llama-2-7b",
        _llama(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
               num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
               max_position_embeddings=4096),
        _hub("meta-llama/Llama-2-7b-hf"), "fp16",
    ),
    Preset(
        "llama-2-13b",
        _llama(vocab_size=32000, hidden_size=5120, intermediate_size=13824,
               num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40,
               max_position_embeddings=4096),
        _hub("meta-llama/Llama-2-13b-hf"), "fp16",
    ),
    Preset(
        "llama-2-70b",
        _llama(vocab_size=32000, hidden_size=8192, intermediate_size=28672,
               num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
               max_position_embeddings=4096),
        _hub("meta-llama/Llama-2-70b-hf"), "fp16",
    ),
    Preset(
        "llama-3-8b",
        _llama(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
               num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               max_position_embeddings=8192),
        _hub("meta-llama/Meta-Llama-3-8B"), "bf16",
    ),
    Preset(
        "llama-3.1-8b",
        _llama(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
               num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               max_position_embeddings=131072),
        _hub("meta-llama/Llama-3.1-8B"), "bf16",
    ),
    Preset(
        "llama-3.1-70b",
        _llama(vocab_size=128256, hidden_size=8192, intermediate_size=28672,
               num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
               max_position_embeddings=131072),
        _hub("meta-llama/Llama-3.1-70B"), "bf16",
    ),
    Preset(
        "llama-3-70b",
        _llama(vocab_size=128256, hidden_size=8192, intermediate_size=28672,
               num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
               max_position_embeddings=8192),
        _hub("meta-llama/Meta-Llama-3-70B"), "bf16",
    ),
    Preset(
        "llama-3.2-1b",
        _llama(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
               num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
               head_dim=64, max_position_embeddings=131072, tie_word_embeddings=True),
        _hub("meta-llama/Llama-3.2-1B"), "bf16",
    ),
    Preset(
        "mistral-7b-v0.1",
        {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "max_position_embeddings": 32768, "sliding_window": 4096,
         "tie_word_embeddings": False},
        _hub("mistralai/Mistral-7B-v0.1"), "bf16",
    ),
    Preset(
        "mixtral-8x7b",
        {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "max_position_embeddings": 32768, "sliding_window": None,
         "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False},
        _hub("mistralai/Mixtral-8x7B-v0.1"), "bf16",
    ),
    Preset(
        "qwen2-7b",
        {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
         "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
         "num_key_value_heads": 4, "max_position_embeddings": 131072,
         "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28,
         "tie_word_embeddings": False},
        _hub("Qwen/Qwen2-7B"), "bf16",
    ),
    Preset(
        "qwen2.5-0.5b",
        {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
         "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
         "num_key_value_heads": 2, "max_position_embeddings": 32768,
         "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 24,
         "tie_word_embeddings": True},
        _hub("Qwen/Qwen2.5-0.5B"), "bf16",
    ),
    Preset(
        "qwen3-8b",
        {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
         "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
         "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
         "max_window_layers": 36, "tie_word_embeddings": False},
        _hub("Qwen/Qwen3-8B"), "bf16",
    ),
    Preset(
        "phi-3-mini",
        {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
         "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 32, "max_position_embeddings": 4096, "sliding_window": 2047,
         "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
         "pad_token_id": 32000, "tie_word_embeddings": False},
        _hub("microsoft/Phi-3-mini-4k-instruct"), "bf16",
    ),
    Preset(
        "gemma-2b",
        {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 2048,
         "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8,
         "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 8192,
         "hidden_activation": "gelu_pytorch_tanh"},
        _hub("google/gemma-2b"), "bf16",
    ),
    Preset(
        "gemma-7b",
        {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072,
         "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16,
         "num_key_value_heads": 16, "head_dim": 256, "max_position_embeddings": 8192,
         "hidden_activation": "gelu_pytorch_tanh"},
        _hub("google/gemma-7b"), "bf16",
    ),
    Preset(
        "gemma-2-2b",
        {"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
         "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
         "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096,
         "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
         "query_pre_attn_scalar": 256, "attention_bias": False},
        _hub("google/gemma-2-2b"), "fp32",
    ),
    Preset(
        "deepseek-v3",
        {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
         "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 128,
         "num_key_value_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
         "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
         "n_shared_experts": 1, "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4,
         "max_position_embeddings": 163840, "attention_bias": False,
         "tie_word_embeddings": False},
        _hub("deepseek-ai/DeepSeek-V3"), "bf16",
    ),
    Preset(
        "gpt2",
        {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
         "n_head": 12, "n_positions": 1024},
        _hub("openai-community/gpt2"), "fp32",
    ),
    Preset(
        "bert-base-uncased",
        {"model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
         "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
         "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu",
         "architectures": ["BertForMaskedLM"]},
        _hub("google-bert/bert-base-uncased"), "fp32",
    ),
)

PRESETS: Registry[Preset] = Registry(
    "model preset",
    {entry.name: entry for entry in _ENTRIES},
    aliases={
        "llama2-7b": "llama-2-7b",
        "meta-llama/Llama-2-7b-hf": "llama-2-7b",
        "meta-llama/Llama-2-13b-hf": "llama-2-13b",
        "meta-llama/Llama-2-70b-hf": "llama-2-70b",
        "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
        "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
        "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
        "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
        "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
        "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
        "mistral-7b": "mistral-7b-v0.1",
        "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
        "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
        "Qwen/Qwen2-7B": "qwen2-7b",
        "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
        "Qwen/Qwen3-8B": "qwen3-8b",
        "phi-3-mini-4k": "phi-3-mini",
        "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini",
        "google/gemma-2b": "gemma-2b",
        "google/gemma-7b": "gemma-7b",
        "google/gemma-2-2b": "gemma-2-2b",
        "deepseek-ai/DeepSeek-V3": "deepseek-v3",
        # Chat and instruct releases whose config.json has the same keys memtheory reads and
        # the same torch_dtype as the base model's. Left out: Qwen2-7B-Instruct (32768
        # positions, not 131072), Qwen3-8B-Base and gemma-2-2b-it (not checked here).
        "meta-llama/Llama-2-7b-chat-hf": "llama-2-7b",
        "meta-llama/Llama-2-13b-chat-hf": "llama-2-13b",
        "meta-llama/Llama-2-70b-chat-hf": "llama-2-70b",
        "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
        "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3-70b",
        "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
        "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
        "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
        "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",
        "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b-v0.1",
        "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
        "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
        "google/gemma-2b-it": "gemma-2b",
        "google/gemma-7b-it": "gemma-7b",
        "gpt2-small": "gpt2",
        "openai-community/gpt2": "gpt2",
        "bert-base": "bert-base-uncased",
        "google-bert/bert-base-uncased": "bert-base-uncased",
    },
    error=UnknownPresetError,
    hint="(or pass a config.json path or dict to memtheory.models.from_config)",
    prefixes=("hf:",),
)
"""Well-known models by name: ``PRESETS["llama-3-8b"].config`` is its configuration."""

