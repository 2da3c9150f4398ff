"""MobileNetV2 (Sandler et al. 2018), as torchvision builds it.

A 3x3 stride-2 stem, 17 inverted residual blocks and a 1x1 convolution to
1,280 channels, each convolution followed by batch normalisation and (but
for a block's last, linear, projection) an in-place ReLU6; then global
average pooling, dropout 0.2 and the classifier. An inverted residual block
widens its input ``t`` times with a 1x1 convolution (skipped when ``t`` is
1), filters each channel on its own with a 3x3 depthwise convolution
(``groups`` equal to the channels, the block's stride here) and projects back
with a 1x1 convolution; it adds its input back (``x + conv(x)``, a new
tensor) where the stride is 1 and the width is unchanged. Channel counts are
scaled by ``width_mult`` and rounded as torchvision's ``_make_divisible``
does. Layers carry torchvision's module names (``features.2.conv.1.0``).

Examples
--------
>>> mobilenet_v2(batch=1).parameter_count
3504872
"""

from __future__ import annotations

from collections.abc import Sequence

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers import (
    AdaptiveAvgPool2d,
    Add,
    BatchNorm2d,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    Input,
    Layer,
    ReLU6,
)
from memtheory.network import Network, Node, module_calls
from memtheory.symbols import B

__all__ = ["MOBILENETV2_SETTING", "inverted_residual", "make_divisible", "mobilenet_v2"]

MOBILENETV2_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""Stages as ``(t, c, n, s)``: expansion, output channels, blocks, stride of the first block."""


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor``, as torchvision's ``_make_divisible``.

    The nearest multiple (halves up), at least ``divisor``, and never more than
    10% below ``value``.

    Examples
    --------
    >>> make_divisible(32 * 0.75), make_divisible(16 * 0.35), make_divisible(1280 * 1.4)
    (24, 8, 1792)
    """
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn_relu6(
    prefix: str,
    channels: int,
    kernel: int,
    *,
    stride: int = 1,
    groups: int = 1,
    source: str | None = None,
) -> list[Layer | Node]:
    """Torchvision's ``Conv2dNormActivation`` with ReLU6: ``prefix.0``, ``.1``, ``.2``."""
    conv = Conv2d(
        channels,
        kernel,
        stride=stride,
        padding=(kernel - 1) // 2,
        groups=groups,
        bias=False,
        name=f"{prefix}.0",
    )
    return [
        conv if source is None else Node(conv, inputs=(source,)),
        BatchNorm2d(name=f"{prefix}.1"),
        ReLU6(inplace=True, name=f"{prefix}.2"),
    ]


def inverted_residual(
    prefix: str, source: str, in_channels: int, out_channels: int, stride: int, expand_ratio: int
) -> list[Layer | Node]:
    """Build one inverted residual block that reads layer ``source``; its last item is its output.

    Parameters
    ----------
    prefix : str
        Module path of the block, e.g. ``"features.2"``.
    source : str
        Name of the layer whose output the block reads.
    in_channels, out_channels : int
    stride : {1, 2}
        Stride of the depthwise convolution.
    expand_ratio : int
        The inner width is ``round(in_channels * expand_ratio)``.

    Examples
    --------
    >>> from memtheory.layers import Input
    >>> block = inverted_residual("features.3", "x", 24, 24, 1, 6)
    >>> net = Network([Input((24, 56, 56), name="x"), *block])
    >>> block[-1].name, net.parameter_count
    ('features.3.add', 8832)
    """
    if stride not in (1, 2):
        raise InvalidSizeError(
            f"inverted_residual {prefix!r}: stride must be 1 or 2, got {stride}."
        )
    hidden = int(round(in_channels * expand_ratio))
    items: list[Layer | Node] = []
    part = 0
    if expand_ratio != 1:
        items += _conv_bn_relu6(f"{prefix}.conv.0", hidden, 1, source=source)
        part = 1
    items += _conv_bn_relu6(
        f"{prefix}.conv.{part}",
        hidden,
        3,
        stride=stride,
        groups=hidden,
        source=None if items else source,
    )
    items += [
        Conv2d(out_channels, 1, bias=False, name=f"{prefix}.conv.{part + 1}"),
        BatchNorm2d(name=f"{prefix}.conv.{part + 2}"),
    ]
    if stride == 1 and in_channels == out_channels:
        items.append(Node(Add(name=f"{prefix}.add"), inputs=(source, f"{prefix}.conv.{part + 2}")))
    return items


def mobilenet_v2(
    *,
    width_mult: float = 1.0,
    setting: Sequence[tuple[int, int, int, int]] = MOBILENETV2_SETTING,
    round_nearest: int = 8,
    image_size: SizeLike = 224,
    batch: SizeLike = B,
    classes: SizeLike = 1000,
    dropout: float = 0.2,
) -> Network:
    """Build MobileNetV2; at the defaults 3,504,872 parameters (torchvision's ``mobilenet_v2``).

    Parameters
    ----------
    width_mult : float, default 1.0
        Multiplies every channel count (before rounding).
    setting : sequence of (t, c, n, s), default :data:`MOBILENETV2_SETTING`
        The inverted residual stages (shorter ones make small test networks).
    round_nearest : int, default 8
        Channel counts are rounded to multiples of it.
    image_size : size, default 224
        Height and width of the RGB input; may be a symbol such as ``H``.
    batch : size, default ``B``
    classes : size, default 1000
    dropout : float, default 0.2
        Dropout before the classifier.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> mobilenet_v2(image_size=H)["features.18.2"].output_shape[1]
    1280
    >>> mobilenet_v2(width_mult=0.5, batch=1).parameter_count
    1968680
    """
    channels = make_divisible(32 * width_mult, round_nearest)
    last_channels = make_divisible(1280 * max(1.0, width_mult), round_nearest)
    layers: list[Layer | Node] = [
        Input((3, image_size, image_size), batch=batch),
        *_conv_bn_relu6("features.0", channels, 3, stride=2),
    ]
    source, index = "features.0.2", 1
    for t, c, n, s in setting:
        out_channels = make_divisible(c * width_mult, round_nearest)
        for repeat in range(n):
            block = inverted_residual(
                f"features.{index}", source, channels, out_channels, s if repeat == 0 else 1, t
            )
            layers += block
            source, channels, index = block[-1].name or "", out_channels, index + 1
    layers += [
        *_conv_bn_relu6(f"features.{index}", last_channels, 1),
        AdaptiveAvgPool2d(1, name="avgpool"),
        Flatten(name="flatten"),
        Dropout(dropout, name="classifier.0"),
        Dense(classes, name="classifier.1"),
    ]
    names = [item.name or "" for item in layers]
    # torchvision: features and classifier are nn.Sequential, each features.i a module, each
    # Conv2dNormActivation a Sequential; each holds its input until it returns.
    return Network(layers, name="MobileNetV2", calls=module_calls(names[1:]))
