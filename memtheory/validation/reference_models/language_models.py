"""Hugging Face's ``BertForMaskedLM`` and ``GPT2LMHeadModel`` as plain modules.

How they differ from Hugging Face's code is listed in
:mod:`memtheory.validation.reference_models`.

Examples
--------
>>> import torch
>>> gpt2 = GPT2Reference(layers=1, hidden=8, heads=2, vocabulary=11, positions=6)
>>> gpt2(torch.zeros(2, 5, dtype=torch.long)).shape
torch.Size([2, 5, 11])
"""

from __future__ import annotations

import torch
from torch import nn

from memtheory.validation.reference_models.parts import (
    AddedEmbedding,
    Chain,
    TiedDecoder,
    TransformerBlock,
)

__all__ = ["BertMLMReference", "GPT2Reference"]


class BertMLMReference(nn.Module):
    """Hugging Face's ``BertForMaskedLM`` (see :mod:`memtheory.validation.reference_models`)."""

    def __init__(
        self,
        *,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        vocabulary: int = 30522,
        positions: int = 512,
        token_types: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.embeddings = _BertEmbeddings(vocabulary, hidden, positions, token_types, dropout)
        self.encoder = _BertEncoder(layers, hidden, heads, dropout)
        self.cls = _BertOnlyMLMHead(hidden, self.embeddings.word_embeddings)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch: ``BertModel.forward``, then the head."""
        return self.cls(self._bert(input_ids))

    def _bert(self, input_ids: torch.Tensor) -> torch.Tensor:
        embedding_output = self.embeddings(input_ids)
        sequence_output = self.encoder(embedding_output)
        return sequence_output


class _BertEmbeddings(nn.Module):
    """``BertEmbeddings``: inputs_embeds lives until it returns (rows added in the layers)."""

    def __init__(
        self, vocabulary: int, hidden: int, positions: int, token_types: int, dropout: float
    ) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocabulary, hidden)
        self.token_type_embeddings = AddedEmbedding(token_types, hidden, ids="zeros")
        self.position_embeddings = AddedEmbedding(
            positions, hidden, ids="positions", inplace=True
        )
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        inputs_embeds = self.word_embeddings(input_ids)
        embeddings = self.token_type_embeddings(inputs_embeds)
        embeddings = self.position_embeddings(embeddings)
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


class _BertEncoder(nn.Module):
    """``BertEncoder``: its ``layer`` list run in turn."""

    def __init__(self, layers: int, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList(
            TransformerBlock(
                hidden, heads, 4 * hidden, norm="post", dropout=dropout, activation=nn.GELU()
            )
            for _ in range(layers)
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states)
        return hidden_states


class _BertOnlyMLMHead(nn.Module):
    """``BertOnlyMLMHead``: ``predictions`` = transform (dense, GELU, LayerNorm), tied decoder."""

    def __init__(self, hidden: int, embedding: nn.Embedding) -> None:
        super().__init__()
        self.predictions = Chain()
        transform = Chain()
        transform.add_module("dense", nn.Linear(hidden, hidden))
        transform.add_module("transform_act_fn", nn.GELU())
        transform.add_module("LayerNorm", nn.LayerNorm(hidden, eps=1e-12))
        self.predictions.add_module("transform", transform)
        self.predictions.add_module("decoder", TiedDecoder(embedding, bias=True))

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        prediction_scores = self.predictions(sequence_output)
        return prediction_scores


class GPT2Reference(nn.Module):
    """Hugging Face's ``GPT2LMHeadModel`` (see :mod:`memtheory.validation.reference_models`)."""

    def __init__(
        self,
        *,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        vocabulary: int = 50257,
        positions: int = 1024,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocabulary, hidden)
        self.wpe = AddedEmbedding(positions, hidden, ids="positions")
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(
            TransformerBlock(
                hidden,
                heads,
                4 * hidden,
                norm="pre",
                dropout=dropout,
                activation=nn.GELU(approximate="tanh"),
            )
            for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = TiedDecoder(self.wte, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch: ``GPT2Model.forward``, then the head."""
        return self.lm_head(self._transformer(input_ids))

    def _transformer(self, input_ids: torch.Tensor) -> torch.Tensor:
        # As GPT2Model.forward: inputs_embeds lives until it returns.
        inputs_embeds = self.wte(input_ids)
        hidden_states = self.wpe(inputs_embeds)
        hidden_states = self.drop(hidden_states)
        for block in self.h:
            hidden_states = block(hidden_states)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states
