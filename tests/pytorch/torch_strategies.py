"""Hypothesis strategies for random PyTorch stacks that memtheory can read.

Every stack is valid by construction: layers are drawn one at a time while the
spatial side is tracked with the output-size formulas of the ``torch.nn.Conv2d``
and ``torch.nn.MaxPool2d`` documentation (ceil mode: a last window must start
inside the input or its left padding), written here independently of
:mod:`memtheory.sliding_window`. (They live apart from ``tests/strategies.py`` because
they need PyTorch.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
from hypothesis import strategies as st
from torch import nn

__all__ = ["SequenceModel", "Stack", "sequence_models", "stacks"]


@dataclass(frozen=True)
class Stack:
    """A random ``nn.Sequential`` and the shape of the batch it takes."""

    module: nn.Sequential
    input_shape: tuple[int, ...]
    classes: int


def _window_out(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil: bool):
    span = dilation * (kernel - 1) + 1
    if ceil:
        out = math.ceil((size + 2 * padding - span) / stride) + 1
        if (out - 1) * stride >= size + padding:
            out -= 1
        return out
    return (size + 2 * padding - span) // stride + 1


_ACTIVATIONS = (
    lambda draw: nn.ReLU(inplace=draw(st.booleans())),
    lambda draw: nn.LeakyReLU(0.1, inplace=draw(st.booleans())),
    lambda draw: nn.ELU(inplace=draw(st.booleans())),
    lambda draw: nn.GELU(),
    lambda draw: nn.SiLU(),
    lambda draw: nn.Sigmoid(),
    lambda draw: nn.Tanh(),
)


_KEEP_OUTPUT = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.Sigmoid, nn.Tanh, nn.Dropout)


@st.composite
def _activation(draw: st.DrawFn, previous: nn.Module | None) -> nn.Module:
    module = draw(st.sampled_from(_ACTIVATIONS))(draw)
    # PyTorch refuses, at backward, an in-place op on a tensor that was saved: the output of
    # an activation that keeps its output (or of an earlier in-place one), or what a p=0
    # dropout passes through. memtheory does not model that error, so it is not drawn.
    if getattr(module, "inplace", False) and isinstance(previous, _KEEP_OUTPUT):
        module.inplace = False
    return module


@st.composite
def stacks(draw: st.DrawFn, max_layers: int = 6) -> Stack:
    """Draw a stack of convolutions, pools and activations, then a dense head."""
    batch = draw(st.integers(1, 4))
    channels = draw(st.integers(1, 4))
    side = draw(st.integers(4, 14))
    layers: list[nn.Module] = []
    image = (channels, side)
    for _ in range(draw(st.integers(0, max_layers))):
        c, s = image
        kind = draw(st.sampled_from(("conv", "conv", "max", "avg", "bn", "act", "dropout")))
        previous = layers[-1] if layers else None
        if kind == "conv":
            kernel = draw(st.integers(1, 3))
            dilation = draw(st.integers(1, 2))
            padding = draw(st.integers(0, kernel // 2 + 1))
            stride = draw(st.integers(1, 2))
            if _window_out(s, kernel, stride, padding, dilation, False) < 1:
                continue
            groups = draw(st.sampled_from([g for g in (1, 2) if c % g == 0]))
            out_channels = groups * draw(st.integers(1, 3))
            layers.append(
                nn.Conv2d(
                    c,
                    out_channels,
                    kernel,
                    stride=stride,
                    padding=padding,
                    dilation=dilation,
                    groups=groups,
                    bias=draw(st.booleans()),
                )
            )
            image = (out_channels, _window_out(s, kernel, stride, padding, dilation, False))
        elif kind in ("max", "avg"):
            kernel = draw(st.integers(1, 3))
            stride = draw(st.integers(1, 3))
            padding = draw(st.integers(0, kernel // 2))
            ceil = draw(st.booleans())
            out = _window_out(s, kernel, stride, padding, 1, ceil)
            if out < 1 or kernel > s + 2 * padding:
                continue
            pool = nn.MaxPool2d if kind == "max" else nn.AvgPool2d
            layers.append(pool(kernel, stride=stride, padding=padding, ceil_mode=ceil))
            image = (c, out)
        elif kind == "bn":
            if batch * s * s < 2:  # training batch norm needs two values per channel
                continue
            layers.append(nn.BatchNorm2d(c, affine=draw(st.booleans())))
        elif kind == "act":
            layers.append(draw(_activation(previous)))
        else:
            layers.append(nn.Dropout(draw(st.sampled_from((0.0, 0.3, 0.5)))))
    features = image[0] * image[1] * image[1]
    layers.append(nn.Flatten())
    for _ in range(draw(st.integers(1, 3))):
        units = draw(st.integers(1, 12))
        layers.append(nn.Linear(features, units, bias=draw(st.booleans())))
        features = units
        if draw(st.booleans()):
            layers.append(draw(_activation(layers[-1])))
    classes = features
    return Stack(nn.Sequential(*layers), (batch, channels, side, side), classes)


# -- models with their own forward(): residuals, attention, norms, several losses -------------
@dataclass(frozen=True)
class SequenceModel:
    """A random module over ``(batch, sequence, width)`` inputs, its loss and how to feed it."""

    module: nn.Module
    width: int
    loss: str
    classes: int

    def batch(self, batch: int, sequence: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Return an input and a target of the given sizes."""
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(batch, sequence, self.width, generator=generator)
        if self.loss == "cross_entropy":
            return x, torch.randint(0, self.classes, (batch, sequence), generator=generator)
        return x, torch.randn(batch, sequence, self.classes, generator=generator)

    def loss_function(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The drawn loss of ``output`` against ``target``."""
        if self.loss == "cross_entropy":
            return F.cross_entropy(output.flatten(0, 1), target.flatten())
        if self.loss == "mse":
            return F.mse_loss(output, target)
        return F.smooth_l1_loss(output, target)


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int, causal: bool, fused: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.heads, self.causal, self.fused = heads, causal, fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, width = x.shape
        q, k, v = (
            t.view(batch, sequence, self.heads, width // self.heads).transpose(1, 2)
            for t in self.qkv(x).split(width, -1)
        )
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = q @ k.transpose(-2, -1) / (width // self.heads) ** 0.5
            if self.causal:
                mask = torch.ones(sequence, sequence, dtype=torch.bool).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            a = scores.softmax(-1) @ v
        return self.out(a.transpose(1, 2).reshape(batch, sequence, width))


class _Block(nn.Module):
    def __init__(self, inner: nn.Module, norm: nn.Module, residual: bool) -> None:
        super().__init__()
        self.norm, self.inner, self.residual = norm, inner, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(self.norm(x))
        return x + y if self.residual else y


class _Model(nn.Module):
    def __init__(self, blocks: list[nn.Module], head: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@st.composite
def sequence_models(draw: st.DrawFn) -> SequenceModel:
    """Draw a module with residual attention and MLP blocks, norms, and a loss.

    No fixed size is 5 or 7, so that examples of batch 5 and sequence 7 tell
    the symbolic sizes apart from the fixed ones.
    """
    heads = draw(st.sampled_from((1, 2, 4)))
    width = heads * draw(st.integers(2, 4)) * 2
    blocks: list[nn.Module] = []
    for _ in range(draw(st.integers(1, 3))):
        norm_kind = draw(st.sampled_from(("layer", "rms", "none")))
        norm: nn.Module = {
            "layer": lambda: nn.LayerNorm(width),
            "rms": lambda: nn.RMSNorm(width),
            "none": nn.Identity,
        }[norm_kind]()
        if draw(st.booleans()):
            inner: nn.Module = _Attention(width, heads, draw(st.booleans()), draw(st.booleans()))
        else:
            hidden = width * draw(st.integers(1, 3))
            activation = draw(st.sampled_from((nn.GELU, nn.ReLU, nn.SiLU, nn.Tanh)))
            inner = nn.Sequential(nn.Linear(width, hidden), activation(), nn.Linear(hidden, width))
        blocks.append(_Block(inner, norm, draw(st.booleans())))
    loss = draw(st.sampled_from(("cross_entropy", "mse", "smooth_l1")))
    classes = draw(st.sampled_from((2, 3, 4, 8, 9)))  # not the example sizes 5 and 7
    torch.manual_seed(draw(st.integers(0, 1000)))
    model = _Model(blocks, nn.Linear(width, classes)).train()
    return SequenceModel(model, width, loss, classes)
