"""Recording measurements as data: the fields, exactness on the CPU, files kept, tables.

No GPU here: the recordings are made on the CPU, where the prediction must
equal the measurement, and the allocator part is checked with a measurement
given an allocator report whose every figure the test chooses.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from memtheory.errors import InvalidArgumentError  # noqa: E402
from memtheory.torch.allocator_counters import AllocatorReport, PhaseCounters  # noqa: E402
from memtheory.validation import compare_with_measurement  # noqa: E402
from memtheory.validation.gpu_measurements import (  # noqa: E402
    FORMAT_VERSION,
    _step_record,
    allocator_peaks,
    live_peaks,
    load_measurements,
    measurements_table,
    record_measurements,
    write_measurements,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recording():
    """Two models at two precisions, recorded on the CPU."""
    return record_measurements(
        "cpu", models=["MLP", "ResNet-18-style"], precisions=["fp32", "bf16"]
    )


@pytest.mark.slow  # the module's recording fixture runs the zoo on the CPU (about 14 s)
def test_a_cpu_recording_is_exact_and_names_what_ran_it(recording):
    """Each step: prediction equal to the live peak; blocks at least the bytes; no allocator."""
    assert recording["format"] == FORMAT_VERSION
    assert recording["device"]["type"] == "cpu"
    assert recording["device"]["torch"] == torch.__version__
    assert [(s["model"], s["precision"]) for s in recording["steps"]] == [
        ("MLP", "fp32"),
        ("MLP", "bf16"),
        ("ResNet-18-style", "fp32"),
        ("ResNet-18-style", "bf16"),
    ]
    for step in recording["steps"]:
        for category in ("saved activations", "peak", "inference peak"):
            assert step["predicted"][category] == step["measured"][category]
        assert step["measured"]["block peak"] >= step["measured"]["peak"]
        assert step["allocator"] is None
    again = compare_with_measurement("MLP", precision="bf16", conventions=("autograd",))
    assert recording["steps"][1]["measured"]["peak"] == again.measurement.peak


@pytest.mark.slow  # the module's recording fixture runs the zoo on the CPU (about 14 s)
def test_files_round_trip_and_an_existing_file_is_kept(recording, tmp_path):
    """Writing then loading gives the same data; a second write is refused unless forced."""
    path = write_measurements(recording, tmp_path / "gpu")
    assert path.parent == tmp_path / "gpu" and path.suffix == ".json"
    assert load_measurements(tmp_path / "gpu") == [json.loads(json.dumps(recording))]
    before = path.read_bytes()
    with pytest.raises(InvalidArgumentError, match="exists and is kept"):
        write_measurements({**recording, "steps": []}, tmp_path / "gpu")
    assert path.read_bytes() == before
    write_measurements({**recording, "steps": []}, tmp_path / "gpu", force=True)
    assert load_measurements(tmp_path / "gpu")[0]["steps"] == []
    with pytest.raises(InvalidArgumentError, match="force must be True or False"):
        write_measurements(recording, tmp_path, force="yes")
    later = {**recording, "recorded": "2031-02-03T04:05:06+00:00"}
    beside = write_measurements(later, tmp_path / "gpu")
    assert beside.name.endswith("-2031-02-03-0405.json") and beside != path
    assert len(load_measurements(tmp_path / "gpu")) == 2


def test_loading_refuses_files_of_another_shape(tmp_path):
    """A missing folder holds no recordings; a stray JSON file is named in the error."""
    assert load_measurements(tmp_path / "absent") == []
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    with pytest.raises(InvalidArgumentError, match="notes.json is not a measurement file"):
        load_measurements(tmp_path)
    (tmp_path / "notes.json").write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="not readable JSON"):
        load_measurements(tmp_path)


def test_an_allocator_report_is_recorded_and_tabulated():
    """The allocator's figures go into the record and the table's last two columns."""
    comparison = compare_with_measurement("MLP", conventions=("autograd",))
    phases = (
        PhaseCounters("forward", 2**20, 3 * 2**20, 4 * 2**20, 6 * 2**20, 6 * 2**20),
        PhaseCounters("backward", 3 * 2**20, 2**20, 5 * 2**20, 8 * 2**20, 8 * 2**20),
        PhaseCounters("inference", 2**20, 2**20, 2 * 2**20, 8 * 2**20, 8 * 2**20),
    )
    report = AllocatorReport("cuda:0 (a test card)", phases, block_peak=123, device_in_use=None)
    measured = dataclasses.replace(comparison.measurement, allocator=report)
    record = _step_record(dataclasses.replace(comparison, measurement=measured))
    assert record["allocator"]["peak allocated"] == 5 * 2**20
    assert record["allocator"]["peak reserved"] == 8 * 2**20
    assert record["allocator"]["peak phase"] == "backward"
    assert record["allocator"]["inference peak allocated"] == 2 * 2**20
    assert [p["phase"] for p in record["allocator"]["phases"]] == [
        "forward",
        "backward",
        "inference",
    ]
    data = {
        "recorded": "now",
        "device": {
            "name": "a test card",
            "type": "cuda",
            "torch": "2.13",
            "cuda": "12.8",
            "driver": "570",
        },
        "steps": [record],
    }
    row = str(measurements_table(data)).splitlines()[3]
    assert row.split()[-2:] == ["5.00", "8.00"]


def test_unknown_precision_is_refused():
    """The error lists the precisions there are."""
    with pytest.raises(InvalidArgumentError, match="known: fp32"):
        record_measurements("cpu", models=["MLP"], precisions=["fp8"])


def test_the_command_without_a_gpu_records_nothing(tmp_path, capsys):
    """Asked to write GPU results on a machine without one: exit 2, no file."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    spec = importlib.util.spec_from_file_location("cuda_zoo", ROOT / "benchmarks" / "cuda_zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--write", str(tmp_path / "gpu")]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().out
    assert not (tmp_path / "gpu").exists()


@pytest.mark.slow  # the module's recording fixture runs the zoo on the CPU (about 14 s)
def test_writing_refuses_other_data_and_unwritable_places(recording, tmp_path):
    """Not a recording, or a folder that is a file: a memtheory error that says what to do."""
    with pytest.raises(InvalidArgumentError, match="writes what record_measurements"):
        write_measurements({"device": {"name": "x"}}, tmp_path)
    blocker = tmp_path / "a file"
    blocker.write_text("kept")
    with pytest.raises(InvalidArgumentError, match="cannot write"):
        write_measurements(recording, blocker / "gpu")
    assert blocker.read_text() == "kept"


# -- the H200 recordings (book/data/gpu/) -------------------------------------------------
GPU_DATA = ROOT / "book" / "data" / "gpu"
FIRST = GPU_DATA / "nvidia-h200-torch-2-11-0-cu130-2026-11-27-0209.json"
"""``benchmarks/cuda_zoo.py --write`` on one NVIDIA H200, PyTorch 2.11.0+cu130, 2026-11-27 02:09.

Its fp32 SDPA predictions were the CPU's fused kernel's; the math path was modelled after it."""
RERUN = GPU_DATA / "nvidia-h200-torch-2-11-0-cu130-2026-11-27-1508.json"
"""The same command on another H200 machine at 15:08 the same day, with the math path modelled."""
THIRD = GPU_DATA / "nvidia-h200-torch-2-11-0-cu130-2026-11-27-2056.json"
"""A third H200 machine at 20:56 the same day, from commit d22926f."""
H100 = GPU_DATA / "nvidia-h100-80gb-hbm3-torch-2-11-0-cu130-2026-11-27-2058.json"
"""The same command and commit on one NVIDIA H100 80GB HBM3, two minutes after THIRD."""
FOURTH = GPU_DATA / "nvidia-h200-torch-2-11-0-cu130-2026-11-28-0301.json"
"""A fourth H200 machine, 2026-11-28 03:01, from commit dfc47ab (after issue 26's speed work)."""
FIFTH = GPU_DATA / "nvidia-h200-torch-2-11-0-cu130-2026-11-28-1430.json"
"""A fifth H200 machine, 2026-11-28 14:30, from commit 520a621 (issue 26, the trace cache)."""
LATER = [THIRD, H100, FOURTH, FIFTH]
LATER_IDS = ["third H200", "H100", "fourth H200", "fifth H200"]


def _by_recipe(data):
    return data, {(r["recipe"], r["size"]): r for r in data["recipes"]}


@pytest.fixture(scope="module")
def h200():
    """The first recording, as chapter 20 loads it, and its recipe steps by (recipe, size)."""
    recordings = [d for d in load_measurements(GPU_DATA) if d["device"]["name"] == "NVIDIA H200"]
    assert [d["recorded"] for d in recordings] == sorted(d["recorded"] for d in recordings)
    assert recordings[0] == json.loads(FIRST.read_text(encoding="utf-8"))
    return _by_recipe(recordings[0])


@pytest.fixture(scope="module")
def rerun():
    """The second recording and its recipe steps by (recipe, size)."""
    return _by_recipe(_load(RERUN))


def _recorded_setups():
    """The setups record_recipe_steps ran, by label (its loops, not the file's labels)."""
    from memtheory.recipes import Setup
    from memtheory.torch.recipe_steps import CPU_RECIPES

    setups = {}
    for name in CPU_RECIPES:
        bases = [Setup.recipe(name)]
        if name == "pytorch-amp":
            bases += [Setup.recipe(name, optimizer_implementation=i) for i in ("for-loop", "fused")]
        for base in bases:
            for attention in ("eager", "sdpa"):
                setup = base.changed(attention=attention)
                setups[setup.label] = setup
    return setups


def test_the_h200_recording_loads_with_its_recipes(h200):
    """Format 1, a CUDA device on PyTorch 2.11, 30 zoo steps and 24 recipe steps, tabulated."""
    from memtheory.validation.gpu_measurements import recipes_table

    data, recipes = h200
    assert data["format"] == FORMAT_VERSION and data["device"]["type"] == "cuda"
    assert data["device"]["torch"].startswith("2.11")
    assert set(recipes) == {(label, size) for label in _recorded_setups()
                            for size in ("tiny", "mid")}
    steps = measurements_table(data)
    differ = [s for s in data["steps"] if s["measured"]["peak"] != s["predicted"]["peak"]]
    assert len(steps.rows) == len(data["steps"])
    assert any(f"in {len(steps.rows) - len(differ)} of {len(steps.rows)} steps" in n
               for n in steps.notes)
    assert any("is not 2.13.0" in n for n in steps.notes)
    table = recipes_table(data)
    assert [row[0] for row in table.rows] == [r["recipe"] for r in data["recipes"]]
    fp32_sdpa = recipes[("pytorch-fp32", "mid")]
    assert fp32_sdpa["measured_peak"] != fp32_sdpa["predicted_peak"]
    assert f"{fp32_sdpa['measured_peak'] - fp32_sdpa['predicted_peak']:+,}" in {
        row[7] for row in table.rows}


@pytest.mark.parametrize("size", ["tiny", "mid"])
def test_fp32_sdpa_on_cuda_is_the_math_path_the_h200_measured(h200, size):
    """pytorch-fp32 with SDPA predicts, for CUDA, the recorded live peak to the byte (math path).

    The recorded SDPA step kept what the eager step kept; the prediction at recording time
    was the fused kernel's (no S x S), which CUDA does not run for fp32 with grouped heads.
    """
    from memtheory.torch.recipe_steps import RECORDED_SIZES, predict_recipe

    _, recipes = h200
    config, batch, sequence = RECORDED_SIZES[size]
    for label in ("pytorch-fp32", "pytorch-fp32 (attention=eager)"):
        record = recipes[(label, size)]
        predicted, _ = predict_recipe(
            _recorded_setups()[label], config, batch=batch, sequence=sequence,
            precision=record["precision"], implementation=record["implementation"],
            device="cuda")
        assert predicted == record["measured_peak"]
    assert recipes[("pytorch-fp32", size)]["measured_peak"] == \
        recipes[("pytorch-fp32 (attention=eager)", size)]["measured_peak"]
    on_cpu, _ = predict_recipe("pytorch-fp32", config, batch=batch, sequence=sequence,
                               precision="fp32", implementation="foreach", device="cpu")
    assert on_cpu == recipes[("pytorch-fp32", size)]["predicted_peak"]  # the CPU's flash kernel


@pytest.mark.parametrize("label", ["pytorch-amp", "hf-trainer", "lightning-bf16"])
def test_16_bit_sdpa_predictions_stay_as_recorded(h200, label):
    """16-bit SDPA (a fused kernel) predicts what was recorded: 16 bytes per layer below live.

    The 16 bytes a decoder layer are consistent with the two int64 scalars (Philox seed and
    offset) CUDA's fused SDPA kernels return for their backward; not modelled.
    """
    from memtheory.torch.recipe_steps import RECORDED_SIZES, predict_recipe

    _, recipes = h200
    config, batch, sequence = RECORDED_SIZES["tiny"]
    record = recipes[(label, "tiny")]
    predicted, _ = predict_recipe(
        _recorded_setups()[label], config, batch=batch, sequence=sequence,
        precision=record["precision"], implementation=record["implementation"], device="cuda")
    assert predicted == record["predicted_peak"]
    for size, (config, _, _) in RECORDED_SIZES.items():
        record = recipes[(label, size)]
        layers = config["num_hidden_layers"]
        assert record["measured_peak"] - record["predicted_peak"] == 2 * 8 * layers


@pytest.mark.parametrize("size", ["tiny", "mid"])
def test_memtheory_estimate_answers_the_fp32_sdpa_peak_the_h200_measured(h200, size):
    """The front door, estimate(), builds the math path too: its peak is the recorded live peak.

    Under the same recipe on the CPU (whose SDPA runs its flash kernel for fp32 as well) it
    answers the fused kernel's peak, the prediction recorded beside the measurement.
    """
    from memtheory.estimate import estimate
    from memtheory.recipes import Setup
    from memtheory.torch.recipe_steps import RECORDED_SIZES

    _, recipes = h200
    config, batch, sequence = RECORDED_SIZES[size]
    record = recipes[("pytorch-fp32", size)]
    setup = Setup.recipe("pytorch-fp32", optimizer_implementation=record["implementation"])
    answer = estimate(dict(config), setup=setup, batch=batch, sequence=sequence)
    assert answer.to_dict()["peak_bytes"] == record["measured_peak"]
    assert "math path" in answer.to_dict()["convention_why"]
    on_cpu = estimate(dict(config), setup=setup.changed(device="cpu"), batch=batch,
                      sequence=sequence)
    assert on_cpu.to_dict()["peak_bytes"] == record["predicted_peak"]


def test_the_rerun_kept_the_same_live_storages_in_every_step(h200, rerun):
    """Another H200 machine, hours later: every live peak the same to the byte, zoo and recipes.

    The allocator's peaks are not compared: they count what the process held before each step.
    """
    first, first_recipes = h200
    second, second_recipes = rerun
    assert second["device"]["name"] == first["device"]["name"]
    assert second["device"]["torch"] == first["device"]["torch"]
    assert second["recorded"] > first["recorded"]
    assert [(s["model"], s["precision"], s["measured"]) for s in second["steps"]] == [
        (s["model"], s["precision"], s["measured"]) for s in first["steps"]]
    assert {key: r["measured_peak"] for key, r in second_recipes.items()} == {
        key: r["measured_peak"] for key, r in first_recipes.items()}


@pytest.mark.parametrize("size", ["tiny", "mid"])
def test_the_rerun_predicted_the_fp32_sdpa_peak_before_measuring_it(h200, rerun, size):
    """The math-path plan, written from the first recording, predicted the rerun to the byte.

    The first recording's prediction (the CPU's fused kernel) fell short of the same live peak.
    """
    _, first = h200
    _, second = rerun
    for label in ("pytorch-fp32", "pytorch-fp32 (attention=eager)"):
        assert second[(label, size)]["predicted_peak"] == second[(label, size)]["measured_peak"]
    assert first[("pytorch-fp32", size)]["predicted_peak"] < \
        second[("pytorch-fp32", size)]["predicted_peak"]


def _load(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", LATER, ids=LATER_IDS)
def test_a_later_recording_kept_the_first_ones_live_storages(h200, path):
    """Three more H200s and an H100, from later commits: every live peak the same."""
    first, _ = h200
    later = _load(path)
    assert later["device"]["torch"] == first["device"]["torch"]
    assert later["recorded"] > first["recorded"]
    assert live_peaks(later) == live_peaks(first)
    assert len(live_peaks(later)) == len(later["steps"]) + len(later["recipes"]) == 54


def test_the_h100_and_the_h200_beside_it_differ_only_in_the_devices_memory_in_use():
    """Same code, same driver, two GPU models: the allocator's peaks are equal phase by phase.

    Only the driver's figure for the whole device (``device in use``: the CUDA context and
    everything else on the card) differs, in one step, by one 2 MiB page; the H100's total
    memory is smaller.
    """
    h200, h100 = _load(THIRD), _load(H100)
    assert h200["device"]["name"] == "NVIDIA H200"
    assert h100["device"]["name"] == "NVIDIA H100 80GB HBM3"
    assert h100["device"]["memory"] < h200["device"]["memory"]
    assert {k: v for k, v in h100["device"].items() if k not in ("name", "memory")} == {
        k: v for k, v in h200["device"].items() if k not in ("name", "memory")}

    pairs = list(zip(h200["steps"] + h200["recipes"], h100["steps"] + h100["recipes"],
                     strict=True))
    assert all(allocator_peaks(a) == allocator_peaks(b) for a, b in pairs)
    assert any(a["allocator"] != b["allocator"] for a, b in pairs)  # the device's own figures
    in_use = [b["allocator"]["device in use"] - a["allocator"]["device in use"]
              for a, b in zip(h200["steps"], h100["steps"], strict=True)]
    assert sorted(set(in_use)) == [0, 2 * 2**20] and in_use.count(2 * 2**20) == 1


@pytest.mark.parametrize("path", LATER, ids=LATER_IDS)
def test_a_later_recordings_eager_recipes_are_what_memtheory_predicts_now(path):
    """Eager attention, every recipe on the tiny decoder: today's prediction is the live peak."""
    from memtheory.torch.recipe_steps import RECORDED_SIZES, predict_recipe

    config, batch, sequence = RECORDED_SIZES["tiny"]
    setups = _recorded_setups()
    eager = [r for r in _load(path)["recipes"]
             if r["size"] == "tiny" and "attention=eager" in r["recipe"]]
    assert len(eager) == 6
    for record in eager:
        predicted, _ = predict_recipe(
            setups[record["recipe"]], config, batch=batch, sequence=sequence,
            precision=record["precision"], implementation=record["implementation"],
            device="cuda")
        assert predicted == record["predicted_peak"] == record["measured_peak"]



@pytest.mark.parametrize("path", LATER, ids=LATER_IDS)
def test_a_later_recording_measured_the_fp32_sdpa_math_path_it_predicted(path):
    """fp32 SDPA on the grouped-query decoders: predicted before measuring, equal to eager's."""
    _, recipes = _by_recipe(_load(path))
    for size in ("tiny", "mid"):
        sdpa = recipes[("pytorch-fp32", size)]
        eager = recipes[("pytorch-fp32 (attention=eager)", size)]
        assert sdpa["predicted_peak"] == sdpa["measured_peak"] == eager["measured_peak"]


@pytest.mark.parametrize(("before", "after"), [(THIRD, FOURTH), (FOURTH, FIFTH)],
                         ids=["d22926f to dfc47ab", "dfc47ab to 520a621"])
def test_the_speed_work_between_two_recordings_changed_no_prediction(before, after):
    """Issue 26's speed work changed no prediction between the commits: zoo and recipes alike.

    Every predicted peak and its moment, recorded on the GPU from each commit, is the same.
    """
    earlier, later = _load(before), _load(after)
    assert [(s["model"], s["precision"], s["predicted"], s["peak moment"])
            for s in later["steps"]] == [
        (s["model"], s["precision"], s["predicted"], s["peak moment"]) for s in earlier["steps"]]
    assert [(r["recipe"], r["size"], r["predicted_peak"], r["predicted_moment"])
            for r in later["recipes"]] == [
        (r["recipe"], r["size"], r["predicted_peak"], r["predicted_moment"])
        for r in earlier["recipes"]]
