"""Kernel plans: how a PyTorch release keeps each layer type's storages, one module per release.

A layer says what it is; a plan, a function registered for the layer's type
(:func:`memtheory.layers.kernel_plans.register_plan`), says which tensors the
release's kernels save for the backward pass, their dtypes and the backward
nodes that read them. The autograd convention asks
:func:`autograd_of`, which dispatches on the layer's type (walking its class
hierarchy, as sympy's printers find ``_print_<Class>``) and falls back to the
layer's own :meth:`~memtheory.layers.Layer.autograd` for layers that carry no
kernel choices.

* :mod:`~memtheory.conventions.autograd.kernels.torch_2_13.attention`: the
  attention family (eager, ``scaled_dot_product_attention``'s CPU flash and
  math paths, ``nn.MultiheadAttention``'s eval fast path, and one CUDA flash
  assumption shared by every attention layer).
* :mod:`~memtheory.conventions.autograd.kernels.torch_2_13.losses`: MSE, L1,
  BCE with logits, cross-entropy and Hugging Face's language-model loss.
* :mod:`~memtheory.conventions.autograd.kernels.torch_2_13.norms`: Llama's
  RMS norm and ``torch.nn.RMSNorm`` (fp32 upcasts, the decomposed backward).
* :mod:`~memtheory.conventions.autograd.kernels.torch_2_13.optimizers`: the
  temporaries of ``torch.optim``'s for-loop, foreach and fused steps, which
  the convention adds at its "optimizer step" moment.

Examples
--------
>>> from memtheory.layers import Dense, MultiHeadAttention
>>> from memtheory.symbols import B, S
>>> [s.label for s in autograd_of(MultiHeadAttention(4, flash=True), ((B, S, 8),)).saved]
['input', 'queries Q', 'keys K', 'values V', 'context PV (heads merged)', 'logsumexp']
>>> autograd_of(Dense(3), ((B, 8),)) == Dense(3).autograd(((B, 8),))
True
"""

from __future__ import annotations

from memtheory.conventions.autograd.kernels.torch_2_13 import attention, losses, norms, optimizers
from memtheory.dtypes import DTypeLike
from memtheory.layers.base import Autograd, Layer, Shape
from memtheory.layers.kernel_plans import plan_for

__all__ = ["RELEASE", "attention", "autograd_of", "losses", "norms", "optimizers"]

RELEASE = "2.13"
"""The PyTorch release whose kernels these plans follow (measured on CPU)."""


def autograd_of(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return what the backward pass keeps for ``layer``: its kernel plan's, or the layer's own.

    Examples
    --------
    >>> from memtheory.layers import ReLU
    >>> from memtheory.symbols import B
    >>> autograd_of(ReLU(), ((B, 8),)).saved[0].role
    'output'
    """
    plan = plan_for(layer)
    if plan is None:
        return layer.autograd(
            input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )
    return plan(
        layer, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
    )
