"""RMSNorm under the autograd convention in training: components and peak, 0 bytes off.

Llama's RMSNorm (written out as Hugging Face writes it) and ``torch.nn.RMSNorm``
with and without a scale, between two linear layers (and reading the network's
fp32 input, which needs no gradient), at fp32, bf16 and CPU autocast-bf16: the
training-step peak lands inside RMSNorm's backward, among its temporaries.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from layer_harness import LlamaRMSNorm  # noqa: E402
from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
import memtheory.layers as ml  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NAMES = ("parameters", "gradients", "optimizer_state", "saved_activations", "input")
KINDS = {
    "llama": (lambda d: LlamaRMSNorm(d), {}),
    "torch": (lambda d: nn.RMSNorm(d), {"implementation": "torch"}),
    "torch-no-affine": (
        lambda d: nn.RMSNorm(d, elementwise_affine=False),
        {"implementation": "torch", "elementwise_affine": False},
    ),
}


def _compare(kind, precision, batch, sequence, width, first=False):
    build, options = KINDS[kind]
    torch.manual_seed(0)
    head = [] if first else [nn.Linear(width, width)]
    module = nn.Sequential(*head, build(width), nn.Linear(width, 3))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = module.to(dtype)
    x = torch.randn(batch, sequence, width, generator=torch.Generator().manual_seed(1)).to(dtype)
    measured = measure(
        module, x, lambda out: out.sum(), torch.optim.SGD(module.parameters(), lr=0.1),
        warmup_steps=1, autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    net = mt.Network(
        [mt.Input((sequence, width), batch=batch)]
        + ([] if first else [ml.Dense(width)])
        + [ml.RMSNorm(**options), ml.Dense(3)]
    )
    predicted = mt.training_memory(
        net, optimizer="sgd",
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation),
    )
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    return got, want


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_rms_norm_training_step_is_exact(kind, precision):
    """Every component and the peak (inside RMSNorm's backward) equal what PyTorch keeps."""
    for size in ((3, 5, 16), (2, 7, 24)):
        got, want = _compare(kind, precision, *size)
        assert got == want, size


@pytest.mark.parametrize("precision", ["fp32", "autocast"])
def test_rms_norm_on_the_input_records_only_its_scale(precision):
    """Reading the network's input (no gradient wanted), only the scale's node keeps anything."""
    got, want = _compare("llama", precision, 3, 5, 16, first=True)
    assert got == want


def test_rms_norm_on_a_16_bit_network_input_is_refused():
    """Reading a bf16 input that needs no gradient, its forward's transients set the peak.

    That case is not modelled, so the convention refuses it and says why (fp32 and autocast
    on the input are exact: test_rms_norm_on_the_input_records_only_its_scale).
    """
    net = mt.Network([mt.Input((5, 16), batch=3), ml.RMSNorm(), ml.Dense(3)])
    with pytest.raises(UnsupportedError, match="RMSNorm .* needs no gradient"):
        mt.training_memory(net, optimizer="sgd", precision="bf16", convention="autograd")


def test_rms_norm_inference_is_refused():
    """Its forward's transients are not modelled: inference says so instead of guessing."""
    net = mt.Network([mt.Input((5, 16), batch=2), ml.RMSNorm(), ml.Dense(3)])
    with pytest.raises(UnsupportedError, match="inference peak of RMSNorm"):
        mt.inference_memory(net, convention=AutogradConvention("for-loop"))
