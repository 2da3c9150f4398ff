"""ResNet with bottleneck blocks (He et al. 2016), as torchvision builds it.

Each bottleneck block runs a 1x1, a 3x3 and a 1x1 convolution (each followed
by batch normalisation, no convolution biases), adds its input back (through
a 1x1 convolution and batch normalisation where the shape changes), and ends
with a ReLU. As in torchvision (ResNet "v1.5"), the stride sits on the 3x3
convolution, the sum is in place (``out += identity``) and the ReLUs are in
place. Layers carry torchvision's module names (``layer1.0.conv1``,
``layer1.0.downsample.0``, ...).

Examples
--------
>>> resnet50(batch=1).parameter_count
25557032
"""

from __future__ import annotations

from memtheory._validation import SizeLike
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
from memtheory.network import Network, Node
from memtheory.symbols import B

__all__ = ["RESNET50_BLOCKS", "bottleneck", "resnet", "resnet50"]

RESNET50_BLOCKS: tuple[int, int, int, int] = (3, 4, 6, 3)
"""Bottleneck blocks in each of ResNet-50's four stages."""

EXPANSION = 4
"""A bottleneck block's output has four times its inner width."""


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
    shortcut = source
    if project:
        items += [
            Node(
                Conv2d(
                    EXPANSION * width,
                    1,
                    stride=stride,
                    bias=False,
                    name=f"{prefix}.downsample.0",
                ),
                inputs=(source,),
            ),
            BatchNorm2d(name=f"{prefix}.downsample.1"),
        ]
        shortcut = f"{prefix}.downsample.1"
    items += [
        Node(Add(inplace=True, name=f"{prefix}.add"), inputs=(f"{prefix}.bn3", shortcut)),
        ReLU(inplace=True, name=f"{prefix}.relu3"),
    ]
    return items


def resnet(
    blocks: tuple[int, ...],
    *,
    image_size: SizeLike = 224,
    batch: SizeLike = B,
    classes: SizeLike = 1000,
) -> Network:
    """Build a bottleneck ResNet with ``blocks[i]`` blocks in stage ``i + 1``.

    Parameters
    ----------
    blocks : tuple of int
        Blocks per stage; stage widths are 64, 128, 256, 512, ...
    image_size : size, default 224
        Height and width of the RGB input; may be a symbol such as ``H``.
    batch : size, default ``B``
    classes : size, default 1000

    Examples
    --------
    >>> resnet((1, 1), image_size=64, classes=10).output_shape
    (B, 10)
    """
    layers: list[Layer | Node] = [
        Input((3, image_size, image_size), batch=batch),
        Conv2d(64, 7, stride=2, padding=3, bias=False, name="conv1"),
        BatchNorm2d(name="bn1"),
        ReLU(inplace=True, name="relu"),
        MaxPool2d(3, stride=2, padding=1, name="maxpool"),
    ]
    source = "maxpool"
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        for index in range(count):
            prefix = f"layer{stage + 1}.{index}"
            first = index == 0
            layers += bottleneck(
                prefix,
                source,
                width,
                stride=2 if first and stage > 0 else 1,
                project=first,
            )
            source = f"{prefix}.relu3"
    layers += [
        AdaptiveAvgPool2d(1, name="avgpool"),
        Flatten(name="flatten"),
        Dense(classes, name="fc"),
    ]
    return Network(layers, name="ResNet")


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
