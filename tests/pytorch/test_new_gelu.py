"""Hugging Face's gelu_new (NewGELU) under the autograd convention: components and peak, 0 B off.

transformers' own ``NewGELUActivation`` between two linear layers, trained one
step on CPU under :func:`memtheory.torch.measure` at fp32, bf16 and CPU
autocast-bf16, against :class:`memtheory.layers.NewGELU` in the same network;
and the same network in eval mode under ``no_grad`` (``measure``'s inference peak).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
activations = pytest.importorskip("transformers.activations", reason="transformers not installed")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
import memtheory.layers as ml  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NAMES = ("parameters", "gradients", "optimizer_state", "saved_activations", "input")


def _compare(precision: str, batch: int, sequence: int, width: int, inner: int):
    torch.manual_seed(0)
    act = activations.ACT2FN["gelu_new"]
    assert type(act).__name__ == "NewGELUActivation"
    module = nn.Sequential(nn.Linear(width, inner), act, nn.Linear(inner, 3))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = module.to(dtype)
    x = torch.randn(batch, sequence, width, generator=torch.Generator().manual_seed(1)).to(dtype)
    measured = measure(
        module, x, lambda out: out.sum(), torch.optim.SGD(module.parameters(), lr=0.1),
        warmup_steps=1, autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    net = mt.Network([mt.Input((sequence, width), batch=batch), ml.Dense(inner), ml.NewGELU(),
                      ml.Dense(3)])
    predicted = mt.training_memory(
        net, optimizer="sgd",
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    inference = mt.inference_memory(
        net, precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    got["inference peak"] = int(inference.peak if inference.timeline else inference.total)
    want["inference peak"] = measured.inference_peak
    return got, want, predicted.peak_moment


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast"])
def test_new_gelu_training_step_is_exact(precision):
    """Every component, the peak (inside gelu_new's backward) and the eval peak are PyTorch's."""
    for size in ((3, 5, 8, 64), (2, 7, 12, 96)):
        got, want, moment = _compare(precision, *size)
        assert got == want, (size, moment)
