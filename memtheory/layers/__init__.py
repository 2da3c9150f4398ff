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

from memtheory.layers.activations import ELU, GELU, LeakyReLU, ReLU, ReLU6, Sigmoid, SiLU, Tanh
from memtheory.layers.adaptive_pooling import AdaptiveAvgPool2d
from memtheory.layers.attention import MultiHeadAttention
from memtheory.layers.base import (
    Autograd,
    Layer,
    Shape,
    Stage,
    TensorSpec,
    describe_shape,
    elements,
)
from memtheory.layers.conv import Conv2d
from memtheory.layers.core import Dense, Flatten, Input, Linear
from memtheory.layers.embedding import (
    Embedding,
    PositionEmbedding,
    TokenTypeEmbedding,
    Unembedding,
)
from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.losses import BCEWithLogitsLoss, L1Loss, MSELoss
from memtheory.layers.merge import Add, Concat, Merge
from memtheory.layers.normalization import BatchNorm2d
from memtheory.layers.pooling import AvgPool2d, MaxPool2d
from memtheory.layers.recurrent import GRU, LSTM
from memtheory.layers.regularization import Dropout
from memtheory.layers.rms_norm import RMSNorm
from memtheory.layers.sequence import SelectToken
from memtheory.layers.softmax import CrossEntropyLoss, LanguageModelLoss, LogSoftmax, Softmax
from memtheory.layers.vision_transformer import ClassToken, LearnedPositions, PatchSequence

__all__ = [
    "ELU",
    "GELU",
    "GRU",
    "LSTM",
    "AdaptiveAvgPool2d",
    "Add",
    "Autograd",
    "AvgPool2d",
    "BCEWithLogitsLoss",
    "BatchNorm2d",
    "ClassToken",
    "Concat",
    "Conv2d",
    "CrossEntropyLoss",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Input",
    "L1Loss",
    "Layer",
    "LanguageModelLoss",
    "LayerNorm",
    "LearnedPositions",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool2d",
    "Merge",
    "MultiHeadAttention",
    "PatchSequence",
    "PositionEmbedding",
    "RMSNorm",
    "ReLU",
    "ReLU6",
    "SelectToken",
    "Shape",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Stage",
    "Tanh",
    "TensorSpec",
    "TokenTypeEmbedding",
    "Unembedding",
    "describe_shape",
    "elements",
]
