"""The sets of chapters 17 (fine-tuning) and 18 (distributed training), answers re-derived.

Each book answer is recomputed here by hand from the question's numbers or
from a paper: Hu et al., "LoRA" (arXiv:2106.09685) Section 4.2 and Table 5;
Dettmers et al., "QLoRA" (arXiv:2305.14314) Section 3; bitsandbytes'
``optim/optimizer.py`` (8-bit state layout); Rajbhandari et al., "ZeRO"
(arXiv:1910.02054) Section 5; Korthikanti et al. 2022 (arXiv:2205.05198)
Table 2; Narayanan et al. 2021 (1F1B); Meta's Llama-3-8B ``config.json``.
"""

from fractions import Fraction
from math import ceil

import pytest

from memtheory.exercises import find_variant, load_sets
from memtheory.exercises.steps_scaling import SCALING_MISCONCEPTIONS

GB, MIB = 10**9, 2**20
SETS = ("ch17", "ch18")


def test_each_set_has_six_or_more_of_several_kinds():
    """At least six exercises per set, mixing answer kinds."""
    sets = load_sets()
    for set_id in SETS:
        assert len(sets[set_id].exercises) >= 6, set_id
        assert len({type(e.answer).__name__ for e in sets[set_id].exercises}) >= 3


def test_scaling_misconceptions_are_all_used():
    """Every misconception defined for chapters 17-18 is listed by an exercise of theirs."""
    sets = load_sets()
    used = {m for s in SETS for e in sets[s].exercises for m in e.misconceptions}
    assert {m.name for m in SCALING_MISCONCEPTIONS} <= used


def test_ch17_lora_count_is_the_lora_papers_gpt3_budget():
    """LoRA Table 5 / Section 4.2: r=4 on W_q, W_v of GPT-3 175B: 96 x 2 x 4 x (12288 + 12288)."""
    assert find_variant("ch17.q1").expected == 96 * 2 * 4 * (12288 + 12288) == 18_874_368


def test_ch17_lora_states_by_hand():
    """GPT-2 shape, 32 layers of 4096 (vocabulary 50,257, 1,024 positions), r=8 on q and v, bf16.

    Frozen base 2 bytes per weight; the adapters' weight, gradient and two Adam moments 2 bytes
    each (no step counters: the breakdown convention leaves them out).
    """
    h, layers, vocab, positions = 4096, 32, 50257, 1024
    block = 12 * h * h + (3 * h + h + 4 * h + h)  # attention and MLP weights, their biases
    base = vocab * h + positions * h + layers * (block + 4 * h) + 2 * h  # + 2 norms/layer, final
    adapters = layers * 2 * 8 * (h + h)
    answer = find_variant("ch17.q2").expected * GB
    assert answer == 2 * base + 4 * 2 * adapters


def test_ch17_nf4_bits_are_the_qlora_papers():
    """QLoRA Section 3: 4 + 8/64 + 32/(64 x 256) = 4.127 bits per weight."""
    assert find_variant("ch17.q3").expected == 4 + Fraction(8, 64) + Fraction(32, 64 * 256)


def test_ch17_nf4_projection_by_hand():
    """4096 x 4096 weights: n/2 bytes of codes, n/64 one-byte constants, an fp32 per 256 blocks."""
    n = 4096 * 4096
    assert find_variant("ch17.q4").expected == n // 2 + n // 64 + 4 * ceil(n / 64 / 256)


def test_ch17_eight_bit_adam_by_hand():
    """A 1024 x 4096 weight (2 bytes + 8 per 256 values) and a 1024 bias (under 4096: fp32 Adam)."""
    n = 1024 * 4096
    assert find_variant("ch17.q5").expected == 2 * n + 8 * n // 256 + 8 * 1024


def test_ch17_twin_state_is_the_adapters_only():
    """LoRA r=4 on a 32 x 32 Linear: 4 x (32 + 32) fp32 parameters, gradient + two moments."""
    assert find_variant("ch17.q6").expected == 4 * (32 + 32) * 4 * 3


def test_ch18_llama_zero3_by_hand():
    """Llama-3-8B (8,030,261,248 parameters, config.json) x 16 bytes / 8 GPUs."""
    assert find_variant("ch18.q1").expected == Fraction(8_030_261_248 * 16, 8 * GB)


def test_ch18_fewest_gpus_by_hand():
    """8B x 16 bytes / N + 10 GB <= 40 GB: N >= 128/30, so 5."""
    assert find_variant("ch18.q2").expected == ceil(Fraction(8 * 16, 40 - 10)) == 5


def test_ch18_ddp_buckets_by_hand():
    """1.5B: 16 bytes of states + 2 bytes of bucketed gradients per parameter, per GPU."""
    assert find_variant("ch18.q3").expected == Fraction(1_500_000_000 * 18, GB)


def test_ch18_tensor_parallel_layer_is_korthikanti_table_2():
    """sbh(10 + 24/t + 5as/(ht)) for s=2048, h=12288, a=96, t=8, b=1 (no sequence parallel)."""
    s, h, a, t = 2048, 12288, 96, 8
    expected = Fraction(s * h) * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))
    assert find_variant("ch18.q4").expected == expected / MIB


@pytest.mark.parametrize(("p", "stage", "m", "held"), [(8, 0, 32, 8), (8, 3, 32, 5), (4, 3, 16, 1),
                                                        (8, 2, 3, 3)])
def test_ch18_in_flight_is_min_p_minus_i_m(p, stage, m, held):
    """1F1B (Narayanan et al. 2021): stage i keeps min(p - i, m) micro-batches."""
    from memtheory.exercises.reasoning import CORRECT
    from memtheory.exercises.steps_scaling import in_flight

    assert in_flight(CORRECT, p, stage, m) == held == min(p - stage, m)


def test_ch18_host_ram_by_hand():
    """8B on 16 GPUs, 8 a node, optimizer offloaded: (2 + 4 + 8) bytes x 8B / 16 x 8."""
    assert find_variant("ch18.q6").expected == Fraction(8 * 10**9 * 14 * 8, 16 * GB)
