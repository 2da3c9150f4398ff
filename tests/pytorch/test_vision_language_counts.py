"""Vision-language models from_config builds: parameter counts against transformers, exactly.

transformers (5.24) builds each configuration on the ``meta`` device (nothing
allocated, nothing downloaded) with ``AutoModelForImageTextToText`` and counts
``model.parameters()`` (a tied matrix once); memtheory builds the same
configuration with ``from_config``. Tiny configurations check every tensor's
shape; the published ``config.json`` of one real model per family (copied
below from the Hub repository named beside it, every key as published) checks
the full size.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory.models import from_config  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_TEXT = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}

_GEMMA3_TEXT = {"model_type": "gemma3_text", **_TEXT, "head_dim": 8}
_SIGLIP = {"model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 24,
           "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 56, "patch_size": 14,
           "vision_use_head": False}

TINY = [
    {"model_type": "qwen2_vl", **_TEXT, "vision_config": {
        "depth": 2, "embed_dim": 16, "hidden_size": 32, "mlp_ratio": 2, "num_heads": 2}},
    {"model_type": "qwen2_vl", **_TEXT, "tie_word_embeddings": True, "vision_config": {
        "depth": 1, "embed_dim": 8, "hidden_size": 32, "num_heads": 2, "patch_size": 4,
        "temporal_patch_size": 1, "spatial_merge_size": 1}},
    {"model_type": "qwen2_vl", "text_config": _TEXT, "vision_config": {
        "depth": 1, "embed_dim": 16, "hidden_size": 32, "num_heads": 2}},
    {"model_type": "qwen2_5_vl", **_TEXT, "vision_config": {
        "depth": 2, "hidden_size": 16, "intermediate_size": 24, "num_heads": 2,
        "out_hidden_size": 32, "fullatt_block_indexes": [1]}},
    {"model_type": "llava", "text_config": {"model_type": "llama", **_TEXT}, "vision_config": {
        "model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14}},
    {"model_type": "llava", "text_config": {"model_type": "qwen2", **_TEXT},
     "multimodal_projector_bias": False, "vision_feature_layer": -1, "vision_config": {
         "model_type": "clip_vision_model", "hidden_size": 8, "intermediate_size": 16,
         "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 32,
         "patch_size": 8}},
    {"model_type": "gemma3", "mm_tokens_per_image": 4, "text_config": _GEMMA3_TEXT,
     "vision_config": _SIGLIP},
    {"model_type": "gemma3", "mm_tokens_per_image": 1, "tie_word_embeddings": False,
     "text_config": _GEMMA3_TEXT, "vision_config": {**_SIGLIP, "image_size": 32,
                                                     "patch_size": 8, "num_hidden_layers": 1}},
    {"model_type": "llava", "text_config": {"model_type": "qwen2", **_TEXT},
     "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
     "vision_config": _SIGLIP},
    {"model_type": "llava", "text_config": {"model_type": "llama", **_TEXT},
     "vision_config": {**_SIGLIP, "num_hidden_layers": 3}},
    # the text_config's tie_word_embeddings is not the one transformers reads: still tied
    {"model_type": "gemma3", "mm_tokens_per_image": 4,
     "text_config": {**_GEMMA3_TEXT, "tie_word_embeddings": False}, "vision_config": _SIGLIP},
]

# Every key of each config.json as published, from the repository named.
PUBLISHED = {
    "qwen2-vl-2b-instruct": {  # https://huggingface.co/Qwen/Qwen2-VL-2B-Instruct/blob/main/config.json
        "architectures": ["Qwen2VLForConditionalGeneration"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "vision_start_token_id": 151652,
        "vision_end_token_id": 151653, "vision_token_id": 151654, "image_token_id": 151655,
        "video_token_id": 151656, "hidden_act": "silu", "hidden_size": 1536,
        "initializer_range": 0.02, "intermediate_size": 8960, "max_position_embeddings": 32768,
        "max_window_layers": 28, "model_type": "qwen2_vl", "num_attention_heads": 12,
        "num_hidden_layers": 28, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                          "in_chans": 3, "hidden_size": 1536, "patch_size": 14,
                          "spatial_merge_size": 2, "temporal_patch_size": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vocab_size": 151936,
    },
    "qwen2.5-vl-7b-instruct": {  # https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "vision_start_token_id": 151652,
        "vision_end_token_id": 151653, "vision_token_id": 151654, "image_token_id": 151655,
        "video_token_id": 151656, "hidden_act": "silu", "hidden_size": 3584,
        "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 128000,
        "max_window_layers": 28, "model_type": "qwen2_5_vl", "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280,
                          "intermediate_size": 3420, "num_heads": 16, "in_chans": 3,
                          "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                          "spatial_patch_size": 14, "window_size": 112,
                          "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
                          "temporal_patch_size": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vocab_size": 152064,
    },
    "llava-1.5-7b-hf": {  # https://huggingface.co/llava-hf/llava-1.5-7b-hf/blob/main/config.json
        "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
        "image_token_index": 32000, "model_type": "llava", "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5",
                        "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
                        "model_type": "llama", "rms_norm_eps": 1e-05,
                        "torch_dtype": "float16", "vocab_size": 32064},
        "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.36.0.dev0",
        "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                          "model_type": "clip_vision_model", "num_attention_heads": 16,
                          "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768,
                          "vocab_size": 32000},
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "vocab_size": 32064,
    },
    # Typed in from https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json (nothing
    # can be downloaded here): every key as published.
    "gemma-3-4b-it": {
        "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
        "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
        "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                        "model_type": "gemma3_text", "num_hidden_layers": 34,
                        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                          "model_type": "siglip_vision_model", "num_attention_heads": 16,
                          "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False},
    },
}

_UNREAD = ("architectures", "torch_dtype", "transformers_version")


def _hf(config: dict) -> tuple[int, list[tuple[int, ...]]]:
    """Return the parameter count and sorted tensor shapes transformers builds (on meta)."""
    values = {k: v for k, v in config.items() if k not in ("model_type", *_UNREAD)}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **values)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config)
    shapes = sorted(tuple(p.shape) for p in model.parameters())
    return sum(p.numel() for p in model.parameters()), shapes


def _ours(config: dict) -> tuple[int, list[tuple[int, ...]]]:
    net = from_config(config)
    shapes = sorted(
        tuple(int(d) for d in shape)
        for row in net.rows
        for _, shape in row.layer.parameter_shapes(row.input_shape)
    )
    return int(net.parameter_count), shapes


@pytest.mark.parametrize("config", TINY, ids=lambda c: c["model_type"])
def test_tiny_vision_language_configs_match_transformers_tensor_for_tensor(config):
    """Each tiny configuration: the total and every parameter tensor's shape agree."""
    assert _ours(config) == _hf(config)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_vision_language_configs_match_transformers(name):
    """Qwen2-VL-2B, Qwen2.5-VL-7B, LLaVA-1.5-7B, Gemma-3-4B as published: transformers' total."""
    published = PUBLISHED[name]
    assert _ours(published)[0] == _hf(published)[0]


def test_gemma3_4b_matches_the_published_sizes():
    """Gemma-3-4B: 4.3B parameters (the model card) and a 417M vision encoder (report, Table 1).

    Gemma Team 2025, "Gemma 3 Technical Report" (arXiv:2503.19786), Table 1:
    4B has a 417M vision encoder; the Hub page of google/gemma-3-4b-it says
    4.3B parameters. Both are rounded, so the check is to their rounding.
    """
    net = from_config(PUBLISHED["gemma-3-4b-it"])
    vision = sum(int(row.parameters) for row in net.rows
                 if (row.name or "").startswith("model.vision_tower."))
    assert round(vision / 1e6) == 417
    assert round(int(net.parameter_count) / 1e8) == 43
