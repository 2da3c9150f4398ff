"""measure(): exact CPU bytes by storage, checked on steps small enough to derive by hand.

Also: for random stacks, the autograd convention predicts the measured saved
activations and peak exactly (PyTorch 2.13, CPU).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from torch import nn  # noqa: E402
from torch_strategies import stacks  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.torch import StorageTracker, from_module, measure, optimizer_implementation  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
F32, BF16, I64 = 4, 2, 8


def data(shape, classes, dtype=torch.float32):
    """A seeded random batch and its targets."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=generator).to(dtype)
    return x, torch.randint(0, classes, (shape[0],), generator=generator)


def test_tracker_counts_a_storage_once_however_many_views():
    """Views share their base's storage: x, x.t() and x[0] are one 4,000-byte storage."""
    x = torch.ones(10, 100)
    with StorageTracker() as tracker:
        tracker.track(x)
        views = (x.t(), x[0], x.view(-1))
        tracker.start()
    assert tracker.peak == 10 * 100 * F32
    assert len(views) == 3


def test_measured_categories_of_a_small_mlp_derived_by_hand():
    """Linear(6, 5) -> ReLU -> Linear(5, 3), batch 4, cross-entropy, Adam (for-loop, CPU).

    Parameters 6*5+5 + 5*3+3 = 53 fp32 values; Adam keeps two moments and four step counters;
    autograd saves the ReLU output (also the second Linear's input) and the log-probabilities
    and total weight of the loss. The first Linear keeps only the input batch, which is data.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = data((4, 6), 3)
    m = measure(model, x, nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()), target=y)
    assert (m.parameters, m.gradients) == (53 * F32, 53 * F32)
    assert (m.optimizer_state, m.optimizer_step_counters) == (2 * 53 * F32, 4 * F32)
    assert m.saved_activations == 4 * 5 * F32 + 4 * 3 * F32 + F32
    assert (m.input, m.targets, m.implementation) == (4 * 6 * F32, 4 * I64, "for-loop")


def test_maxpool_keeps_int64_indices_and_dropout_a_cpu_mask():
    """MaxPool2d saves int64 indices (8 B each); CPU dropout saves fp32 noise, not a bool mask."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.MaxPool2d(2), nn.Dropout(0.5))
    x, _ = data((3, 1, 8, 8), 2)
    m = measure(model, x, lambda out: out.sum(), torch.optim.SGD(model.parameters(), lr=0.1))
    conv_out, pooled = 3 * 2 * 8 * 8, 3 * 2 * 4 * 4
    assert m.saved_activations == conv_out * F32 + pooled * I64 + pooled * F32


def test_bf16_model_keeps_bf16_activations_and_int64_indices():
    """model.to(bfloat16): activations and the dropout noise are 2 bytes, indices still 8."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.MaxPool2d(2)).to(torch.bfloat16)
    x, _ = data((3, 1, 8, 8), 2, torch.bfloat16)
    m = measure(model, x, lambda out: out.float().sum(), torch.optim.SGD(model.parameters(), 0.1))
    assert m.saved_activations == 3 * 2 * 8 * 8 * BF16 + 3 * 2 * 4 * 4 * I64
    assert m.parameters == (2 * 9 + 2) * BF16


def test_autocast_weight_copies_are_told_apart_from_activations():
    """Under autocast the bf16 copy of the second Linear's weight is saved: 5 x 3 x 2 bytes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = data((4, 6), 3)
    m = measure(
        model,
        x,
        nn.CrossEntropyLoss(),
        torch.optim.SGD(model.parameters(), lr=0.1),
        target=y,
        autocast=torch.bfloat16,
    )
    assert m.weight_copies == 5 * 3 * BF16
    assert m.parameters == 53 * F32
    assert m.autocast == "bfloat16"


def test_optimizer_implementation_is_what_torch_picks():
    """On CPU torch.optim defaults to the for-loop; foreach and fused are honoured when asked."""
    params = [nn.Parameter(torch.ones(3))]
    assert optimizer_implementation(torch.optim.SGD(params, lr=0.1)) == "for-loop"
    assert optimizer_implementation(torch.optim.Adam(params, foreach=True)) == "foreach"
    assert optimizer_implementation(torch.optim.Adam(params, fused=True)) == "fused"


def test_measure_refuses_eval_mode():
    """A module in eval mode is not being trained: measure() says so."""
    model = nn.Linear(2, 2).eval()
    with pytest.raises(ValueError, match="train"):
        measure(model, torch.ones(1, 2), lambda o: o.sum(), torch.optim.SGD(model.parameters(), 1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks(max_layers=5))
def test_autograd_convention_predicts_random_stacks_exactly(stack):
    """Saved activations, the training peak and the inference peak equal the measured bytes."""
    torch.manual_seed(0)
    module = stack.module
    x, y = data(stack.input_shape, stack.classes)
    loss = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(module.parameters())
    measured = measure(module, x, loss, optimizer, target=y, warmup_steps=1)
    net = from_module(module, stack.input_shape, loss=loss)
    convention = AutogradConvention(measured.implementation)
    predicted = mt.training_memory(net, optimizer="adam", convention=convention)
    assert predicted["saved_activations"] == measured.saved_activations
    assert predicted.peak == measured.peak
    assert mt.inference_memory(net, convention=convention).peak == measured.inference_peak
