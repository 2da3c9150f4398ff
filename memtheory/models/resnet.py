"""ResNet (He et al. 2016) with basic or bottleneck blocks, as torchvision builds it.

A basic block (ResNet-18, ResNet-34) runs two 3x3 convolutions, each followed
by batch normalisation, the first also by a ReLU; the stride sits on the
first. Each bottleneck block (ResNet-50) runs a 1x1, a 3x3 and a 1x1 convolution (each followed
by batch normalisation, no convolution biases), adds its input back (through
a 1x1 convolution and batch normalisation where the shape changes), and ends
with a ReLU. As in torchvision (ResNet "v1.5"), the stride sits on the 3x3
convolution, the sum is in place (``out += identity``) and the ReLUs are in
place. Both kinds add their input back, through a 1x1 convolution and batch
normalisation (``downsample``) where the stride or the width changes. Layers
carry torchvision's module names (``layer1.0.conv1``,
``layer1.0.downsample.0``, ...); the ReLUs, one module reused in torchvision,
are ``relu1``, ``relu2`` (and ``relu3``) here.

Examples
--------
>>> resnet50(batch=1).parameter_count
25557032
>>> resnet18(batch=1).parameter_count
11689512
"""

from __future__ import annotations

from typing import Literal

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers import (
    AdaptiveAvgPool2d,
    Add,
    BatchNorm2d,
    Conv2d,
    Dense,
    Flatten,
    Input,
    Layer,
    MaxPool2d,
    ReLU,
)
from memtheory.network import Network, Node, module_calls
from memtheory.symbols import B

__all__ = [
    "RESNET18_BLOCKS",
    "RESNET34_BLOCKS",
    "RESNET50_BLOCKS",
    "basic_block",
    "bottleneck",
    "resnet",
    "resnet18",
    "resnet34",
    "resnet50",
]

RESNET18_BLOCKS: tuple[int, int, int, int] = (2, 2, 2, 2)
"""Basic blocks in each of ResNet-18's four stages."""

RESNET34_BLOCKS: tuple[int, int, int, int] = (3, 4, 6, 3)
"""Basic blocks in each of ResNet-34's four stages."""

RESNET50_BLOCKS: tuple[int, int, int, int] = (3, 4, 6, 3)
"""Bottleneck blocks in each of ResNet-50's four stages."""

EXPANSION = 4
"""A bottleneck block's output has four times its inner width."""


def _shortcut(
    prefix: str, source: str, channels: SizeLike, stride: SizeLike, project: bool
) -> tuple[list[Layer | Node], str]:
    if not project:
        return [], source
    items: list[Layer | Node] = [
        Node(
            Conv2d(channels, 1, stride=stride, bias=False, name=f"{prefix}.downsample.0"),
            inputs=(source,),
        ),
        BatchNorm2d(name=f"{prefix}.downsample.1"),
    ]
    return items, f"{prefix}.downsample.1"


def basic_block(
    prefix: str,
    source: str,
    width: SizeLike,
    *,
    stride: SizeLike = 1,
    project: bool = False,
) -> list[Layer | Node]:
    """Build one basic block that reads layer ``source``; its last layer is ``prefix.relu2``.

    ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`` with 3x3
    convolutions without biases, the sum and the ReLUs in place (torchvision's
    ``BasicBlock``).

    Parameters
    ----------
    prefix : str
        Module path of the block, e.g. ``"layer2.0"``.
    source : str
        Name of the layer whose output the block reads (and adds back).
    width : size
        Output channels of both convolutions.
    stride : size, default 1
        Stride of the first convolution (and of the projection).
    project : bool, default False
        Whether the shortcut is a 1x1 convolution and batch normalisation
        (``downsample``) instead of the identity.

    Examples
    --------
    >>> from memtheory.layers import Input
    >>> block = basic_block("layer2.0", "x", 128, stride=2, project=True)
    >>> net = Network([Input((64, 56, 56), name="x"), *block])
    >>> net.output_shape, net.parameter_count
    ((B, 128, 28, 28), 230144)
    """
    items: list[Layer | Node] = [
        Node(
            Conv2d(width, 3, stride=stride, padding=1, bias=False, name=f"{prefix}.conv1"),
            inputs=(source,),
        ),
        BatchNorm2d(name=f"{prefix}.bn1"),
        ReLU(inplace=True, name=f"{prefix}.relu1"),
        Conv2d(width, 3, padding=1, bias=False, name=f"{prefix}.conv2"),
        BatchNorm2d(name=f"{prefix}.bn2"),
    ]
    shortcut_items, shortcut = _shortcut(prefix, source, width, stride, project)
    return [
        *items,
        *shortcut_items,
        Node(Add(inplace=True, name=f"{prefix}.add"), inputs=(f"{prefix}.bn2", shortcut)),
        ReLU(inplace=True, name=f"{prefix}.relu2"),
    ]


def bottleneck(
    prefix: str,
    source: str,
    width: SizeLike,
    *,
    stride: SizeLike = 1,
    project: bool = False,
) -> list[Layer | Node]:
    """Build one bottleneck block that reads layer ``source``; its last layer is ``prefix.relu3``.

    Parameters
    ----------
    prefix : str
        Module path of the block, e.g. ``"layer2.0"``.
    source : str
        Name of the layer whose output the block reads (and adds back).
    width : size
        Inner width; the block outputs ``4 * width`` channels.
    stride : size, default 1
        Stride of the 3x3 convolution (and of the projection).
    project : bool, default False
        Whether the shortcut is a 1x1 convolution and batch normalisation
        (``downsample``) instead of the identity.

    Examples
    --------
    >>> from memtheory.layers import Input
    >>> block = bottleneck("layer1.0", "x", 64, project=True)
    >>> net = Network([Input((64, 56, 56), name="x"), *block])
    >>> net.output_shape, net.parameter_count
    ((B, 256, 56, 56), 75008)
    """
    items: list[Layer | Node] = [
        Node(Conv2d(width, 1, bias=False, name=f"{prefix}.conv1"), inputs=(source,)),
        BatchNorm2d(name=f"{prefix}.bn1"),
        ReLU(inplace=True, name=f"{prefix}.relu1"),
        Conv2d(width, 3, stride=stride, padding=1, bias=False, name=f"{prefix}.conv2"),
        BatchNorm2d(name=f"{prefix}.bn2"),
        ReLU(inplace=True, name=f"{prefix}.relu2"),
        Conv2d(EXPANSION * width, 1, bias=False, name=f"{prefix}.conv3"),
        BatchNorm2d(name=f"{prefix}.bn3"),
    ]
    shortcut_items, shortcut = _shortcut(prefix, source, EXPANSION * width, stride, project)
    items += [
        *shortcut_items,
        Node(Add(inplace=True, name=f"{prefix}.add"), inputs=(f"{prefix}.bn3", shortcut)),
        ReLU(inplace=True, name=f"{prefix}.relu3"),
    ]
    return items


def resnet(
    blocks: tuple[int, ...],
    *,
    block: Literal["basic", "bottleneck"] = "bottleneck",
    width: SizeLike = 64,
    image_size: SizeLike = 224,
    batch: SizeLike = B,
    classes: SizeLike = 1000,
) -> Network:
    """Build a ResNet with ``blocks[i]`` blocks of kind ``block`` in stage ``i + 1``.

    The stem is a 7x7 stride-2 convolution of ``width`` filters, batch
    normalisation, a ReLU and a 3x3 stride-2 max pooling; stage ``i`` has inner
    width ``width * 2**i`` (times 4 at the output of a bottleneck block) and
    halves the resolution from the second stage on; then global average
    pooling and the classifier. A block projects its shortcut where its stride
    is not 1 or its input and output widths differ, as torchvision does.

    Parameters
    ----------
    blocks : tuple of int
        Blocks per stage.
    block : {"basic", "bottleneck"}, default "bottleneck"
    width : size, default 64
        Stem width and first stage width (torchvision's 64; smaller for tests).
    image_size : size, default 224
        Height and width of the RGB input; may be a symbol such as ``H``.
    batch : size, default ``B``
    classes : size, default 1000

    Examples
    --------
    >>> resnet((1, 1), image_size=64, classes=10).output_shape
    (B, 10)
    >>> resnet((1, 1), block="basic", width=8, image_size=32, classes=10).parameter_count
    6226
    """
    if block not in ("basic", "bottleneck"):
        raise InvalidSizeError(f"resnet: block must be 'basic' or 'bottleneck', got {block!r}.")
    make = basic_block if block == "basic" else bottleneck
    expansion = 1 if block == "basic" else EXPANSION
    layers: list[Layer | Node] = [
        Input((3, image_size, image_size), batch=batch),
        Conv2d(width, 7, stride=2, padding=3, bias=False, name="conv1"),
        BatchNorm2d(name="bn1"),
        ReLU(inplace=True, name="relu"),
        MaxPool2d(3, stride=2, padding=1, name="maxpool"),
    ]
    source, channels = "maxpool", width
    last = "relu2" if block == "basic" else "relu3"
    for stage, count in enumerate(blocks):
        inner = width * 2**stage
        for index in range(count):
            prefix = f"layer{stage + 1}.{index}"
            stride = 2 if index == 0 and stage > 0 else 1
            layers += make(
                prefix,
                source,
                inner,
                stride=stride,
                project=stride != 1 or channels != expansion * inner,
            )
            source, channels = f"{prefix}.{last}", expansion * inner
    layers += [
        AdaptiveAvgPool2d(1, name="avgpool"),
        Flatten(name="flatten"),
        Dense(classes, name="fc"),
    ]
    names = [item.name or "" for item in layers]
    # torchvision: each stage an nn.Sequential of blocks, each block (and its downsample) a
    # module; each holds its input until it returns.
    return Network(layers, name="ResNet", calls=module_calls(names[1:]))


def resnet18(
    *, image_size: SizeLike = 224, batch: SizeLike = B, classes: SizeLike = 1000
) -> Network:
    """Build ResNet-18: 8 basic blocks in stages of 2, 2, 2, 2; 11,689,512 parameters.

    Examples
    --------
    >>> resnet18(batch=1)["layer4.1.relu2"].output_shape
    (1, 512, 7, 7)
    """
    network = resnet(
        RESNET18_BLOCKS, block="basic", image_size=image_size, batch=batch, classes=classes
    )
    network.name = "ResNet-18"
    return network


def resnet34(
    *, image_size: SizeLike = 224, batch: SizeLike = B, classes: SizeLike = 1000
) -> Network:
    """Build ResNet-34: 16 basic blocks in stages of 3, 4, 6, 3; 21,797,672 parameters.

    Examples
    --------
    >>> resnet34(batch=1).parameter_count
    21797672
    """
    network = resnet(
        RESNET34_BLOCKS, block="basic", image_size=image_size, batch=batch, classes=classes
    )
    network.name = "ResNet-34"
    return network


def resnet50(
    *, image_size: SizeLike = 224, batch: SizeLike = B, classes: SizeLike = 1000
) -> Network:
    """Build ResNet-50: 16 bottleneck blocks in stages of 3, 4, 6, 3; 25,557,032 parameters.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> resnet50(image_size=H).output_shape
    (B, 1000)
    """
    network = resnet(RESNET50_BLOCKS, image_size=image_size, batch=batch, classes=classes)
    network.name = "ResNet-50"
    return network
