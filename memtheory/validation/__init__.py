"""Validation: the models memtheory's predictions are checked on, and the checks' tables.

The top of the package, and optional: it needs PyTorch (the ``torch`` extra), and
nothing else in memtheory imports it. The tests, the benchmarks and the book's
measurement chapters use it.

==================  ===============================================================
module              what it holds
==================  ===============================================================
zoo                 :data:`ZOO`: sequential models (the StackExchange CNN, the forum's
                    MLP, ...) as a memtheory Network beside the same PyTorch module
reference_models    :data:`PAIRS`: residual and transformer reference modules in plain
                    PyTorch beside the builders' networks (ResNet, GPT-2, BERT, ViT)
accuracy            :func:`compare_with_measurement` and :func:`accuracy_table`: each
                    convention's prediction beside the measured step
gpu_measurements    :func:`record_measurements`: the zoo measured on a CUDA device,
                    written as JSON for the book
peers               the peers' formulas (accelerate's ``estimate-memory``, DeepSpeed's
                    ZeRO-2/3 model states, 16 and 18 bytes per parameter), written out
                    from their sources for the benchmarks (no PyTorch needed)
==================  ===============================================================

Examples
--------
>>> from memtheory.validation import ZOO
>>> "StackExchange CNN" in ZOO
True
"""


from typing import Any

from memtheory._lazy import lazy_attribute

__all__ = [
    "PAIRS",
    "ZOO",
    "Comparison",
    "ReferencePair",
    "ZooModel",
    "accuracy_table",
    "compare_with_measurement",
]

_HOMES = {
    "ZOO": "memtheory.validation.zoo",
    "ZooModel": "memtheory.validation.zoo",
    "PAIRS": "memtheory.validation.reference_models",
    "ReferencePair": "memtheory.validation.reference_models",
    "Comparison": "memtheory.validation.accuracy",
    "accuracy_table": "memtheory.validation.accuracy",
    "compare_with_measurement": "memtheory.validation.accuracy",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so that this package imports without PyTorch."""
    return lazy_attribute('memtheory.validation', _HOMES, name)


def __dir__() -> list[str]:
    return sorted(__all__)
