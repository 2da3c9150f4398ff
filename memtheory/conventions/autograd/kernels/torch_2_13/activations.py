r"""How PyTorch 2.13 runs Hugging Face's ``gelu_new``: seven element-wise operations, each a node.

``NewGELUActivation.forward`` (transformers 5.24) is
``0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))`` with
:math:`c = \sqrt{2/\pi}`. Python evaluates it left to right: ``h = 0.5 * x``
first, then ``pow``, the product by 0.044715, the sum with ``x``, the
product by :math:`c`, ``tanh``, the sum with 1 and the product ``h * u``.
Products and sums with a Python number keep nothing; ``pow`` keeps ``x``,
``tanh`` its output and the last product both of its factors.

Examples
--------
>>> from memtheory.layers import NewGELU
>>> from memtheory.symbols import B, S
>>> [s.label for s in new_gelu(NewGELU(), ((B, S, 8),)).stages]
['0.5 x', 'pow', '0.044715 p', 'x + q', 'c r', 'tanh', '1 + t', 'h u']
"""

from __future__ import annotations

from memtheory.dtypes import DTypeLike
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec
from memtheory.layers.kernel_plans import register_plan

__all__ = ["new_gelu"]


@register_plan("memtheory.layers.activations.NewGELU")
def new_gelu(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return ``gelu_new``'s saved tensors and its eight backward nodes, in creation order.

    Measured on CPU (PyTorch 2.13, ``tests/pytorch/test_new_gelu.py``). Each
    node's gradient is a new input-sized tensor, in the compute dtype (the
    input's: autocast leaves element-wise operations alone), except the two
    sums', which hand theirs on: ``x + q`` to both ``x`` and ``q``. ``pow``'s
    backward, ``grad * (3 * x.pow(2))``, allocates two temporaries. The three
    gradients of ``x`` (from ``x + q``, ``pow`` and ``0.5 * x``) are added as
    autograd adds them. In eval mode under ``no_grad`` nothing is kept: at
    most two input-sized tensors (``0.5 * x`` and one step of the chain) live
    beside the output.
    """
    shape = tuple(input_shapes[0])
    full = TensorSpec("intermediate", shape)
    stages = (
        Stage("0.5 x", edges=((-1, full),)),
        Stage("pow", (0,), edges=((-1, full),), temporaries=(full, full)),
        Stage("0.044715 p", edges=((1, full),)),
        Stage("x + q", gradient_is_view=True, edges=((-1, full), (2, full))),
        Stage("c r", edges=((3, full),)),
        Stage("tanh", (2,), edges=((4, full),)),
        Stage("1 + t", gradient_is_view=True, edges=((5, full),)),
        Stage("h u", (1, 3), edges=((0, full), (6, full))),
    )
    # eval under no_grad: 0.5 x lives to the end, and each step of the chain frees the one
    # before it once the next exists: at most two input-sized tensors beside the output
    return Autograd(saved=layer.saved_for_backward(shape), stages=stages, no_grad=(full, full))
