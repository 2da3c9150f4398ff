r"""What a Hugging Face model's forward makes once for every layer: positions and a causal mask.

Before its layers run, ``FalconModel.forward`` (transformers 5.24
``models/falcon/modeling_falcon.py``) makes the positions
(``torch.arange(S) + past_seen_tokens``, one int64 row for the batch) and,
with ``create_causal_mask`` on the eager path, the additive causal mask,
:math:`(B, 1, S, S)` in the embeddings' dtype (the parameters' dtype: fp32
under autocast). It hands both to every layer and keeps them in variables
until it returns: nothing saves them for the backward. Each is a row of its
own that no layer reads, inside the model's module call
(:attr:`~memtheory.network.Network.calls`), which holds it until the call
returns.

Examples
--------
>>> from memtheory.symbols import B, S
>>> CausalMask().output_shape((B, S)), Positions().output_shape((B, S))
((B, 1, S, S), (S,))
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import RankError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape

__all__ = ["CausalMask", "Positions"]


def _sequence(layer: Layer, input_shape: Shape) -> tuple[sp.Expr, sp.Expr]:
    """Return (batch, sequence) of the token ids, or refuse another input."""
    if len(input_shape) != 2:
        raise RankError(
            f"{layer.label}: reads the token ids, (batch, sequence), got "
            f"{describe_shape(tuple(input_shape))}. Wire it with "
            f"Node({layer.kind}(...), inputs=('input_ids',))."
        )
    return sp.sympify(input_shape[0]), sp.sympify(input_shape[1])


@dataclass(frozen=True)
class Positions(Layer):
    """The int64 positions ``arange(S) + past_seen_tokens``: one per position, for the batch.

    Its forward makes the ``arange`` and the sum (the positions), and frees
    the ``arange``. Nothing saves them; they live until the model's call
    returns. Measured on CPU (PyTorch 2.13) inside tiny Falcon models
    (``tests/pytorch/test_family_autograd.py``).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> spec = Positions().autograd(((B, S),))
    >>> spec.compute_dtype.name, [t.shape for t in spec.transients]
    ('int64', [(S,)])
    """

    name: str | None = None
    kind = "Positions"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (Falcon)
    autograd_inference_checked = False

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(S,)``: one position per token, shared by the batch."""
        return (_sequence(self, input_shape)[1],)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Zero: nothing keeps the positions for the backward."""
        return sp.Integer(0)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: whole numbers need no gradient."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Nothing saved; int64 positions, and the ``arange`` they are summed from, freed."""
        sequence = self.output_shape(tuple(input_shapes[0]))[0]
        int64 = as_dtype("int64")
        return Autograd(
            reads_ids=True,
            compute_dtype=int64,
            transients=(TensorSpec("intermediate", (sequence,), int64, label="arange"),),
        )


@dataclass(frozen=True)
class CausalMask(Layer):
    r"""The additive causal mask of eager attention, :math:`(B, 1, S, S)`, made once per forward.

    ``create_causal_mask`` (transformers 5.24, eager path) compares the
    positions into an :math:`S \times S` ``bool`` tensor and turns it into
    the additive mask with ``torch.where`` (0 or the dtype's minimum), in the
    embeddings' dtype: the parameters' (fp32 under autocast). Its forward
    frees the ``bool`` comparison. Nothing saves the mask (the attention adds
    it to its scores); it lives until the model's call returns. Measured on
    CPU (PyTorch 2.13) inside tiny Falcon models
    (``tests/pytorch/test_family_autograd.py``).

    Parameters
    ----------
    boolean : bool, default False
        The SDPA path's mask (``attn_implementation="sdpa"``, which Falcon
        materialises with ``allow_is_causal_skip=False``): ``bool``, one
        :math:`S \times S` storage that the batch dimension expands (stride 0);
        its storage was read on CPU, its forward's transients were not.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> CausalMask(boolean=True).autograd(((B, S),)).output_elements
    S**2
    >>> spec = CausalMask().autograd(((B, S),))
    >>> spec.autocast, [(t.shape, t.dtype.name) for t in spec.transients]
    ('parameters', [((S, S), 'bool')])
    """

    boolean: bool = False
    name: str | None = None
    kind = "CausalMask"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py (Falcon)
    autograd_inference_checked = False

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(B, 1, S, S)``."""
        batch, sequence = _sequence(self, input_shape)
        return (batch, sp.Integer(1), sequence, sequence)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Zero: nothing keeps the mask for the backward."""
        return sp.Integer(0)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: it needs no gradient."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Nothing saved; the mask in the parameters' dtype, its ``bool`` comparison freed."""
        sequence = _sequence(self, tuple(input_shapes[0]))[1]
        if self.boolean:
            return Autograd(
                reads_ids=True, compute_dtype=as_dtype("bool"), output_elements=sequence**2
            )
        return Autograd(
            reads_ids=True,
            autocast="parameters",
            transients=(
                TensorSpec("intermediate", (sequence, sequence), as_dtype("bool"),
                           label="causal comparison"),
            ),
        )
