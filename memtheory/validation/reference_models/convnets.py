"""torchvision's ResNet (``BasicBlock`` / ``Bottleneck``, v1.5) and MobileNetV2 as plain modules.

Examples
--------
>>> [name for name, _ in ResNetReference("basic", (1, 1), width=4).named_children()][:4]
['conv1', 'bn1', 'relu', 'maxpool']
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from memtheory.models import MOBILENETV2_SETTING, make_divisible
from memtheory.validation.reference_models.parts import Chain

__all__ = ["MobileNetV2Reference", "ResNetReference"]


# -- ResNet ----------------------------------------------------------------------------------
class _Block(nn.Module):
    """torchvision's ``BasicBlock`` or ``Bottleneck``, with one ReLU module per use."""

    def __init__(self, kind: str, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        self.kind = kind
        out_channels = width * (1 if kind == "basic" else 4)
        if kind == "basic":
            self.conv1 = nn.Conv2d(in_channels, width, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.relu2 = nn.ReLU(inplace=True)
            self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = Chain(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        # The block's last ReLU: relu2 of a basic block, relu3 of a bottleneck.
        self.add_module("relu2" if kind == "basic" else "relu3", nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One operation per statement, as torchvision writes it: under no_grad a tensor is
        # freed when its last Python reference goes, so nested calls would change the peak.
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu1(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.kind != "basic":
            out = self.relu2(out)
            out = self.conv3(out)
            out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.get_submodule("relu2" if self.kind == "basic" else "relu3")(out)
        return out


class ResNetReference(nn.Module):
    """torchvision's ResNet with ``blocks[i]`` blocks of ``kind`` in stage ``i + 1``."""

    def __init__(
        self, kind: str, blocks: Sequence[int], *, width: int = 64, classes: int = 1000
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        channels = width
        expansion = 1 if kind == "basic" else 4
        self.stages: list[Chain] = []
        for stage, count in enumerate(blocks):
            inner = width * 2**stage
            stage_blocks = []
            for index in range(count):
                stride = 2 if index == 0 and stage > 0 else 1
                stage_blocks.append(_Block(kind, channels, inner, stride))
                channels = inner * expansion
            chain = Chain(*stage_blocks)
            self.add_module(f"layer{stage + 1}", chain)
            self.stages.append(chain)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in self.stages:
            x = stage(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- MobileNetV2 -----------------------------------------------------------------------------
def _conv_bn_relu6(
    in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1
) -> Chain:
    return Chain(
        nn.Conv2d(
            in_channels, out_channels, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False
        ),
        nn.BatchNorm2d(out_channels),
        nn.ReLU6(inplace=True),
    )


class _InvertedResidual(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(in_channels * expand))
        self.use_res_connect = stride == 1 and in_channels == out_channels
        parts: list[nn.Module] = []
        if expand != 1:
            parts.append(_conv_bn_relu6(in_channels, hidden, 1))
        parts += [
            _conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, out_channels, 1, 1, 0, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.conv = Chain(*parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2Reference(nn.Module):
    """torchvision's MobileNetV2."""

    def __init__(
        self,
        *,
        width_mult: float = 1.0,
        setting: Sequence[tuple[int, int, int, int]] = MOBILENETV2_SETTING,
        classes: int = 1000,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        channels = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [_conv_bn_relu6(3, channels, 3, 2)]
        for t, c, n, s in setting:
            out_channels = make_divisible(c * width_mult)
            for repeat in range(n):
                features.append(
                    _InvertedResidual(channels, out_channels, s if repeat == 0 else 1, t)
                )
                channels = out_channels
        features.append(_conv_bn_relu6(channels, last, 1))
        self.features = Chain(*features)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = Chain(nn.Dropout(dropout), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
