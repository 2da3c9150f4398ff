r"""Logit soft-capping, :math:`c \tanh(x / c)`: Gemma 2's attention scores and final logits.

Gemma 2 bounds its attention scores (``attn_logit_softcapping``, 50) and its
output logits (``final_logit_softcapping``, 30) smoothly: divide by the cap,
take the hyperbolic tangent, multiply by the cap. The division and the
product by a number keep nothing for the backward pass; ``tanh`` keeps its
output, one tensor of the capped tensor's shape in the compute dtype.

Examples
--------
>>> from memtheory.symbols import B, S
>>> [t.shape for t in SoftCap(30.0).saved_for_backward((B, S, 256000))]
[(B, S, 256000)]
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["SoftCap", "SoftCappedAttention"]


def _check_cap(cap: object, owner: str) -> None:
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not cap > 0:
        raise InvalidSizeError(f"{owner}: cap must be a positive number, got {cap!r}.")


@dataclass(frozen=True)
class SoftCap(Layer):
    r""":math:`c \tanh(x / c)`: a new tensor of the input's shape; keeps the ``tanh`` output.

    Measured in training on Gemma 2's final logits (CPU, PyTorch 2.13,
    ``tests/pytorch/test_family_autograd.py``).

    Parameters
    ----------
    cap : float
        :math:`c` (Gemma 2's ``final_logit_softcapping``).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> SoftCap(30.0).output_shape((B, S, 8)), SoftCap(30.0).describe()
    ((B, S, 8), 'cap 30')
    """

    cap: float
    name: str | None = None
    kind = "SoftCap"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (Gemma 2)
    #: Its forward's transients (x / cap, tanh) were not checked in inference.
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        _check_cap(self.cap, self.label)

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input's shape."""
        return tuple(input_shape)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return ``tanh``'s output (the product by the cap is a further new tensor)."""
        return (TensorSpec("intermediate", tuple(input_shape), label="tanh"),)

    def describe(self) -> str:
        """Show the cap."""
        return f"cap {self.cap:g}"


@dataclass(frozen=True)
class SoftCappedAttention(GroupedQueryAttention):
    r""":class:`~memtheory.layers.GroupedQueryAttention` whose scores are soft-capped first.

    Hugging Face's eager Gemma 2 attention computes ``tanh(scores / cap) *
    cap`` before the mask and the softmax; ``tanh`` keeps its output, one
    more :math:`(B, a, S, S)` tensor in the compute dtype. A memory-efficient
    kernel (``flash=True``; FlashAttention-2 takes ``softcap``) keeps no
    :math:`S^2` tensor, as without the cap. The eager path is measured
    against Gemma 2 on CPU (PyTorch 2.13, ``tests/pytorch/test_family_autograd.py``):
    exact, its backward's peak included.

    Parameters
    ----------
    softcap : float, default 50.0
        The cap (``attn_logit_softcapping``).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> attn = SoftCappedAttention(4, kv_heads=2, head_dim=8, softcap=50.0)
    >>> [t.label for t in attn.autograd(((B, S, 32), (B, S, 16), (B, S, 16))).saved]
    ['queries', 'keys', 'tanh', 'softmax', 'values']
    """

    softcap: float = 50.0
    kind = "SoftCappedAttention"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (Gemma 2, eager)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_cap(self.softcap, self.label)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return :class:`GroupedQueryAttention`'s storages and the ``tanh`` output (eager).

        Its kernel plan says so:
        :func:`memtheory.conventions.autograd.kernels.torch_2_13.attention.soft_capped_attention`.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def describe(self) -> str:
        """Add the cap to the attention's description."""
        return f"{super().describe()}, softcap {self.softcap:g}"
