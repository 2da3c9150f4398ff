"""The assembly every decoder builder shares: embeddings, a stack of layers, norm, head, loss.

:func:`decoder_stack` puts together what :func:`~memtheory.models.decoder`,
:func:`~memtheory.models.parallel_decoder.parallel_decoder` and
:func:`~memtheory.models.deepseek.deepseek` have in common: the token ids
(``input_ids``), the embedding chain, the tables the layers read beside it
(the rotary table), one block per layer each reading the previous one's
output, the final norm, the output projection ``lm_head`` (and what follows
it) and the causal-LM loss. Each builder says only what its layers are.
:func:`fused_projection` is the fused query/key/value projection sliced
into its three parts, which Phi-3, GPT-NeoX and Falcon share.
:func:`loss_on_logits` is the same network with the loss applied by the
caller to the logits the model returns, rather than by the model itself.

Examples
--------
>>> from memtheory.layers import Dense, Embedding, RMSNorm
>>> net = decoder_stack(
...     "tiny", embedded=[Embedding(10, 4, name="embed")], layers=2,
...     layer=lambda index, source: [Dense(4, name=f"layers.{index}")],
...     final_norm=RMSNorm(name="norm"), vocabulary=10, batch=2, sequence=3)
>>> [row.layer.name for row in net.rows]
['input_ids', 'embed', 'layers.0', 'layers.1', 'norm', 'lm_head']
>>> net.output_shape
(2, 3, 10)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers import Dense, Input, LanguageModelLoss, Layer, Unembedding
from memtheory.layers.split import Slice
from memtheory.network import Network, Node

__all__ = [
    "HEAD_AND_LOSS", "decoder_stack", "fused_projection", "loss_on_logits", "registration_order",
]


HEAD_AND_LOSS = ("lm_head", "loss")
"""The tail of ``*ForCausalLM.forward``: its ``hidden_states`` variable (the final norm's output)
lives until the loss has run (transformers 5.24 ``models/llama/modeling_llama.py:469-475``),
when the model computes its loss itself (given ``labels=``); see :func:`loss_on_logits`."""


def loss_on_logits(network: Network) -> Network:
    """Return ``network`` with its loss applied by the caller to the logits the model returns.

    A decoder built with ``loss=True`` computes its loss inside
    ``*ForCausalLM.forward`` (``model(input_ids, labels=labels).loss``, as
    the ``Trainer`` runs it), whose ``hidden_states`` variable holds the final
    norm's output while the loss runs (:data:`HEAD_AND_LOSS`). A loop that
    takes the logits and applies the loss itself (``loss_fn(model(ids).logits,
    labels)``, as ``measure(model, ids, causal_lm_loss)`` does) runs the loss
    after the model's forward has returned: the final norm's output is freed
    first, unless a backward node keeps it. Only that call is dropped; the
    layers, and every other call, are the same.

    Examples
    --------
    >>> from memtheory.models import from_config
    >>> net = from_config({"model_type": "llama", "vocab_size": 50, "hidden_size": 32,
    ...                    "intermediate_size": 40, "num_hidden_layers": 1,
    ...                    "num_attention_heads": 4}, batch=2, sequence=8, loss=True)
    >>> HEAD_AND_LOSS in net.calls, HEAD_AND_LOSS in loss_on_logits(net).calls
    (True, False)
    """
    outside = copy.copy(network)
    outside.calls = tuple(call for call in network.calls if call != HEAD_AND_LOSS)
    return outside


def decoder_stack(
    builder: str,
    *,
    embedded: Sequence[Layer | Node],
    layers: int,
    layer: Callable[[int, str], list[Layer | Node]],
    final_norm: Layer,
    vocabulary: int,
    batch: SizeLike,
    sequence: SizeLike,
    tables: Sequence[Layer | Node] = (),
    tied: bool = False,
    after_head: Sequence[Layer | Node] = (),
    lm_head: bool = True,
    loss: bool = False,
    name: str | None = None,
    block_order: Sequence[str] = (),
    calls: Sequence[tuple[str, str]] = (),
) -> Network:
    """Return the decoder network: ``input_ids``, embeddings, ``layers`` blocks, norm, head.

    Parameters
    ----------
    builder : str
        The builder's name, for messages (``"decoder"``).
    embedded : sequence of Layer or Node
        The chain after the token ids (the embedding, then a scale): the first
        layer reads its last item.
    layers : int
        How many blocks.
    layer : callable
        ``layer(index, source)``: block ``index`` reading ``source`` (a name);
        its last item is its output, which the next block reads.
    final_norm : Layer
        The norm of the last block's output.
    vocabulary : int
        Rows of the output projection ``lm_head``.
    batch, sequence : size
    tables : sequence of Layer or Node
        Items after the embeddings that the blocks read by name (the rotary
        table, a :class:`~memtheory.network.Node` reading ``input_ids``).
    tied : bool, default False
        ``lm_head`` reads the embedding's matrix.
    after_head : sequence of Layer or Node
        What follows ``lm_head`` (Gemma 2's final soft cap).
    lm_head : bool, default True
        End with the output projection (and ``after_head``).
    loss : bool, default False
        End with the causal-LM loss over the logits; needs ``lm_head``.
    name : str, optional
        The network's name (default ``builder``).
    block_order : sequence of str, optional
        The order the family's decoder layer registers its submodules, where
        it differs from the order they run: name endings such as
        ``"self_attn.o_proj"`` or ``"mlp"`` (a layer whose name contains an
        ending as whole dotted parts takes its place; the first that
        matches). It gives the network's
        :attr:`~memtheory.network.Network.parameter_order`, which
        torch.optim's for-loop step follows; layers no ending matches come
        last in their block, in the order they run.
    calls : sequence of (str, str), optional
        Module calls besides the head and loss's
        (:attr:`~memtheory.network.Network.calls`): Falcon's model call, from
        its positions to the final norm, holds its positions and causal mask.

    Raises
    ------
    InvalidSizeError
        For ``loss`` without ``lm_head``.

    Examples
    --------
    >>> from memtheory.layers import Embedding, RMSNorm
    >>> decoder_stack("tiny", embedded=[Embedding(10, 4)], layers=0, layer=lambda i, s: [],
    ...               final_norm=RMSNorm(), vocabulary=10, batch=1, sequence=2,
    ...               lm_head=False, loss=True)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidSizeError: tiny: loss=True needs the logits; keep lm_head=True.
    """
    if loss and not lm_head:
        raise InvalidSizeError(f"{builder}: loss=True needs the logits; keep lm_head=True.")
    items: list[Layer | Node] = [
        Input((sequence,), batch=batch, name="input_ids"),
        *embedded,
        *tables,
    ]
    source = embedded[-1].name or ""
    order: list[str] = []
    for index in range(layers):
        block = layer(index, source)
        items += block
        source = block[-1].name or ""
        order += registration_order(block, block_order)
    items.append(Node(final_norm, inputs=(source,)))
    if lm_head:
        items.append(Unembedding(vocabulary, tied=tied, name="lm_head"))
        items += after_head
    calls = list(calls)
    if loss:
        items.append(LanguageModelLoss(name="loss"))
        calls.append(HEAD_AND_LOSS)
    return Network(
        items, name=name or builder, calls=calls,
        parameter_order=_whole_order(items, order) if block_order else (),
    )


def registration_order(block: Sequence[Layer | Node], endings: Sequence[str]) -> list[str]:
    """Return the names of ``block``'s layers in the order ``endings`` registers them.

    A layer takes the place of the first ending its name contains as whole
    dotted parts; the rest follow, each group in the order the layers run.

    Examples
    --------
    >>> block = [Dense(4, name="l.0.attn.q"), Dense(4, name="l.0.attn.o"),
    ...          Dense(4, name="l.0.mlp.up"), Dense(4, name="l.0.norm")]
    >>> registration_order(block, ["attn.o", "attn", "norm"])
    ['l.0.attn.o', 'l.0.attn.q', 'l.0.norm', 'l.0.mlp.up']
    """
    names = [(item.layer if isinstance(item, Node) else item).name or "" for item in block]

    def rank(name: str) -> int:
        dotted = f".{name}."
        return next(
            (i for i, ending in enumerate(endings) if f".{ending}." in dotted), len(endings)
        )

    return sorted(names, key=rank)


def _whole_order(items: Sequence[Layer | Node], blocks: Sequence[str]) -> tuple[str, ...]:
    """Return every layer's name: the blocks in registration order, the rest where they run."""
    names = [(item.layer if isinstance(item, Node) else item).name or "" for item in items]
    inside = set(blocks)
    first = next((i for i, name in enumerate(names) if name in inside), len(names))
    outside = [name for name in names if name not in inside]
    return tuple(name for name in (*outside[:first], *blocks, *outside[first:]) if name)


def fused_projection(
    fused: str,
    attn: str,
    source: str,
    queries: int,
    keys: int,
    bias: bool,
    items: list[Layer | Node],
) -> tuple[str, str, str]:
    """Append one projection of ``source`` to queries, keys and values, sliced in three.

    The projection ``fused`` has ``queries + 2 * keys`` features; its slices
    are ``{attn}.q``, ``{attn}.k`` and ``{attn}.v`` (views). Returns their names.

    Examples
    --------
    >>> items = []
    >>> fused_projection("attn.qkv_proj", "attn", "x", 8, 4, False, items)
    ('attn.q', 'attn.k', 'attn.v')
    >>> [(node.layer.name, node.layer.start, node.layer.stop) for node in items[1:]]
    [('attn.q', 0, 8), ('attn.k', 8, 12), ('attn.v', 12, 16)]
    """
    items.append(Node(Dense(queries + 2 * keys, bias=bias, name=fused), inputs=(source,)))
    bounds = {"q": (0, queries), "k": (queries, queries + keys),
              "v": (queries + keys, queries + 2 * keys)}
    for part, (start, stop) in bounds.items():
        items.append(Node(Slice(start, stop, name=f"{attn}.{part}"), inputs=(fused,)))
    return f"{attn}.q", f"{attn}.k", f"{attn}.v"
