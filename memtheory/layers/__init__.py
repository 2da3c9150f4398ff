"""Layers: each knows its output shape, parameters, activations and saved tensors.

Every layer is a frozen dataclass whose methods take the input shape (batch
first, possibly symbolic) and return exact sympy expressions.

Examples
--------
>>> from memtheory.layers import Conv2d
>>> from memtheory.symbols import B, H
>>> Conv2d(16, 3).output_shape((B, 3, H, H))
(B, 16, H - 2, H - 2)
"""

from memtheory.layers.activations import ELU, GELU, LeakyReLU, ReLU, Sigmoid, SiLU, Tanh
from memtheory.layers.base import Layer, Shape, TensorSpec, describe_shape, elements
from memtheory.layers.conv import Conv2d
from memtheory.layers.core import Dense, Flatten, Input, Linear
from memtheory.layers.normalization import BatchNorm2d
from memtheory.layers.pooling import AvgPool2d, MaxPool2d
from memtheory.layers.regularization import Dropout
from memtheory.layers.softmax import CrossEntropyLoss, LogSoftmax, Softmax

__all__ = [
    "ELU",
    "GELU",
    "AvgPool2d",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dense",
    "Dropout",
    "Flatten",
    "Input",
    "Layer",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MaxPool2d",
    "ReLU",
    "Shape",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "TensorSpec",
    "describe_shape",
    "elements",
]
