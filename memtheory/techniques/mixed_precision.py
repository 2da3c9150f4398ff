r"""Mixed-precision training: bytes per parameter, loss scaling, and what autocast keeps.

Mixed precision as in Micikevicius et al. 2018 and the ZeRO paper keeps
16-bit weights and gradients for the forward and backward passes and, for the
optimizer, an fp32 master copy of the weights and fp32 optimizer state. With
Adam that is :math:`2 + 2 + (4 + 4 + 4) = 16` bytes per parameter
(Rajbhandari et al. 2020, Section 3.1: "2Ψ + 2Ψ + KΨ" with :math:`K = 12`):
as much as plain fp32 Adam, before activations.

The numbers here are not typed in: :func:`parameter_bytes` asks the
breakdown convention for the memory of a model of :math:`P` parameters and
divides by :math:`P`.

PyTorch's ``torch.autocast`` works differently from this "master weights"
recipe: the weights stay fp32 (they *are* the master copy), gradients and
optimizer state are fp32, and autocast casts each weight a matrix product or
convolution reads to 16 bits once per forward pass (its cast cache). Autograd
keeps those 16-bit copies for the backward pass, so they cost up to 2 more
bytes per parameter of such layers until the backward pass frees them
(:func:`autocast_weight_copy_bytes`). The activations that autocast runs in
16 bits are kept in 16 bits; softmax, layer norm and losses run in fp32.

Loss scaling costs no memory per parameter: ``GradScaler`` keeps one fp32
scale and one int32 growth counter (:data:`LOSS_SCALER_BYTES`), whatever the
model's size; scaling multiplies the loss, and unscaling works in place on
the gradients.

Derived in the book's chapter "Precision".

Examples
--------
>>> parameter_bytes(optimizer="adam", precision="mixed-fp16")
{'parameters': 2, 'gradients': 2, 'optimizer_state': 8, 'master_weights': 4}
>>> bytes_per_parameter(optimizer="adam", precision="mixed-fp16")
16
>>> bytes_per_parameter(optimizer="adam", precision="fp32")
16
"""

from __future__ import annotations

import sympy as sp

from memtheory.counts import ModelCounts
from memtheory.dtypes import DTypeLike, dtype
from memtheory.memory import training_memory
from memtheory.optimizers import OptimizerLike
from memtheory.precision import Precision, PrecisionLike
from memtheory.symbols import P

__all__ = [
    "LOSS_SCALER_BYTES",
    "PARAMETER_COMPONENTS",
    "autocast",
    "autocast_weight_copy_bytes",
    "bytes_per_parameter",
    "parameter_bytes",
]

PARAMETER_COMPONENTS = ("parameters", "gradients", "optimizer_state", "master_weights")
"""The components that scale with the parameter count: the model states."""

LOSS_SCALER_BYTES = 4 + 4
"""``GradScaler``'s state: a one-element fp32 scale and a one-element int32 growth tracker."""


def parameter_bytes(
    *, optimizer: OptimizerLike = "adam", precision: PrecisionLike = "mixed-fp16"
) -> dict[str, sp.Expr]:
    """Bytes per parameter of each model-state component, from the breakdown convention.

    Parameters
    ----------
    optimizer : str or Optimizer, default "adam"
    precision : str or Precision, default "mixed-fp16"

    Returns
    -------
    dict of str to sympy expression
        ``parameters``, ``gradients``, ``optimizer_state`` and, in mixed
        precision, ``master_weights``: bytes per parameter.

    Examples
    --------
    >>> parameter_bytes(optimizer="sgd", precision="mixed-bf16")
    {'parameters': 2, 'gradients': 2, 'optimizer_state': 0, 'master_weights': 4}
    """
    counts = ModelCounts(parameters=P, activations=0, input_elements=0)
    memory = training_memory(counts, optimizer=optimizer, precision=precision)
    return {
        name: sp.simplify(memory[name] / P)
        for name in PARAMETER_COMPONENTS
        if name in memory.components
    }


def bytes_per_parameter(
    *, optimizer: OptimizerLike = "adam", precision: PrecisionLike = "mixed-fp16"
) -> sp.Expr:
    """Total model-state bytes per parameter: 16 for Adam in mixed precision.

    Examples
    --------
    >>> bytes_per_parameter(optimizer="sgd+momentum", precision="mixed-fp16")
    12
    """
    return sp.Add(*parameter_bytes(optimizer=optimizer, precision=precision).values())


def autocast(low: DTypeLike = "fp16") -> Precision:
    """Return the precision of ``torch.autocast`` training: fp32 model states, 16-bit activations.

    There is no separate master copy: the fp32 weights are it. Add
    :func:`autocast_weight_copy_bytes` for the 16-bit weight copies autocast
    makes for the forward pass.

    Examples
    --------
    >>> p = autocast("bf16")
    >>> p.parameters.name, p.gradients.name, p.activations.name, p.master_weights
    ('fp32', 'fp32', 'bf16', None)
    """
    return Precision.autocast(low)


def autocast_weight_copy_bytes(parameters: sp.Expr | int, low: DTypeLike = "fp16") -> sp.Expr:
    """Bytes of autocast's 16-bit copies of ``parameters`` weights (kept until the backward pass).

    Count only the weights of layers autocast runs in 16 bits (dense,
    convolution, attention projections); embeddings and normalisation layers
    stay fp32.

    Examples
    --------
    >>> autocast_weight_copy_bytes(10**6)
    2000000
    """
    return sp.sympify(parameters) * dtype(low).bytes
