"""``benchmarks/trace.py``: its DenseNet-121 is torchvision's, its quick path is exact and says so.

The benchmark is loaded from its file, as ``make bench`` runs it. No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
pytest.importorskip("transformers", reason="needs Hugging Face transformers")

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "trace_benchmark", ROOT / "benchmarks" / "trace.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_densenet_121_has_torchvisions_parameter_count():
    """The benchmark's DenseNet-121 has the 7,978,856 parameters of torchvision's model card.

    Source: torchvision's ``DenseNet121_Weights.IMAGENET1K_V1.meta["num_params"]``.
    """
    with torch.device("meta"):
        model = _benchmark()._DenseNet121()
    assert sum(p.numel() for p in model.parameters()) == 7_978_856


def test_densenet_121_keeps_its_shapes_down_to_the_classifier():
    """Four dense blocks end at 1,024 channels; the output is one row of 1,000 logits per image."""
    with torch.device("meta"):
        model = _benchmark()._DenseNet121()
        logits = model(torch.empty(2, 3, 64, 64))
    width = 64  # the stem's channels; each layer adds 32, each transition halves
    for layers in (6, 12, 24):
        width = (width + 32 * layers) // 2
    assert model.classifier.in_features == width + 32 * 16 == 1024
    assert tuple(logits.shape) == (2, 1000)


def test_help_prints_the_docstring_and_runs_nothing(capsys):
    """``--help`` prints the module's docstring (its targets) and returns 0."""
    module = _benchmark()
    assert module.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Targets" in out and "DenseNet-121" in out


@pytest.mark.slow  # a trace and two real steps of a small CNN: about 10 s on the shared machine
def test_quick_path_is_exact_and_says_so(capsys):
    """``--quick``: the residual CNN's row at its trace size and one other, 0 bytes off at both."""
    module = _benchmark()
    assert module.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "(5, 32): 0; (9, 45): 0" in out
    assert "0 bytes off on every model measure can run: yes" in out


@pytest.mark.slow  # two real steps of DenseNet-121 at 64 x 64, counted twice: about 10 s
def test_operation_count_is_a_steady_step_and_leaves_the_weights_alone():
    """The count the vision row divides by: the same on a second call, the weights unchanged.

    The first step creates Adam's state, the counted one is the second: counted twice, the
    model gives the same number, which is more than its parameters (each gets an update).
    """
    module = _benchmark()
    torch.manual_seed(0)
    model = module._DenseNet121().train()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    first = module._operations(model)
    assert module._operations(model) == first
    assert first > len(list(model.parameters()))
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
