"""The small CNN the trace-condition tests share: a conv, BatchNorm, pooling and a head.

Its CPU convolution gives the trace a real condition (``B < 16``, a kernel choice).
"""

from __future__ import annotations

import torch
from torch import nn


def small_cnn() -> nn.Sequential:
    """Return the CNN in training mode, with weights from a fixed seed."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).train()


def small_cnn_data(batch: int, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return a batch of images and class labels, the same for the same sizes."""
    generator = torch.Generator().manual_seed(batch * 100 + side)
    return (torch.randn(batch, 3, side, side, generator=generator),
            torch.randint(0, 10, (batch,), generator=generator))
