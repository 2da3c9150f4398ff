"""The transformer block: attention and a feed-forward network, each with a residual sum.

:func:`transformer_block` returns the block's layers, named and wired, to put
in a :class:`~memtheory.network.Network` after whatever layer feeds it. Two
arrangements are in use:

* ``norm="pre"`` (GPT-2, Megatron-LM): ``x + attn(ln_1(x))``, then
  ``h + mlp(ln_2(h))``;
* ``norm="post"`` (BERT, the original transformer): ``ln_1(x + attn(x))``,
  then ``ln_2(h + mlp(h))``.

Derived in the book's chapter "Transformers".

Examples
--------
>>> from memtheory.layers import Input
>>> from memtheory.network import Network
>>> from memtheory.symbols import S
>>> block = transformer_block("h.0", "x", hidden=768, heads=12)
>>> net = Network([Input((S, 768), name="x"), *block])
>>> net.parameter_count
7087872
>>> block[-1].name
'h.0.add_2'
"""

from __future__ import annotations

from typing import Literal

from memtheory._validation import SizeLike, as_size
from memtheory.errors import InvalidSizeError
from memtheory.layers import GELU, Add, Dense, Dropout, Layer, LayerNorm, MultiHeadAttention
from memtheory.network import Node

__all__ = ["block_calls", "transformer_block"]

Style = Literal["torchvision", "gpt2", "bert"]


def transformer_block(
    prefix: str,
    source: str,
    *,
    hidden: SizeLike,
    heads: SizeLike,
    ffn_hidden: SizeLike | None = None,
    dropout: float = 0.1,
    attention_dropout: float | None = None,
    norm: Literal["pre", "post"] = "pre",
    flash: bool = False,
    activation_dropout: bool = False,
    skip_zero_dropout: bool = False,
) -> list[Layer | Node]:
    """Build one transformer block that reads layer ``source``; its last item is its output.

    Layers are named ``{prefix}.ln_1``, ``.attn``, ``.attn_dropout``,
    ``.add_1``, ``.ln_2``, ``.mlp_fc``, ``.mlp_act``, (``.act_dropout``,)
    ``.mlp_proj``, ``.mlp_dropout``, ``.add_2``.

    Parameters
    ----------
    prefix : str
        Name prefix, e.g. ``"h.0"``.
    source : str
        Name of the layer whose ``(batch, sequence, hidden)`` output the block reads.
    hidden : size
        Model width :math:`h` (the feed-forward network maps back to it).
    heads : size
        Attention heads :math:`a`.
    ffn_hidden : size, optional
        Width of the feed-forward network; defaults to ``4 * hidden``.
    dropout : float, default 0.1
        Dropout after the attention projection and after the feed-forward network.
    attention_dropout : float, optional
        Dropout on the attention probabilities; defaults to ``dropout``.
    norm : {"pre", "post"}, default "pre"
        Where the layer norms sit (see the module docstring).
    flash : bool, default False
        Use memory-efficient attention (no :math:`s^2` tensors kept).
    activation_dropout : bool, default False
        Also drop (with ``dropout``) after the activation of the feed-forward
        network, as torchvision's ViT ``MLPBlock`` does.
    skip_zero_dropout : bool, default False
        Leave out the dropout layers whose probability is 0: PyTorch returns
        their input itself (torchvision's ViT-B/16 has dropout 0 everywhere).

    Examples
    --------
    >>> [item.name for item in transformer_block("b", "x", hidden=64, heads=4, norm="post")][:4]
    ['b.attn', 'b.attn_dropout', 'b.add_1', 'b.ln_1']
    """
    hidden = as_size(hidden, "hidden", "transformer_block")
    ffn = (
        4 * hidden if ffn_hidden is None else as_size(ffn_hidden, "ffn_hidden", "transformer_block")
    )
    if norm not in ("pre", "post"):
        raise InvalidSizeError(f"transformer_block: norm must be 'pre' or 'post', got {norm!r}.")
    p_attn = dropout if attention_dropout is None else attention_dropout

    def name(part: str) -> str:
        return f"{prefix}.{part}"

    def dropped(source: str, p: float, part: str) -> tuple[list[Layer | Node], str]:
        """Return a dropout reading ``source``, and the name of what comes out."""
        if skip_zero_dropout and p == 0:
            return [], source
        return [Dropout(p, name=name(part))], name(part)

    attention = MultiHeadAttention(heads, dropout=p_attn, flash=flash, name=name("attn"))
    act_drop = dropped(name("mlp_act"), dropout, "act_dropout")[0] if activation_dropout else []
    mlp_drop, mlp_out = dropped(name("mlp_proj"), dropout, "mlp_dropout")
    attn_drop, attn_out = dropped(name("attn"), dropout, "attn_dropout")
    mlp: list[Layer | Node] = [
        Dense(ffn, name=name("mlp_fc")),
        GELU(name=name("mlp_act")),
        *act_drop,
        Dense(hidden, name=name("mlp_proj")),
        *mlp_drop,
    ]
    if norm == "pre":
        return [
            Node(LayerNorm(name=name("ln_1")), inputs=(source,)),
            attention,
            *attn_drop,
            Node(Add(name=name("add_1")), inputs=(source, attn_out)),
            LayerNorm(name=name("ln_2")),
            *mlp,
            Node(Add(name=name("add_2")), inputs=(name("add_1"), mlp_out)),
        ]
    return [
        Node(attention, inputs=(source,)),
        *attn_drop,
        Node(Add(name=name("add_1")), inputs=(source, attn_out)),
        LayerNorm(name=name("ln_1")),
        *mlp,
        Node(Add(name=name("add_2")), inputs=(name("ln_1"), mlp_out)),
        LayerNorm(name=name("ln_2")),
    ]


def block_calls(block: list[Layer | Node], style: Style) -> list[tuple[str, str]]:
    """Return the spans of a block's layers during which Python keeps what they read alive.

    For :class:`~memtheory.network.Network`'s ``calls``, as the real code is
    written (each a ``(first, last)`` pair of layer names). In every style the
    caller holds the block's input until the block returns. Then:

    * ``"torchvision"`` (``EncoderBlock``, pre-norm): the MLP is an
      ``nn.Sequential`` called on ``ln_2``'s output, which it holds until it returns;
    * ``"gpt2"`` (Hugging Face ``GPT2Block``): ``hidden_states = ln_1(x)``
      lives until ``add_1`` reassigns it, ``attn_output`` until the block
      returns, and ``ln_2``'s output until ``add_2``;
    * ``"bert"`` (Hugging Face ``BertLayer``, post-norm): the dropped
      projections live until their layer norm has run (``BertSelfOutput``,
      ``BertOutput``), ``attention_output`` and ``intermediate_output`` until
      the layer returns.

    Examples
    --------
    >>> block = transformer_block("h.0", "x", hidden=64, heads=4)
    >>> block_calls(block, "gpt2")[:2]
    [('h.0.ln_1', 'h.0.add_2'), ('h.0.attn', 'h.0.add_1')]
    """
    names = [item.name or "" for item in block]
    prefix = names[0].rsplit(".", 1)[0]

    def named(part: str) -> str:
        return f"{prefix}.{part}"

    mlp_last = names[names.index(named("add_2")) - 1]
    calls = [(names[0], names[-1])]
    if style == "torchvision":
        calls.append((named("mlp_fc"), mlp_last))
    elif style == "gpt2":
        calls += [
            (named("attn"), named("add_1")),
            (named("add_1"), named("add_2")),
            (named("mlp_fc"), named("add_2")),
        ]
    elif style == "bert":
        calls += [
            (named("add_1"), named("ln_1")),
            (named("mlp_fc"), named("ln_2")),
            (named("mlp_proj"), named("ln_2")),
            (named("add_2"), named("ln_2")),
        ]
    else:
        raise InvalidSizeError(
            f"block_calls: style must be 'torchvision', 'gpt2' or 'bert', got {style!r}."
        )
    return calls
