"""Where a layer finds how a PyTorch release runs it: a registry of kernel plans by layer type.

A layer says what it is (shapes, parameters, the tensors it computes); how a
given PyTorch release's kernels keep those tensors for the backward pass
(eager or fused attention, the CPU flash kernel, the eval fast path) is a
*kernel plan*, a function kept in a versioned module of the autograd
convention (:mod:`memtheory.conventions.autograd.kernels`). The plans register
themselves here by layer type, as sympy's printers find ``_print_<Class>`` by
walking the class's method resolution order; a layer whose
:meth:`~memtheory.layers.Layer.autograd` has a plan hands the question to it
(:func:`planned_autograd`). This module holds no PyTorch knowledge, only the
lookup, so the layers need not import the convention: the first lookup loads the
plans (:data:`PLANS_MODULE`, named, not imported here) if nothing has yet.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Protocol

from memtheory.dtypes import DTypeLike
from memtheory.errors import UnsupportedError
from memtheory.layers.base import Autograd, Layer, Shape

__all__ = ["PLANS_MODULE", "KernelPlan", "plan_for", "planned_autograd", "register_plan"]


class KernelPlan(Protocol):
    """How a PyTorch release keeps storages for one layer type (see :meth:`Layer.autograd`)."""

    def __call__(
        self,
        layer: Layer,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool,
        input_dtype: DTypeLike | None,
        autocast: DTypeLike | None,
    ) -> Autograd:
        """Return the layer's :class:`~memtheory.layers.base.Autograd` for these inputs."""
        ...


_PLANS: dict[str, KernelPlan] = {}

PLANS_MODULE = "memtheory.conventions.autograd.kernels"
"""The module whose import registers the plans (``import memtheory`` no longer imports it)."""


def _path(layer_type: type) -> str:
    return f"{layer_type.__module__}.{layer_type.__qualname__}"


def register_plan(layer_type: type[Layer] | str) -> Callable[[KernelPlan], KernelPlan]:
    """Register the decorated function as the kernel plan of ``layer_type`` and its subclasses.

    ``layer_type`` is the class, or its dotted path
    (``"memtheory.layers.attention.MultiHeadAttention"``): a plan named by path
    leaves the layer's module unimported until a network uses it.

    Examples
    --------
    >>> from memtheory.layers import MultiHeadAttention
    >>> plan_for(MultiHeadAttention(4)).__module__
    'memtheory.conventions.autograd.kernels.torch_2_13.attention'
    """
    key = layer_type if isinstance(layer_type, str) else _path(layer_type)

    def register(plan: KernelPlan) -> KernelPlan:
        _PLANS[key] = plan
        return plan

    return register


def plan_for(layer: Layer) -> KernelPlan | None:
    """Return the kernel plan of the nearest class of ``layer`` that has one, or None.

    Examples
    --------
    >>> from memtheory.layers import Dense
    >>> from memtheory.layers.softcap import SoftCappedAttention
    >>> plan_for(Dense(4)) is None
    True
    >>> plan_for(SoftCappedAttention(4, head_dim=8)).__name__
    'soft_capped_attention'
    """
    if not _PLANS:  # a process that imported a layer but not the convention
        import_module(PLANS_MODULE)
    for cls in type(layer).__mro__:
        plan = _PLANS.get(_path(cls))
        if plan is not None:
            return plan
    return None


def planned_autograd(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Ask the layer's kernel plan what its backward keeps; refuse clearly when none is loaded.

    Examples
    --------
    >>> from memtheory.layers import MultiHeadAttention
    >>> from memtheory.symbols import B, S
    >>> [s.label for s in planned_autograd(MultiHeadAttention(4), ((B, S, 8),)).saved][1:3]
    ['queries Q', 'keys K']
    """
    plan = plan_for(layer)
    if plan is None:
        raise UnsupportedError(
            f"no kernel plan says how PyTorch runs {layer.label}: the plans register when "
            f"{PLANS_MODULE} is imported (the first lookup does it)."
        )
    return plan(
        layer, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
    )
