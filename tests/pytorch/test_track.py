"""track(): the live storages of any training code, exact on CPU, against measure().

measure() is the standard step run inside track(); a loop that runs the same
step under track() must give measure's figures to the byte. Other loops
(gradient accumulation, dropped logits, a Hugging Face ``Trainer`` step) are
checked on what can be derived independently: the bytes a kept tensor adds,
the gradients a second micro-batch starts with, and the phases whose code is
the same as measure's.
"""

from __future__ import annotations

import copy
import warnings
from contextlib import nullcontext

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

import torch.nn.functional as F  # noqa: E402, N812 (PyTorch's convention)
from torch import nn  # noqa: E402

from memtheory import Footprint  # noqa: E402
from memtheory.conventions.autograd import torch_version as versions  # noqa: E402
from memtheory.errors import EvaluationError, InvalidArgumentError, MissingArgumentError  # noqa: E402
from memtheory.torch import (  # noqa: E402
    TorchVersionWarning,
    TrackedMemory,
    measure,
    phase_peaks,
    trace,
    track,
)

F32 = 4


def mlp(seed: int = 0) -> nn.Sequential:
    """A small MLP, its weights drawn from ``seed`` (twins share a seed)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 5)
    )


def batch(size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded input batch and its class targets."""
    generator = torch.Generator().manual_seed(1)
    return torch.randn(size, 12, generator=generator), torch.randint(
        0, 5, (size,), generator=generator
    )


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters, from their shapes and dtypes."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def standard_step(model, x, y, optimizer, tracker=None) -> None:
    """Run measure()'s step: zero_grad, forward, loss, backward, step; the outputs die after."""

    def phase(name):
        return tracker.phase(name) if tracker is not None else nullcontext()

    with phase("zero_grad"):
        optimizer.zero_grad(set_to_none=True)
    with phase("forward"):
        output = model(x)
    with phase("loss"):
        value = F.cross_entropy(output, y)
    with phase("backward"):
        value.backward()
    with phase("optimizer step"):
        optimizer.step()
    del output, value


def test_the_standard_step_under_track_is_measure_to_the_byte():
    """A custom loop running measure's step gives its peak, moment, start and every op's bytes."""
    x, y = batch()
    measured_model, model = mlp(), mlp()
    measured = measure(
        measured_model,
        x,
        nn.functional.cross_entropy,
        torch.optim.Adam(measured_model.parameters()),
        target=y,
        record=True,
    )
    adam = torch.optim.Adam(model.parameters())
    for _ in range(2):  # measure's warm-up steps
        standard_step(model, x, y, adam)
    with track(model, adam, inputs=(x, y), record=True) as tracker:
        standard_step(model, x, y, adam, tracker)
    assert tracker.peak == measured.peak
    assert tracker.peak_moment == measured.peak_moment
    assert tracker.step_start == measured.step_start
    assert tracker.timeline[1:] == measured.timeline[1:]  # every operation after the start
    memory = tracker.footprint
    assert memory.total == memory.peak == measured.peak
    assert memory.peak_moment == measured.peak_moment.split(":")[0]
    assert {k: int(v) for k, v in memory.timeline.items() if k != "start"} == {
        name: p.peak for name, p in phase_peaks(measured).items() if name != "step start"
    }


def test_automatic_phases_see_the_same_peak():
    """Without phase() blocks the peak is the same; hooks name forward, backward, optimizer step."""
    x, y = batch()
    explicit_model, model = mlp(), mlp()
    sgd = torch.optim.SGD(explicit_model.parameters(), lr=0.1, momentum=0.9)
    with track(explicit_model, sgd, inputs=(x, y)) as explicit:
        standard_step(explicit_model, x, y, sgd, explicit)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with track(model, sgd, inputs=(x, y)) as tracker:
        standard_step(model, x, y, sgd)
    assert tracker.peak == explicit.peak
    assert list(tracker.footprint.timeline) == [
        "start",
        "forward",
        "other",  # the loss, computed outside any module
        "backward",
        "optimizer step",
    ]


def test_gradient_accumulation_over_two_micro_batches():
    """The second micro-batch's forward holds the first's gradients: its peak is higher by them."""
    x, y = batch(16)
    model = mlp()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with track(model, sgd, inputs=(x, y)) as tracker:
        for half in (slice(0, 8), slice(8, 16)):
            loss = F.cross_entropy(model(x[half]), y[half]) / 2
            loss.backward()
            del loss
        sgd.step()
        sgd.zero_grad()
    memory = tracker.footprint
    assert isinstance(memory, TrackedMemory) and isinstance(memory, Footprint)
    assert list(memory.timeline) == [
        "start",
        "other",  # slicing the micro-batch, the loss: outside any module, one phase
        "forward",
        "backward",
        "forward (2)",
        "backward (2)",
        "optimizer step",
    ]
    assert memory.timeline["forward (2)"] - memory.timeline["forward"] == parameter_bytes(model)
    assert memory.total == memory.peak == tracker.peak == max(memory.timeline.values())
    assert memory.peak_moment in ("forward (2)", "backward (2)")  # on top of the gradients
    assert memory["gradients"] == parameter_bytes(model)
    assert memory["parameters"] == parameter_bytes(model)
    assert memory["input"] == x.nbytes + y.nbytes


def test_a_loop_that_drops_the_logits_peaks_lower_by_them():
    """Keeping the logits alive to the end adds exactly their bytes to the peak, as activations."""
    x, y = batch()
    logit_bytes = x.shape[0] * 5 * F32  # the last Linear's output: batch x 5 classes, fp32
    results = {}
    for keep in (True, False):
        model = mlp()
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        with track(model, sgd, inputs=(x, y)) as tracker:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if not keep:
                del logits
            loss.backward()
            sgd.step()
        results[keep] = tracker.footprint
    kept, dropped = results[True], results[False]
    assert kept.peak - dropped.peak == logit_bytes
    assert kept["activations"] - dropped.components.get("activations", 0) == logit_bytes
    assert kept.modules["4"] - dropped.modules.get("4", 0) == logit_bytes  # the last Linear
    for memory in results.values():
        assert memory.total == memory.peak


def test_measure_takes_a_mapping_batch_and_reads_the_output_loss():
    """Run model(**batch) with labels: .loss is the loss, labels the targets, bytes as tracked."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    twin = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 16))
    data = {"input_ids": ids, "labels": ids.clone()}
    measured = measure(model, data, None, torch.optim.AdamW(model.parameters()), warmup_steps=0)
    assert (measured.input, measured.targets) == (ids.nbytes, ids.nbytes)
    adamw = torch.optim.AdamW(twin.parameters())
    with track(twin, adamw, inputs=data) as tracker:
        adamw.zero_grad(set_to_none=True)
        output = twin(**data)
        output.loss.backward()
        adamw.step()
        del output
    assert tracker.peak == measured.peak
    assert tracker.footprint["input"] == measured.input + measured.targets
    with pytest.raises(InvalidArgumentError, match="no .loss"):
        measure(nn.Linear(3, 2), {"input": torch.ones(1, 3)}, None, adamw, warmup_steps=0)


def test_a_hugging_face_trainer_step(tmp_path):
    """A real Trainer step (max_steps=1): found optimizer, exact parameters, measure's rises.

    The Trainer's backward and optimizer step are measure's on the same model, batch and
    optimizer (the Trainer's own, made again for the twin): their rises above where each
    phase starts agree to the byte. Its forward differs (the loss is summed and divided by the
    Trainer's token count), and it drops the output before backward, which measure keeps.
    """
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    twin = copy.deepcopy(model).train()
    ids = torch.randint(0, 64, (2, 16))
    rows = [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        max_grad_norm=0.0,  # no clipping: measure's step does not clip
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
    with track(model, record=True) as tracker:
        trainer.train()
    memory = tracker.footprint
    assert memory.total == memory.peak == tracker.peak
    # The first AdamW step makes two moments per parameter while the parameters and all
    # their gradients are alive: 4x the parameters, more than this tiny model's backward.
    assert memory.peak_moment == "optimizer step"
    assert memory["parameters"] == memory["gradients"] == parameter_bytes(model)
    assert 0 < memory["optimizer_state"] <= 2 * parameter_bytes(model)

    optimizer = transformers.Trainer(model=twin, args=args).create_optimizer()
    batch_of_rows = {"input_ids": ids.clone(), "labels": ids.clone()}
    measured = measure(twin, batch_of_rows, None, optimizer, warmup_steps=0, record=True)
    tracked, steps = phase_peaks(tracker.timeline), phase_peaks(measured)
    assert tracked["backward"].rise == steps["backward"].rise
    assert tracked["optimizer step"].rise == steps["optimizer step"].rise


def test_measurement_is_a_footprint():
    """Measure's result has the Footprint interface: total of the components, its measured peak."""
    x, y = batch()
    model = mlp()
    m = measure(model, x, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), target=y)
    assert isinstance(m, Footprint)
    assert m.total == sum(m.components.values()) == m["total"]
    assert m["peak"] == m.peak and not m.free_symbols
    assert m.evaluate() is m
    with pytest.raises(EvaluationError, match="no symbol named 'B'"):
        m.evaluate(B=4)
    footer = m.table("B", 0).footer
    assert footer[0][1] == str(m.total)
    assert footer[1] == (f"peak live ({m.peak_moment})", str(m.peak), "")


def test_other_torch_releases_warn_once(monkeypatch):
    """A PyTorch of another major.minor than the checked one warns once; trace and track both."""
    monkeypatch.setattr(versions, "_warned", set())
    monkeypatch.setattr(torch, "__version__", "2.12.1")
    model = nn.Linear(3, 2)
    with pytest.warns(TorchVersionWarning, match=versions.CHECKED_TORCH_VERSION):
        with track(model):
            model(torch.ones(1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchVersionWarning)
        with track(model):  # once per version
            model(torch.ones(1, 3))
    monkeypatch.setattr(versions, "_warned", set())
    with pytest.warns(TorchVersionWarning):
        trace(model, torch.ones(4, 3), {"B": 4}, loss=lambda out: out.sum(), optimizer="sgd")
    monkeypatch.setattr(versions, "_warned", set())
    monkeypatch.setattr(torch, "__version__", versions.CHECKED_TORCH_VERSION + "+cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchVersionWarning)
        with track(model):
            model(torch.ones(1, 3))


def test_bad_arguments_get_clear_errors():
    """A model or optimizer of the wrong type, a reused tracker, a nameless phase, no optimizer."""
    with pytest.raises(InvalidArgumentError, match="torch.nn.Module"):
        track("model")
    with pytest.raises(InvalidArgumentError, match="torch.optim.Optimizer"):
        track(nn.Linear(2, 2), "adam")
    tracker = track()
    with tracker:
        pass
    with pytest.raises(InvalidArgumentError, match="call track\\(\\) again"):
        with tracker:
            pass
    with pytest.raises(InvalidArgumentError, match="a phase needs a name"):
        with track() as tracker, tracker.phase(""):
            pass
    with pytest.raises(MissingArgumentError, match="needs the optimizer"):
        measure(nn.Linear(2, 2), torch.ones(1, 2), loss=lambda out: out.sum(), optimizer=None)


def test_a_view_of_a_tensor_made_before_the_block_allocates_nothing():
    """Indexing a dataset made before ``track`` counts the row's copy, not the dataset.

    A view or in-place result shares its input's storage; where that storage was made
    before the block and never registered, the block allocated nothing for it (it was
    counted whole before: the dataset's 400,000 bytes for one row).
    """
    data = torch.zeros(1000, 100)
    row_bytes = 100 * data.element_size()
    with track() as tracker:
        row = data[3]  # a view: no new storage
        data.add_(1)  # in place: none either
        doubled = row * 2  # one new row
    del doubled
    assert tracker.peak == row_bytes


def test_tensors_built_from_python_data_inside_the_block_are_counted():
    """``torch.tensor(...)`` builds its storage outside the dispatcher, then lifts it: counted."""
    with track() as tracker:
        values = torch.tensor([1.0, 2.0, 3.0])
        step = torch.tensor(0.0)
    assert tracker.peak == values.untyped_storage().nbytes() + step.untyped_storage().nbytes()
