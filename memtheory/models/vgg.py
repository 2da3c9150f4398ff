"""VGG networks (Simonyan and Zisserman, 2015), as torchvision builds them.

Examples
--------
>>> vgg16(batch=1).parameter_count
138357544
"""

from __future__ import annotations

from memtheory._validation import SizeLike
from memtheory.layers import Conv2d, Dense, Dropout, Flatten, Input, Layer, MaxPool2d, ReLU
from memtheory.network import Network
from memtheory.symbols import B

__all__ = ["VGG16_CONFIG", "vgg", "vgg16"]

VGG16_CONFIG: tuple[int | str, ...] = (
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    "M",
)
"""Configuration "D": filters per 3x3 convolution, ``"M"`` for 2x2 max pooling."""


def vgg(
    config: tuple[int | str, ...],
    *,
    image_size: SizeLike = 224,
    batch: SizeLike = B,
    classes: SizeLike = 1000,
    inplace_relu: bool = True,
) -> Network:
    """Build a VGG network from its configuration: 3x3 convolutions, pools, three dense layers.

    Parameters
    ----------
    config : tuple of int or "M"
    image_size : size, default 224
        Height and width of the RGB input; may be a symbol such as ``H``.
    batch : size, default ``B``
    classes : size, default 1000
    inplace_relu : bool, default True
        torchvision's VGG uses in-place ReLUs.

    Examples
    --------
    >>> vgg((8, "M"), image_size=32, classes=10).parameter_count
    25215210
    """
    layers: list[Layer] = [Input((3, image_size, image_size), batch=batch)]
    for item in config:
        if item == "M":
            layers.append(MaxPool2d(2, stride=2))
        else:
            layers += [Conv2d(item, 3, padding=1), ReLU(inplace=inplace_relu)]
    layers += [
        Flatten(),
        Dense(4096),
        ReLU(inplace=inplace_relu),
        Dropout(0.5),
        Dense(4096),
        ReLU(inplace=inplace_relu),
        Dropout(0.5),
        Dense(classes),
    ]
    return Network(layers, name="VGG")


def vgg16(*, image_size: SizeLike = 224, batch: SizeLike = B, classes: SizeLike = 1000) -> Network:
    """Build VGG-16 (configuration D): 13 convolutions, 3 dense layers, 138,357,544 parameters.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> net = vgg16(image_size=H)
    >>> net.output_shape
    (B, 1000)
    """
    network = vgg(VGG16_CONFIG, image_size=image_size, batch=batch, classes=classes)
    network.name = "VGG-16"
    return network
