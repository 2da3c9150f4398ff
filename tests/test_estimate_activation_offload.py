"""``memtheory estimate --activation-offload``: saved tensors in host memory between the passes.

Issue 25 ("training questions it cannot express"). The model
(:mod:`memtheory.techniques.activation_offload`) is derived from the autograd
convention's saved tensors; the numbers here are derived in the tests from
PyTorch's saved-tensor rules (``nn.Linear`` saves its input, ``nn.ReLU`` its
result) and from the step without offload.
"""

from __future__ import annotations

import json

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory import Dense, Input, Network, ReLU, training_memory
from memtheory.cli import main
from memtheory.errors import UnsupportedError
from memtheory.estimate import estimate
from memtheory.techniques.activation_offload import offload_activations, unit_working_sets

FP32 = 4
"""Bytes of an fp32 element."""


def _mlp(batch: int, features: int, hidden: tuple[int, ...], out: int) -> Network:
    layers: list = [Input((features,), batch=batch)]
    for width in hidden:
        layers += [Dense(width), ReLU()]
    return Network([*layers, Dense(out)])


widths = st.lists(st.integers(1, 64), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 16), features=st.integers(1, 32), hidden=widths,
       out=st.integers(1, 16))
def test_the_working_set_is_the_widest_relu_output(batch, features, hidden, out):
    """Each ReLU's output (kept by the ReLU and the next Linear) is one unit's working set."""
    net = _mlp(batch, features, tuple(hidden), out)
    sets = unit_working_sets(net)
    widest = FP32 * batch * max(hidden)  # ReLU saves its result; Linear saves its input
    assert max(sets.values()) == widest
    assert sorted(sets.values()) == sorted(
        FP32 * batch * w for w in hidden for _ in range(2)  # the ReLU and the next Linear
    )


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 16), features=st.integers(1, 32), hidden=widths,
       out=st.integers(1, 16), optimizer=st.sampled_from(["sgd", "adam", "adamw"]))
def test_offloading_raises_the_peak_by_the_input_copy_at_most_and_frees_the_saved(
    batch, features, hidden, out, optimizer
):
    """Device peak: at most the step's and the input's copy back, at least less every saved."""
    net = _mlp(batch, features, tuple(hidden), out)
    step = training_memory(net, optimizer=optimizer, convention="autograd")
    moved = offload_activations(step, net)
    saved = step.components["saved_activations"]
    data = FP32 * batch * features  # the first Linear saves the input batch: copied back
    assert moved.memory.peak <= step.peak + data
    assert moved.memory.peak >= step.peak - saved
    assert moved.host == saved + data  # each saved storage once, in host memory
    assert moved.memory.components["saved_activations"] == min(saved, moved.working_set)


def test_a_two_layer_mlp_keeps_one_relu_output_on_the_device():
    """Each moment's saved part falls to the widest ReLU output; dense_1's backward gets x back."""
    batch, hidden = 8, (256, 128)
    net = _mlp(batch, 64, hidden, 10)
    step = training_memory(net, optimizer="sgd", convention="autograd")
    moved = offload_activations(step, net)
    largest = FP32 * batch * max(hidden)
    data = FP32 * batch * 64  # the input batch dense_1 saves, copied back in its backward
    for moment, alive in moved.memory.timeline_parts.items():
        before = step.timeline_parts[moment].get("saved_activations", 0)
        copied = data if moment.startswith("backward dense_1") else 0
        assert alive.get("saved_activations", 0) == min(before, largest)
        assert moved.memory.timeline[moment] == step.timeline[moment] - before + min(
            before, largest
        ) + copied


def test_the_breakdown_convention_is_refused():
    """Without saved tensors followed moment by moment there is nothing to offload."""
    net = _mlp(2, 4, (8,), 2)
    with pytest.raises(UnsupportedError, match="autograd convention"):
        offload_activations(training_memory(net, optimizer="sgd", convention="breakdown"), net)


@pytest.fixture(scope="module")
def gpt2_pair():
    """GPT-2 small at batch 4, sequence 1024 on a T4, without and with activation offload."""
    sizes = dict(batch=4, sequence=1024, gpu="T4")
    return estimate("gpt2", **sizes), estimate("gpt2", activation_offload=True, **sizes)


@pytest.mark.slow
def test_gpt2_offloaded_needs_less_device_memory_and_its_saved_tensors_on_the_host(gpt2_pair):
    """Device peak falls, the largest batch grows, the host holds the saved activations."""
    plain, moved = gpt2_pair
    assert moved.peak < plain.peak
    assert moved.max_batch >= plain.max_batch
    # the saved activations, and the token ids the embedding saves (int64, batch 4 x 1,024)
    ids = 8 * 4 * 1024
    assert moved.host == plain.memory.components["saved_activations"] + ids
    # what cannot move: everything but the saved activations
    assert moved.peak >= plain.peak - plain.memory.components["saved_activations"]
    assert moved.settings["activation_offload"] and not plain.settings["activation_offload"]
    assert any(line.startswith("activation offload: ") for line in moved.assumptions)
    assert "not measured" in moved.why


@pytest.mark.slow
def test_gpt2_working_set_is_one_block_or_the_head(gpt2_pair):
    """The device's saved part is at most the largest unit: a block h.i or a row outside."""
    _, moved = gpt2_pair
    sets = unit_working_sets(moved.model.network, "autocast-bf16")
    blocks = {name for name in sets if name.startswith("h.")}
    assert blocks == {f"h.{i}" for i in range(12)}  # GPT-2 small's 12 blocks, one unit each
    largest = sp.Max(*sets.values())
    sizes = {"B": 4, "S": 1024}
    assert {s.name for s in largest.free_symbols} <= set(sizes)
    at_sizes = largest.subs({s: sizes[s.name] for s in largest.free_symbols})
    assert 0 < moved.memory.components["saved_activations"] <= at_sizes


@pytest.mark.slow
def test_the_cli_flag_is_in_help_text_and_json(capsys):
    """--activation-offload: in --help, the assumed lines, the host RAM line and --json."""
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "--activation-offload" in capsys.readouterr().out
    assert main(["estimate", "gpt2", "--seq", "256", "--activation-offload"]) == 0
    text = capsys.readouterr().out
    assert "assumed: activation offload: " in text
    assert "host RAM per node for offload: " in text
    assert main(["estimate", "gpt2", "--seq", "256", "--activation-offload", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["settings"]["activation_offload"] is True
    assert answer["host_ram_per_node_bytes"] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "2"], "modelled on one GPU"),
        (["--gpus", "4", "--zero", "3"], "modelled on one GPU"),
        (["--tp", "2"], "modelled on one GPU"),
        (["--checkpointing"], "breakdown convention"),
        (["--convention", "breakdown"], "breakdown convention"),
        (["--optimizer", "adamw-8bit"], "breakdown convention"),
    ],
)
def test_setups_it_does_not_model_are_refused(capsys, argv, message):
    """Several GPUs, or a step in the breakdown convention: exit 2 with the reason."""
    assert main(["estimate", "gpt2", "--seq", "128", "--activation-offload", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_gradient_accumulation_adds_the_same_gradients_with_or_without_offload():
    """Accumulating over 4 micro-batches raises the offloaded peak by the gradients, as without."""
    sizes = dict(batch=2, sequence=256)
    for offloaded in (False, True):
        one = estimate("gpt2", activation_offload=offloaded, **sizes)
        four = estimate("gpt2", activation_offload=offloaded, grad_accum=4, **sizes)
        components = one.memory.components
        # the Trainer fetches the 3 other micro-batches' input and targets before the first runs
        prefetched = 3 * (components["input"] + components["targets"])
        assert four.peak - one.peak == components["gradients"] + prefetched
