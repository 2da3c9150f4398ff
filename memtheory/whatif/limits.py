"""Memory limits and the bytes compared with them: ``"24 GiB"`` in, bytes out.

* :func:`memory_limit`: a limit in bytes, from a number or a labelled size.
* :func:`total_bytes`: the bytes of a model (or of a memory result, or of an
  expression) to compare with a limit.

Peak or total
-------------
Every what-if function that takes a model says which bytes count with
``by`` (what :class:`~memtheory.footprint.Footprint` defines as its ``peak``
and ``total``):

``by="peak"`` (the default)
    The most bytes alive at once: the convention's traced peak (the autograd
    convention traces a timeline). For a convention without a timeline
    (breakdown, rule of thumb) every component is alive at once, and the peak
    equals the total.
``by="total"``
    The sum of the listed components. Under the autograd convention it is not
    the peak: not every tensor is alive at the same time, and temporaries that
    come and go during the step are not components (in the example of
    :func:`total_bytes` the total is the smaller of the two).

Examples
--------
>>> from memtheory import ModelCounts
>>> memory_limit("24 GiB")
25769803776
>>> total_bytes(ModelCounts.per_sample(parameters=10, activations=2, input_elements=1),
...             optimizer="sgd")
20*B + 80
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, TypeAlias

import sympy as sp

from memtheory._shown import shown
from memtheory.conventions import ConventionLike, Model
from memtheory.counts import ModelCounts
from memtheory.errors import EvaluationError, UnknownNameError, UnsupportedError
from memtheory.footprint import Footprint
from memtheory.memory import inference_memory, training_memory
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.precision import PrecisionLike
from memtheory.recipes import Setup
from memtheory.units import parse_bytes

__all__ = ["By", "LimitLike", "Quantity", "memory_limit", "total_bytes"]

LimitLike: TypeAlias = str | int | sp.Expr
"""A memory limit: a number of bytes or a labelled size such as ``"24 GiB"``."""

Quantity: TypeAlias = Model | Footprint | sp.Expr | int
"""What the what-if functions take: a model, a memory result, or bytes."""

By = Literal["peak", "total"]
"""Which bytes count: the most alive at once, or the sum of the components (see above)."""

BY_CHOICES: tuple[By, ...] = ("peak", "total")


def memory_limit(limit: LimitLike) -> sp.Rational:
    """Return a memory limit in bytes: a number of bytes, or text such as ``"24 GiB"``.

    Examples
    --------
    >>> memory_limit("80 GB"), memory_limit("24 GiB"), memory_limit(1000)
    (80000000000, 25769803776, 1000)
    """
    if isinstance(limit, str):
        value = parse_bytes(limit)
    elif isinstance(limit, numbers.Rational | sp.Expr) and not isinstance(limit, bool):
        value = (
            sp.Rational(int(limit)) if isinstance(limit, numbers.Integral) else sp.sympify(limit)
        )
    elif isinstance(limit, numbers.Real) and not isinstance(limit, bool) and math.isfinite(limit):
        value = sp.nsimplify(float(limit))
    else:
        raise EvaluationError(
            f"a memory limit must be a positive number of bytes or a size such as '24 GiB', "
            f"got {shown(limit)} ({type(limit).__name__})."
        )
    if not value.is_number or not value.is_positive or not value.is_finite or not value.is_real:
        raise EvaluationError(
            f"a memory limit must be a positive number of bytes or a size such as '24 GiB', "
            f"got {shown(limit)}."
        )
    return (
        sp.Rational(value) if value.is_Rational or value.is_Float else sp.Rational(sp.floor(value))
    )


def total_bytes(
    model: Quantity,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike | None = None,
    convention: ConventionLike | None = None,
    mode: Literal["training", "inference"] = "training",
    by: By = "peak",
    setup: Setup | str | None = None,
) -> sp.Expr:
    """Return the bytes to compare with a limit: the peak (default) or the total.

    Parameters
    ----------
    model : Network, ModelCounts, Footprint (a memory result) or expression
        A network or counts (its training or inference memory is derived), a
        memory result, or an expression in bytes (returned as it is).
    optimizer, precision, convention, setup
        As for :func:`~memtheory.memory.training_memory`; the optimizer is
        needed for training memory (a setup gives one).
    mode : {"training", "inference"}, default "training"
    by : {"peak", "total"}, default "peak"
        The most bytes alive at once, or the sum of the components (see the
        module's docstring). They differ only for a convention that traces a
        timeline (autograd).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, ReLU
    >>> net = Network([Input((8,)), Dense(8), ReLU(), Dense(2)])
    >>> total_bytes(net, optimizer="sgd", convention="autograd")
    Max(72*B + 728, 136*B + 440)
    >>> total_bytes(net, optimizer="sgd", convention="autograd", by="total")
    64*B + 720
    >>> sgd = total_bytes(net, optimizer="sgd", by="peak")
    >>> sgd == total_bytes(net, optimizer="sgd", by="total")
    True
    """
    if not isinstance(by, str) or by not in BY_CHOICES:
        raise UnknownNameError(f"by must be 'peak' or 'total', got {shown(by)}.")
    if not isinstance(mode, str) or mode not in ("training", "inference"):
        raise UnknownNameError(f"mode must be 'training' or 'inference', got {shown(mode)}.")
    if isinstance(model, Network | ModelCounts):
        if mode == "inference":
            memory = inference_memory(
                model, precision=precision, convention=convention, setup=setup
            )
        else:
            memory = training_memory(
                model, optimizer=optimizer, precision=precision, convention=convention,
                setup=setup,
            )
        return _bytes_by(memory, by)
    if isinstance(model, Footprint):
        return _bytes_by(model, by)
    if isinstance(model, sp.Basic | int):
        return sp.sympify(model)
    raise UnsupportedError(
        f"cannot take the memory of {type(model).__name__}: pass a Network, ModelCounts, "
        "a memory result (a Footprint such as MemoryBreakdown) or an expression in bytes."
    )


def _bytes_by(memory: Footprint, by: By) -> sp.Expr:
    """Choose between a result's peak and its total: the one place that does."""
    return memory.total if by == "total" else memory.peak
