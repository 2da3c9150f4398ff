"""``memtheory estimate --cp N``: the sequence split across GPUs, attention as a ring.

Issue 25 ("training questions it cannot express"). The model
(:mod:`memtheory.techniques.context_parallel`) follows PyTorch 2.13's
``torch/distributed/tensor/experimental/_context_parallel/``: each GPU runs
the step on ``S/N`` tokens, and one attention layer holds the all-gathered
keys and values and fp32 sums. The numbers here come from the step without
context parallelism at ``S/N`` and from those buffers counted from the source.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.cli import main
from memtheory.estimate import estimate
from memtheory.symbols import B, S
from memtheory.techniques.context_parallel import ring_buffers

HEADS, HEAD_DIM, BF16 = 4, 16, 2
TINY_LLAMA = {
    "model_type": "llama", "hidden_size": HEADS * HEAD_DIM, "num_attention_heads": HEADS,
    "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 2,
    "vocab_size": 256, "max_position_embeddings": 65536, "torch_dtype": "bfloat16",
}
"""A two-layer Llama config (bf16 weights, so the bf16 step) small enough to derive quickly."""

MODEL_STATES = ("parameters", "gradients", "optimizer_state", "optimizer_step_counters")


def _backward_buffers(n: int, batch: int, sequence: int) -> int:
    """Ring attention's backward buffers, counted from ``_templated_ring_attention_backward``."""
    width, local = HEADS * HEAD_DIM, batch * sequence // n
    gathered = 2 * width * batch * sequence * BF16  # all_gather_single of every rank's k, v
    sent = 2 * width * local * BF16  # torch.cat([key.flatten(), value.flatten()])
    sums = 3 * width * local * 4  # grad_query, grad_key, grad_value in fp32 (convert_to_f32)
    rotated = 2 * (2 * width * local * 4)  # the fp32 key/value gradients sent and received
    return gathered + sent + sums + rotated


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_ring_buffers_are_those_counted_from_the_source(n):
    """ring_buffers' backward equals the tensors _templated_ring_attention_backward allocates."""
    expression = ring_buffers(heads_width=HEADS * HEAD_DIM, activation_bytes=BF16, size=n)
    assert expression["backward"].subs({B: 2, S: 1024}) == _backward_buffers(n, 2, 1024)
    assert estimate(TINY_LLAMA, batch=2, sequence=1024, context_parallel=n).memory.components[
        "ring_attention_buffers"] == _backward_buffers(n, 2, 1024)


def test_cp_1_is_the_step_without_context_parallelism():
    """--cp 1 changes nothing: the same peak, components and devices."""
    plain = estimate(TINY_LLAMA, sequence=2048)
    one = estimate(TINY_LLAMA, sequence=2048, context_parallel=1)
    assert one.peak == plain.peak
    assert dict(one.memory.components) == dict(plain.memory.components)
    assert one.settings["gpus"] == plain.settings["gpus"] == 1


@settings(max_examples=12, deadline=None)
@given(n=st.sampled_from([2, 4, 8, 16]), chunks=st.integers(1, 8), batch=st.integers(1, 3))
def test_each_gpu_holds_the_step_at_s_over_n_plus_the_ring(n, chunks, batch):
    """Per GPU: the model states whole, the activations those of S/N, one ring's buffers more."""
    sequence = 2 * n * chunks * 16
    split = estimate(TINY_LLAMA, batch=batch, sequence=sequence, context_parallel=n)
    local = estimate(TINY_LLAMA, batch=batch, sequence=sequence // n)
    whole = estimate(TINY_LLAMA, batch=batch, sequence=sequence)
    for name in MODEL_STATES:
        assert split.memory.components[name] == whole.memory.components[name]
    assert (split.memory.components["saved_activations"]
            == local.memory.components["saved_activations"])
    ring = _backward_buffers(n, batch, sequence)
    assert local.peak <= split.peak <= local.peak + ring
    assert split.settings["gpus"] == n and split.settings["context_parallel"] == n


def test_the_peak_per_gpu_falls_with_n_for_a_long_sequence():
    """At 64k tokens each doubling of N lowers the peak per GPU."""
    peaks = [estimate(TINY_LLAMA, sequence=65536, context_parallel=n).peak
             for n in (1, 2, 4, 8, 16)]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)


def test_the_largest_sequence_is_a_multiple_of_2n():
    """What fits is a sequence the head-tail load balancer can cut into 2N chunks."""
    answer = estimate(TINY_LLAMA, sequence=4096, context_parallel=4, limit="64 MiB", reserve=0)
    assert answer.max_sequence is not None and answer.max_sequence > 0
    assert answer.max_sequence % 8 == 0


def test_the_cli_flag_is_in_help_text_and_json(capsys, tmp_path):
    """--cp: in --help, the assumed lines, the devices line and --json."""
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "--cp N" in capsys.readouterr().out
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    assert main(["estimate", str(config), "--seq", "4096", "--cp", "4"]) == 0
    text = capsys.readouterr().out
    assert "assumed: context parallel 4: " in text
    assert "4 GPUs (context parallel 4" in text
    assert main(["estimate", str(config), "--seq", "4096", "--cp", "4", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["settings"]["context_parallel"] == 4
    assert answer["components"]["ring_attention_buffers"] == _backward_buffers(4, 1, 4096)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seq", "1000", "--cp", "8"], "a multiple of 16"),
        (["--seq", "4096", "--cp", "2", "--gpus", "4"], "--cp 2 is modelled alone"),
        (["--seq", "4096", "--cp", "2", "--tp", "2"], "--cp 2 is modelled alone"),
        (["--seq", "4096", "--cp", "2", "--activation-offload"], "--cp 2 is modelled alone"),
        (["--seq", "4096", "--cp", "2", "--attention", "eager"], "(eager)"),
        (["--seq", "4096", "--cp", "2", "--recipe", "deepspeed-zero3"], "ZeRO-3"),
        (["--seq", "4096", "--cp", "0"], "positive whole number"),
    ],
)
def test_splits_it_does_not_model_are_refused(capsys, tmp_path, argv, message):
    """An uneven sequence, another split, eager attention, a sharding recipe: exit 2, why."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    assert main(["estimate", str(config), *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("model", "message"), [("gpt2", "Llama-style"), ("resnet50", "vision")])
def test_models_it_does_not_split_are_refused(capsys, model, message):
    """GPT-2's packed attention and a vision model: refused with the reason."""
    argv = ["estimate", model, "--cp", "2"] + (["--seq", "1024"] if model == "gpt2" else [])
    assert main(argv) == 2
    assert message in capsys.readouterr().err
