"""memtheory's optimizers keep exactly the state PyTorch 2.13's optimizers keep."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from memtheory.optimizers import OPTIMIZERS  # noqa: E402

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
