"""The pieces the reference modules share: a chain of children, self-attention, a block.

:class:`TransformerBlock` is memtheory's ``transformer_block`` written as
torchvision's ``EncoderBlock`` or Hugging Face's ``GPT2Block`` or ``BertLayer``
(its ``style``); the embeddings that add their rows and the tied decoder are
the language models'.

Examples
--------
>>> import torch
>>> from torch import nn
>>> Chain(nn.Linear(2, 3), nn.ReLU())(torch.ones(1, 2)).shape
torch.Size([1, 3])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
from torch import nn

__all__: list[str] = []


class Chain(nn.Module):
    """Children named ``0``, ``1``, ... run one after the other (an explicit forward)."""

    def __init__(self, *modules: nn.Module, names: Sequence[str] | None = None) -> None:
        super().__init__()
        for index, module in enumerate(modules):
            self.add_module(names[index] if names else str(index), module)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.children():
            x = module(x)
        return x


# -- transformers ----------------------------------------------------------------------------
class _SelfAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` called as self-attention, returning only its output."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__(hidden, heads, dropout=dropout, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x, x, x, need_weights=False)[0]


class TransformerBlock(nn.Module):
    """memtheory's ``transformer_block``: ``pre`` (GPT-2, ViT) or ``post`` (BERT) norm."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        ffn: int,
        *,
        norm: str,
        dropout: float,
        activation: nn.Module,
        activation_dropout: bool = False,
        style: str = "gpt2",
    ) -> None:
        super().__init__()
        self.norm = norm
        self.style = style if norm == "pre" else "bert"
        drop = (lambda: nn.Dropout(dropout)) if dropout else (lambda: nn.Identity())
        if norm == "pre":
            self.ln_1 = nn.LayerNorm(hidden)
        self.attn = _SelfAttention(hidden, heads, dropout)
        if dropout:
            self.attn_dropout = drop()
        if norm == "post":
            self.ln_1 = nn.LayerNorm(hidden)
        if norm == "pre":
            self.ln_2 = nn.LayerNorm(hidden)
        self.mlp_fc = nn.Linear(hidden, ffn)
        self.mlp_act = activation
        if activation_dropout and dropout:
            self.act_dropout = drop()
        self.mlp_proj = nn.Linear(ffn, hidden)
        if dropout:
            self.mlp_dropout = drop()
        if norm == "post":
            self.ln_2 = nn.LayerNorm(hidden)

    def _drop(self, name: str, x: torch.Tensor) -> torch.Tensor:
        module = getattr(self, name, None)
        return x if module is None else module(x)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        x = self._drop("act_dropout", self.mlp_act(self.mlp_fc(x)))
        return self._drop("mlp_dropout", self.mlp_proj(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Variables live as in the real code (memtheory.models.transformer.block_calls).
        if self.style == "torchvision":  # torchvision's EncoderBlock
            input = x  # noqa: A001
            x = self.ln_1(input)
            x = self.attn(x)
            x = self._drop("attn_dropout", x)
            x = x + input
            y = self.ln_2(x)
            y = self._mlp(y)
            return x + y
        if self.style == "gpt2":  # Hugging Face's GPT2Block
            residual = x
            hidden_states = self.ln_1(x)
            attn_output = self._drop("attn_dropout", self.attn(hidden_states))
            hidden_states = attn_output + residual
            residual = hidden_states
            hidden_states = self.ln_2(hidden_states)
            feed_forward_hidden_states = self._mlp(hidden_states)
            hidden_states = residual + feed_forward_hidden_states
            return hidden_states
        # Hugging Face's BertLayer: BertAttention (BertSelfOutput), BertIntermediate, BertOutput
        attention_output = self._self_output(self.attn(x), x, "attn_dropout", "ln_1")
        intermediate_output = self.mlp_act(self.mlp_fc(attention_output))
        return self._self_output(
            self.mlp_proj(intermediate_output), attention_output, "mlp_dropout", "ln_2"
        )

    def _self_output(
        self, hidden_states: torch.Tensor, input_tensor: torch.Tensor, drop: str, norm: str
    ) -> torch.Tensor:
        """Hugging Face's ``BertSelfOutput`` / ``BertOutput`` after the projection."""
        hidden_states = self._drop(drop, hidden_states)
        hidden_states = self.get_submodule(norm)(hidden_states + input_tensor)
        return hidden_states


class AddedEmbedding(nn.Embedding):
    """Rows looked up and added to ``x``: position ids ``arange(sequence)`` or zero token types.

    memtheory's ``PositionEmbedding`` and ``TokenTypeEmbedding``, whose output is the sum.
    """

    def __init__(self, rows: int, hidden: int, *, ids: str, inplace: bool = False) -> None:
        super().__init__(rows, hidden)
        self.ids, self.inplace = ids, inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence = x.shape[:2]
        if self.ids == "positions":  # made on the input's device (a GPU run as well as the CPU)
            ids = torch.arange(sequence, device=x.device)
        else:
            ids = torch.zeros(batch, sequence, dtype=torch.long, device=x.device)
        rows = super().forward(ids)
        if self.inplace:
            x += rows
            return x
        return x + rows


class TiedDecoder(nn.Module):
    """A projection onto the vocabulary that reads the token embedding's matrix (tied)."""

    def __init__(self, embedding: nn.Embedding, bias: bool) -> None:
        super().__init__()
        self._embedding = [embedding]  # not registered: the matrix belongs to the embedding
        if bias:
            self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))
        else:
            self.bias = None  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self._embedding[0].weight, self.bias)
