"""Per device, a split step's peak is a moment of one replica's timeline at the device's share.

``parallel_memory`` scales each moment of the exact convention's timeline:
the components held through the step by the device's difference, the
gradients and kept activations by their live bytes at that moment times the
device's share, the device's own buffers added; activation gradients and
temporaries stay whole. Checked here against the single-device answer (no
split: the same bytes), against its own components (the peak holds each at
some moment) and against the replica (sharding lowers every moment, but for
what only the device has).
"""

from __future__ import annotations

import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory import training_memory
from memtheory.estimate import estimate
from memtheory.models import gpt2
from memtheory.symbols import B, S
from memtheory.techniques import parallel_memory
from tests.strategies import mlps

_DEVICE_ONLY = ("gradient_buckets", "gathered_parameters")
_TORCH_OPTIM = st.sampled_from(["sgd", "sgd+momentum", "adam", "adamw", "adagrad", "rmsprop"])
"""Optimizers whose step the exact convention follows (torch.optim's)."""


def _step(spec, optimizer):
    return training_memory(spec.network(), optimizer=optimizer, convention="autograd")


@settings(max_examples=25, deadline=None)
@given(spec=mlps(), optimizer=_TORCH_OPTIM, zero=st.sampled_from([0, 1, 2]),
       batch=st.integers(1, 64))
def test_one_device_is_the_unsplit_step_to_the_byte(spec, optimizer, zero, batch):
    """With one device nothing is split: the same timeline, peak and moment as the step."""
    memory = _step(spec, optimizer)
    device = parallel_memory(memory, zero=zero).evaluate(B=batch)
    single = memory.evaluate(B=batch)
    assert device.timeline == single.timeline
    assert device.peak == single.peak and device.peak_moment == single.peak_moment


@settings(max_examples=25, deadline=None)
@given(spec=mlps(), optimizer=_TORCH_OPTIM, zero=st.sampled_from([0, 1, 2, 3]),
       data=st.sampled_from([2, 4, 8]), batch=st.integers(1, 64),
       offload=st.sampled_from(["none", "optimizer"]))
def test_the_device_peak_holds_each_component_and_no_more_than_a_replica(
    spec, optimizer, zero, data, batch, offload
):
    """The peak is at least every component, and at most the replica's plus the device's own."""
    if offload != "none" and zero == 0:
        zero = 1
    memory = _step(spec, optimizer)
    device = parallel_memory(memory, data=data, zero=zero, offload=offload,
                             network=spec.network()).evaluate(B=batch)
    assert all(device.peak >= value for value in device.components.values())
    own = sum((device.components.get(name, sp.S.Zero) for name in _DEVICE_ONLY), sp.S.Zero)
    assert device.peak <= memory.evaluate(B=batch).peak + own


def test_zero3_estimate_peaks_at_a_moment_of_the_step():
    """GPT-2 small on 4 GPUs, ZeRO-3: the peak is a moment of the device's timeline.

    In the backward pass, where activation gradients (the logits' B x S x
    50,257 among them) are alive that no component counts: the sum of the
    components misses them, the device's timeline does not.
    """
    answer = estimate("gpt2", batch=2, sequence=256, gpus=4, zero=3)
    memory = answer.memory
    assert memory.timeline and memory.peak == max(memory.timeline.values())
    assert memory.peak_moment.startswith("backward")
    assert max(memory.components.values()) <= memory.peak
    assert memory.peak > memory.total


def test_the_estimate_with_one_shard_is_the_single_device_step():
    """The split path's formula, with nothing split, is the single GPU's, symbol for symbol."""
    net = gpt2("small", batch=B, sequence=S, loss=True, flash=True)
    memory = training_memory(net, setup="hf-trainer", precision="autocast-bf16")
    split = parallel_memory(memory, network=net)
    assert {k: sp.expand(v) for k, v in split.timeline.items()} == {
        k: sp.expand(v) for k, v in memory.timeline.items()}
