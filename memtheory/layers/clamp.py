"""An in-place clamp, OLMo's ``clip_qkv``: it keeps a copy of what it overwrites.

OLMo and OLMoE (transformers 5.24 ``models/olmo/modeling_olmo.py``) clamp
their query, key and value projections in place when ``clip_qkv`` is set
(``query_states.clamp_(min=-clip_qkv, max=clip_qkv)``). ``clamp``'s backward
needs the values before the clamp, and an in-place operation overwrites them:
autograd saves a copy of its input first (measured on CPU, PyTorch 2.13: one
input-sized copy in the input's dtype per clamp). Its backward makes a new
input-sized gradient.

Examples
--------
>>> from memtheory.symbols import B, S
>>> spec = Clamp(8.0).autograd(((B, S, 32),))
>>> spec.aliases_input, [(t.label, t.shape) for t in spec.saved]
(True, [('input before the clamp', (B, S, 32))])
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidArgumentError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec

__all__ = ["Clamp"]


@dataclass(frozen=True)
class Clamp(Layer):
    """Clamp to ``[-limit, limit]`` in place; the backward keeps a copy of the input.

    Under the autograd convention tiny OLMo steps with ``clip_qkv`` are exact
    (``tests/pytorch/test_family_autograd.py``). In inference under
    ``no_grad`` it allocates nothing; that peak was not checked.

    Parameters
    ----------
    limit : float
        The bound, ``clip_qkv``.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> Clamp(8.0).output_shape((B, S, 32)), Clamp(8.0).activation_count((B, S, 32))
    ((B, S, 32), 0)
    """

    limit: float
    name: str | None = None
    kind = "Clamp"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (OLMo's clip_qkv)
    autograd_inference_checked = False

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
            raise InvalidArgumentError(
                f"{self.label}: limit must be a positive number (clip_qkv), got {limit!r}."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input shape."""
        return tuple(input_shape)

    def stores_output(self) -> bool:
        """Return False: it clamps its input in place."""
        return False

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the copy of its input that autograd makes before the clamp overwrites it."""
        return (TensorSpec("intermediate", tuple(input_shape), label="input before the clamp"),)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Its input's copy, saved; its output is its input; nothing under ``no_grad``."""
        return Autograd(
            saved=self.saved_for_backward(tuple(input_shapes[0])), aliases_input=True, no_grad=()
        )

    def describe(self) -> str:
        """Say its bound."""
        return f"[-{self.limit}, {self.limit}], in place"
