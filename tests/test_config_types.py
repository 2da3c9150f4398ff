"""A config.json value of the wrong type is refused by name, never read as true (issue 27).

``tie_word_embeddings="silu"``, ``-4``, ``attention_bias="..."``, ``use_sliding_window=7.5e10``
and a ViT's ``qkv_bias=-4e16`` were read as true (Python's truthiness); a list for
``hidden_act`` raised "unhashable type: 'list'"; a 300-character model name raised OSError
"File name too long"; a config.json of any size was read whole.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.errors import InvalidArgumentError, MemtheoryError
from memtheory.models import PRESETS, from_config
from memtheory.models.hf_config import CONFIG_LIMIT

VIT = {
    "model_type": "vit", "image_size": 32, "patch_size": 16, "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128,
}
"""A small ViT configuration (google/vit-base-patch16-224's keys, smaller sizes)."""

FLAGS = [
    ("llama-2-7b", "tie_word_embeddings"),
    ("llama-2-7b", "attention_bias"),
    ("llama-2-7b", "mlp_bias"),
    ("qwen2-7b", "use_sliding_window"),
    ("vit", "qkv_bias"),
]
"""Every boolean key from_config reads, with a configuration of the family that reads it."""


def config_of(family: str) -> dict:
    """The preset's configuration, or the small ViT's."""
    return dict(VIT) if family == "vit" else dict(PRESETS[family].config)


NOT_BOOLEANS = st.one_of(
    st.text(max_size=20),
    st.integers(),
    st.floats(allow_nan=True),
    st.lists(st.booleans(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.booleans(), max_size=2),
)


@pytest.mark.parametrize(("family", "key"), FLAGS)
@pytest.mark.parametrize("value", ["silu", -4, "...", 7.5e10, -4e16, 1, 0, "false"])
def test_the_issues_values_are_refused_by_name(family, key, value):
    """Each value of the issue (and 1, 0, "false") is refused naming the key and JSON's bool."""
    with pytest.raises(InvalidArgumentError, match=f"'{key}' must be true or false"):
        from_config({**config_of(family), key: value})


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from(FLAGS), value=NOT_BOOLEANS)
def test_no_value_but_a_boolean_is_read_as_one(case, value):
    """For any key read as a boolean, any JSON value but true, false or null is refused."""
    family, key = case
    with pytest.raises(InvalidArgumentError, match=key):
        from_config({**config_of(family), key: value})


@pytest.mark.parametrize(("family", "key"), FLAGS)
def test_true_false_and_null_still_read(family, key):
    """JSON true and false build; null means the family's default (as leaving it out does)."""
    config = config_of(family)
    config.pop(key, None)
    default = from_config(config).parameter_count
    assert from_config({**config, key: None}).parameter_count == default
    flags = (True,) if family == "vit" else (True, False)  # a ViT without qkv bias: unmodelled
    counts = {from_config({**config, key: flag}).parameter_count for flag in flags}
    assert default in counts


@pytest.mark.parametrize("key", ["hidden_act", "hidden_activation"])
@pytest.mark.parametrize("value", [["silu"], {"name": "silu"}, 3])
def test_an_activation_that_is_not_text_is_refused(key, value):
    """A list for hidden_act used to raise "unhashable type: 'list'"."""
    with pytest.raises(InvalidArgumentError, match=key):
        from_config({**config_of("llama-2-7b"), key: value})
    with pytest.raises(InvalidArgumentError, match="hidden_act"):
        from_config({**dict(PRESETS["bert-base-uncased"].config), "hidden_act": value})


def test_a_name_too_long_for_a_path_is_a_memtheory_error():
    """A 300-character name: a memtheory error quoting a prefix, not OSError."""
    name = "m" * 300
    with pytest.raises(MemtheoryError) as caught:
        from_config(name)
    message = str(caught.value)
    assert "300 characters" in message and name not in message


def test_a_config_over_the_limit_is_refused_before_reading(tmp_path, monkeypatch):
    """A config.json over 16 MiB is refused from its size, without reading it."""
    path = tmp_path / "config.json"
    config = json.dumps(dict(PRESETS["llama-2-7b"].config))
    path.write_text(config + " " * (CONFIG_LIMIT + 1 - len(config)))
    assert path.stat().st_size == CONFIG_LIMIT + 1
    from pathlib import Path

    def unread(*args, **kwargs):
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_text", unread)
    with pytest.raises(InvalidArgumentError, match="16 MiB"):
        from_config(path)


def test_a_config_at_the_limit_still_reads(tmp_path):
    """Exactly 16 MiB (padding is JSON whitespace) is read."""
    path = tmp_path / "config.json"
    config = json.dumps(dict(PRESETS["llama-2-7b"].config))
    path.write_text(config + " " * (CONFIG_LIMIT - len(config)))
    assert path.stat().st_size == CONFIG_LIMIT
    assert from_config(path).parameter_count == from_config("llama-2-7b").parameter_count
