"""What an accounting convention is, and what every convention shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import sympy as sp

from memtheory.conventions.optimizer_state import state_bytes
from memtheory.counts import ModelCounts
from memtheory.errors import UnsupportedError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import LayerRow, Network
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = [
    "Convention",
    "Model",
    "activation_elements",
    "attention_mask_bytes",
    "row_activation_elements",
    "row_mask_bytes",
    "buffer_bytes",
    "model_counts",
    "optimizer_state_bytes",
]

Model = Network | ModelCounts


def model_counts(model: Model) -> ModelCounts:
    """Return the counts of a network, or the counts themselves.

    Examples
    --------
    >>> model_counts(ModelCounts(parameters=1, activations=2, input_elements=3)).activations
    2
    """
    if isinstance(model, Network):
        return model.counts()
    if isinstance(model, ModelCounts):
        return model
    raise UnsupportedError(
        f"expected a memtheory Network or ModelCounts, got {type(model).__name__}. "
        "Build a Network from layers, or ModelCounts.per_sample(...) from known totals "
        "(a PyTorch module converts with memtheory.torch.from_module)."
    )


def _attention(layer: object) -> bool:
    """Whether ``layer`` is attention, or a frozen or LoRA-adapted one."""
    from memtheory.layers import GroupedQueryAttention, MultiHeadAttention

    inner = getattr(layer, "layer", layer)  # Frozen and LoRAAttention wrap the layer
    return isinstance(inner, (MultiHeadAttention, GroupedQueryAttention))


def row_activation_elements(row: LayerRow) -> sp.Expr:
    """Return one layer's activation elements as :func:`activation_elements` counts them.

    Its row's count, plus, for a merge layer (whose row counts only its
    output), the tensors it keeps inside in the activation dtype.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> config = DecoderConfig(vocabulary=96, hidden=32, layers=1, heads=4, ffn_hidden=64)
    >>> net = decoder(config, batch=1, sequence=8)
    >>> row = next(r for r in net.rows if r.name == "model.layers.0.self_attn.attention")
    >>> row.activations, row_activation_elements(row)  # + Q, K, V copies and 4 x 8 x 8 scores
    (256, 1280)
    """
    from memtheory.layers.merge import Merge

    if not isinstance(row.layer, Merge):
        return row.activations
    inside = sp.Add(
        *(s.elements for s in row.saved if s.role == "intermediate" and s.dtype is None)
    )
    return sp.expand(row.activations + inside)


def row_mask_bytes(row: LayerRow) -> sp.Expr:
    """Return the bytes of the masks one attention layer keeps in their own dtype.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> net = gpt2("small", batch=1, sequence=8)
    >>> row_mask_bytes(next(r for r in net.rows if r.name == "h.0.attn"))  # 12 heads x 8 x 8
    768
    """
    if not _attention(row.layer):
        return sp.S.Zero
    return sp.Add(
        *(
            s.elements * s.dtype.bytes
            for s in row.saved
            if s.role == "mask" and s.dtype is not None
        )
    )


def activation_elements(model: Model) -> sp.Expr:
    """Return the activation elements a convention that counts every kept tensor counts.

    A network's activation count (:attr:`~memtheory.network.Network.activation_count`)
    plus what a merge layer keeps inside beyond its output: eager
    :class:`~memtheory.layers.GroupedQueryAttention` keeps copies of the
    queries, keys and values and its ``(B, a, S, S)`` softmax output (and,
    with dropout, the dropped probabilities), as its
    :meth:`~memtheory.layers.GroupedQueryAttention.autograd` states; a flash
    kernel keeps none of them. (:class:`~memtheory.layers.MultiHeadAttention`
    counts its own in its activation count.) ``ModelCounts`` are taken as given.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> config = DecoderConfig(vocabulary=96, hidden=32, layers=1, heads=4, ffn_hidden=64)
    >>> eager, flash = decoder(config, batch=1, sequence=8), decoder(config, batch=1,
    ...                                                             sequence=8, flash=True)
    >>> eager.activation_count == flash.activation_count
    True
    >>> activation_elements(eager) - activation_elements(flash)  # Q, K, V copies; 4 x 8 x 8 scores
    1024
    """
    if not isinstance(model, Network):
        return model_counts(model).activations
    return sp.expand(sp.Add(*(row_activation_elements(row) for row in model.rows[1:])))


def attention_mask_bytes(model: Model) -> sp.Expr:
    """Return the bytes of the masks attention keeps in its own dtype: attention dropout's.

    Eager attention with dropout in training keeps a ``(B, a, S, S)`` mask,
    one ``bool`` byte per element on CUDA (a causal mask built in the forward
    pass is one too); an activation count in elements leaves these out.
    ``ModelCounts`` have none.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> attention_mask_bytes(gpt2("small", batch=1, sequence=8))  # 12 layers x 12 heads x 8 x 8
    9216
    >>> attention_mask_bytes(gpt2("small", batch=1, sequence=8, flash=True))
    0
    """
    if not isinstance(model, Network):
        return sp.S.Zero
    return sp.Add(*(row_mask_bytes(row) for row in model.rows))


def buffer_bytes(model: Model, precision: Precision) -> sp.Expr:
    """Return the bytes of the model's buffers: each in its own dtype, else the parameters'.

    A network states each buffer's dtype (BatchNorm's statistics follow the
    parameters; BERT's int64 id buffers and GPT-2's ``bool`` mask do not);
    ``ModelCounts`` only counts buffers in the parameter dtype.

    Examples
    --------
    >>> from memtheory.layers import Input, TokenTypeEmbedding
    >>> from memtheory.precision import precision
    >>> net = Network([Input((4, 8), batch=2), TokenTypeEmbedding(2, ids_buffer=16)])
    >>> buffer_bytes(net, precision("bf16"))  # 16 int64 ids
    128
    """
    if isinstance(model, Network):
        return sp.Add(*(spec.nbytes(precision.parameters) for spec in model.buffer_specs))
    return model_counts(model).buffers * precision.parameters.bytes


def optimizer_state_bytes(model: Model, optimizer: Optimizer, precision: Precision) -> sp.Expr:
    """Return the bytes of the optimizer's state: parameter-sized copies, or Adafactor's factors.

    Adafactor keeps a row and a column factor per matrix (its state depends on
    each parameter's shape), so it needs a network; ``ModelCounts`` is refused.

    Examples
    --------
    >>> from memtheory.layers import Dense, Input
    >>> from memtheory.optimizers import optimizer
    >>> from memtheory.precision import precision
    >>> net = Network([Input((784,), batch=64), Dense(256)])
    >>> optimizer_state_bytes(net, optimizer("adafactor"), precision("fp32"))  # (256+784+256) x 4
    5184
    """
    if optimizer.factored_state_names:
        if not isinstance(model, Network):
            raise UnsupportedError(
                f"{optimizer.title} keeps factored state whose size depends on each "
                "parameter's shape; ModelCounts has only the total. Pass a Network."
            )
        return state_bytes(optimizer, model, precision)
    if not optimizer.states_per_parameter:  # sympy's 0 * x asks whether x is finite
        return sp.S.Zero
    parameters = model_counts(model).parameters
    return optimizer.states_per_parameter * parameters * precision.optimizer_state.bytes


class Convention(ABC):
    """A way of accounting for training memory: which tensors count, and how many copies.

    Subclasses turn a model, an optimizer and a precision into a
    :class:`~memtheory.memory_breakdown.MemoryBreakdown`. Conventions register in
    :data:`memtheory.conventions.CONVENTIONS` by :attr:`name`.

    Examples
    --------
    >>> from memtheory import optimizer, precision
    >>> from memtheory.conventions import convention
    >>> from memtheory.models import gpt2
    >>> breakdown = convention("breakdown")
    >>> isinstance(breakdown, Convention), breakdown.name
    (True, 'breakdown')
    >>> net = gpt2("small", batch=1, sequence=8)
    >>> step = breakdown.training(net, optimizer("adam"), precision("fp32"))
    >>> step.components["parameters"] == 4 * net.parameter_count, step.total
    (True, 2006403168)
    """

    name: ClassVar[str]
    title: ClassVar[str]

    @abstractmethod
    def training(
        self, model: Model, optimizer: Optimizer | None, precision: Precision
    ) -> MemoryBreakdown:
        """Memory of one training step."""

    @abstractmethod
    def inference(self, model: Model, precision: Precision) -> MemoryBreakdown:
        """Memory of one forward pass without gradients."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
