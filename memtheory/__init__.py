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

from importlib import import_module
from typing import TYPE_CHECKING, Any

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
    DoesNotFitError,
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
    SizeWarning,
    UnknownAttributeError,
    UnknownConventionError,
    UnknownDTypeError,
    UnknownNameError,
    UnknownOptimizerError,
    UnknownPrecisionError,
    UnknownUnitError,
    UnsupportedError,
    UntraceableError,
)
from memtheory.evaluation import compile_exact, evaluate, evaluate_grid
from memtheory.footprint import Footprint
from memtheory.layers import (
    Add,
    BatchNorm2d,
    Concat,
    Conv2d,
    Dense,
    Flatten,
    Input,
    Layer,
    LayerNorm,
    Linear,
    TensorSpec,
)
from memtheory.memory import MemoryBreakdown, inference_memory, training_memory
from memtheory.network import LayerRow, Network, NetworkSummary, Node
from memtheory.optimizers import OPTIMIZERS, Optimizer, optimizer
from memtheory.precision import Precision, precision
from memtheory.tables import Column, Table
from memtheory.units import convert, format_bytes, parse_bytes

if TYPE_CHECKING:
    from memtheory.layers import (
        ELU,
        GELU,
        GRU,
        LSTM,
        AdaptiveAvgPool2d,
        AvgPool2d,
        BCEWithLogitsLoss,
        ClassToken,
        CrossEntropyLoss,
        Dropout,
        Embedding,
        L1Loss,
        LanguageModelLoss,
        LeakyReLU,
        LearnedPositions,
        LogSoftmax,
        MaxPool2d,
        MSELoss,
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
        TokenTypeEmbedding,
        Unembedding,
    )
    from memtheory.whatif import (
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
    "BCEWithLogitsLoss",
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
    "L1Loss",
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
    "MSELoss",
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
    "SizeWarning",
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
    "UntraceableError",
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

_LAZY = {
    "AdaptiveAvgPool2d": "memtheory.layers",
    "AvgPool2d": "memtheory.layers",
    "BCEWithLogitsLoss": "memtheory.layers",
    "ClassToken": "memtheory.layers",
    "CrossEntropyLoss": "memtheory.layers",
    "Dropout": "memtheory.layers",
    "ELU": "memtheory.layers",
    "Embedding": "memtheory.layers",
    "GELU": "memtheory.layers",
    "GRU": "memtheory.layers",
    "L1Loss": "memtheory.layers",
    "LSTM": "memtheory.layers",
    "LanguageModelLoss": "memtheory.layers",
    "LeakyReLU": "memtheory.layers",
    "LearnedPositions": "memtheory.layers",
    "LogSoftmax": "memtheory.layers",
    "MSELoss": "memtheory.layers",
    "MaxPool2d": "memtheory.layers",
    "MultiHeadAttention": "memtheory.layers",
    "PatchSequence": "memtheory.layers",
    "PositionEmbedding": "memtheory.layers",
    "RMSNorm": "memtheory.layers",
    "ReLU": "memtheory.layers",
    "ReLU6": "memtheory.layers",
    "SelectToken": "memtheory.layers",
    "SiLU": "memtheory.layers",
    "Sigmoid": "memtheory.layers",
    "Softmax": "memtheory.layers",
    "Tanh": "memtheory.layers",
    "TokenTypeEmbedding": "memtheory.layers",
    "Unembedding": "memtheory.layers",
    "compare_scenarios": "memtheory.whatif",
    "max_batch": "memtheory.whatif",
    "max_sequence_length": "memtheory.whatif",
    "max_value": "memtheory.whatif",
    "max_value_formula": "memtheory.whatif",
    "sensitivity": "memtheory.whatif",
}
"""Public names imported on first use: most layers, and what-if analysis (with the techniques)."""

_SUBPACKAGES = ("exercises", "models", "techniques", "whatif", "worked_examples")
"""Subpackages reachable as attributes (``memtheory.models``), imported on first use."""


def __getattr__(name: str) -> Any:
    """Import a lazily loaded public name or subpackage on first use, then keep it here."""
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES:
        value = import_module(f"memtheory.{name}")
    else:
        raise UnknownAttributeError(f"module 'memtheory' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})
