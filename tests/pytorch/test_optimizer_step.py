"""Optimizer options and implementations: the autograd convention equals measure() to the byte.

For every torch.optim optimizer memtheory knows, with ``weight_decay``,
``maximize`` and (Adam, AdamW) ``amsgrad``, in each implementation PyTorch 2.13
has on CPU (for-loop, foreach, fused where it exists), at fp32 and bf16, a
small sequential network's parameters, gradients, optimizer state, the bytes
live at the optimizer step's own peak and the whole step's peak are predicted
exactly. The networks are sized so that the optimizer step is the step's peak
(large weights, a batch of 2), so a temporary the convention forgets shows.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.optimizers import OPTIMIZERS, optimizer  # noqa: E402
from memtheory.torch import from_module, measure, torch_optimizer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FUSED = {"sgd", "sgd+momentum", "nesterov", "adam", "adamw", "adagrad"}
TORCH_NAMES = sorted(n for n, o in OPTIMIZERS.items() if o.torch_name)
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _options(name):
    """weight_decay and maximize on and off; amsgrad too where torch.optim has it."""
    flags = ["weight_decay", "maximize"] + (["amsgrad"] if name in ("adam", "adamw") else [])
    for on in itertools.product([False, True], repeat=len(flags)):
        chosen = dict(zip(flags, on, strict=True))
        yield {**chosen, "weight_decay": 0.01 if chosen["weight_decay"] else 0.0}


def _cases():
    """Every option combination in fp32; in bf16 the defaults and everything on (kept short)."""
    for name in TORCH_NAMES:
        implementations = ["for-loop", "foreach", *(["fused"] if name in FUSED else [])]
        for implementation, options in itertools.product(implementations, _options(name)):
            label = ",".join(k for k, v in options.items() if v) or "defaults"
            every_or_none = len({bool(v) for v in options.values()}) == 1
            for precision in sorted(PRECISIONS) if every_or_none else ["fp32"]:
                yield pytest.param(
                    name,
                    implementation,
                    options,
                    precision,
                    id=f"{name}-{implementation}-{label}-{precision}",
                )


def _mlp(dtype):
    # The weights dwarf the activations (batch 2), so the optimizer step is the peak; the
    # largest weight is not the first, so "the previous tensor's temporaries" matter.
    return nn.Sequential(
        nn.Linear(9, 13), nn.ReLU(), nn.Linear(13, 31), nn.ReLU(), nn.Linear(31, 5)
    )


def _cnn(dtype):
    return nn.Sequential(
        nn.Conv2d(2, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 3 * 3, 17), nn.Linear(17, 3)
    )


def _measure_and_predict(name, implementation, options, precision, build, input_shape):
    torch.manual_seed(0)
    dtype = PRECISIONS[precision]
    module = build(dtype).to(dtype)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(*input_shape, generator=generator).to(dtype)
    y = torch.randint(0, 3, (input_shape[0],), generator=generator)
    loss = nn.CrossEntropyLoss()
    spec = optimizer(name, **options)
    step = torch_optimizer(spec, module.parameters(), implementation=implementation)
    measured = measure(module, x, loss, step, target=y, warmup_steps=1, record=True)
    assert measured.implementation == implementation
    net = from_module(module, input_shape, loss=loss)
    predicted = mt.training_memory(
        net,
        optimizer=spec,
        precision=precision,
        convention=AutogradConvention(measured.implementation),
    )
    return measured, predicted


def _step_peak(measured):
    return max(live for phase, _, live in measured.timeline if phase == "optimizer step")


@pytest.mark.slow  # 216 measured steps: `make test-slow` (and CI) run them
@pytest.mark.parametrize(("name", "implementation", "options", "precision"), list(_cases()))
def test_step_with_options_is_predicted_exactly(name, implementation, options, precision):
    """P, G, optimizer state and counters, the optimizer step's peak and the step's peak."""
    measured, predicted = _measure_and_predict(
        name, implementation, options, precision, _mlp, (2, 9)
    )
    c = predicted.components
    assert c["parameters"] == measured.parameters
    assert c["gradients"] == measured.gradients
    assert c["optimizer_state"] + c.get("optimizer_step_counters", 0) == (
        measured.optimizer_state + measured.optimizer_step_counters
    )
    assert predicted.timeline["optimizer step"] == _step_peak(measured)
    assert predicted.peak == measured.peak


@pytest.mark.parametrize(
    ("name", "implementation", "options"),
    [
        ("adam", "for-loop", {"weight_decay": 0.1}),
        ("adamw", "foreach", {"amsgrad": True, "maximize": True}),
        ("sgd+momentum", "for-loop", {"weight_decay": 5e-4}),
        ("nesterov", "for-loop", {"maximize": True}),
        ("rmsprop-centered", "foreach", {"weight_decay": 0.1}),
        ("adadelta", "for-loop", {"maximize": True}),
        ("nadam", "foreach", {}),
        ("adafactor", "for-loop", {"maximize": True}),
        ("adafactor", "foreach", {"weight_decay": 0.1}),
    ],
)
def test_step_on_a_small_cnn_is_predicted_exactly(name, implementation, options):
    """The same on a convolution: its 4-D weight is one tensor among the parameters."""
    measured, predicted = _measure_and_predict(
        name, implementation, options, "fp32", _cnn, (2, 2, 5, 5)
    )
    assert predicted.timeline["optimizer step"] == _step_peak(measured)
    assert predicted.peak == measured.peak


def test_weight_decay_temporary_was_the_known_bug():
    """for-loop Adam with weight_decay holds grad + wd * param: the largest parameter's bytes more.

    Derived: the step's peak moment holds the largest weight's decayed gradient, its sqrt and
    quotient, and the previous tensor's denom; without weight decay one of those is gone.
    """
    with_decay, predicted = _measure_and_predict(
        "adam", "for-loop", {"weight_decay": 0.1}, "fp32", _mlp, (2, 9)
    )
    without, plain = _measure_and_predict("adam", "for-loop", {}, "fp32", _mlp, (2, 9))
    largest = 13 * 31 * 4
    assert _step_peak(with_decay) - _step_peak(without) == largest
    assert predicted.timeline["optimizer step"] - plain.timeline["optimizer step"] == largest


def test_adafactor_state_is_factored():
    """Adafactor keeps row and column factors of each weight matrix, a full variance per bias.

    Derived: Linear(9, 13), Linear(13, 31), Linear(31, 5) weights keep 13 + 9, 31 + 13 and
    5 + 31 values; the biases 13, 31 and 5; fp32, plus six float32 step counters.
    """
    measured, predicted = _measure_and_predict("adafactor", "for-loop", {}, "fp32", _mlp, (2, 9))
    factored = (13 + 9) + (31 + 13) + (5 + 31) + 13 + 31 + 5
    assert measured.optimizer_state == predicted["optimizer_state"] == factored * 4
    assert measured.optimizer_step_counters == predicted["optimizer_step_counters"] == 6 * 4


@pytest.mark.parametrize(
    ("name", "implementation", "options"),
    [
        ("adam", "for-loop", {"weight_decay": 0.1, "maximize": True}),
        ("sgd+momentum", "foreach", {"weight_decay": 0.1}),
        ("adafactor", "for-loop", {}),
    ],
)
def test_step_under_autocast_is_predicted_exactly(name, implementation, options):
    """Under CPU autocast (bf16) the parameters stay fp32, and so do the step's temporaries."""
    torch.manual_seed(0)
    module = _mlp(torch.float32)
    x, y = torch.randn(2, 9), torch.randint(0, 3, (2,))
    loss = nn.CrossEntropyLoss()
    spec = optimizer(name, **options)
    step = torch_optimizer(spec, module.parameters(), implementation=implementation)
    measured = measure(
        module, x, loss, step, target=y, autocast=torch.bfloat16, warmup_steps=1, record=True
    )
    net = from_module(module, (2, 9), loss=loss)
    predicted = mt.training_memory(
        net,
        optimizer=spec,
        precision=autocast_precision("bf16"),
        convention=AutogradConvention(implementation),
    )
    assert predicted.timeline["optimizer step"] == _step_peak(measured)
    assert predicted.peak == measured.peak
