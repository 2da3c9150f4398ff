"""Activation offload against a measured step: saved-tensor hooks that move activations off torch.

On CPU the host and the device are one memory, so the "host" here is NumPy
memory, which ``measure()`` does not count: the pack hook copies each saved
activation into a NumPy array (each storage once, as torchtune's
``OffloadActivations`` does) and the unpack hook copies it back into a new
torch tensor, as the real hooks copy it back to the GPU. Tensors that share a
parameter's storage stay (torchtune skips parameters). The measured torch
peak is then the device's, and the NumPy bytes the host's.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

import weakref  # noqa: E402

import numpy as np  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd.graph import saved_tensors_hooks  # noqa: E402

from memtheory import training_memory  # noqa: E402
from memtheory.techniques.activation_offload import offload_activations  # noqa: E402
from memtheory.torch import from_module, measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _Host:
    """Saved-tensor hooks keeping activations in NumPy memory between the passes."""

    def __init__(self, model: nn.Module) -> None:
        self.parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.arrays: dict[int, np.ndarray] = {}
        self.seen: dict[int, tuple[weakref.ref, int]] = {}  # storage address: a live view, key
        self.most = 0

    def pack(self, tensor):
        address = tensor.untyped_storage().data_ptr()
        if address in self.parameters:
            return tensor  # a weight (or its view) stays where it is
        seen, key = self.seen.get(address, (None, -1))
        if seen is None or seen() is None:  # a storage not packed yet (or its address reused)
            key = len(self.arrays)
            self.arrays[key] = tensor.detach().numpy().copy()
            self.seen[address] = (weakref.ref(tensor), key)
            self.most = max(self.most, sum(a.nbytes for a in self.arrays.values()))
        return key, tensor.shape, tensor.dtype

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        key, shape, dtype = packed
        device = torch.empty(shape, dtype=dtype)  # the copy back: one new storage
        device.numpy()[...] = self.arrays[key].reshape(shape)  # filled outside torch's ops
        return device

    def hooks(self):
        return saved_tensors_hooks(self.pack, self.unpack)


class _Offloaded(nn.Module):
    """The model's forward under the hooks."""

    def __init__(self, inner: nn.Module, host: _Host) -> None:
        super().__init__()
        self.inner, self.host = inner, host

    def forward(self, x):
        self.host.arrays.clear()  # the previous step's backward has run: its copies are done
        self.host.seen.clear()
        with self.host.hooks():
            return self.inner(x)


class _OffloadedLoss:
    """The loss under the same hooks, so its saved tensors go to the host too."""

    def __init__(self, loss: nn.Module, host: _Host) -> None:
        self.loss, self.host = loss, host

    def __call__(self, output, target):
        with self.host.hooks():
            return self.loss(output, target)


def _steps(batch: int, widths: tuple[int, ...]):
    """An MLP's step measured plain and offloaded, and the model's, with the hooks' host."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    features = 48
    for width in widths:
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    model = nn.Sequential(*layers, nn.Linear(features, 10))
    x = torch.randn(batch, 48)
    y = torch.randint(0, 10, (batch,))
    net = from_module(model, (batch, 48), loss=nn.CrossEntropyLoss())
    step = training_memory(net, optimizer="sgd", convention="autograd")
    moved = offload_activations(step, net)
    plain = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="sgd")
    host = _Host(model)
    offloaded = measure(_Offloaded(model, host), x, loss=_OffloadedLoss(nn.CrossEntropyLoss(),
                        host), target=y, optimizer="sgd")
    return x, step, moved, plain, offloaded, host


@pytest.mark.parametrize(("batch", "widths"), [(8, (256, 128)), (16, (64, 512, 64)), (4, (32,))])
def test_the_measured_offloaded_peak_is_within_the_model(batch, widths):
    """Device: at most the model's peak; host: the saved activations, input and targets."""
    x, step, moved, plain, offloaded, host = _steps(batch, widths)
    assert plain.peak == step.peak  # the autograd convention, exact for this step
    assert offloaded.peak <= moved.memory.peak
    # offloading frees every saved activation but one layer's, and adds the input's copy back
    copy = x.numel() * x.element_size()
    assert offloaded.peak <= plain.peak + copy
    # the host held the saved activations, each storage once, the input and the targets too
    assert host.most == moved.host


@pytest.mark.parametrize(("batch", "widths"), [(512, (128,) * 4), (256, (64,) * 6)])
def test_where_activations_dominate_the_model_is_exact_and_the_peak_falls(batch, widths):
    """Deep, wide batches: the offloaded peak is 0 bytes off the model, well below the plain one."""
    _, step, moved, plain, offloaded, host = _steps(batch, widths)
    assert plain.peak == step.peak
    assert offloaded.peak == moved.memory.peak < plain.peak
    assert host.most == moved.host
