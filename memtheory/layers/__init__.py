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

from importlib import import_module
from typing import TYPE_CHECKING, Any

from memtheory.errors import UnknownAttributeError
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
from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.merge import Add, Concat, Merge, Multiply
from memtheory.layers.normalization import BatchNorm2d

if TYPE_CHECKING:
    from memtheory.layers.activations import (
        ELU,
        GELU,
        LeakyReLU,
        NewGELU,
        ReLU,
        ReLU6,
        Sigmoid,
        SiLU,
        Tanh,
    )
    from memtheory.layers.adaptive_pooling import AdaptiveAvgPool2d
    from memtheory.layers.attention import MultiHeadAttention
    from memtheory.layers.embedding import (
        Embedding,
        PositionEmbedding,
        TokenTypeEmbedding,
        Unembedding,
    )
    from memtheory.layers.grouped_attention import GroupedQueryAttention
    from memtheory.layers.losses import BCEWithLogitsLoss, L1Loss, MSELoss
    from memtheory.layers.moe import MixtureOfExperts
    from memtheory.layers.pooling import AvgPool2d, MaxPool2d
    from memtheory.layers.recurrent import GRU, LSTM
    from memtheory.layers.regularization import Dropout
    from memtheory.layers.rms_norm import GemmaRMSNorm, RMSNorm
    from memtheory.layers.rotary import Rotary, RotaryTable
    from memtheory.layers.scale import TensorScale
    from memtheory.layers.sequence import SelectToken
    from memtheory.layers.softmax import CrossEntropyLoss, LanguageModelLoss, LogSoftmax, Softmax
    from memtheory.layers.vision_transformer import ClassToken, LearnedPositions, PatchSequence

__all__ = [
    "ELU",
    "GELU",
    "GRU",
    "GemmaRMSNorm",
    "GroupedQueryAttention",
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
    "MixtureOfExperts",
    "Multiply",
    "MultiHeadAttention",
    "NewGELU",
    "PatchSequence",
    "PositionEmbedding",
    "RMSNorm",
    "ReLU",
    "ReLU6",
    "Rotary",
    "RotaryTable",
    "TensorScale",
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

_HOMES = {
    "AdaptiveAvgPool2d": "memtheory.layers.adaptive_pooling",
    "AvgPool2d": "memtheory.layers.pooling",
    "BCEWithLogitsLoss": "memtheory.layers.losses",
    "ClassToken": "memtheory.layers.vision_transformer",
    "CrossEntropyLoss": "memtheory.layers.softmax",
    "Dropout": "memtheory.layers.regularization",
    "ELU": "memtheory.layers.activations",
    "Embedding": "memtheory.layers.embedding",
    "GELU": "memtheory.layers.activations",
    "NewGELU": "memtheory.layers.activations",
    "GemmaRMSNorm": "memtheory.layers.rms_norm",
    "GroupedQueryAttention": "memtheory.layers.grouped_attention",
    "GRU": "memtheory.layers.recurrent",
    "L1Loss": "memtheory.layers.losses",
    "LSTM": "memtheory.layers.recurrent",
    "LanguageModelLoss": "memtheory.layers.softmax",
    "LeakyReLU": "memtheory.layers.activations",
    "LearnedPositions": "memtheory.layers.vision_transformer",
    "LogSoftmax": "memtheory.layers.softmax",
    "MSELoss": "memtheory.layers.losses",
    "MaxPool2d": "memtheory.layers.pooling",
    "MixtureOfExperts": "memtheory.layers.moe",
    "MultiHeadAttention": "memtheory.layers.attention",
    "PatchSequence": "memtheory.layers.vision_transformer",
    "PositionEmbedding": "memtheory.layers.embedding",
    "RMSNorm": "memtheory.layers.rms_norm",
    "ReLU": "memtheory.layers.activations",
    "ReLU6": "memtheory.layers.activations",
    "Rotary": "memtheory.layers.rotary",
    "RotaryTable": "memtheory.layers.rotary",
    "TensorScale": "memtheory.layers.scale",
    "SelectToken": "memtheory.layers.sequence",
    "SiLU": "memtheory.layers.activations",
    "Sigmoid": "memtheory.layers.activations",
    "Softmax": "memtheory.layers.softmax",
    "Tanh": "memtheory.layers.activations",
    "TokenTypeEmbedding": "memtheory.layers.embedding",
    "Unembedding": "memtheory.layers.embedding",
}
"""Layers imported on first use: ``import memtheory`` needs only the core ones."""


def __getattr__(name: str) -> Any:
    """Import a layer's module on first use of its name, then keep the name here."""
    if name not in _HOMES:
        raise UnknownAttributeError(f"module 'memtheory.layers' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
