"""``benchmarks/torchinfo_peer.py``: both sides read one model at the same sizes; it can skip.

The benchmark is loaded from its file, as ``make bench`` runs it. No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "torchinfo_benchmark", ROOT / "benchmarks" / "torchinfo_peer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_help_prints_the_docstring_and_runs_nothing(capsys):
    """``--help`` prints the module's docstring (models, sizes, target) and returns 0."""
    assert _benchmark().main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "torchinfo" in out and "at least 10x faster" in out


def test_without_torchinfo_it_says_what_is_skipped_and_exits_0(capsys, monkeypatch, tmp_path):
    """With torchinfo not importable: a ``skipped`` line naming it, a summary row, exit 0."""
    summary = tmp_path / "summary.jsonl"
    monkeypatch.setenv("MEMTHEORY_BENCH_SUMMARY", str(summary))
    monkeypatch.setitem(sys.modules, "torchinfo", None)  # import torchinfo raises ImportError
    assert _benchmark().main([]) == 0
    assert "skipped: needs torchinfo" in capsys.readouterr().out
    rows = [json.loads(line) for line in summary.read_text().splitlines()]
    assert [(r["benchmark"], r["verdict"][:8]) for r in rows] == [("torchinfo_peer", "skipped:")]


@pytest.mark.parametrize("name", ["ResNet-50", "GPT-2 small", "BERT-base"])
def test_memtheory_and_pytorch_models_are_the_same_model_at_the_same_sizes(name):
    """Each PyTorch model has memtheory's parameters; torchinfo's input is memtheory's shape.

    At the benchmark's sizes and at ``--quick``'s. Both counts are computed here: the
    PyTorch model's (built on the meta device, each tied tensor once) and memtheory's.
    """
    torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
    pytest.importorskip("transformers", reason="needs Hugging Face transformers")
    module = _benchmark()
    pair = next(p for p in module.pairs() if p.name == name)
    with torch.device("meta"):
        model = pair.module()
    for sizes in (module.SIZES[name], module.QUICK_SIZES[name]):
        network = pair.network(sizes)
        assert module.parameter_count(model) == int(network.parameter_count)
        example = pair.example(sizes)
        shape = (tuple(example["input_data"].shape) if "input_data" in example
                 else tuple(example["input_size"]))
        assert shape == tuple(int(n) for n in network.input_shape)


def test_torchinfo_counts_resnet_50_as_memtheorys_builder_does():
    """ResNet-50's parameters as torchinfo counts them (a real, tiny forward) are memtheory's."""
    pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
    pytest.importorskip("transformers", reason="needs Hugging Face transformers")
    torchinfo = pytest.importorskip("torchinfo", reason="torchinfo is the optional 'bench' extra")
    module = _benchmark()
    pair = next(p for p in module.pairs() if p.name == "ResNet-50")
    stats = torchinfo.summary(pair.module(), input_size=(1, 3, 32, 32), verbose=0)
    assert stats.total_params == int(pair.network({"B": 1, "H": 32}).parameter_count)


def test_the_symbolic_peak_evaluated_is_the_peak_built_at_the_sizes():
    """The timed memtheory call (symbolic sizes, then evaluated) gives the numeric build's peak."""
    pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
    pytest.importorskip("transformers", reason="needs Hugging Face transformers")
    module = _benchmark()
    pair = next(p for p in module.pairs() if p.name == "ResNet-50")
    sizes = module.QUICK_SIZES["ResNet-50"]
    assert module.memtheory_peak(pair, sizes) == module.memtheory_peak(pair, sizes, symbolic=False)


@pytest.mark.slow  # builds GPT-2 and BERT and runs torchinfo's forward on each: 10 s or more
def test_quick_path_runs_every_model_and_reports_each(capsys):
    """``--quick``: one row per model with both answers and a verdict line, exit 0."""
    pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
    pytest.importorskip("transformers", reason="needs Hugging Face transformers")
    pytest.importorskip("torchinfo", reason="torchinfo is the optional 'bench' extra")
    assert _benchmark().main(["--quick"]) == 0
    out = capsys.readouterr().out
    for name in ("ResNet-50 (B=1, H=64)", "GPT-2 small (B=1, S=64)", "BERT-base (B=1, S=64)"):
        assert f"{name} exact peak vs torchinfo.summary, CPU" in out
    assert out.count("forward/backward pass size") == 3
    assert out.count("exact training peak") == 3
