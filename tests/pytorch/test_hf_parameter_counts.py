"""Every preset's parameter count against Hugging Face transformers building the same config.

transformers (5.23) builds each configuration on the ``meta`` device (no
weights allocated, nothing downloaded) and counts ``model.parameters()``, which
lists a tied matrix once; memtheory builds the same configuration with
``from_config``. The two are written independently: transformers' modeling
code on one side, memtheory's layer formulas on the other.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory.models import PRESETS, active_parameter_count, from_config  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_HEADS = {"bert": "AutoModelForMaskedLM"}


def _hf_count(config: dict) -> tuple[int, object]:
    """Parameters of transformers' model for ``config`` (built on the meta device)."""
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **values)
    auto = getattr(transformers, _HEADS.get(config["model_type"], "AutoModelForCausalLM"))
    with torch.device("meta"):
        model = auto.from_config(hf_config)
    return sum(p.numel() for p in model.parameters()), model


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_parameter_count_matches_transformers(name):
    """The count of each preset equals transformers' model built from the same keys."""
    config = dict(PRESETS[name].config)
    assert from_config(config).parameter_count == _hf_count(config)[0]


def test_small_configs_match_transformers_layer_for_layer():
    """Tiny Llama/Qwen2/Gemma/Mixtral configs: total and per-tensor shapes match transformers."""
    base = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    for config in (
        {"model_type": "llama", **base},
        {"model_type": "llama", **base, "attention_bias": True, "mlp_bias": True},
        {"model_type": "qwen2", **base},
        {"model_type": "gemma", **base, "head_dim": 16},
        {"model_type": "mistral", **base, "sliding_window": 8},
        {"model_type": "mixtral", **base, "num_local_experts": 4, "num_experts_per_tok": 2},
    ):
        count, model = _hf_count(config)
        net = from_config(config)
        assert net.parameter_count == count, config
        ours = sorted(
            tuple(int(d) for d in shape)
            for row in net.rows
            for _, shape in row.layer.parameter_shapes(row.input_shape)
        )
        theirs = sorted(tuple(p.shape) for p in model.parameters())
        assert ours == theirs, config


def test_mixtral_active_parameters_against_transformers_experts():
    """Active = total less the unrouted experts' tensors, read off transformers' expert weights."""
    config = {"model_type": "mixtral", "vocab_size": 96, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2}
    count, model = _hf_count(config)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    unused = experts * (4 - 2) // 4
    assert active_parameter_count(from_config(config)) == count - unused
