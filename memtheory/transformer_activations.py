r"""Activation memory of one transformer layer, derived from its layers (Korthikanti et al. 2022).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (MLSys 2023, arXiv:2205.05198), Section 4, count the bytes a
transformer layer keeps for its backward pass, with 16-bit activations and
one-byte dropout masks, for :math:`s` tokens, a micro-batch of :math:`b`,
width :math:`h` and :math:`a` heads:

.. math:: sbh\left(34 + 5\frac{as}{h}\right),

and, Table 2, what tensor parallelism over :math:`t` devices, sequence
parallelism, and selective or full recomputation leave of it.

Here the same numbers are *derived*: :func:`transformer_layer` builds the
layer from memtheory's layers (layer norms, attention, dense layers, GELU,
dropout, residual sums), :meth:`~memtheory.network.Network.saved_tensors`
lists what each layer keeps (each tensor once), and :func:`activation_bytes`
adds them up, dividing by :math:`t` the tensors that Megatron-LM's parallelism
splits. The tests show that each result simplifies to the paper's closed
form, which :func:`paper_activation_bytes` types in for comparison. Like the
paper, the per-position fp32 statistics (layer-norm mean and inverse
standard deviation, :math:`O(sb)` bytes) are left out unless asked for.

Derived in the book's chapter "Transformers".

Examples
--------
>>> from memtheory.symbols import B, D, S
>>> derived = activation_bytes()
>>> sp.factor(derived)
B*S*(34*D + 5*S*a)
>>> sp.simplify(derived - paper_activation_bytes()) == 0
True
"""

from __future__ import annotations

from typing import Literal

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.dtypes import DTypeLike, dtype
from memtheory.errors import InvalidSizeError
from memtheory.layers import Input, Layer
from memtheory.models.transformer import transformer_block
from memtheory.network import Network, Node, SavedTensor
from memtheory.symbols import B, D, S, size_symbol

__all__ = [
    "HEADS",
    "TENSOR_PARALLEL",
    "Recompute",
    "activation_bytes",
    "activation_terms",
    "paper_activation_bytes",
    "transformer_layer",
]

HEADS = size_symbol("a")
"""The paper's :math:`a`: attention heads."""

TENSOR_PARALLEL = size_symbol("t")
"""The paper's :math:`t`: tensor-parallel size (devices a layer is split over)."""

Recompute = Literal["none", "selective", "full"]
"""No recomputation, recomputing the attention core, or recomputing the whole layer."""

PREFIX = "layer"


def transformer_layer(
    *,
    sequence: SizeLike = S,
    batch: SizeLike = B,
    hidden: SizeLike = D,
    heads: SizeLike = HEADS,
    flash: bool = False,
    dropout: float = 0.1,
) -> Network:
    """Build one pre-norm transformer layer (GPT, Megatron-LM) fed ``(batch, sequence, hidden)``.

    Parameters
    ----------
    sequence, batch, hidden, heads : size
        The paper's :math:`s, b, h, a` (symbols by default).
    flash : bool, default False
        Memory-efficient attention: the :math:`s^2` tensors are not kept.
    dropout : float, default 0.1
        Every dropout probability (attention, projection, feed-forward).

    Examples
    --------
    >>> net = transformer_layer(hidden=768, heads=12)
    >>> net.parameter_count
    7087872
    >>> [row.name for row in net.rows][:4]
    ['input', 'layer.ln_1', 'layer.attn', 'layer.attn_dropout']
    """
    items: list[Layer | Node] = [Input((sequence, hidden), batch=batch, name="input")]
    items += transformer_block(
        PREFIX, "input", hidden=hidden, heads=heads, dropout=dropout, flash=flash
    )
    return Network(items, name="transformer layer")


def _split_by_tensor_parallelism(tensor: SavedTensor) -> bool:
    """Whether Megatron-LM's tensor parallelism splits this tensor across the t devices.

    Megatron splits the attention heads (the fused query/key/value projection is
    column-parallel, the output projection row-parallel) and the feed-forward
    hidden width (first dense column-parallel, second row-parallel). So every
    tensor the attention keeps except its (replicated) input is split, and so
    are the first dense layer's output and the GELU's output, the tensors
    between the two feed-forward dense layers. Layer norms, dropouts after the
    projections and the inputs of the two column-parallel layers are replicated.
    """
    inside_attention = tensor.saver == f"{PREFIX}.attn" and tensor.spec.role != "input"
    inside_mlp = tensor.owner in (f"{PREFIX}.mlp_fc", f"{PREFIX}.mlp_act")
    return inside_attention or inside_mlp


def activation_terms(
    *,
    sequence: SizeLike = S,
    batch: SizeLike = B,
    hidden: SizeLike = D,
    heads: SizeLike = HEADS,
    tensor_parallel: SizeLike = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
    activations: DTypeLike = "fp16",
    statistics: bool = False,
) -> tuple[tuple[SavedTensor, sp.Expr], ...]:
    """List every tensor one layer keeps, with its bytes on one device.

    Parameters are those of :func:`activation_bytes`.

    Examples
    --------
    >>> for tensor, nbytes in activation_terms()[:3]:
    ...     print(tensor.saver, tensor.spec.role, nbytes)
    layer.ln_1 input 2*B*D*S
    layer.attn input 2*B*D*S
    layer.attn intermediate 2*B*D*S
    """
    if recompute not in ("none", "selective", "full"):
        raise InvalidSizeError(
            f"recompute must be 'none', 'selective' or 'full', got {recompute!r}."
        )
    low = dtype(activations)
    network = transformer_layer(
        sequence=sequence,
        batch=batch,
        hidden=hidden,
        heads=heads,
        flash=recompute == "selective",
    )
    t = sp.sympify(tensor_parallel)
    tensors = network.saved_tensors()
    if recompute == "full":
        # Only the layer's input is kept; the forward pass runs again in the backward pass.
        tensors = tuple(x for x in tensors if x.owner == "input")
    terms = []
    for tensor in tensors:
        if tensor.spec.role == "statistics" and not statistics:
            continue
        split = sequence_parallel or (recompute != "full" and _split_by_tensor_parallelism(tensor))
        terms.append((tensor, tensor.nbytes(low) / t if split else tensor.nbytes(low)))
    return tuple(terms)


def activation_bytes(
    *,
    sequence: SizeLike = S,
    batch: SizeLike = B,
    hidden: SizeLike = D,
    heads: SizeLike = HEADS,
    tensor_parallel: SizeLike = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
    activations: DTypeLike = "fp16",
    statistics: bool = False,
) -> sp.Expr:
    """Bytes one transformer layer keeps for its backward pass, on one device, derived.

    Parameters
    ----------
    sequence, batch, hidden, heads : size
        The paper's :math:`s, b, h, a` (symbols by default).
    tensor_parallel : size, default 1
        The paper's :math:`t` (:data:`TENSOR_PARALLEL` for the symbol).
    sequence_parallel : bool, default False
        Split the replicated part (layer norms, dropouts, inputs of the
        column-parallel layers) along the sequence across the same :math:`t`.
    recompute : {"none", "selective", "full"}, default "none"
        ``"selective"`` recomputes the attention core (softmax, its dropout,
        the weighted sum) in the backward pass, keeping what a flash kernel
        keeps; ``"full"`` keeps only the layer's input.
    activations : dtype, default "fp16"
        Element type of the activations; masks are one-byte ``bool``.
    statistics : bool, default False
        Also count the fp32 per-position statistics the paper leaves out.

    Examples
    --------
    >>> from memtheory.symbols import B, D, S
    >>> sp.factor(activation_bytes(recompute="selective"))
    34*B*D*S
    >>> activation_bytes(recompute="full")
    2*B*D*S
    >>> gpt3 = activation_bytes(sequence=2048, batch=1, hidden=12288, heads=96)
    >>> gpt3, gpt3 / (2048 * 1 * 12288)
    (2868903936, 114)
    """
    terms = activation_terms(
        sequence=sequence,
        batch=batch,
        hidden=hidden,
        heads=heads,
        tensor_parallel=tensor_parallel,
        sequence_parallel=sequence_parallel,
        recompute=recompute,
        activations=activations,
        statistics=statistics,
    )
    return sp.expand(sp.Add(*(nbytes for _, nbytes in terms)))


def paper_activation_bytes(
    *,
    sequence: SizeLike = S,
    batch: SizeLike = B,
    hidden: SizeLike = D,
    heads: SizeLike = HEADS,
    tensor_parallel: SizeLike = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
) -> sp.Expr:
    r"""Return the paper's closed forms (Korthikanti et al. 2022, Section 4 and Table 2), typed in.

    Here only to check :func:`activation_bytes` against; nothing in memtheory
    computes with them.

    ============================================  ========================================
    configuration                                 bytes per layer
    ============================================  ========================================
    no parallelism                                :math:`sbh(34 + 5as/h)`
    tensor parallel                               :math:`sbh(10 + 24/t + 5as/(ht))`
    tensor + sequence parallel                    :math:`sbh/t \cdot (34 + 5as/h)`
    tensor parallel + selective recompute         :math:`sbh(10 + 24/t)`
    tensor + sequence parallel + selective        :math:`34\,sbh/t`
    full recompute                                :math:`2sbh`
    ============================================  ========================================

    (With tensor parallelism of 1 the first row is the no-parallelism case.)
    Full recomputation with sequence parallelism keeps its input split:
    :math:`2sbh/t`.

    Examples
    --------
    >>> paper_activation_bytes(recompute="full")
    2*B*D*S
    """
    s, b, h, a = (sp.sympify(x) for x in (sequence, batch, hidden, heads))
    t = sp.sympify(tensor_parallel)
    if recompute == "full":
        return 2 * s * b * h / (t if sequence_parallel else 1)
    attention_core = 0 if recompute == "selective" else 5 * a * s / h
    if sequence_parallel:
        return s * b * h / t * (34 + attention_core)
    return s * b * h * (10 + 24 / t + attention_core / t)
