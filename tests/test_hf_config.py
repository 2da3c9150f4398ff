"""Networks from Hugging Face configurations and presets: parameter counts and errors.

The published parameter counts below are the totals of the released
checkpoints as the Hugging Face Hub reports them for each repository (the
model page's "Model size", from the safetensors metadata), quoted exactly in
memtheory issue 13. tests/pytorch/test_hf_parameter_counts.py checks every
preset independently against Hugging Face transformers building the same
configuration.
"""

from __future__ import annotations

import json

import pytest
import sympy as sp

from memtheory.errors import (
    InvalidArgumentError,
    UnknownNameError,
    UnknownPresetError,
    UnsupportedError,
)
from memtheory.layers import GroupedQueryAttention, MixtureOfExperts, Rotary
from memtheory.models import (
    PRESETS,
    active_parameter_count,
    bert_base_mlm,
    decoder_config,
    from_config,
    gpt2,
    load_config,
    preset,
)
from memtheory.symbols import B, S

PUBLISHED = {
    # repository on the Hub: exact count quoted in issue 13
    "llama-2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf
    "llama-3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B
    "mistral-7b-v0.1": 7_241_732_096,  # mistralai/Mistral-7B-v0.1
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_match_the_published_parameter_counts(name):
    """Llama-2-7B, Llama-3-8B, Mistral-7B-v0.1, Mixtral-8x7B: the Hub's totals, exactly."""
    assert preset(name).parameter_count == PUBLISHED[name]


def test_mixtral_active_parameters_are_router_plus_two_experts_per_layer():
    """Mixtral's active count is the total less 6 of 8 experts' SwiGLU weights in each layer."""
    net = preset("mixtral-8x7b")
    c = PRESETS["mixtral-8x7b"].config
    expert = 3 * c["hidden_size"] * c["intermediate_size"]
    unused = c["num_hidden_layers"] * (c["num_local_experts"] - c["num_experts_per_tok"]) * expert
    assert active_parameter_count(net) == PUBLISHED["mixtral-8x7b"] - unused
    assert active_parameter_count(preset("llama-2-7b")) == PUBLISHED["llama-2-7b"]


def test_gpt2_and_bert_presets_are_the_existing_builders():
    """The gpt2 and bert-base-uncased configurations build what gpt2() and bert_base_mlm() do."""
    assert preset("gpt2").parameter_count == gpt2("small").parameter_count
    assert preset("bert-base-uncased").parameter_count == bert_base_mlm().parameter_count


def test_vit_config_maps_to_the_vision_transformer():
    """google/vit-base-patch16-224's keys build torchvision's ViT-B/16 count, 86,567,656."""
    config = {
        "model_type": "vit", "image_size": 224, "patch_size": 16, "hidden_size": 768,
        "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
        "id2label": {str(i): str(i) for i in range(1000)},
    }
    assert from_config(config, batch=2).parameter_count == 86_567_656


def test_from_config_reads_a_file_and_a_folder(tmp_path):
    """A config.json path and its folder give the same network as the dict."""
    config = dict(PRESETS["llama-2-7b"].config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    expected = from_config(config).parameter_count
    assert from_config(tmp_path / "config.json").parameter_count == expected
    assert from_config(str(tmp_path)).parameter_count == expected


def test_grouped_query_attention_and_window_are_read_from_the_config():
    """Mistral: 8 key/value heads of 128 and a 4096 window in every layer."""
    net = preset("mistral-7b-v0.1", batch=1, sequence=16)
    attention = [row.layer for row in net.rows if isinstance(row.layer, GroupedQueryAttention)]
    assert len(attention) == 32
    assert {(a.kv_heads, a.head_dim, a.window) for a in attention} == {(8, 128, 4096)}
    k_proj = net["model.layers.0.self_attn.k_proj"]
    assert k_proj.output_shape == (1, 16, 8 * 128)


def test_qwen2_biases_and_sliding_window_switch():
    """Qwen2: q/k/v biases, none on o_proj; its sliding window only with use_sliding_window."""
    c = dict(PRESETS["qwen2-7b"].config)
    net = from_config(c, batch=1, sequence=4)
    assert net["model.layers.0.self_attn.q_proj"].biases == 3584
    assert net["model.layers.0.self_attn.o_proj"].biases == 0
    assert decoder_config(c).windows == ()
    c.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    assert decoder_config(c).windows == (None,) * 20 + (4096,) * 8


def test_layer_types_give_per_layer_windows():
    """layer_types marks which layers slide."""
    c = {**PRESETS["llama-2-7b"].config, "num_hidden_layers": 2, "sliding_window": 64,
         "layer_types": ["sliding_attention", "full_attention"]}
    assert decoder_config(c).windows == (64, None)


def test_gemma_scales_embeddings_and_ties_the_head():
    """Gemma-2B: multi-query (one key/value head of 256), tied head, embedding scale."""
    net = preset("gemma-2b", batch=1, sequence=4)
    assert net["lm_head"].weights == 0
    assert net["model.layers.0.self_attn.k_proj"].output_shape == (1, 4, 256)
    assert "model.embed_scale" in [row.name for row in net.rows]


def test_symbolic_batch_and_sequence():
    """Left unset, batch and sequence are the symbols B and S."""
    net = from_config("llama-3-8b")
    assert net.output_shape == (B, S, 128256)
    assert isinstance(net.rows[0].output_shape[1], sp.Symbol)


def test_rotary_and_moe_layers_are_in_the_network():
    """Two rotary merges per layer; Mixtral's MLP is a mixture of experts."""
    net = preset("mixtral-8x7b", batch=1, sequence=4)
    assert sum(isinstance(row.layer, Rotary) for row in net.rows) == 64
    assert sum(isinstance(row.layer, MixtureOfExperts) for row in net.rows) == 32


def test_unknown_model_type_names_the_known_ones():
    """An unknown model_type lists those memtheory builds and suggests the closest."""
    with pytest.raises(UnknownNameError, match="Did you mean 'llama'.*Known model_types"):
        from_config({"model_type": "lama"})


def test_missing_key_is_named():
    """A missing required key is named, with the fix."""
    config = dict(PRESETS["llama-2-7b"].config)
    del config["intermediate_size"]
    missing = "no 'intermediate_size'.*Add \"intermediate_size\""
    with pytest.raises(InvalidArgumentError, match=missing):
        from_config(config)
    with pytest.raises(InvalidArgumentError, match="no \"model_type\""):
        from_config({"hidden_size": 8})


def test_unsupported_values_name_the_key():
    """An unknown activation or a non-4x BERT MLP is refused, naming the key."""
    with pytest.raises(UnsupportedError, match="hidden_act='relu2'"):
        from_config({**PRESETS["llama-2-7b"].config, "hidden_act": "relu2"})
    with pytest.raises(UnsupportedError, match="intermediate_size=1000"):
        from_config({**PRESETS["bert-base-uncased"].config, "intermediate_size": 1000})
    with pytest.raises(UnsupportedError, match="lm_head"):
        from_config("bert-base-uncased", lm_head=False)


def test_unknown_preset_and_missing_file():
    """A misspelt preset suggests the right one; a missing path is not taken for a preset."""
    with pytest.raises(UnknownPresetError, match="Did you mean 'mixtral-8x7b'"):
        preset("mixtral-8x7")
    with pytest.raises(InvalidArgumentError, match="downloads nothing"):
        load_config("meta-llama/Llama-2-7b-hf/config.json")


def test_preset_aliases():
    """Hub repository names and loose spellings find the preset."""
    assert PRESETS["meta-llama/Meta-Llama-3-8B"].name == "llama-3-8b"
    assert load_config("meta-llama/Meta-Llama-3-8B") == dict(PRESETS["llama-3-8b"].config)
    assert PRESETS["Llama 3.1 8B"].name == "llama-3.1-8b"
    assert PRESETS["Mistral_7B"].name == "mistral-7b-v0.1"


def test_instruct_and_chat_repositories_resolve_to_the_base_preset():
    """Instruct/chat releases of the base architecture find the base preset (load_config too)."""
    pairs = {
        "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
        "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3-70b",
        "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",
        "meta-llama/Llama-2-7b-chat-hf": "llama-2-7b",
        "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b-v0.1",
        "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
        "Qwen/Qwen3-8B": "qwen3-8b",
        "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini",
    }
    for repository, name in pairs.items():
        assert PRESETS[repository].name == name
        assert load_config(repository) == dict(PRESETS[name].config)


def test_new_presets_carry_their_source_and_dtype():
    """Each new preset cites its Hub repository's config.json and the published torch_dtype."""
    expected = {
        "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B", "bf16"),
        "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", "bf16"),
        "llama-3-70b": ("meta-llama/Meta-Llama-3-70B", "bf16"),
        "qwen3-8b": ("Qwen/Qwen3-8B", "bf16"),
        "phi-3-mini": ("microsoft/Phi-3-mini-4k-instruct", "bf16"),
        "gemma-2-2b": ("google/gemma-2-2b", "fp32"),
        "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "bf16"),
    }
    for name, (repository, dtype) in expected.items():
        entry = PRESETS[name]
        assert f"huggingface.co/{repository}/" in entry.source
        assert entry.dtype == dtype


def test_llama_3_70b_differs_from_3_1_70b_only_in_context():
    """Llama-3-70B and Llama-3.1-70B: the same network, 8192 against 131072 positions."""
    old, new = dict(PRESETS["llama-3-70b"].config), dict(PRESETS["llama-3.1-70b"].config)
    assert old.pop("max_position_embeddings") == 8192
    assert new.pop("max_position_embeddings") == 131072
    assert old == new


def test_qwen3_head_norms_and_default_head_width():
    """Qwen3: head_dim defaults to 128; a q_norm and k_norm of one head's width feed the rotary."""
    config = {"model_type": "qwen3", "vocab_size": 64, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}
    net = from_config(config, batch=1, sequence=4)
    assert net["model.layers.0.self_attn.q_proj"].output_shape == (1, 4, 4 * 128)
    assert net["model.layers.0.self_attn.q_norm"].parameters == 128
    assert net["model.layers.1.self_attn.k_norm"].output_shape == (1, 4, 2 * 128)
    assert decoder_config({**config, "use_sliding_window": True, "sliding_window": 16,
                           "max_window_layers": 1}).windows == (None, 16)


def test_phi3_fused_projections_and_refusals():
    """Phi-3: one qkv_proj and one gate_up_proj per layer; residual dropout is refused."""
    c = PRESETS["phi-3-mini"].config
    net = preset("phi-3-mini", batch=1, sequence=4)
    width = c["hidden_size"]
    assert net["model.layers.0.self_attn.qkv_proj"].output_shape == (1, 4, 3 * width)
    assert net["model.layers.0.mlp.gate_up_proj"].output_shape == (
        1, 4, 2 * c["intermediate_size"])
    assert net["model.layers.0.self_attn.v"].output_shape == (1, 4, width)
    assert decoder_config(c).windows == (c["sliding_window"],) * c["num_hidden_layers"]
    with pytest.raises(UnsupportedError, match="resid_pdrop"):
        from_config({**c, "resid_pdrop": 0.1})
    with pytest.raises(UnsupportedError, match="partial_rotary_factor"):
        from_config({**c, "rope_scaling": {"partial_rotary_factor": 0.75}})


def test_gemma2_alternate_windows_four_norms_and_caps():
    """Gemma 2: even layers slide (4096 by default), four norms per layer, capped logits."""
    c = dict(PRESETS["gemma-2-2b"].config)
    layers = c["num_hidden_layers"]
    windows = decoder_config(c).windows
    assert windows == tuple(4096 if i % 2 == 0 else None for i in range(layers))
    del c["sliding_window"]
    assert decoder_config(c).windows == windows
    net = preset("gemma-2-2b", batch=1, sequence=4)
    names = [row.name for row in net.rows]
    norms = [n for n in names if n.startswith("model.layers.0.") and n.endswith("layernorm")]
    assert len(norms) == 4
    assert net["lm_head"].weights == 0
    assert names[-1] == "final_logit_softcapping"
    capped = decoder_config({**c, "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert (capped.attention_softcap, capped.final_softcap) == (None, None)
    with pytest.raises(InvalidArgumentError, match="attn_logit_softcapping"):
        from_config({**c, "attn_logit_softcapping": -1})
