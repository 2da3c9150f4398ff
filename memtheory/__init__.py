"""memtheory: derive, compute and teach how much memory a neural network needs.

Every quantity is an exact sympy expression in bytes or elements: it can keep
symbols (batch ``B``, image size ``H``, ...) for what-if analysis, or be
evaluated exactly, or over NumPy grids.

The names here are the supported API, by audience; everything else lives in its
subpackage (``memtheory.layers``, ``memtheory.models``, ``memtheory.techniques``,
``memtheory.finetuning``, ``memtheory.recipes``, ``memtheory.estimate``, ...).

**Learner**: build a network layer by layer and count what training keeps.
    :class:`Network`, :class:`Node`, :class:`Input`, :class:`Dense`,
    :class:`Conv2d`, :class:`MaxPool2d`, :class:`AvgPool2d`, :class:`Flatten`,
    :class:`ReLU`, :class:`Sigmoid`, :class:`Softmax`, :class:`BatchNorm2d`,
    :class:`Dropout`, :class:`Add`, :class:`Concat`, :class:`Embedding`,
    :class:`LayerNorm`, :class:`MultiHeadAttention`, :class:`CrossEntropyLoss`;
    :class:`ModelCounts`, :func:`training_memory`, :func:`inference_memory`;
    :func:`format_bytes`, :func:`parse_bytes`, :func:`convert`, :func:`evaluate`.

**Practitioner**: a real model, a card, a question ("what batch fits?").
    :class:`MemoryBreakdown`, :class:`Footprint`, :class:`Table`, :class:`Column`;
    :func:`optimizer`, :func:`precision`, :func:`dtype`, :func:`convention`;
    :func:`max_batch`, :func:`max_sequence_length`, :func:`max_value`,
    :func:`sensitivity`, :func:`compare_scenarios`; :func:`evaluate_grid`,
    :func:`compile_exact`. Named models are in :mod:`memtheory.models`
    (``preset("llama-3-8b")``), techniques in :mod:`memtheory.techniques`.

**Tracer**: exact figures for any PyTorch module.
    :class:`AutogradConvention` (``convention="autograd"``), and, with the
    ``torch`` extra, :func:`memtheory.torch.trace`, :func:`memtheory.torch.track`
    and :func:`memtheory.torch.measure`.

**Errors**: :class:`MemtheoryError` (the base of all), :class:`InvalidArgumentError`,
:class:`ShapeError`, :class:`KernelTooLargeError`, :class:`UnsupportedError`,
:class:`DoesNotFitError`; the rest are in :mod:`memtheory.errors`.

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

import sys
from importlib import import_module
from importlib.util import find_spec
from types import ModuleType
from typing import TYPE_CHECKING, Any

from memtheory.errors import (
    DoesNotFitError,
    InvalidArgumentError,
    KernelTooLargeError,
    MemtheoryError,
    ShapeError,
    UnknownAttributeError,
    UnsupportedError,
)

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from memtheory.conventions import AutogradConvention, convention
    from memtheory.counts import ModelCounts
    from memtheory.dtypes import dtype
    from memtheory.evaluation import compile_exact, evaluate, evaluate_grid
    from memtheory.footprint import Footprint
    from memtheory.layers import (
        Add,
        AvgPool2d,
        BatchNorm2d,
        Concat,
        Conv2d,
        CrossEntropyLoss,
        Dense,
        Dropout,
        Embedding,
        Flatten,
        Input,
        LayerNorm,
        MaxPool2d,
        MultiHeadAttention,
        ReLU,
        Sigmoid,
        Softmax,
    )
    from memtheory.memory import MemoryBreakdown, inference_memory, training_memory
    from memtheory.network import Network, Node
    from memtheory.optimizers import optimizer
    from memtheory.precision import precision
    from memtheory.tables import Column, Table
    from memtheory.units import convert, format_bytes, parse_bytes
    from memtheory.whatif import (
        compare_scenarios,
        max_batch,
        max_sequence_length,
        max_value,
        sensitivity,
    )

__version__ = "0.1.0"

__all__ = [
    # learner: a network, its layers, what training keeps, in bytes
    "Add",
    "AvgPool2d",
    "BatchNorm2d",
    "Concat",
    "Conv2d",
    "CrossEntropyLoss",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Input",
    "LayerNorm",
    "MaxPool2d",
    "ModelCounts",
    "MultiHeadAttention",
    "Network",
    "Node",
    "ReLU",
    "Sigmoid",
    "Softmax",
    "convert",
    "evaluate",
    "format_bytes",
    "inference_memory",
    "parse_bytes",
    "training_memory",
    # practitioner: results, assumptions, questions
    "Column",
    "Footprint",
    "MemoryBreakdown",
    "Table",
    "compare_scenarios",
    "compile_exact",
    "convention",
    "dtype",
    "evaluate_grid",
    "max_batch",
    "max_sequence_length",
    "max_value",
    "optimizer",
    "precision",
    "sensitivity",
    # tracer: the exact convention (memtheory.torch traces, tracks and measures)
    "AutogradConvention",
    # errors
    "DoesNotFitError",
    "InvalidArgumentError",
    "KernelTooLargeError",
    "MemtheoryError",
    "ShapeError",
    "UnsupportedError",
    "__version__",
]

_LAZY = {
    "Add": "memtheory.layers",
    "AutogradConvention": "memtheory.conventions",
    "BatchNorm2d": "memtheory.layers",
    "Column": "memtheory.tables",
    "Concat": "memtheory.layers",
    "Conv2d": "memtheory.layers",
    "Dense": "memtheory.layers",
    "Flatten": "memtheory.layers",
    "Footprint": "memtheory.footprint",
    "Input": "memtheory.layers",
    "LayerNorm": "memtheory.layers",
    "MemoryBreakdown": "memtheory.memory",
    "ModelCounts": "memtheory.counts",
    "Network": "memtheory.network",
    "Node": "memtheory.network",
    "Table": "memtheory.tables",
    "compile_exact": "memtheory.evaluation",
    "convention": "memtheory.conventions",
    "convert": "memtheory.units",
    "dtype": "memtheory.dtypes",
    "evaluate": "memtheory.evaluation",
    "evaluate_grid": "memtheory.evaluation",
    "format_bytes": "memtheory.units",
    "inference_memory": "memtheory.memory",
    "optimizer": "memtheory.optimizers",
    "parse_bytes": "memtheory.units",
    "precision": "memtheory.precision",
    "training_memory": "memtheory.memory",
    "AvgPool2d": "memtheory.layers",
    "CrossEntropyLoss": "memtheory.layers",
    "Dropout": "memtheory.layers",
    "Embedding": "memtheory.layers",
    "MaxPool2d": "memtheory.layers",
    "MultiHeadAttention": "memtheory.layers",
    "ReLU": "memtheory.layers",
    "Sigmoid": "memtheory.layers",
    "Softmax": "memtheory.layers",
    "compare_scenarios": "memtheory.whatif",
    "max_batch": "memtheory.whatif",
    "max_sequence_length": "memtheory.whatif",
    "max_value": "memtheory.whatif",
    "sensitivity": "memtheory.whatif",
}
"""Public names imported on first use (all but the errors), so that ``import memtheory`` does
not import sympy: ``memtheory estimate`` answers a question it answered before without it
(:mod:`memtheory.estimate.answer_cache`)."""

_SUBPACKAGES = ("exercises", "models", "techniques", "whatif", "worked_examples")
"""Subpackages reachable as attributes (``memtheory.models``), imported on first use."""

def __getattr__(name: str) -> Any:
    """Import a lazily loaded public name or subpackage on first use, then keep it here."""
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES or _is_module(name):
        value = import_module(f"memtheory.{name}")
    else:
        raise UnknownAttributeError(f"module 'memtheory' has no attribute {name!r}")
    globals()[name] = value
    return value


def _is_module(name: str) -> bool:
    """Whether ``memtheory.NAME`` is a public module (``memtheory.units``, ...).

    ``import memtheory`` imported many of them before its names became lazy, and code
    written then reads them as attributes (``memtheory.units.UNITS``) without importing them.
    """
    return not name.startswith("_") and find_spec(f"memtheory.{name}") is not None


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


class _Package(ModuleType):
    """memtheory's module type: the public function ``precision`` keeps its name.

    Importing the submodule ``memtheory.precision`` sets the package's attribute of
    that name to the module; imported eagerly, the function was bound after it.
    Imported lazily, the module may come second, so it is not let to replace the function.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "precision" and isinstance(value, ModuleType):
            value = value.precision
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
