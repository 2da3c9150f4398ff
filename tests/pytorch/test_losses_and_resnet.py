"""Losses over sequences and ResNet-50, against measure(): 0 bytes off.

* A small language-model head: (batch, sequence, vocabulary) logits and
  cross-entropy with ``ignore_index`` (the logits, their log-probabilities and,
  under autocast, their fp32 copy are the largest tensors).
* ResNet-50 from :mod:`memtheory.models` at a small image size against a
  hand-written torchvision-style module (bottleneck blocks, in-place sum and
  ReLUs, 1x1-conv + BN projections).
* from_module converts MSE, L1 and BCE-with-logits losses.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.models import resnet50  # noqa: E402
from memtheory.network import Node  # noqa: E402
from memtheory.torch import from_module, measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NAMES = ("parameters", "gradients", "optimizer_state", "saved_activations", "targets")


def _check(net, module, x, y, loss, optimizer, name, precision):
    """Assert every category, the training peak and the inference peak equal the measurement."""
    autocast = torch.bfloat16 if precision == "autocast" else None
    measured = measure(module, x, loss, optimizer, target=y, warmup_steps=1, autocast=autocast)
    ours = autocast_precision() if precision == "autocast" else precision
    convention = AutogradConvention(measured.implementation)
    predicted = mt.training_memory(net, optimizer=name, precision=ours, convention=convention)
    inference = mt.inference_memory(net, precision=ours, convention=convention)
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: getattr(measured, n) for n in NAMES}
    assert got == want
    assert (int(predicted.peak), int(inference.peak)) == (measured.peak, measured.inference_peak)
    return predicted, measured


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_language_model_head_cross_entropy_over_a_sequence(precision, optimizer):
    """(B, S, V) logits, flattened to (B*S, V) for cross-entropy with ignored positions."""
    batch, sequence, features, hidden, vocabulary = 3, 5, 6, 7, 11
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = nn.Sequential(
        nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, vocabulary)
    ).to(dtype)
    x = torch.randn(batch, sequence, features).to(dtype)
    y = torch.randint(0, vocabulary, (batch, sequence))
    y[0, :2] = -100

    def loss(logits, targets):
        return nn.functional.cross_entropy(
            logits.view(-1, vocabulary), targets.view(-1), ignore_index=-100
        )

    net = mt.Network([
        mt.Input((sequence, features), batch=batch), mt.Dense(hidden), mt.layers.GELU(),
        mt.Dense(vocabulary), mt.CrossEntropyLoss(ignore_index=-100),
    ])
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(
        module.parameters(), lr=0.01
    )
    predicted, _ = _check(net, module, x, y, loss, opt, optimizer, precision)
    logits = batch * sequence * vocabulary
    fp32 = 4 if precision != "bf16" else 2
    # The log-probabilities are the largest saved tensor: B*S*V in the loss dtype.
    assert predicted["saved_activations"] >= logits * fp32


@pytest.mark.parametrize(
    "loss", [nn.MSELoss(), nn.L1Loss(), nn.BCEWithLogitsLoss()], ids=lambda m: type(m).__name__
)
def test_from_module_converts_regression_and_binary_losses(loss):
    """A converted loss predicts the measured step of a small MLP exactly."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 4))
    x, y = torch.randn(6, 5), torch.rand(6, 4)
    net = from_module(module, (6, 5), loss=loss)
    assert net.rows[-1].layer.kind == type(loss).__name__
    opt = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    _check(net, module, x, y, loss, opt, "sgd+momentum", "fp32")
    with pytest.raises(mt.UnsupportedError, match="reduction"):
        from_module(module, (6, 5), loss=type(loss)(reduction="sum"))


class Bottleneck(nn.Module):
    """torchvision's bottleneck block (ResNet v1.5: the stride on the 3x3 convolution)."""

    def __init__(self, inplanes: int, width: int, stride: int, project: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            nn.Sequential(
                nn.Conv2d(inplanes, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4)
            )
            if project
            else None
        )

    def forward(self, x):  # noqa: D102
        # torchvision's statement order: each intermediate dies when `out` is rebound
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet50(nn.Module):
    """torchvision's ResNet-50, written out, its 16 blocks run in one loop.

    (torchvision nests them in four ``layerN`` Sequentials, whose caller keeps
    each stage's input alive for the whole stage: in inference that adds the
    stage input to the peak; in training it is saved anyway.)
    """

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, inplanes = [], 64
        for stage, count in enumerate((3, 4, 6, 3)):
            width = 64 * 2**stage
            for index in range(count):
                stride = 2 if index == 0 and stage > 0 else 1
                blocks.append(Bottleneck(inplanes, width, stride, index == 0))
                inplanes = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):  # noqa: D102
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        for block in self.blocks:  # each block's input dies once the next one has it
            x = block(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("precision", "optimizer"), [("fp32", "adam"), ("autocast", "sgd+momentum"), ("bf16", "sgd")]
)
def test_resnet50_from_the_builders_is_exact(precision, optimizer):
    """memtheory.models.resnet50 + cross-entropy: every category and both peaks, 0 bytes off."""
    batch, side, classes = 2, 40, 10
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = ResNet50(classes).to(dtype)
    built = resnet50(image_size=side, batch=batch, classes=classes)
    net = mt.Network(
        [Node(row.layer, inputs=row.inputs) if row.inputs else row.layer for row in built.rows]
        + [mt.CrossEntropyLoss()],
        name="ResNet-50",
    )
    assert net.parameter_count == sum(p.numel() for p in module.parameters())
    x = torch.randn(batch, 3, side, side).to(dtype)
    y = torch.randint(0, classes, (batch,))
    opt = (
        torch.optim.Adam(module.parameters(), lr=1e-3)
        if optimizer == "adam"
        else torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9 if "momentum" in optimizer
                             else 0)
    )
    _check(net, module, x, y, nn.CrossEntropyLoss(), opt, optimizer, precision)
