"""A real FSDP2 step (``fully_shard``, bf16 ``MixedPrecisionPolicy``) on gloo CPU ranks, tracked.

``memtheory.torch.fsdp_step.fsdp_step`` spawns the ranks, shards
transformers' Llama (each decoder layer, then the root, as accelerate does),
runs a warm-up step and then one AdamW (foreach) step under ``track()`` on
every rank. The sharded model states are checked against
:mod:`memtheory.techniques.fsdp2` to the byte, at the tiny Llama, at a second
size with dims that do not divide by the world size (padding), and at world
sizes 2 and 4; each rank's peak against ``estimate(..., setup="fsdp2-bf16")``'s
(:func:`memtheory.techniques.fsdp2.fsdp2_timeline`), to the byte. Each run
takes some 45 s on two cores.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
pytest.importorskip("transformers", reason="needs Hugging Face transformers")
torch_distributed = pytest.importorskip("torch.distributed", reason="needs torch.distributed")
if not torch_distributed.is_available() or not torch_distributed.is_gloo_available():
    pytest.skip("this PyTorch has no gloo backend", allow_module_level=True)

import torch  # noqa: E402
import transformers  # noqa: E402

from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.estimate.plan import estimate  # noqa: E402
from memtheory.techniques import fsdp2_model_states  # noqa: E402
from memtheory.techniques.fsdp2 import gathered_bytes  # noqa: E402
from memtheory.torch.fsdp_step import FSDPRank, fsdp_step  # noqa: E402
from memtheory.torch.recipe_steps import TINY_LLAMA  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

ODD_LLAMA = {**TINY_LLAMA, "vocab_size": 97, "hidden_size": 40, "intermediate_size": 44}
"""A second size, not tuned for: a vocabulary of 97 rows does not divide by 2 or 4 ranks."""

RUNS = {"tiny-2": (TINY_LLAMA, 2), "odd-2": (ODD_LLAMA, 2), "tiny-4": (TINY_LLAMA, 4)}
BATCH, SEQUENCE = 2, 6
STATES = ("parameters", "optimizer_state", "optimizer_step_counters")


def _named(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape by name, built on meta."""
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(config["model_type"], **values)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def _shapes(config: dict[str, Any], prefix: str = "") -> list[tuple[int, ...]]:
    """Every parameter's shape (those whose name starts with ``prefix``)."""
    return [shape for name, shape in _named(config).items() if name.startswith(prefix)]


_DONE: dict[str, list[FSDPRank]] = {}


def _ranks(name: str) -> list[FSDPRank]:
    """Run ``RUNS[name]`` once per session; skip where the gloo group cannot start."""
    if name not in _DONE:
        config, world = RUNS[name]
        try:
            _DONE[name] = fsdp_step(config, world=world, batch=BATCH, sequence=SEQUENCE,
                                    timeout=300)
        except UnsupportedError as error:
            pytest.skip(str(error))
    return _DONE[name]


@pytest.fixture(scope="module", params=list(RUNS))
def run(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], int, list[FSDPRank]]:
    """One tracked FSDP2 step, every rank's."""
    config, world = RUNS[request.param]
    return request.param, dict(config), world, _ranks(request.param)


def test_every_rank_reports_its_step(run):
    """Each rank's tracked step came back; the peak was reached in the backward pass."""
    _, _, world, ranks = run
    assert [r.rank for r in ranks] == list(range(world))
    assert all(r.peak_operation.startswith("backward") for r in ranks)


def test_sharded_states_are_fsdp2_model_states(run):
    """Parameters (padded shards), AdamW state (own rows) and step counters, to the byte."""
    _, config, world, ranks = run
    shapes = _shapes(config)
    for r in ranks:
        expected = fsdp2_model_states(shapes, world, r.rank)
        assert {name: r.components[name] for name in STATES} == expected
        assert r.shard_bytes == expected["parameters"]


def test_padding_is_seen_where_dims_do_not_divide(run):
    """With 97 vocabulary rows, the last rank's AdamW state is smaller than rank 0's."""
    name, config, world, ranks = run
    shapes = _shapes(config)
    unpadded = 4 * sum(_numel(s) for s in shapes) // world
    if name.startswith("odd"):
        assert ranks[0].components["parameters"] > unpadded
        assert ranks[-1].components["optimizer_state"] < ranks[0].components["optimizer_state"]
    else:
        assert all(r.components["parameters"] == unpadded for r in ranks)


def test_gradients_at_the_peak_are_the_last_layers_fp32_shard(run):
    """At the peak (layer 0's backward) only the last decoder layer's gradient is reduced.

    FSDP2 reduce-scatters each layer's gradients after its backward
    (``_fsdp_param_group.py`` ``post_backward``), into fp32 shards
    (``reduce_dtype=float32``) padded as the parameters are; the root's
    (embeddings, final norm, head) are reduced after layer 0, at the end.
    """
    _, config, world, ranks = run
    last = f"model.layers.{config['num_hidden_layers'] - 1}."
    for r in ranks:
        layer = fsdp2_model_states(_shapes(config, last), world, r.rank)
        assert r.components["gradients"] == layer["parameters"]


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def _replica(r: FSDPRank) -> int:
    """The peak less what is sharded (model states, the gradient shards) and the step's data."""
    held = sum(r.components.get(name, 0) for name in (*STATES, "gradients", "buffers", "input"))
    return r.peak - held


def test_the_rest_of_the_peak_is_one_replicas_on_any_world_size():
    """Beyond the shards, each rank holds the same bytes at 2 and at 4 ranks (and on each rank).

    The gathered bf16 layers, the unsharded bf16 gradients and the
    activations are one replica's: what ZeRO-3's model assumes.
    """
    replicas = {_replica(r) for name in ("tiny-2", "tiny-4") for r in _ranks(name)}
    assert len(replicas) == 1


def test_estimate_against_the_tracked_step(run):
    """The recipe's model states are rank 0's to the byte, and no rank holds more.

    ``estimate(..., setup="fsdp2-bf16")`` holds FSDP2's padded parameter
    shards, AdamW's state on rank 0's own rows (the most of any rank) and
    one 4-byte step counter per tensor (:func:`memtheory.techniques.fsdp2_shards`).
    """
    _, config, world, ranks = run
    predicted = estimate(config, batch=BATCH, sequence=SEQUENCE, gpus=world, setup="fsdp2-bf16")
    device = {k: int(v) for k, v in predicted.memory.device.components.items()}
    assert {name: device[name] for name in STATES} == {
        name: ranks[0].components[name] for name in STATES}
    for r in ranks:
        assert all(r.components[name] <= device[name] for name in STATES)


def _fsdp2_buffers(config: dict[str, Any], world: int, rank: int) -> int:
    """FSDP2's own storages at the peak (layer 0's backward), each from the source.

    * the previous layer's reduce-scatter input, in ``reduce_dtype`` fp32:
      ``world`` padded shards of every parameter (``_fsdp_collectives.py``
      ``foreach_reduce``, kept to the next post-backward,
      ``_fsdp_param_group.py:717-718``), and its fp32 gradient shard;
    * layer 0's bf16 all-gather output and its parameters' own all-gather
      outputs (``foreach_all_gather_copy_out``), each ``world`` padded shards;
    * the root's (embeddings, final norm, head) gathered bf16 parameters, not
      resharded after forward (``_fsdp_state.py:207``), and the bf16
      gradients its backward made so far (head and final norm, unpadded).
    """
    named = _named(config)
    last = f"model.layers.{config['num_hidden_layers'] - 1}."
    layer = _shapes(config, "model.layers.0.")
    root = [shape for name, shape in named.items() if not name.startswith("model.layers.")]
    made = [named["lm_head.weight"], named["model.norm.weight"]]
    return (gathered_bytes(layer, world, 4)
            + fsdp2_model_states(_shapes(config, last), world, rank)["parameters"]
            + 2 * gathered_bytes(layer, world)
            + gathered_bytes(root, world)
            + 2 * sum(_numel(shape) for shape in made))


def _bf16_replica(r: FSDPRank, config: dict[str, Any], world: int) -> int:
    """The peak less the model states, data, and FSDP2's own storages."""
    held = sum(r.components.get(name, 0) for name in (*STATES, "buffers", "input"))
    return r.peak - held - _fsdp2_buffers(config, world, r.rank)


def test_the_peak_is_fsdp2s_storages_and_one_bf16_replicas_backward():
    """Each rank's peak, named piece by piece: what remains is one bf16 replica's, any world.

    Beyond the model states and FSDP2's storages (:func:`_fsdp2_buffers`),
    every rank at 2 and at 4 ranks holds the same bytes: layer 0's saved
    activations and the activation gradients of a bf16 model (the
    ``MixedPrecisionPolicy`` casts the parameters; no autocast). The recipe's
    estimate does not model these yet (see the next test).
    """
    config = dict(TINY_LLAMA)
    rest = {_bf16_replica(r, config, world) for name, world in (("tiny-2", 2), ("tiny-4", 4))
            for r in _ranks(name)}
    assert len(rest) == 1
    odd = {_bf16_replica(r, dict(ODD_LLAMA), 2) for r in _ranks("odd-2")}
    assert len(odd) == 1


def _phase_peaks(timeline: dict[str, Any]) -> dict[str, int]:
    """The prediction's most bytes in the forward, the backward and the optimizer step."""
    peaks: dict[str, int] = {}
    for moment, value in timeline.items():
        phase = moment.split()[0]
        if phase in ("forward", "backward", "optimizer"):
            peaks[phase] = max(peaks.get(phase, 0), int(value))
    return peaks


def test_the_recipe_is_exact_at_every_ranks_peak(run):
    """``estimate(..., setup="fsdp2-bf16")``'s peak is each rank's tracked peak, to the byte.

    The estimate is rank 0's (the most optimizer state); every other rank
    holds the same less its smaller AdamW state, at the same moment (layer
    0's backward, as the bf16 all-gather output is copied out).
    """
    _, config, world, ranks = run
    predicted = estimate(config, batch=BATCH, sequence=SEQUENCE, gpus=world, setup="fsdp2-bf16")
    state = int(predicted.memory.device.components["optimizer_state"])
    for r in ranks:
        assert int(predicted.peak) - (state - r.components["optimizer_state"]) == r.peak


def test_the_other_phases_are_pinned(run):
    """A pinned gap: exact in backward; below in the forward, above in the optimizer step.

    Measured on the tiny Llama at 2 ranks: the forward 1,584 B below the
    tracked one (what FSDP2 holds while the root's forward and the loss run
    is not followed: :func:`memtheory.techniques.fsdp2.fsdp2_timeline` counts
    the gathered weights and a bf16 replica's activations only); the
    optimizer step 4 B above (the bf16 replica's foreach step keeps a 0-dim
    ``torch.tensor(1.0)`` there that the sharded step does not). When these
    are made exact, this test says so by failing.
    """
    _, config, world, ranks = run
    predicted = estimate(config, batch=BATCH, sequence=SEQUENCE, gpus=world, setup="fsdp2-bf16")
    peaks = _phase_peaks(dict(predicted.memory.device.timeline))
    state = int(predicted.memory.device.components["optimizer_state"])
    for r in ranks:
        mine = {phase: value - (state - r.components["optimizer_state"])
                for phase, value in peaks.items()}
        assert mine["backward"] == r.phases["backward"]
        assert mine["forward"] < r.phases["forward"]
        assert mine["optimizer"] > r.phases["optimizer step"]
