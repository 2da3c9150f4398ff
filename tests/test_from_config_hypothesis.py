"""``from_config`` under hostile configuration values: a network or a memtheory error, never raw.

Each case starts from a preset's configuration (every family the presets
cover, at published sizes) and replaces one to three keys, present or not,
with what a broken or hostile ``config.json`` holds: wrong types, negative,
zero and huge sizes, NaN, text, lists, nested dicts. ``from_config`` must
return a network whose parameter count is a whole number, or raise a
:class:`memtheory.errors.MemtheoryError`, within :data:`HANG_SECONDS`. The last
test prints how many configurations each family got (issue 27's "printing how
many inputs it tried per entry point").
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import timedelta

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.models import PRESETS, from_config
from tests.strategies import hostile_values
from tests.test_api_hypothesis import HANG_SECONDS, outcome, print_tried

TRIED: Counter[str] = Counter()
"""Configurations built, by model_type (printed by the last test)."""

FAMILIES = {}
for _name, _preset in PRESETS.items():
    FAMILIES.setdefault(_preset.config["model_type"], _name)
"""One preset per model_type: the configuration each family's cases start from."""

EXTRA_KEYS = ["model_type", "num_hidden_layers", "hidden_size", "head_dim", "vocab_size",
              "num_key_value_heads", "tie_word_embeddings", "hidden_act", "rope_scaling",
              "sliding_window", "num_local_experts", "num_experts_per_tok", "torch_dtype",
              "max_position_embeddings", "intermediate_size", "layer_types", "quantization_config"]
"""Keys a hostile file may add or break, beside the preset's own."""

VALUES = st.one_of(
    hostile_values(),
    st.integers(-(10**12), 10**12),
    st.sampled_from([0, -1, 1, 2, 3, 7, 10**9, 10**30, 2**63, math.nan, math.inf, 1e-9, 4.5,
                     "llama", "gpt2", "silu", "bfloat16", "x" * 400, [], [1, 2], [[[]]],
                     {"type": "linear", "factor": 2.0}, {"a": {"b": {"c": None}}}]),
)

FUZZ = settings(
    max_examples=40,
    deadline=timedelta(seconds=HANG_SECONDS),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@st.composite
def broken_configs(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    """A family's preset configuration with one to three keys replaced by hostile values."""
    family = draw(st.sampled_from(sorted(FAMILIES)))
    config = dict(PRESETS[FAMILIES[family]].config)
    keys = sorted(set(config) | set(EXTRA_KEYS))
    for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True)):
        config[key] = draw(VALUES)
    return family, config


def build(family: str, config: dict[str, object]) -> None:
    """Build the configuration: a network with a whole parameter count, or a memtheory error."""
    TRIED[family] += 1
    network = outcome("from_config", lambda: from_config(config, batch=1, sequence=8))
    if network is not None:
        count = sp.sympify(network.parameter_count)
        assert count.is_integer and count > 0, (family, count)


@settings(FUZZ)
@given(case=broken_configs())
@example(case=("llama", {**PRESETS["llama-3-8b"].config, "num_hidden_layers": 10**7}))
@example(case=("llama", {**PRESETS["llama-3-8b"].config, "hidden_act": ["silu"]}))
@example(case=("llama", {**PRESETS["llama-3-8b"].config, "tie_word_embeddings": "silu"}))
@example(case=("gemma2", {**PRESETS["gemma-2-2b"].config, "head_dim": math.nan}))
@example(case=("bert", {**PRESETS["bert-base-uncased"].config, "architectures": object()}))
@example(case=("llama", {**PRESETS["llama-3-8b"].config, "hidden_act": np.array([1, 2])}))
@example(case=("phi3", {**PRESETS["phi-3-mini"].config, "rope_scaling": np.array([1, 2])}))
def test_a_broken_config_gives_a_network_or_a_memtheory_error(case):
    """Hostile values in one to three keys of any family's configuration."""
    build(*case)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_builds_unbroken(family):
    """The starting points are valid: every family's preset configuration builds."""
    TRIED[family] += 1
    network = from_config(dict(PRESETS[FAMILIES[family]].config), batch=1, sequence=8)
    assert isinstance(network, mt.Network)


def test_zz_report(capsys):
    """Print how many configurations each family got."""
    print_tried(capsys, TRIED, "from_config hypothesis suite, configurations per family")
