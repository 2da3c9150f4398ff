"""The models memtheory's predictions are measured against: two worked examples, two classics.

========================  ===========================================================
name                      model
========================  ===========================================================
``StackExchange CNN``     the StackExchange question's 50x50x3 CNN at batch 64 (its softmax
                          is the loss's)
``MLP``                   784 -> 256 -> ReLU -> dropout 0.2 -> 128 -> ReLU -> 10, batch 128
``VGG-style``             two VGG blocks (in-place ReLUs) on 32x32x3, 256-unit head with dropout
``forum FC net / 100``    the forum thread's 240k -> 1024 -> 512 -> 240k net with 240k scaled
                          to 2,400
========================  ===========================================================

These are sequential (``nn.Sequential``, converted with
:func:`~memtheory.torch.from_module`); the residual and transformer models,
ResNet-18/50-, MobileNetV2-, ViT-, BERT-MLM- and GPT-2-style, are the reference
pairs of :data:`memtheory.validation.reference_models.PAIRS`, each written with its own
``forward()`` beside its builder's network.
:func:`~memtheory.validation.compare_with_measurement` takes a name from either.

Each is trained with cross-entropy. Each also has its memtheory
:class:`~memtheory.network.Network` built independently (from
:mod:`memtheory.worked_examples` where the model is one), which
:func:`~memtheory.torch.from_module` must reproduce.

Examples
--------
>>> sorted(ZOO)
['MLP', 'StackExchange CNN', 'VGG-style', 'forum FC net / 100']
>>> ZOO["StackExchange CNN"].network().parameter_count
4632902
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from memtheory.layers import (
    Conv2d,
    CrossEntropyLoss,
    Dense,
    Dropout,
    Flatten,
    Input,
    Layer,
    MaxPool2d,
    ReLU,
)
from memtheory.network import Network
from memtheory.worked_examples import fc_adam_network, small_cnn_network
from memtheory.worked_examples.fc_adam_forum import BATCH as FC_BATCH
from memtheory.worked_examples.fc_adam_forum import WIDTH as FC_WIDTH
from memtheory.worked_examples.small_cnn import BATCH as SMALL_CNN_BATCH

__all__ = ["ZOO", "ZooModel"]

FC_SCALE = 100
"""The forum net's 240,000-wide input and output are divided by this (to 2,400) to fit CI."""


@dataclass(frozen=True)
class ZooModel:
    """A PyTorch model with its batch, classes, and its independently built memtheory Network.

    Attributes
    ----------
    name : str
    description : str
    build : callable
        Returns a fresh ``nn.Module`` (fp32, CPU, training mode).
    input_shape : tuple of int
        The input batch's shape, batch first.
    classes : int
        Number of classes of the cross-entropy targets.
    network : callable
        Returns the memtheory Network, loss included, built without PyTorch.

    Examples
    --------
    >>> mlp = ZOO["MLP"]
    >>> mlp.input_shape, mlp.classes
    ((128, 1, 28, 28), 10)
    >>> mlp.network().parameter_count == sum(p.numel() for p in mlp.build().parameters())
    True
    """

    name: str
    description: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    classes: int
    network: Callable[[], Network]

    def module(self, dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
        """Return a fresh module in ``dtype``, its weights drawn from ``seed``.

        Examples
        --------
        >>> ZOO["MLP"].module().training
        True
        """
        torch.manual_seed(seed)
        return self.build().to(dtype)

    def batch(
        self, dtype: torch.dtype = torch.float32, seed: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return a random input batch in ``dtype`` and int64 class targets.

        Examples
        --------
        >>> x, y = ZOO["MLP"].batch()
        >>> tuple(x.shape), y.dtype
        ((128, 1, 28, 28), torch.int64)
        """
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(*self.input_shape, generator=generator).to(dtype)
        y = torch.randint(0, self.classes, (self.input_shape[0],), generator=generator)
        return x, y


def _small_cnn_module() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.MaxPool2d(2, stride=2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.MaxPool2d(2, stride=2),
        nn.Flatten(),
        nn.Linear(64 * 12 * 12, 500),
        nn.Linear(500, 10),
    )


def _small_cnn_network() -> Network:
    layers = list(small_cnn_network(batch=SMALL_CNN_BATCH).layers)
    return Network([*layers[:-1], CrossEntropyLoss()], name="StackExchange CNN")


def _mlp_module() -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 256),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(256, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


def _mlp_network() -> Network:
    return Network(
        [
            Input((1, 28, 28), batch=128),
            Flatten(),
            Dense(256),
            ReLU(),
            Dropout(0.2, device="cpu"),
            Dense(128),
            ReLU(),
            Dense(10),
            CrossEntropyLoss(),
        ],
        name="MLP",
    )


def _vgg_module() -> nn.Module:
    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [
            nn.Conv2d(c_in, c_out, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(c_out, c_out, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2),
        ]

    return nn.Sequential(
        *block(3, 16),
        *block(16, 32),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 256),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(256, 10),
    )


def _vgg_network() -> Network:
    layers: list[Layer] = [Input((3, 32, 32), batch=32)]
    for channels in (16, 32):
        for _ in range(2):
            layers += [Conv2d(channels, 3, padding=1), ReLU(inplace=True)]
        layers.append(MaxPool2d(2, stride=2))
    layers += [
        Flatten(),
        Dense(256),
        ReLU(inplace=True),
        Dropout(0.5, device="cpu"),
        Dense(10),
        CrossEntropyLoss(),
    ]
    return Network(layers, name="VGG-style")


_FC_WIDTH = FC_WIDTH // FC_SCALE


def _fc_module() -> nn.Module:
    return nn.Sequential(
        nn.Linear(_FC_WIDTH, 1024), nn.Linear(1024, 512), nn.Linear(512, _FC_WIDTH)
    )


def _fc_network() -> Network:
    layers = list(fc_adam_network(width=_FC_WIDTH, batch=FC_BATCH).layers)
    return Network([*layers, CrossEntropyLoss()], name="forum FC net / 100")


ZOO: dict[str, ZooModel] = {
    model.name: model
    for model in (
        ZooModel(
            "StackExchange CNN",
            "the StackExchange question's CNN at batch 64; its softmax is the one inside the "
            "cross-entropy",
            _small_cnn_module,
            (SMALL_CNN_BATCH, 3, 50, 50),
            10,
            _small_cnn_network,
        ),
        ZooModel(
            "MLP",
            "784 -> 256 -> ReLU -> dropout 0.2 -> 128 -> ReLU -> 10, batch 128",
            _mlp_module,
            (128, 1, 28, 28),
            10,
            _mlp_network,
        ),
        ZooModel(
            "VGG-style",
            "two VGG blocks with in-place ReLUs on 32x32x3, a 256-unit head with dropout, batch 32",
            _vgg_module,
            (32, 3, 32, 32),
            10,
            _vgg_network,
        ),
        ZooModel(
            "forum FC net / 100",
            "the forum thread's fully connected net with 240k scaled to 2,400, batch 128, "
            "cross-entropy over 2,400 classes",
            _fc_module,
            (FC_BATCH, _FC_WIDTH),
            _FC_WIDTH,
            _fc_network,
        ),
    )
}
"""The zoo, by name."""
