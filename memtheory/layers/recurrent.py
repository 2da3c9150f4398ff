r"""Recurrent layers (LSTM, GRU): one cell unrolled over every step of a sequence.

A cell with :math:`g` gates (LSTM 4, GRU 3), :math:`F` input features and
:math:`H` hidden units has :math:`g(HF + H^2)` weights and, as in PyTorch,
two bias vectors :math:`g \cdot 2H`. Unrolled over :math:`S` steps, training
keeps each step's gate activations and states: memory linear in :math:`S`.
What is kept follows PyTorch's fused cells (``_thnn_fused_lstm_cell``,
``_thnn_fused_gru_cell``). Derived in the book's chapter "Transformers".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import RankError, UnsupportedError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape, elements

__all__ = ["GRU", "LSTM"]


@dataclass(frozen=True)
class _Recurrent(Layer):
    hidden_size: SizeLike
    bias: bool = True
    name: str | None = None
    gates: ClassVar[int] = 1
    input_rank = 3

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "hidden_size", as_size(self.hidden_size, "hidden_size", self.label)
        )

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless the input is ``(batch, sequence, features)``."""
        if len(input_shape) != 3:
            raise RankError(
                f"{self.label}: needs a 3-D input (batch, sequence, features) (batch first), "
                f"got {len(input_shape)}-D {describe_shape(tuple(input_shape))}."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, sequence, hidden_size)``: the hidden state of every step."""
        self.check_input(input_shape)
        return (input_shape[0], input_shape[1], self.hidden_size)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """Input-to-hidden and hidden-to-hidden weights of every gate."""
        self.check_input(input_shape)
        hidden = self.hidden_size
        return self.gates * hidden * (input_shape[-1] + hidden)

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """PyTorch's two bias vectors (``b_ih`` and ``b_hh``) of every gate."""
        return 2 * self.gates * self.hidden_size if self.bias else sp.Integer(0)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """Return ``weight_ih_l0``, ``weight_hh_l0`` and the biases, as ``nn.LSTM`` / ``GRU``."""
        self.check_input(input_shape)
        hidden = self.hidden_size
        rows = self.gates * hidden
        shapes: list[tuple[str, Shape]] = [
            ("weight_ih_l0", (rows, input_shape[-1])),
            ("weight_hh_l0", (rows, hidden)),
        ]
        if self.bias:
            shapes += [("bias_ih_l0", (rows,)), ("bias_hh_l0", (rows,))]
        return tuple(shapes)

    def _kept_per_step(self) -> tuple[sp.Expr, ...]:
        raise NotImplementedError

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Its input, the per-step cell tensors, and its output (each step's hidden state)."""
        batch, steps = input_shape[0], input_shape[1]
        return (
            TensorSpec("input", tuple(input_shape)),
            *(TensorSpec("intermediate", (batch, steps, size)) for size in self._kept_per_step()),
            TensorSpec("output", self.output_shape(input_shape)),
        )

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the output and the per-step cell tensors."""
        batch, steps = input_shape[0], input_shape[1]
        kept = sp.Add(*(batch * steps * size for size in self._kept_per_step()))
        return elements(self.output_shape(input_shape)) + kept

    def describe(self) -> str:
        """Hidden units."""
        return f"{self.hidden_size}" + ("" if self.bias else ", no bias")


@dataclass(frozen=True)
class LSTM(_Recurrent):
    """Long short-term memory, one layer, batch first.

    Each step keeps its four activated gates (input, forget, cell, output:
    :math:`4H`) and its cell state (:math:`H`); its hidden state is the output.

    Parameters
    ----------
    hidden_size : size
    bias : bool, default True
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> lstm = LSTM(256)
    >>> lstm.parameter_count((B, S, 128))
    395264
    >>> lstm.activation_count((B, S, 128))
    1536*B*S
    """

    kind = "LSTM"
    gates = 4
    autograd_refusal = (
        "on CPU nn.LSTM runs oneDNN's mkldnn_rnn_layer, which saves a uint8 workspace of seven "
        "buffers, each rounded up to a 4 KiB page (28,672 bytes for any tiny LSTM); this layer "
        "does not model it, but memtheory.torch.trace does (fp32, exact against measure): "
        "trace the nn.LSTM module itself. Network.saved_tensors() gives the fused-cell "
        "estimate (4H gates and the cell state per step)."
    )

    def _kept_per_step(self) -> tuple[sp.Expr, ...]:
        hidden = self.hidden_size
        return (4 * hidden, hidden)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return the fused-cell estimate; refuse a concrete dtype (CPU's oneDNN workspace).

        Without ``input_dtype`` it describes :meth:`saved_for_backward` (4H
        gates and the cell state per step), which is not checked against
        PyTorch (the autograd convention refuses LSTM). Asked for the storages
        of a run at a concrete dtype, it refuses.

        Measured (PyTorch 2.13, CPU, ``mkldnn_rnn_layer``): besides a copy of the
        batch-first input, the zero initial states, the output and the final
        states, it keeps one ``uint8`` workspace whose size follows oneDNN's
        internal, page-aligned layout (28,672 bytes for any tiny LSTM; 520,192
        for batch 8, 16 steps, 64 units at fp32; 372,736 at bf16).

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> LSTM(8).autograd(((B, S, 4),), input_dtype="fp32")
        Traceback (most recent call last):
        ...
        memtheory.errors.UnsupportedError: LSTM: its CPU saved tensors include a oneDNN ...
        """
        if input_dtype is None:
            return super().autograd(input_shapes, training=training)
        raise UnsupportedError(
            f"{self.label}: its CPU saved tensors include a oneDNN workspace of page-rounded "
            "buffers that this layer does not model; memtheory.torch.trace sizes it exactly for "
            "a real nn.LSTM (fp32), and saved_for_backward gives the fused-cell estimate "
            "(4H gates and the cell state per step)."
        )


@dataclass(frozen=True)
class GRU(_Recurrent):
    r"""Gated recurrent unit, one layer, batch first.

    Each step keeps PyTorch's fused-cell workspace of :math:`5H`: the reset and
    update gates, the candidate state, the hidden part of the candidate's
    pre-activation, and a copy of the previous hidden state.

    Parameters
    ----------
    hidden_size : size
    bias : bool, default True
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> GRU(256).parameter_count((B, S, 128))
    296448
    """

    kind = "GRU"
    gates = 3
    autograd_refusal = (
        "on CPU nn.GRU runs its cell step by step, so its backward is a chain of nodes per "
        "step, with their own gradients and temporaries, which memtheory does not follow: its "
        "saved tensors are measured (GRU.autograd, exact) but a training-step peak through "
        "it is not (measured 80 to 170 bytes off on tiny GRUs)."
    )

    def _kept_per_step(self) -> tuple[sp.Expr, ...]:
        return (5 * self.hidden_size,)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return what PyTorch's CPU GRU keeps, measured (PyTorch 2.13), training or eval.

        On CPU the GRU runs its cell step by step (no fused kernel): it keeps a
        copy of the batch-first input, the zero initial state, and at every
        step the hidden-to-hidden gates (:math:`3H`), two copies and one sum of
        :math:`H` each, and the hidden state the next step reads. The specs
        here each stand for one such storage per step (shape ``(B, S, ...)``),
        so their bytes, not their count, match. Under autocast the gates and
        the hidden states the linear layers read are 16-bit casts and one
        :math:`H` per step stays in the input's dtype. Assumes at least two sequences of at
        least two steps (otherwise the input copy is a view).

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> spec = GRU(7).autograd(((B, S, 12),), input_dtype="fp32")
        >>> sp.expand(sum(t.nbytes(t.dtype) for t in spec.saved))
        244*B*S

        Without ``input_dtype`` it describes :meth:`saved_for_backward`.
        """
        if input_dtype is None:
            return super().autograd(input_shapes, training=training)
        input_shape = tuple(input_shapes[0])
        self.check_input(input_shape)
        batch, steps, features = input_shape
        hidden = self.hidden_size
        if autocast is None:
            kind = as_dtype(input_dtype)
            return Autograd(
                saved=(
                    TensorSpec("intermediate", (batch, steps, features), kind),
                    TensorSpec("intermediate", (batch, hidden), kind),
                    TensorSpec("intermediate", (batch, steps, 3 * hidden), kind),
                    TensorSpec("intermediate", (batch, steps, 3 * hidden), kind),
                    TensorSpec("intermediate", (batch, steps - 1, hidden), kind),
                )
            )
        low = as_dtype(autocast)
        return Autograd(
            saved=(
                TensorSpec("intermediate", (batch, steps, features), low),
                TensorSpec("intermediate", (batch, steps, hidden), low),
                TensorSpec("intermediate", (batch, steps, 3 * hidden), low),
                TensorSpec("intermediate", (batch, steps, 2 * hidden), low),
                TensorSpec("intermediate", (batch, steps, hidden), as_dtype(input_dtype)),
            )
        )
