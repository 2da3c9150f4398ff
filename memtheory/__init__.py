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
>>> memory.evaluate(B=64).format("total", "MiB")
'53.73 MiB'
"""

from memtheory.conventions import (
    CONVENTIONS,
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
    InvalidSizeError,
    KernelTooLargeError,
    MemtheoryError,
    ParseError,
    RankError,
    ShapeError,
    UnknownConventionError,
    UnknownDTypeError,
    UnknownNameError,
    UnknownOptimizerError,
    UnknownUnitError,
    UnsupportedError,
)
from memtheory.evaluation import compile_exact, evaluate, evaluate_grid
from memtheory.layers import (
    ELU,
    GELU,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    CrossEntropyLoss,
    Dense,
    Dropout,
    Flatten,
    Input,
    Layer,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool2d,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    TensorSpec,
)
from memtheory.memory import MemoryBreakdown, inference_memory, training_memory
from memtheory.network import LayerRow, Network, NetworkSummary
from memtheory.optimizers import OPTIMIZERS, Optimizer, optimizer
from memtheory.precision import Precision, precision
from memtheory.units import convert, format_bytes, parse_bytes

__version__ = "0.1.0"

__all__ = [
    "CONVENTIONS",
    "DTYPES",
    "ELU",
    "GELU",
    "OPTIMIZERS",
    "AvgPool2d",
    "BatchNorm2d",
    "BreakdownConvention",
    "Convention",
    "Conv2d",
    "CrossEntropyLoss",
    "DType",
    "Dense",
    "Dropout",
    "EvaluationError",
    "EvaluationOverflowError",
    "Flatten",
    "Input",
    "InvalidSizeError",
    "KernelTooLargeError",
    "Layer",
    "LayerRow",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MaxPool2d",
    "MemoryBreakdown",
    "MemtheoryError",
    "ParseError",
    "ModelCounts",
    "Network",
    "NetworkSummary",
    "Optimizer",
    "Precision",
    "RankError",
    "ReLU",
    "RuleOfThumbConvention",
    "ShapeError",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "TensorSpec",
    "UnknownConventionError",
    "UnknownDTypeError",
    "UnknownNameError",
    "UnknownOptimizerError",
    "UnknownUnitError",
    "UnsupportedError",
    "__version__",
    "compile_exact",
    "convention",
    "convert",
    "dtype",
    "evaluate",
    "evaluate_grid",
    "format_bytes",
    "inference_memory",
    "optimizer",
    "parse_bytes",
    "precision",
    "training_memory",
]
