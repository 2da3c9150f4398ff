"""nn.GRU and nn.LSTM under the autograd convention: refused, each with the measured reason.

Measured with PyTorch 2.13 on CPU (memtheory.torch.measure), batch first, one
and two layers: a GRU's saved tensors are what ``GRU.autograd`` states, but
its step-by-step backward sets a training peak the convention does not follow;
an LSTM saves a uint8 oneDNN workspace of page-rounded buffers that the layer does not model
(memtheory.torch.trace sizes it; tests/pytorch/test_onednn_workspace.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
import memtheory.layers as ml  # noqa: E402
from memtheory.errors import UnsupportedError  # noqa: E402
from memtheory.layers.saved_storages import saved_storages  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _Recurrent(nn.Module):
    """Linear, then a batch-first GRU or LSTM of ``layers`` layers, then a linear head."""

    def __init__(self, kind: type[nn.Module], layers: int) -> None:
        super().__init__()
        self.fc0 = nn.Linear(6, 6)
        self.rnn = kind(6, 8, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.fc0(x)
        y, _ = self.rnn(x)
        return self.fc(y)


def _measure(kind: type[nn.Module], layers: int, batch: int, steps: int):
    torch.manual_seed(0)
    module = _Recurrent(kind, layers)
    x = torch.randn(batch, steps, 6, generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    return measure(module, x, lambda out: out.sum(), optimizer, warmup_steps=1)


def _network(layer: ml.Layer, batch: int, steps: int) -> mt.Network:
    return mt.Network(
        [mt.Input((steps, 6), batch=batch), ml.Dense(6, name="fc0"), layer, ml.Dense(3, name="fc")]
    )


@pytest.mark.parametrize(("batch", "steps"), [(3, 5), (2, 7)])
def test_gru_saved_tensors_are_exact_but_training_is_refused(batch, steps):
    """The GRU's saved bytes and its output (the head keeps it) are all the step saves.

    Its own copy of its input is among them. The training step is refused, naming why.
    """
    m = _measure(nn.GRU, 1, batch, steps)
    gru = saved_storages(ml.GRU(8), (batch, steps, 6), dtype="fp32")
    output = batch * steps * 8 * 4
    assert sum(int(t.nbytes(t.dtype)) for t in gru) + output == m.saved_activations
    with pytest.raises(UnsupportedError, match="GRU 'rnn' .* step by step"):
        mt.training_memory(_network(ml.GRU(8, name="rnn"), batch, steps), optimizer="sgd",
                           convention="autograd")


@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_keeps_a_onednn_workspace_and_is_refused(layers):
    """One uint8 workspace per LSTM layer stack, of a size no formula gives: a clear error."""
    m = _measure(nn.LSTM, layers, 3, 5)
    assert m.saved_activations > 0
    module = nn.LSTM(6, 8, num_layers=layers, batch_first=True)
    kept: list[torch.dtype] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(torch.randn(3, 5, 6))
    assert torch.uint8 in kept
    with pytest.raises(UnsupportedError, match="LSTM 'rnn' .* oneDNN"):
        mt.training_memory(_network(ml.LSTM(8, name="rnn"), 3, 5), optimizer="sgd",
                           convention="autograd")
