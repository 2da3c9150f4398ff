"""A master copy under the autograd convention: DeepSpeed's bf16 step, as its source allocates.

The rules are read from DeepSpeed 0.19.6 (commit edaa722): the fp32 master
partition is ``converted.clone().detach()`` of the bf16 one
(``runtime/zero/stage3.py:1120-1122``), FusedAdam keeps ``exp_avg`` and
``exp_avg_sq`` like it and its step as a Python int
(``ops/adam/fused_adam.py:153-157``), and the optimizer step casts the flat
bf16 gradient to fp32 (``stage3.py:2401-2402``), the flat copy dying as the
cast returns. Every number below is derived here from those rules and the
dtypes' sizes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory as mt
from memtheory.cli import main
from memtheory.conventions.autograd import AutogradConvention
from memtheory.conventions.autograd.master_weights import (
    CAST_MOMENT,
    cast_moment,
    working_precision,
)
from memtheory.precision import Precision, precision
from memtheory.techniques.parallel import parallel_memory

BF16, FP32 = 2, 4  # bytes per element


def _mlp(batch: int, width: int, depth: int = 2) -> mt.Network:
    layers: list[mt.Layer] = [mt.Input((width,), batch=batch)]
    for _ in range(depth):
        layers += [mt.Dense(width), mt.ReLU()]
    return mt.Network([*layers, mt.Dense(3), mt.CrossEntropyLoss()])


def _step(net: mt.Network, name: str, implementation: str = "fused") -> mt.MemoryBreakdown:
    return mt.training_memory(net, optimizer="adamw", precision=name,
                              convention=AutogradConvention(implementation))


def test_cast_moment_is_the_flat_copy_and_its_fp32_cast():
    """flatten(grads) in bf16 and its .to(fp32): 2 + 4 bytes per element, both alive."""
    assert cast_moment(1000, precision("mixed-bf16")) == {
        "flat 16-bit gradient": 1000 * BF16, "fp32 gradient": 1000 * FP32}


def test_cast_moment_needs_a_master_copy():
    """Nothing is cast to fp32 when there is no master copy: a clear refusal."""
    with pytest.raises(mt.UnsupportedError, match="no master copy"):
        cast_moment(10, precision("bf16"))


def test_working_precision_is_the_uniform_16_bit_model():
    """The forward and backward run as model.to(bfloat16): one dtype everywhere."""
    assert working_precision(precision("mixed-bf16")) == Precision.uniform("bf16")
    with pytest.raises(mt.UnsupportedError, match="share one dtype"):
        working_precision(Precision(parameters="bf16", activations="fp32", master_weights="fp32"))


def test_components_are_deepspeeds_per_parameter_bytes():
    """bf16 weights and gradients, fp32 master, two fp32 moments, an fp32 step gradient."""
    net = _mlp(batch=4, width=16)
    count = net.parameter_count
    memory = _step(net, "mixed-bf16")
    assert memory["parameters"] == memory["gradients"] == count * BF16
    assert memory["master_weights"] == memory["master_gradients"] == count * FP32
    assert memory["optimizer_state"] == 2 * count * FP32
    assert "optimizer_step_counters" not in memory.components  # FusedAdam: a Python int


def test_forward_and_backward_are_the_bf16_models_plus_constants():
    """Every moment before the step is bf16's, moved by master + fp32 state - bf16 state."""
    net = _mlp(batch=8, width=24, depth=3)
    mixed, bf16 = _step(net, "mixed-bf16"), _step(net, "bf16")
    shift = (mixed["master_weights"] + mixed["optimizer_state"]
             - bf16["optimizer_state"] - bf16["optimizer_step_counters"])
    before_step = [k for k in bf16.timeline if not k.startswith("optimizer step")]
    assert before_step and all(mixed.timeline[k] - bf16.timeline[k] == shift for k in before_step)


def test_optimizer_step_moments_follow_deepspeeds_cast():
    """After bf16's backward: + the fp32 gradient at the step, + its flat bf16 copy at the cast."""
    net = _mlp(batch=2, width=32)
    count = net.parameter_count
    mixed, bf16 = _step(net, "mixed-bf16"), _step(net, "bf16")  # fused: no step temporaries
    shift = (mixed["master_weights"] + mixed["optimizer_state"]
             - bf16["optimizer_state"] - bf16["optimizer_step_counters"])
    step = bf16.timeline["optimizer step"] + shift + count * FP32
    assert mixed.timeline["optimizer step"] == step
    assert mixed.timeline[CAST_MOMENT] == step + count * BF16


def test_a_for_loop_optimizer_steps_one_flat_fp32_tensor():
    """A for-loop torch AdamW over DeepSpeed's one flat tensor: that tensor's temporaries."""
    net = _mlp(batch=2, width=32)
    fused, loop = _step(net, "mixed-bf16"), _step(net, "mixed-bf16", "for-loop")
    from memtheory.conventions.autograd.kernels.torch_2_13.optimizers import step_temporaries

    flat = net.parameter_count * FP32
    expected = step_temporaries(mt.optimizer("adamw"), "for-loop", [flat])
    assert loop.timeline["optimizer step"] - fused.timeline["optimizer step"] == expected


def test_factored_optimizers_are_refused_over_a_flat_master():
    """Adafactor's factored state needs matrices; the flat master partition has none."""
    with pytest.raises(mt.UnsupportedError, match="factored"):
        mt.training_memory(_mlp(2, 8), optimizer="adafactor", precision="mixed-bf16",
                           convention="autograd")


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 16), width=st.integers(2, 48), depth=st.integers(1, 3))
def test_master_copy_peak_is_at_least_the_bf16_peak_plus_master_and_state(batch, width, depth):
    """mixed-bf16's peak >= bf16's peak + master + (fp32 - bf16 state) - bf16's step counters."""
    net = _mlp(batch, width, depth)
    mixed, bf16 = _step(net, "mixed-bf16"), _step(net, "bf16")
    extra = (mixed["master_weights"] + mixed["optimizer_state"]
             - bf16["optimizer_state"] - bf16["optimizer_step_counters"])
    assert mixed.peak >= bf16.peak + extra


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 8), width=st.integers(4, 48), zero=st.sampled_from([1, 2, 3]))
def test_per_device_peak_does_not_grow_with_the_zero_world_size(batch, width, zero):
    """More data-parallel devices never raise one device's peak, at every ZeRO stage.

    From 2 devices on: ZeRO-3's reduce bucket (reduce_bucket_size elements,
    whatever the model) exists only when there is something to reduce.
    """
    memory = _step(_mlp(batch, width), "mixed-bf16")
    peaks = [parallel_memory(memory, data=n, zero=zero).device.peak for n in (2, 3, 4, 8, 16)]
    assert all(later <= earlier for earlier, later in zip(peaks, peaks[1:], strict=False))


def test_zero3_keeps_deepspeeds_gradient_partition_and_reduce_bucket():
    """stage3.py:731-744: a reduce bucket (bf16) and every gradient's partition, kept."""
    memory = _step(_mlp(4, 16), "mixed-bf16")
    bucket = 1000  # elements
    device = parallel_memory(memory, data=4, zero=3, reduce_bucket_size=bucket).device
    assert device["gradient_buckets"] == bucket * BF16
    # at the step's start (after zero_grad) torch holds no gradient; DeepSpeed its partition
    plain = parallel_memory(memory, data=4, zero=2).device  # stage 2: grads at their share, freed
    held = memory["gradients"] / 4
    stage3_shift = device.timeline["forward dense_1"] - plain.timeline["forward dense_1"]
    weights = memory["parameters"] - memory["parameters"] / 4  # stage 3 partitions them too
    assert stage3_shift == held + bucket * BF16 - plain["gradient_buckets"] - weights


def test_one_device_split_is_the_replica_peak():
    """ZeRO over one device changes nothing: the per-device timeline is the replica's."""
    memory = _step(_mlp(4, 16), "mixed-bf16")
    assert parallel_memory(memory, data=1, zero=3).device.peak == memory.peak


def test_zero_shares_the_master_copys_gradient_too():
    """Its fp32 gradient is the rank's partition's: 1/N of it at every stage."""
    memory = _step(_mlp(2, 32), "mixed-bf16")
    for zero in (1, 2, 3):
        device = parallel_memory(memory, data=4, zero=zero).device
        assert device["master_gradients"] * 4 == memory["master_gradients"]
        assert device["master_weights"] * 4 == memory["master_weights"]


def test_estimate_cli_answers_the_deepspeed_recipe_under_autograd(capsys):
    """`memtheory estimate --recipe deepspeed-zero3` says autograd, and what is modelled."""
    assert main(["estimate", "gpt2", "--batch", "1", "--seq", "128", "--recipe",
                 "deepspeed-zero3", "--gpus", "2", "--gpu", "A10G"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("convention:"))
    assert line.startswith("convention: autograd: the forward and backward exact")
    assert "modelled from DeepSpeed's source" in line and "not measured" in line
    assert "fp32 gradient of the master copy" in out
