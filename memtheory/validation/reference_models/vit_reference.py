"""torchvision's ``VisionTransformer`` as a plain module (pre-norm blocks, class token).

Examples
--------
>>> import torch
>>> vit = ViTReference(image_size=16, patch_size=8, layers=1, hidden=8, heads=2, mlp_dim=12,
...                    classes=3)
>>> vit(torch.zeros(2, 3, 16, 16)).shape
torch.Size([2, 3])
"""

from __future__ import annotations

import torch
from torch import nn

from memtheory.validation.reference_models.parts import Chain, TransformerBlock

__all__ = ["ViTReference"]


class _ClassToken(nn.Module):
    """``cat([class_token.expand(n, -1, -1), x], dim=1)``, as torchvision's ViT."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)


class _LearnedPositions(nn.Module):
    """``x + pos_embedding``, as torchvision's ViT encoder."""

    def __init__(self, positions: int, hidden: int) -> None:
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, positions, hidden).normal_(std=0.02))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos_embedding


class ViTReference(nn.Module):
    """torchvision's ``VisionTransformer`` (pre-norm, GELU MLP, head on the class token)."""

    def __init__(
        self,
        *,
        image_size: int = 224,
        patch_size: int = 16,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        mlp_dim: int = 3072,
        classes: int = 1000,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.conv_proj = nn.Conv2d(3, hidden, patch_size, patch_size)
        self.class_token = _ClassToken(hidden)
        sequence = (image_size // patch_size) ** 2 + 1
        self.encoder = _ViTEncoder(sequence, layers, hidden, heads, mlp_dim, dropout)
        self.heads = Chain()
        self.heads.add_module("head", nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch, as torchvision's ``VisionTransformer.forward``."""
        x = self._process_input(x)
        x = self.class_token(x)
        x = self.encoder(x)
        x = x[:, 0]
        x = self.heads(x)
        return x

    def _process_input(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x)
        n, hidden = x.shape[0], x.shape[1]
        x = x.reshape(n, hidden, -1)
        x = x.permute(0, 2, 1)
        return x


class _ViTEncoder(nn.Module):
    """torchvision's ViT ``Encoder``: ``ln(layers(dropout(input + pos_embedding)))``."""

    def __init__(
        self, sequence: int, layers: int, hidden: int, heads: int, mlp_dim: int, dropout: float
    ) -> None:
        super().__init__()
        self.pos_embedding = _LearnedPositions(sequence, hidden)
        if dropout:
            self.dropout = nn.Dropout(dropout)
        self.layers = Chain(
            *(
                TransformerBlock(
                    hidden,
                    heads,
                    mlp_dim,
                    norm="pre",
                    dropout=dropout,
                    activation=nn.GELU(),
                    activation_dropout=True,
                    style="torchvision",
                )
                for _ in range(layers)
            ),
            names=[f"encoder_layer_{i}" for i in range(layers)],
        )
        self.ln = nn.LayerNorm(hidden, eps=1e-6)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torchvision's name)
        input = self.pos_embedding(input)  # noqa: A001
        if hasattr(self, "dropout"):
            input = self.dropout(input)  # noqa: A001
        return self.ln(self.layers(input))
