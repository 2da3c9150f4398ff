"""nn.MultiheadAttention's CPU flash-path backward, node by node: the training peak, 0 bytes off.

Linear -> nn.MultiheadAttention (batch first, no dropout: the CPU flash
kernel) -> Linear, trained on ``output.sum()`` with SGD, against the same
network in memtheory: the step peaks inside attention's backward, where
``unbind``'s backward rebuilds the packed gradient of Q, K and V.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
import memtheory.layers as ml  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.before = nn.Linear(width, width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.after = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = self.before(x)
        return self.after(self.attn(h, h, h, need_weights=False)[0])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    ("batch", "sequence", "width", "heads"), [(2, 6, 12, 1), (3, 4, 12, 3), (2, 9, 16, 2)]
)
def test_flash_attention_backward_peak_is_exact(batch, sequence, width, heads, precision):
    """Saved activations and the peak (inside attention's backward) equal what PyTorch keeps."""
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = _Attention(width, heads).to(dtype)
    x = torch.randn(batch, sequence, width, generator=torch.Generator().manual_seed(1)).to(dtype)
    measured = measure(
        module, x, lambda out: out.sum(), torch.optim.SGD(module.parameters(), lr=0.1),
        warmup_steps=1,
    )
    net = mt.Network(
        [
            mt.Input((sequence, width), batch=batch),
            ml.Dense(width),
            ml.MultiHeadAttention(heads, implementation="torch", name="attn"),
            ml.Dense(3),
        ]
    )
    predicted = mt.training_memory(
        net, optimizer="sgd", precision=precision,
        convention=AutogradConvention(measured.implementation),
    )
    moment = max(predicted.timeline, key=lambda label: predicted.timeline[label])
    assert moment.startswith("backward attn")
    assert (int(predicted.components["saved_activations"]), int(predicted.peak)) == (
        measured.saved_activations,
        measured.peak,
    )
