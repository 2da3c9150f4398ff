"""memtheory's optimizers keep exactly the state PyTorch 2.13's optimizers keep."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from memtheory.optimizers import OPTIMIZERS, optimizer  # noqa: E402
from memtheory.torch import torch_optimizer  # noqa: E402

# How each of memtheory's optimizers is spelt in torch.optim (Lion is not in torch.optim).
TORCH = {
    "sgd": ("SGD", {"lr": 0.1}),
    "sgd+momentum": ("SGD", {"lr": 0.1, "momentum": 0.9}),
    "nesterov": ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    "adagrad": ("Adagrad", {}),
    "rmsprop": ("RMSprop", {}),
    "rmsprop+momentum": ("RMSprop", {"momentum": 0.9}),
    "rmsprop-centered": ("RMSprop", {"centered": True}),
    "adadelta": ("Adadelta", {}),
    "adam": ("Adam", {}),
    "adamw": ("AdamW", {}),
    "adamax": ("Adamax", {}),
    "nadam": ("NAdam", {}),
    "adafactor": ("Adafactor", {}),
}


def test_every_torch_optimizer_is_mapped():
    """Every memtheory optimizer but Lion has its torch.optim spelling here."""
    assert set(OPTIMIZERS) - set(TORCH) == {"lion"}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_state_names_match_torch(name):
    """Parameter-shaped buffers and per-tensor scalars are the ones torch.optim creates."""
    cls, options = TORCH[name]
    weight = torch.nn.Parameter(torch.zeros(5))
    step = getattr(torch.optim, cls)([weight], **options)
    weight.grad = torch.ones(5)
    step.step()
    state = step.state[weight]
    shaped = {key for key, value in state.items() if value.shape == weight.shape}
    scalars = {key for key, value in state.items() if value.dim() == 0}
    assert shaped == set(OPTIMIZERS[name].state_names)
    assert scalars == set(OPTIMIZERS[name].scalar_states)


def _state_after_a_step(spec, shape):
    weight = torch.nn.Parameter(torch.zeros(shape))
    step = torch_optimizer(spec, [weight])
    weight.grad = torch.ones(shape)
    step.step()
    return step.state[weight]


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_amsgrad_adds_the_state_torch_adds(name):
    """amsgrad=True: torch.optim keeps max_exp_avg_sq beside the two moments, as memtheory says."""
    spec = optimizer(name, amsgrad=True, weight_decay=0.1)
    state = _state_after_a_step(spec, (3, 4))
    shaped = {key for key, value in state.items() if value.shape == (3, 4)}
    assert shaped == set(spec.state_names) == {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}


@pytest.mark.parametrize("shape", [(7,), (5, 3), (6, 4, 3), (2, 3, 4, 5)])
def test_adafactor_state_is_factored_as_torch_factors_it(shape):
    """Adafactor: row and column factors for 2-D+ parameters, a full variance for 1-D ones."""
    spec = optimizer("adafactor")
    state = _state_after_a_step(spec, shape)
    tensors = {key: value for key, value in state.items() if key != "step"}
    expected = spec.factored_state_names if len(shape) >= 2 else spec.state_names
    assert set(tensors) == set(expected)
    assert sum(value.numel() for value in tensors.values()) == spec.state_elements(shape)


@pytest.mark.parametrize("name", sorted(set(TORCH) - {"adafactor"}))
@pytest.mark.parametrize("options", [{"weight_decay": 0.1}, {"maximize": True}])
def test_options_do_not_change_the_state(name, options):
    """weight_decay and maximize change the step, not what torch.optim keeps."""
    spec = optimizer(name, **options)
    state = _state_after_a_step(spec, (3, 4))
    assert {k for k, v in state.items() if v.shape == (3, 4)} == set(spec.state_names)
    assert {k for k, v in state.items() if v.dim() == 0} == set(spec.scalar_states)
