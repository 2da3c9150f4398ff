"""Every builder beside its reference module at small sizes (:data:`PAIRS`).

Examples
--------
>>> sorted(PAIRS)[:2]
['BERT-MLM-style', 'GPT-2-style']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memtheory.layers import CrossEntropyLoss
from memtheory.models import bert, gpt2, mobilenet_v2, resnet, vision_transformer
from memtheory.models.gpt2 import GPT2Config
from memtheory.network import Network
from memtheory.torch.hf_losses import causal_lm_loss, masked_lm_loss
from memtheory.validation.reference_models.convnets import MobileNetV2Reference, ResNetReference
from memtheory.validation.reference_models.language_models import BertMLMReference, GPT2Reference
from memtheory.validation.reference_models.network_settings import as_measured
from memtheory.validation.reference_models.vit_reference import ViTReference

__all__ = ["BATCH", "PAIRS", "ReferencePair"]


@dataclass(frozen=True)
class ReferencePair:
    """A memtheory builder and its PyTorch twin at the same small hyperparameters.

    Attributes
    ----------
    name : str
    build_module : callable
        ``build_module(dtype=torch.float32, seed=0)``: the reference module on
        CPU, seeded, in training mode.
    build_network : callable
        ``build_network()``: the builder's :class:`~memtheory.network.Network`
        at the same sizes and batch, ending with the loss layer that matches
        :attr:`loss`, with CPU dropout masks and ``nn.MultiheadAttention``
        (see :func:`as_measured`).
    example_input, example_target : callable
        ``example_input(seed=0)``: the batch; ``example_target(seed=0)``: its labels.
    loss : callable
        ``loss(output, target)`` for :func:`memtheory.torch.measure`.

    Examples
    --------
    >>> gpt2 = PAIRS["GPT-2-style"]
    >>> tuple(gpt2.example_input().shape)  # batch 3, 11 tokens
    (3, 11)
    >>> gpt2.build_network().parameter_count
    29856
    >>> sum(p.numel() for p in gpt2.build_module().parameters())
    29856
    """

    name: str
    build_module: Callable[..., nn.Module]
    build_network: Callable[[], Network]
    example_input: Callable[..., torch.Tensor]
    example_target: Callable[..., torch.Tensor]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def batch(
        self, dtype: torch.dtype = torch.float32, seed: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the input (images converted to ``dtype``; token ids stay int64) and targets.

        Examples
        --------
        >>> x, y = PAIRS["ViT-style"].batch(torch.bfloat16)
        >>> x.dtype, y.dtype
        (torch.bfloat16, torch.int64)
        >>> PAIRS["GPT-2-style"].batch(torch.bfloat16)[0].dtype
        torch.int64
        """
        x = self.example_input(seed)
        if x.is_floating_point():
            x = x.to(dtype)
        return x, self.example_target(seed)


def _module(factory: Callable[[], nn.Module]) -> Callable[..., nn.Module]:
    def build(dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return factory().to(dtype).train()

    return build


def _randint(high: int, shape: tuple[int, ...]) -> Callable[..., torch.Tensor]:
    def make(seed: int = 0) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed + 1))

    return make


def _images(batch: int, size: int) -> Callable[..., torch.Tensor]:
    def make(seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(batch, 3, size, size, generator=generator).to(dtype)

    return make


BATCH = 3
"""Batch of every small pair (a size nobody tuned for)."""


def _resnet18_style() -> ReferencePair:
    blocks, width, image, classes = (2, 2, 1, 1), 8, 40, 10
    return ReferencePair(
        "ResNet-18-style",
        _module(lambda: ResNetReference("basic", blocks, width=width, classes=classes)),
        lambda: as_measured(
            resnet(
                blocks, block="basic", width=width, image_size=image, batch=BATCH, classes=classes
            ),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(classes, (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _resnet50_style() -> ReferencePair:
    blocks, width, image, classes = (2, 1, 1, 1), 4, 36, 7
    return ReferencePair(
        "ResNet-50-style",
        _module(lambda: ResNetReference("bottleneck", blocks, width=width, classes=classes)),
        lambda: as_measured(
            resnet(
                blocks,
                block="bottleneck",
                width=width,
                image_size=image,
                batch=BATCH,
                classes=classes,
            ),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(classes, (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _mobilenet_style() -> ReferencePair:
    setting = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2))
    width_mult, image, classes = 0.25, 40, 10
    return ReferencePair(
        "MobileNetV2-style",
        _module(
            lambda: MobileNetV2Reference(width_mult=width_mult, setting=setting, classes=classes)
        ),
        lambda: as_measured(
            mobilenet_v2(
                width_mult=width_mult,
                setting=setting,
                image_size=image,
                batch=BATCH,
                classes=classes,
            ),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(classes, (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _vit_style() -> ReferencePair:
    sizes = {"patch_size": 8, "layers": 2, "hidden": 32, "heads": 4, "mlp_dim": 48, "classes": 5}
    image = 24
    return ReferencePair(
        "ViT-style",
        _module(lambda: ViTReference(image_size=image, **sizes)),
        lambda: as_measured(
            vision_transformer(image_size=image, batch=BATCH, **sizes),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(sizes["classes"], (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _bert_style() -> ReferencePair:
    sizes: dict[str, Any] = {
        "layers": 2,
        "hidden": 32,
        "heads": 4,
        "vocabulary": 101,
        "positions": 40,
    }
    sequence = 13
    return ReferencePair(
        "BERT-MLM-style",
        _module(lambda: BertMLMReference(**sizes)),
        lambda: as_measured(
            bert(**sizes, batch=BATCH, sequence=sequence, pooler=False, mlm_head=True, loss=True),
            None,
        ),
        _randint(sizes["vocabulary"], (BATCH, sequence)),
        _randint(sizes["vocabulary"], (BATCH, sequence)),
        masked_lm_loss,
    )


def _gpt2_style() -> ReferencePair:
    config = GPT2Config(layers=2, hidden=32, heads=4, vocabulary=97, positions=40)
    sequence = 11
    return ReferencePair(
        "GPT-2-style",
        _module(
            lambda: GPT2Reference(
                layers=config.layers,
                hidden=config.hidden,
                heads=config.heads,
                vocabulary=config.vocabulary,
                positions=config.positions,
            )
        ),
        lambda: as_measured(gpt2(config, batch=BATCH, sequence=sequence, loss=True), None),
        _randint(config.vocabulary, (BATCH, sequence)),
        _randint(config.vocabulary, (BATCH, sequence)),
        causal_lm_loss,
    )


PAIRS: dict[str, ReferencePair] = {
    pair.name: pair
    for pair in (
        _resnet18_style(),
        _resnet50_style(),
        _mobilenet_style(),
        _vit_style(),
        _bert_style(),
        _gpt2_style(),
    )
}
"""Every builder with its reference module at small sizes, by name."""
