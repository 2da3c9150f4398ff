"""memtheory: derive, compute and teach how much memory a neural network needs.

Every quantity is an exact sympy expression in bytes or elements: it can keep
symbols (batch ``B``, image size ``H``, ...) for what-if analysis, or be
evaluated exactly, or over NumPy grids.

Examples
--------
>>> from memtheory import Conv2d, Dense, Flatten, Input, MaxPool2d, Network, training_memory
>>> from memtheory.symbols import B
>>> net = Network([Input((3, 50, 50)), Conv2d(32, 3, padding=1), MaxPool2d(2),
...                Flatten(), Dense(10)])
>>> memory = training_memory(net, optimizer="adam")
>>> memory.total
830080*B + 3214496
>>> memory.evaluate(B=64).format("MiB")
'53.73 MiB'
"""

from memtheory.conventions import (
    CONVENTIONS,
    AutogradConvention,
    BreakdownConvention,
    Convention,
    RuleOfThumbConvention,
    convention,
)
from memtheory.counts import ModelCounts
from memtheory.dtypes import DTYPES, DType, dtype
from memtheory.errors import (
    EvaluationError,
    EvaluationOverflowError,
    InvalidArgumentError,
    InvalidSizeError,
    KernelTooLargeError,
    MemtheoryError,
    MissingArgumentError,
    ParseError,
    RankError,
    ShapeError,
    UnknownAttributeError,
    UnknownConventionError,
    UnknownDTypeError,
    UnknownNameError,
    UnknownOptimizerError,
    UnknownPrecisionError,
    UnknownUnitError,
    UnsupportedError,
)
from memtheory.evaluation import compile_exact, evaluate, evaluate_grid
from memtheory.footprint import Footprint
from memtheory.layers import (
    ELU,
    GELU,
    GRU,
    LSTM,
    AdaptiveAvgPool2d,
    Add,
    AvgPool2d,
    BatchNorm2d,
    ClassToken,
    Concat,
    Conv2d,
    CrossEntropyLoss,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    Input,
    LanguageModelLoss,
    Layer,
    LayerNorm,
    LeakyReLU,
    LearnedPositions,
    Linear,
    LogSoftmax,
    MaxPool2d,
    MultiHeadAttention,
    PatchSequence,
    PositionEmbedding,
    ReLU,
    ReLU6,
    RMSNorm,
    SelectToken,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    TensorSpec,
    TokenTypeEmbedding,
    Unembedding,
)
from memtheory.memory import MemoryBreakdown, inference_memory, training_memory
from memtheory.network import LayerRow, Network, NetworkSummary, Node
from memtheory.optimizers import OPTIMIZERS, Optimizer, optimizer
from memtheory.precision import Precision, precision
from memtheory.tables import Column, Table
from memtheory.units import convert, format_bytes, parse_bytes
from memtheory.whatif import (
    DoesNotFitError,
    compare_scenarios,
    max_batch,
    max_sequence_length,
    max_value,
    max_value_formula,
    sensitivity,
)

__version__ = "0.1.0"

__all__ = [
    "CONVENTIONS",
    "DTYPES",
    "ELU",
    "GELU",
    "GRU",
    "LSTM",
    "OPTIMIZERS",
    "AdaptiveAvgPool2d",
    "AutogradConvention",
    "Add",
    "AvgPool2d",
    "BatchNorm2d",
    "ClassToken",
    "BreakdownConvention",
    "Column",
    "Concat",
    "Conv2d",
    "Convention",
    "CrossEntropyLoss",
    "DType",
    "Dense",
    "DoesNotFitError",
    "Dropout",
    "Embedding",
    "EvaluationError",
    "EvaluationOverflowError",
    "Flatten",
    "Footprint",
    "Input",
    "InvalidArgumentError",
    "InvalidSizeError",
    "KernelTooLargeError",
    "Layer",
    "LanguageModelLoss",
    "LayerNorm",
    "LearnedPositions",
    "RMSNorm",
    "LayerRow",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MaxPool2d",
    "MemoryBreakdown",
    "MemtheoryError",
    "MissingArgumentError",
    "ModelCounts",
    "MultiHeadAttention",
    "PatchSequence",
    "Network",
    "NetworkSummary",
    "Node",
    "Optimizer",
    "ParseError",
    "PositionEmbedding",
    "Precision",
    "RankError",
    "ReLU",
    "ReLU6",
    "RuleOfThumbConvention",
    "SelectToken",
    "ShapeError",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Table",
    "Tanh",
    "TensorSpec",
    "TokenTypeEmbedding",
    "Unembedding",
    "UnknownAttributeError",
    "UnknownConventionError",
    "UnknownDTypeError",
    "UnknownNameError",
    "UnknownOptimizerError",
    "UnknownPrecisionError",
    "UnknownUnitError",
    "UnsupportedError",
    "__version__",
    "compare_scenarios",
    "compile_exact",
    "convention",
    "convert",
    "dtype",
    "evaluate",
    "evaluate_grid",
    "format_bytes",
    "inference_memory",
    "max_batch",
    "max_sequence_length",
    "max_value",
    "max_value_formula",
    "optimizer",
    "parse_bytes",
    "precision",
    "sensitivity",
    "training_memory",
]
