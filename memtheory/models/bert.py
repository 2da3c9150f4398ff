"""BERT (Devlin et al. 2019), as Hugging Face's ``BertModel`` (bert-base-uncased).

Word, position and token-type embeddings summed, a layer norm and dropout;
a stack of post-norm transformer blocks with GELU feed-forward networks; and
the pooler (a dense layer with tanh on the first token). Dropout is 0.1
everywhere. Instead of the pooler, :func:`bert_base_mlm` ends with the
masked-LM head of Hugging Face's ``BertForMaskedLM`` (``cls.predictions``): a
dense layer, GELU and a layer norm (the "transform"), then a decoder to the
vocabulary whose matrix is the word embedding's (tied) and which has a bias
of its own.

Examples
--------
>>> bert_base().parameter_count
109482240
>>> bert_base_mlm().parameter_count
109514298
"""

from __future__ import annotations

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers import (
    GELU,
    Dense,
    Dropout,
    Embedding,
    Input,
    LanguageModelLoss,
    Layer,
    LayerNorm,
    PositionEmbedding,
    SelectToken,
    Tanh,
    TokenTypeEmbedding,
    Unembedding,
)
from memtheory.models.transformer import block_calls, transformer_block
from memtheory.network import Network, Node, module_calls
from memtheory.symbols import B, S

__all__ = ["bert", "bert_base", "bert_base_mlm"]


def bert(
    *,
    layers: int,
    hidden: int,
    heads: int,
    vocabulary: int = 30522,
    positions: int = 512,
    token_types: int = 2,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    pooler: bool = True,
    mlm_head: bool = False,
    loss: bool = False,
    flash: bool = False,
) -> Network:
    """Build a BERT encoder for ``batch`` sequences of ``sequence`` tokens.

    Parameters
    ----------
    layers, hidden, heads : int
        Blocks, model width and attention heads.
    vocabulary : int, default 30522
    positions : int, default 512
    token_types : int, default 2
    batch : size, default ``B``
    sequence : size, default ``S``
    pooler : bool, default True
        End with the pooler (dense + tanh on the first token), as ``BertModel``.
    mlm_head : bool, default False
        End with the masked-LM head instead, as ``BertForMaskedLM`` (which
        has no pooler: pass ``pooler=False``).
    loss : bool, default False
        After the masked-LM head, its loss (cross-entropy over every position,
        as ``BertForMaskedLM(labels=...)``).
    flash : bool, default False

    Examples
    --------
    >>> bert(layers=2, hidden=128, heads=2, vocabulary=1000).parameter_count
    607104
    >>> bert(layers=2, hidden=128, heads=2, vocabulary=1000, pooler=False,
    ...      mlm_head=True).output_shape
    (B, S, 1000)
    """
    if loss and not mlm_head:
        raise InvalidSizeError("bert: loss=True is the masked-LM loss; pass mlm_head=True.")
    if pooler and mlm_head:
        raise InvalidSizeError(
            "bert: pooler=True and mlm_head=True would give the network two outputs; "
            "BertForMaskedLM has no pooler, so pass pooler=False with mlm_head=True."
        )
    calls: list[tuple[str, str]] = []
    items: list[Layer | Node] = [
        Input((sequence,), batch=batch, name="input_ids"),
        Embedding(vocabulary, hidden, name="embeddings.word_embeddings"),
        TokenTypeEmbedding(token_types, name="embeddings.token_type_embeddings"),
        PositionEmbedding(positions, inplace=True, name="embeddings.position_embeddings"),
        LayerNorm(name="embeddings.LayerNorm"),
        Dropout(0.1, name="embeddings.dropout"),
    ]
    source = "embeddings.dropout"
    for index in range(layers):
        block = transformer_block(
            f"encoder.layer.{index}", source, hidden=hidden, heads=heads, norm="post", flash=flash
        )
        items += block
        calls += block_calls(block, "bert")
        source = block[-1].name or ""
    if pooler:
        items += [
            SelectToken(0, name="pooler.first_token"),
            Dense(hidden, name="pooler.dense"),
            Tanh(name="pooler.activation"),
        ]
    if mlm_head:
        items += [
            Dense(hidden, name="cls.predictions.transform.dense"),
            GELU(name="cls.predictions.transform.transform_act_fn"),
            LayerNorm(name="cls.predictions.transform.LayerNorm"),
            Unembedding(vocabulary, tied=True, bias=True, name="cls.predictions.decoder"),
        ]
    if loss:
        items.append(LanguageModelLoss(shift=False, upcast=False, name="loss"))
    # Hugging Face: embeddings, encoder, pooler and cls are called as modules (module_calls);
    # the encoder's layers are an nn.ModuleList it iterates; BertEmbeddings keeps
    # inputs_embeds until it returns.
    names = [item.name or "" for item in items[1:]]
    calls += module_calls(names, not_called=["encoder.layer"])
    calls.append(("embeddings.token_type_embeddings", "embeddings.dropout"))
    return Network(items, name="BERT", calls=calls)


def bert_base(
    *, batch: SizeLike = B, sequence: SizeLike = S, pooler: bool = True, flash: bool = False
) -> Network:
    """Build BERT-base: 12 blocks of width 768 with 12 heads; 109,482,240 parameters.

    The "110M" of the BERT paper rounds this count, which includes the
    embeddings (23.8M of it, mostly the 30,522-word vocabulary) and the pooler
    (590,592), but not the pre-training heads.

    Examples
    --------
    >>> bert_base(pooler=False).parameter_count
    108891648
    """
    network = bert(
        layers=12,
        hidden=768,
        heads=12,
        batch=batch,
        sequence=sequence,
        pooler=pooler,
        flash=flash,
    )
    network.name = "BERT-base"
    return network


def bert_base_mlm(
    *, batch: SizeLike = B, sequence: SizeLike = S, loss: bool = False, flash: bool = False
) -> Network:
    """Build BERT-base with its masked-LM head (``BertForMaskedLM``); 109,514,298 parameters.

    The encoder without the pooler (108,891,648) plus the head's transform
    (768 x 768 + 768, and a layer norm of 2 x 768) and the decoder's bias
    (30,522); the decoder's matrix is the word embedding's.

    Examples
    --------
    >>> bert_base_mlm(sequence=128).output_shape
    (B, 128, 30522)
    >>> bert_base_mlm(loss=True).output_shape
    ()
    """
    network = bert(
        layers=12,
        hidden=768,
        heads=12,
        batch=batch,
        sequence=sequence,
        pooler=False,
        mlm_head=True,
        loss=loss,
        flash=flash,
    )
    network.name = "BERT-base MLM"
    return network
