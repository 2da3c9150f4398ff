"""The builders' networks as the reference modules, or Hugging Face 5, run them on CPU.

Examples
--------
>>> from memtheory.layers import CrossEntropyLoss
>>> from memtheory.models import resnet
>>> net = as_measured(resnet((1, 1), width=4, image_size=32, batch=2, classes=3),
...                   CrossEntropyLoss(name="loss"))
>>> net.layers[-1].name
'loss'
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from memtheory.errors import InvalidArgumentError
from memtheory.layers import (
    Dropout,
    Layer,
    MultiHeadAttention,
    PositionEmbedding,
    TokenTypeEmbedding,
)
from memtheory.network import Network, Node

__all__ = ["as_hugging_face", "as_measured"]


def as_measured(network: Network, loss: Layer | None) -> Network:
    """Return ``network`` as the reference modules run it on CPU, ``loss`` appended last.

    Its dropouts get PyTorch's CPU masks (the scaled noise in the activation
    dtype, ``Dropout(device="cpu")``) instead of the one-byte masks of the
    fused GPU kernel that the builders assume, and its attention layers are
    ``torch.nn.MultiheadAttention`` on CPU (``implementation="torch"``,
    ``device="cpu"``), which is what the reference modules call.
    """
    items: list[Layer | Node] = [network.layers[0]]
    for row in network.rows[1:]:
        layer = row.layer
        if isinstance(layer, Dropout):
            layer = replace(layer, device="cpu")
        elif isinstance(layer, MultiHeadAttention):
            layer = replace(layer, implementation="torch", device="cpu")
        items.append(Node(layer, inputs=row.inputs))
    if loss is not None:
        items.append(loss)
    return Network(items, name=network.name, calls=network.calls)


def as_hugging_face(network: Network, model: Literal["gpt2", "bert"]) -> Network:
    """Return a GPT-2 or BERT builder's network as Hugging Face 5 runs it (CPU, eager).

    ``network`` comes from :func:`~memtheory.models.gpt2` or
    :func:`~memtheory.models.bert`; ``transformers`` 5 runs it on CPU with
    ``attn_implementation="eager"``. Checked byte for byte against
    ``GPT2LMHeadModel`` and ``BertForMaskedLM`` built from small configs
    (``tests/pytorch/test_hugging_face.py``). In both,
    dropout masks are CPU's and attention is Hugging Face's eager path
    (``device="cpu"``). GPT-2 adds its fp32 causal mask to the scores
    (``additive_mask``). BERT has three query/key/value projections
    (``packed=False``), reads its position ids from the registered
    ``position_ids`` buffer and its token types by gathering from the
    ``token_type_ids`` buffer (``gathered``), and adds the position rows out
    of place. The builders' own defaults differ from this only in these
    settings.

    Examples
    --------
    >>> from memtheory.models import bert
    >>> net = as_hugging_face(bert(layers=1, hidden=8, heads=2, vocabulary=11, positions=6,
    ...                            batch=2, sequence=5, pooler=False, mlm_head=True), "bert")
    >>> [p for p, _ in net["encoder.layer.0.attn"].layer.parameter_shapes((2, 5, 8))][:2]
    ['query.weight', 'query.bias']
    """
    if model not in ("gpt2", "bert"):
        raise InvalidArgumentError(f"model must be 'gpt2' or 'bert', got {model!r}.")
    positions = next(
        (r.layer.num_embeddings for r in network.rows if isinstance(r.layer, PositionEmbedding)),
        None,
    )
    items: list[Layer | Node] = [network.layers[0]]
    for row in network.rows[1:]:
        layer = row.layer
        if isinstance(layer, Dropout):
            layer = replace(layer, device="cpu")
        elif isinstance(layer, MultiHeadAttention):
            layer = replace(
                layer,
                device="cpu",
                implementation="eager",
                additive_mask=model == "gpt2",
                packed=model == "gpt2",
            )
        elif model == "bert" and isinstance(layer, TokenTypeEmbedding):
            layer = replace(layer, ids_buffer=positions, gathered=True)
        elif model == "bert" and isinstance(layer, PositionEmbedding):
            layer = replace(layer, ids_buffer=positions, inplace=False)
        items.append(Node(layer, inputs=row.inputs))
    return Network(items, name=network.name, calls=network.calls)
