"""measured_saved_tensors() and phase_peaks(): what autograd saved per layer; each phase's rise.

measured_saved_tensors reads the autograd graph, measure() the saved-tensor hooks: two
routes to the same storages, which must agree to the byte. The per-layer
listing is checked against the autograd convention's forward storages, and
against sizes derived here from the shapes (PyTorch 2.13, CPU).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

from memtheory.conventions.autograd import forward_storages  # noqa: E402
from memtheory.errors import InvalidArgumentError  # noqa: E402
from memtheory.torch import (  # noqa: E402
    distinct_bytes,
    from_module,
    measure,
    measured_saved_tensors,
    phase_peaks,
)
from memtheory.validation import ZOO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
F32, BF16, I64 = 4, 2, 8


@pytest.mark.parametrize("model", ["MLP", "VGG-style", "forum FC net / 100"])
@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_saved_tensors_agree_with_measure(model, autocast):
    """Activations and autocast's weight copies, each storage once, equal measure()'s figures."""
    entry = ZOO[model]
    module = entry.module()
    x, y = entry.batch()
    loss = nn.CrossEntropyLoss()
    listing = measured_saved_tensors(module, x, loss, y, autocast=autocast)
    step = measure(module, x, loss, torch.optim.SGD(module.parameters(), lr=0.01), target=y,
                   autocast=autocast)
    activations = [t for t in listing if t.category == "activation"]
    copies = [t for t in listing if t.category == "weight copy"]
    assert distinct_bytes(activations) == step.saved_activations
    assert distinct_bytes(copies) == step.weight_copies
    assert (step.weight_copies > 0) == (autocast is not None)


def test_layers_keep_what_the_autograd_convention_lists():
    """VGG-style: pooling indices and the dropout mask per layer, as forward_storages lists them."""
    entry = ZOO["VGG-style"]
    module = entry.module()
    x, y = entry.batch()
    listing = measured_saved_tensors(module, x, nn.CrossEntropyLoss(), y)
    net = from_module(module, entry.input_shape, loss=nn.CrossEntropyLoss())
    storages = forward_storages(net)
    for role in ("indices", "mask"):
        predicted = sum(int(s.nbytes) for s in storages if s.role == role)
        if role == "indices":
            measured = distinct_bytes(t for t in listing if t.dtype == "int64"
                                      and t.category == "activation")
            # two 2x2 poolings of 16 x 32 x 32 and 32 x 16 x 16 at batch 32, one int64 each
            assert measured == 32 * (16 * 16 * 16 + 32 * 8 * 8) * I64
        else:
            dropout = next(path for path, m in module.named_modules() if isinstance(m, nn.Dropout))
            measured = distinct_bytes(t for t in listing if t.module == dropout)
            assert measured == 32 * 256 * F32  # the CPU mask is fp32 noise of the 256 features
        assert measured == predicted, role


def test_shared_storages_are_numbered_once():
    """A ReLU's output, saved by the ReLU and by the next Linear, is one storage under two nodes."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    listing = measured_saved_tensors(module, torch.randn(5, 6), nn.CrossEntropyLoss(),
                            torch.randint(0, 3, (5,)))
    relu = next(t for t in listing if t.module == "1")
    sharing = [t for t in listing if t.storage == relu.storage]
    assert {t.module for t in sharing} == {"1", "2"}
    assert relu.nbytes == 5 * 10 * F32
    # the first Linear keeps the caller's input; the second its input and its weight (a view of
    # the parameter, to pass a gradient back), which the parameter already holds
    assert {t.category for t in listing if t.module == "0"} == {"input"}
    assert {t.category for t in listing if t.module == "2"} == {"activation", "parameter"}
    assert any(t.category == "targets" and t.module == "loss" for t in listing)


def test_weight_copies_are_casts_of_parameters():
    """Under autocast a Linear saves a bf16 cast of its weight: 'weight copy', not a parameter."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(3, 8, requires_grad=True)  # the first Linear's input needs a gradient too
    listing = measured_saved_tensors(module, x, autocast=torch.bfloat16)
    copies = [t for t in listing if t.category == "weight copy"]
    assert {t.dtype for t in copies} == {"bfloat16"}
    assert distinct_bytes(copies) == (8 * 16 + 16 * 4) * BF16


def test_nothing_saved_is_refused():
    """Under no_grad there is no graph: a clear error, not an empty list."""
    module = nn.Sequential(nn.Linear(4, 4))
    with torch.no_grad(), pytest.raises(InvalidArgumentError, match="training mode"):
        measured_saved_tensors(module, torch.randn(2, 4))


def test_phase_peaks_of_a_measured_step():
    """Adam's for-loop step on one 1,000 x 1,000 weight: sqrt and quotient, 2 x 4 MB at once."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(1000, 1000, bias=False))
    x = torch.randn(2, 1000)
    step = measure(module, x, lambda out: out.sum(), torch.optim.Adam(module.parameters()),
                   record=True)
    peaks = phase_peaks(step)
    assert list(peaks)[:2] == ["step start", "zero_grad"]
    assert peaks["optimizer step"].rise == 2 * 1000 * 1000 * F32
    # the backward's seed gradient (a 4-byte fp32 one) dies when backward() returns, between
    # phases: the step starts with the weight, its gradient and two moments, the input and the
    # output (2 x 1,000 each), the loss and Adam's step counter (fp32 scalars)
    assert peaks["optimizer step"].start == 4 * 1000 * 1000 * F32 + 2 * 2 * 1000 * F32 + 2 * F32
    assert max(p.peak for p in peaks.values()) == step.peak
    with pytest.raises(InvalidArgumentError, match="record=True"):
        phase_peaks(measure(module, x, lambda out: out.sum(), torch.optim.SGD(
            module.parameters(), lr=0.1)))
