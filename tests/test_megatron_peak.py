"""One device's peak under Megatron tensor and 1F1B pipeline parallelism, from the papers.

Every expected number is typed in here from the published formulas, not taken
from memtheory: Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (2022), Table 2 (bytes per layer) and Section 4.2.3 (the
first stage keeps p micro-batches of L/p layers); Narayanan et al., "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (2021),
Section 2.2.1 (1F1B: stage i runs p - i forwards before its first backward);
Shoeybi et al., "Megatron-LM" (2019), Section 3 (which matrices are split).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory.errors import InvalidArgumentError
from memtheory.techniques import megatron_device_peak

GPT = {"layers": 24, "hidden": 2048, "heads": 16, "sequence": 2048, "micro_batch": 2,
       "vocabulary": 51200}
"""A GPT-style model whose sizes every split below divides."""


def _per_layer(s, b, h, a, t, sequence_parallel, recompute="none"):
    """Korthikanti et al. 2022, Table 2, typed in."""
    core = 0 if recompute == "selective" else 5 * a * s / h
    if sequence_parallel:
        return s * b * h / t * (34 + core)
    return s * b * h * (10 + 24 / t + core / t)


@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (4, False), (4, True), (8, True)])
@pytest.mark.parametrize("p", [1, 2, 4])
def test_the_first_stage_keeps_l_layers_of_activations(t, sp, p):
    """Section 4.2.3: the first stage keeps p micro-batches of L/p layers: L layers' worth."""
    peak = megatron_device_peak(**GPT, tensor=t, pipeline=p, sequence_parallel=sp)
    s, b, h, a, n = (GPT[k] for k in ("sequence", "micro_batch", "hidden", "heads", "layers"))
    assert peak.in_flight == p
    assert peak.parts["kept activations"] == n * _per_layer(s, b, h, a, t, sp)


@pytest.mark.parametrize(("stage", "micro_batches", "held"), [(0, 8, 4), (1, 8, 3), (3, 8, 1),
                                                              (0, 2, 2), (2, 2, 2)])
def test_stage_i_keeps_p_minus_i_micro_batches(stage, micro_batches, held):
    """1F1B (Narayanan et al. 2021): stage i holds min(p - i, m) micro-batches in flight."""
    peak = megatron_device_peak(**GPT, tensor=2, pipeline=4, micro_batches=micro_batches,
                                stage=stage)
    s, b, h, a = (GPT[k] for k in ("sequence", "micro_batch", "hidden", "heads"))
    assert peak.in_flight == held
    assert peak.parts["kept activations"] == held * 24 // 4 * _per_layer(s, b, h, a, 2, False)


@pytest.mark.parametrize(("t", "p", "stage"), [(1, 1, 0), (2, 4, 0), (2, 4, 1), (8, 4, 3)])
def test_model_states_are_the_stages_share_of_the_parameters(t, p, stage):
    """Split matrices and column biases / t, row biases and norms whole; embeddings at the ends."""
    h, v, s = GPT["hidden"], GPT["vocabulary"], GPT["sequence"]
    layer = (12 * h * h + 7 * h) / t + 6 * h  # qkv, fc1 (+ biases) and proj, fc2 split
    expected = GPT["layers"] / p * layer
    if stage == 0:
        expected += v * h / t + s * h
    if stage == p - 1:
        expected += (v * h / t if p > 1 else 0) + 2 * h
    peak = megatron_device_peak(**GPT, tensor=t, pipeline=p, stage=stage)
    assert peak.parts["parameters"] == expected
    assert peak.parts["model states"] == 16 * expected


def test_one_device_counts_the_whole_gpt_parameters():
    """One device: Narayanan et al.'s 12Lh^2(1 + 13/(12h) + (V + s)/(12Lh)), plus the final norm."""
    h, n, v, s = GPT["hidden"], GPT["layers"], GPT["vocabulary"], GPT["sequence"]
    peak = megatron_device_peak(**GPT)
    assert peak.parts["parameters"] == 12 * n * h * h + 13 * n * h + v * h + s * h + 2 * h


def test_sequence_parallelism_adds_one_gathered_input_and_splits_the_gradient():
    """With SP, the backward re-gathers a 2sbh input; the output's gradient is split by t."""
    s, b, h, a = (GPT[k] for k in ("sequence", "micro_batch", "hidden", "heads"))
    with_sp = megatron_device_peak(**GPT, tensor=4, sequence_parallel=True)
    without = megatron_device_peak(**GPT, tensor=4)
    assert with_sp.parts["communication buffers"] == 2 * s * b * h
    assert without.parts["communication buffers"] == 0
    assert with_sp.parts["backward working memory"] == (
        _per_layer(s, b, h, a, 4, True) + 2 * s * b * h / 4)
    assert without.parts["backward working memory"] == (
        _per_layer(s, b, h, a, 4, False) + 2 * s * b * h)


def test_full_recomputation_keeps_inputs_and_rebuilds_one_layer():
    """Full recompute keeps 2sbh per layer; the layer in its backward is rebuilt whole."""
    s, b, h, a = (GPT[k] for k in ("sequence", "micro_batch", "hidden", "heads"))
    peak = megatron_device_peak(**GPT, tensor=2, pipeline=2, recompute="full")
    assert peak.parts["kept activations"] == 2 * 12 * 2 * s * b * h
    whole = _per_layer(s, b, h, a, 2, False)
    assert peak.parts["backward working memory"] == 2 * whole + 2 * s * b * h


@given(t=st.sampled_from([1, 2, 4, 8]), p=st.sampled_from([1, 2, 3, 4, 6]),
       sp=st.booleans(), recompute=st.sampled_from(["none", "selective", "full"]))
def test_more_devices_never_hold_more(t, p, sp, recompute):
    """Doubling the tensor-parallel devices never raises the first stage's estimate."""
    one = megatron_device_peak(**GPT, tensor=t, pipeline=p, sequence_parallel=sp,
                               recompute=recompute)
    two = megatron_device_peak(**GPT, tensor=2 * t, pipeline=p, sequence_parallel=sp,
                               recompute=recompute)
    assert two.peak <= one.peak
    assert one.peak == sum(one.parts[k] for k in ("model states", "kept activations",
                                                   "backward working memory",
                                                   "communication buffers"))
    assert any("an estimate" in line for line in one.assumed)


@pytest.mark.parametrize(("changes", "message"), [
    ({"pipeline": 5}, "layers=24 is not divisible by 5"),
    ({"tensor": 3}, "hidden=2048 is not divisible by 3"),
    ({"stage": 4, "pipeline": 4}, "stage must be a whole number from 0 to 3"),
    ({"micro_batch": 0}, "micro_batch must be a whole number of at least 1"),
    ({"recompute": "some"}, "recompute must be 'none', 'selective' or 'full'"),
])
def test_bad_input_names_the_fix(changes, message):
    """Uneven splits, stages outside the pipeline and bad sizes get a memtheory error."""
    with pytest.raises(InvalidArgumentError, match=message):
        megatron_device_peak(**{**GPT, **changes})
