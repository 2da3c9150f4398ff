"""Memory techniques against their papers: mixed precision, checkpointing, ZeRO, offload, caches."""

from __future__ import annotations

import math

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

import memtheory.layers as ml
from memtheory import ModelCounts, training_memory
from memtheory.models import gpt2, resnet50
from memtheory.network import Network
from memtheory.symbols import B, P, S, size_symbol
from memtheory.techniques import (
    LOSS_SCALER_BYTES,
    autocast,
    autocast_weight_copy_bytes,
    best_uniform_interval,
    bytes_per_parameter,
    checkpoint_units,
    checkpointed_activations,
    checkpointed_counts,
    cpu_offload,
    generation_memory,
    gradient_accumulation,
    kv_cache_bytes,
    kv_cache_formula,
    minimal_memory,
    parameter_bytes,
    relaxed_optimal_interval,
    tradeoff,
    uniform_memory,
    zero_model_states,
    zero_partition,
)
from memtheory.techniques.checkpointing import LAYERS
from memtheory.techniques.mixed_precision import PARAMETER_COMPONENTS

STATES = ModelCounts(parameters=P, activations=0, input_elements=0)


# -- mixed precision -------------------------------------------------------------------
@pytest.mark.parametrize("low", ["fp16", "bf16"])
def test_mixed_precision_adam_is_2_plus_2_plus_12_bytes_per_parameter(low):
    """ZeRO paper (Rajbhandari et al. 2020, Section 3.1): 2Ψ + 2Ψ + KΨ with K = 12: 16 bytes."""
    per_parameter = parameter_bytes(optimizer="adam", precision=f"mixed-{low}")
    assert per_parameter == {
        "parameters": 2,
        "gradients": 2,
        "optimizer_state": 8,
        "master_weights": 4,
    }
    k = per_parameter["optimizer_state"] + per_parameter["master_weights"]
    assert (k, bytes_per_parameter(optimizer="adam", precision=f"mixed-{low}")) == (12, 16)


def test_training_memory_of_gpt2_has_16_bytes_per_parameter_in_mixed_precision():
    """Adam in mixed precision (fp16 weights and gradients): model states are 16 bytes x P."""
    net = gpt2("small")
    memory = training_memory(net, optimizer="adam", precision="mixed-fp16")
    states = sum(memory[name] for name in PARAMETER_COMPONENTS)
    assert states == 16 * 124_439_808


def test_autocast_keeps_fp32_states_without_a_master_copy():
    """torch.autocast: fp32 weights are the master copy; 4 + 4 + 8 = 16 bytes, plus 2 cast."""
    assert parameter_bytes(optimizer="adam", precision=autocast()) == {
        "parameters": 4,
        "gradients": 4,
        "optimizer_state": 8,
    }
    assert autocast_weight_copy_bytes(P) == 2 * P
    assert autocast("bf16").activations.bytes == 2


def test_loss_scaling_costs_two_scalars_whatever_the_model():
    """GradScaler (torch/amp/grad_scaler.py) keeps an fp32 _scale and an int32 _growth_tracker."""
    assert LOSS_SCALER_BYTES == 4 + 4
    assert "loss" not in " ".join(training_memory(STATES, optimizer="adam", precision="mixed-fp16"))


# -- checkpointing ---------------------------------------------------------------------
def test_relaxed_optimal_interval_is_sqrt_n_and_memory_is_2_sqrt_n():
    """Chen et al. 2016, Section 4.1: k = sqrt(n) segments give O(2 sqrt(n)) memory."""
    n = LAYERS
    assert relaxed_optimal_interval() == sp.sqrt(n)
    assert sp.simplify(minimal_memory() - (2 * sp.sqrt(n) - 1)) == 0
    assert sp.limit(minimal_memory() / sp.sqrt(n), n, sp.oo) == 2


@pytest.mark.slow
@given(st.integers(min_value=1, max_value=5_000))
def test_best_uniform_interval_is_next_to_sqrt_n(n):
    """The exact memory ceil(n/k) - 1 + min(k, n) is least at isqrt(n) or isqrt(n) + 1."""
    least = int(uniform_memory(n, best_uniform_interval(n)))
    root = math.isqrt(n)
    assert least == min(int(uniform_memory(n, root)), int(uniform_memory(n, root + 1)))
    assert 2 * math.sqrt(n) - 1 <= least <= 2 * math.sqrt(n)


def test_tradeoff_runs_from_plain_training_to_the_sqrt_optimum():
    """Segments of n layers are plain training (no recompute); k = sqrt(n) has the least memory."""
    plans = tradeoff(100)
    assert (plans[-1].memory, plans[-1].recompute) == (100, 0)
    best = min(plans, key=lambda p: p.memory)
    assert (best.interval, best.memory, best.recompute) == (10, 19, 90)


@given(st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=40))
def test_checkpointing_a_uniform_chain_matches_the_uniform_formula(n, k):
    """A chain of n equal Dense layers checkpointed every k keeps uniform_memory(n, k) layers."""
    k = min(k, n)
    net = Network([ml.Input((16,)), *[ml.Dense(16) for _ in range(n)]])
    assert checkpointed_activations(net, k) == uniform_memory(n, k) * 16 * B


def test_resnet50_checkpoint_units_are_its_blocks_and_stem_layers():
    """Cut points fall between bottleneck blocks: 16 block units after the stem layers."""
    units = checkpoint_units(resnet50(batch=1))
    assert len([u for u in units if u.layers[-1].endswith("relu3")]) == 16
    assert units[0].layers == ("conv1",)
    assert sum(u.activations for u in units) == resnet50(batch=1).activation_count


def test_checkpointed_counts_feed_any_convention():
    """Checkpointing changes only the activations of the counts."""
    net = gpt2("small")
    plain, checkpointed = net.counts(), checkpointed_counts(net, 5)
    assert checkpointed.parameters == plain.parameters
    lower = checkpointed.activations.subs({B: 1, S: 1024})
    assert lower < plain.activations.subs({B: 1, S: 1024})


# -- gradient accumulation -------------------------------------------------------------
def test_accumulation_has_micro_batch_memory_and_effective_batch_update():
    """Accumulating m micro-batches of b: memory of b, update of m*b; only activations differ."""
    b, m = size_symbol("b"), size_symbol("m")
    counts = ModelCounts.per_sample(parameters=1000, activations=200, input_elements=10)
    plan = gradient_accumulation(counts, b, m, optimizer="adam")
    assert plan.effective_batch == b * m
    assert plan.memory.total == training_memory(counts, optimizer="adam").total.subs(B, b)
    assert plan.memory["gradients"] == plan.full_batch["gradients"] == 4000
    assert sp.expand(plan.saved - (b * m - b) * (200 * 4 * 2 + 10 * 4)) == 0


# -- ZeRO ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stage", "published"), [(0, "120.0 GB"), (1, "31.4 GB"), (2, "16.6 GB"), (3, "1.9 GB")]
)
def test_zero_7_5b_parameters_on_64_gpus(stage, published):
    """ZeRO paper (Rajbhandari et al. 2020), Figure 1: Ψ = 7.5B, N_d = 64, K = 12.

    Baseline 120 GB; P_os 31.4 GB; P_os+g 16.6 GB; P_os+g+p 1.9 GB per device (GB = 10^9).
    """
    states = zero_model_states(7_500_000_000, 64, stage)
    assert states.format("GB", digits=1) == published


def test_zero_stages_are_the_papers_formulas():
    """Figure 1: (2+2+K)Ψ, 2Ψ+2Ψ+KΨ/N_d, 2Ψ+(2+K)Ψ/N_d, (2+2+K)Ψ/N_d with K = 12."""
    n, k = size_symbol("N"), 12
    paper = [(4 + k) * P, 4 * P + k * P / n, 2 * P + (2 + k) * P / n, (4 + k) * P / n]
    for stage, expected in enumerate(paper):
        assert sp.simplify(zero_model_states(P, n, stage).total - expected) == 0


def test_zero_leaves_activations_alone():
    """Each device keeps the activations of its own micro-batch: ZeRO-3 divides states only."""
    counts = ModelCounts.per_sample(parameters=P, activations=100, input_elements=1)
    memory = training_memory(counts, optimizer="adam", precision="mixed-fp16")
    sharded = zero_partition(memory, 8, 3)
    assert sharded["activations"] == memory["activations"]
    assert sharded["parameters"] == memory["parameters"] / 8


def test_zero_offload_keeps_2_bytes_per_parameter_on_the_gpu():
    """ZeRO-Offload (Ren et al. 2021, Section 3): fp16 parameters (2Ψ) stay, 14Ψ go to the CPU."""
    split = cpu_offload(training_memory(STATES, optimizer="adam", precision="mixed-fp16"))
    assert (split.gpu.total, split.cpu.total) == (2 * P, 14 * P)


# -- inference: weights and the key/value cache ---------------------------------------
@pytest.mark.parametrize("size", ["small", "medium", "large", "xl"])
def test_gpt2_kv_cache_is_2_layers_heads_head_dim_seq_batch_bytes(size):
    """The cache is 2 * layers * heads * head_dim * seq * batch * bytes (fp16: 2 bytes)."""
    from memtheory.models import GPT2_SIZES

    config = GPT2_SIZES[size]
    head_dim = config.hidden // config.heads
    expected = 2 * config.layers * config.heads * head_dim * S * B * 2
    assert kv_cache_bytes(gpt2(size)) == expected


def test_llama2_7b_kv_cache_is_2_gib_at_4096_tokens():
    """NVIDIA, "Mastering LLM Techniques: Inference Optimization" (2023): Llama 2 7B, fp16.

    32 layers, 32 heads of 128, batch 1, 4,096 tokens: 2 * 4096 * 32 * 4096 * 2 bytes, "~2 GB"
    (exactly 2 GiB); 0.5 MiB per token.
    """
    cache = kv_cache_formula(layers=32, heads=32, head_dim=128, sequence=4096, batch=1)
    assert cache == 2 * 2**30
    assert kv_cache_formula(layers=32, heads=32, head_dim=128, sequence=1, batch=1) == 2**19


def test_generation_memory_is_weights_plus_cache():
    """GPT-2 small in fp16: 2 bytes per parameter plus the cache; fp32 cache doubles it."""
    memory = generation_memory(gpt2("small"))
    assert memory.weights == 2 * 124_439_808
    assert memory.kv_cache == 36864 * B * S
    assert generation_memory(gpt2("small"), cache="fp32").kv_cache == 2 * memory.kv_cache
    assert memory.positions == 1024


def test_best_network_interval_is_the_exact_minimum_over_intervals():
    """On GPT-2 small (unequal units) the best interval beats the equal-units sqrt choice.

    The minimum is checked against every interval by brute force; the sqrt choice
    assumes equal units and so keeps more activations here.
    """
    from memtheory.models import gpt2
    from memtheory.techniques.checkpointing import (
        best_network_interval,
        best_uniform_interval,
        checkpoint_units,
        checkpointed_activations,
    )

    net = gpt2("small")
    point = {"B": 8, "S": 1024}

    def peak(interval):
        expression = checkpointed_activations(net, interval)
        return expression.xreplace({s: point[s.name] for s in expression.free_symbols})

    units = len(checkpoint_units(net))
    best = best_network_interval(net, S=1024)
    assert peak(best) == min(peak(k) for k in range(1, units + 1))
    assert peak(best) < peak(best_uniform_interval(units))


def test_compare_scenarios_offers_the_best_interval():
    """compare_scenarios(intervals=("sqrt", "best")): "best" never needs more than "sqrt"."""
    from memtheory.models import gpt2
    from memtheory.whatif import compare_scenarios

    table = compare_scenarios(
        gpt2("small"),
        optimizers=("adam",),
        precisions=("fp32",),
        intervals=("sqrt", "best"),
        B=8,
        S=1024,
    )
    sqrt_total, best_total = (scenario.total for scenario in table.scenarios)
    assert best_total <= sqrt_total
