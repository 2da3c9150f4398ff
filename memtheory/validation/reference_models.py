"""PyTorch twins of memtheory's builders, written as ordinary modules, measured against them.

Each reference module is an ``nn.Module`` with an explicit ``forward()`` (no
``nn.Sequential``, no torchvision or transformers, whose code or compiled
extensions are not available here). Its submodules carry the memtheory layer
names (``layer1.0.conv1``, ``h.0.attn``, ``cls.predictions.decoder``) and are
registered in the order the network runs them, so ``named_parameters()``
lines up, name for name and shape for shape, with
:func:`memtheory.network.parameter_shapes` of the builder's network; a
forward hook on a submodule sees the output shape of the memtheory layer of
the same name.

What each one does, operation for operation, follows the real model, and so
does how long Python keeps each tensor: the containers torchvision and Hugging
Face call as modules are modules here, and the variables their ``forward``
methods keep are kept here, so that under ``no_grad`` (where a tensor lives as
long as something refers to it) the inference peak is the real code's. The
builders declare the same lifetimes as :attr:`~memtheory.network.Network.calls`.

* ResNet (torchvision ``BasicBlock`` / ``Bottleneck``, v1.5): in-place ReLUs,
  one operation per statement (as torchvision, so that under ``no_grad`` each
  tensor is freed when torchvision frees it), the stride on the first 3x3
  convolution, the projection computed after the main branch, ``out += identity``.
* MobileNetV2 (torchvision): conv + BN + in-place ReLU6 units, depthwise
  convolutions through ``groups``, ``x + conv(x)`` out of place, functional
  global pooling written as an ``AdaptiveAvgPool2d`` module.
* ViT (torchvision ``VisionTransformer``): ``conv_proj``, reshape + permute,
  class token by ``cat``, the ``Encoder`` module (``x + pos_embedding``, its
  layers, ``ln``), pre-norm ``EncoderBlock`` s around
  ``nn.MultiheadAttention(..., need_weights=False)``; dropouts of probability
  0 left out (PyTorch passes their input through).
* BERT-MLM (Hugging Face ``BertForMaskedLM``): word + token-type embeddings,
  position embeddings added in place, LayerNorm and dropout; post-norm blocks
  ``LayerNorm(x + dropout(attn(x)))`` and ``LayerNorm(h + dropout(mlp(h)))``
  with exact GELU; the head ``dense -> GELU -> LayerNorm -> decoder`` whose
  matrix is the word embedding's and whose bias is its own. Differences from
  Hugging Face: the attention is ``nn.MultiheadAttention`` (one packed
  query/key/value projection, memtheory's ``implementation="torch"``; Hugging
  Face has three projections and its own eager or SDPA attention), the
  token-type and position ids are made in ``forward`` (zeros of ``(batch,
  sequence)`` and ``arange(sequence)``) rather than read from registered
  buffers, and the looked-up rows are added inside the embedding modules
  (Hugging Face keeps them in variables until ``BertEmbeddings`` returns).
  ``BertEmbeddings``, ``BertEncoder`` and ``BertOnlyMLMHead`` are modules,
  and each block keeps its variables as ``BertLayer`` does.
* GPT-2 (Hugging Face ``GPT2LMHeadModel``): token + position embeddings
  (``arange(sequence)`` ids), dropout, pre-norm blocks with the tanh GELU as
  one operation (``nn.GELU(approximate="tanh")``; Hugging Face's ``gelu_new``
  is a Python composite), the final LayerNorm, the tied ``lm_head`` and
  Hugging Face's causal-LM loss (:func:`~memtheory.torch.hf_losses.causal_lm_loss`). The
  attention is ``nn.MultiheadAttention`` without a causal mask (memtheory's
  layer models none). ``GPT2Model.forward`` keeps ``inputs_embeds`` until it returns, and
  each block its variables as ``GPT2Block`` does.

The memtheory side of each pair is the builder's network passed through
:func:`as_measured` (CPU dropout masks, ``nn.MultiheadAttention`` attention).

:data:`PAIRS` holds one :class:`ReferencePair` per builder at small sizes:

>>> import torch
>>> from memtheory.torch import measure
>>> pair = PAIRS["ResNet-18-style"]
>>> module = pair.build_module()
>>> m = measure(module, pair.example_input(), pair.loss,
...             torch.optim.SGD(module.parameters(), lr=0.1), target=pair.example_target(),
...             warmup_steps=0)
>>> m.parameters == 4 * pair.build_network().parameter_count
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
from torch import nn

from memtheory.errors import InvalidArgumentError
from memtheory.layers import (
    CrossEntropyLoss,
    Dropout,
    Layer,
    MultiHeadAttention,
    PositionEmbedding,
    TokenTypeEmbedding,
)
from memtheory.models import (
    MOBILENETV2_SETTING,
    bert,
    gpt2,
    make_divisible,
    mobilenet_v2,
    resnet,
    vision_transformer,
)
from memtheory.models.gpt2 import GPT2Config
from memtheory.network import Network, Node
from memtheory.torch.hf_losses import causal_lm_loss, masked_lm_loss

__all__ = [
    "PAIRS",
    "BertMLMReference",
    "GPT2Reference",
    "MobileNetV2Reference",
    "ReferencePair",
    "ResNetReference",
    "ViTReference",
    "as_hugging_face",
    "as_measured",
]


# -- ResNet ----------------------------------------------------------------------------------
class _Block(nn.Module):
    """torchvision's ``BasicBlock`` or ``Bottleneck``, with one ReLU module per use."""

    def __init__(self, kind: str, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        self.kind = kind
        out_channels = width * (1 if kind == "basic" else 4)
        if kind == "basic":
            self.conv1 = nn.Conv2d(in_channels, width, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.relu2 = nn.ReLU(inplace=True)
            self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = _Chain(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        # The block's last ReLU: relu2 of a basic block, relu3 of a bottleneck.
        self.add_module("relu2" if kind == "basic" else "relu3", nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One operation per statement, as torchvision writes it: under no_grad a tensor is
        # freed when its last Python reference goes, so nested calls would change the peak.
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu1(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.kind != "basic":
            out = self.relu2(out)
            out = self.conv3(out)
            out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.get_submodule("relu2" if self.kind == "basic" else "relu3")(out)
        return out


class _Chain(nn.Module):
    """Children named ``0``, ``1``, ... run one after the other (an explicit forward)."""

    def __init__(self, *modules: nn.Module, names: Sequence[str] | None = None) -> None:
        super().__init__()
        for index, module in enumerate(modules):
            self.add_module(names[index] if names else str(index), module)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.children():
            x = module(x)
        return x


class ResNetReference(nn.Module):
    """torchvision's ResNet with ``blocks[i]`` blocks of ``kind`` in stage ``i + 1``."""

    def __init__(
        self, kind: str, blocks: Sequence[int], *, width: int = 64, classes: int = 1000
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        channels = width
        expansion = 1 if kind == "basic" else 4
        self.stages: list[_Chain] = []
        for stage, count in enumerate(blocks):
            inner = width * 2**stage
            stage_blocks = []
            for index in range(count):
                stride = 2 if index == 0 and stage > 0 else 1
                stage_blocks.append(_Block(kind, channels, inner, stride))
                channels = inner * expansion
            chain = _Chain(*stage_blocks)
            self.add_module(f"layer{stage + 1}", chain)
            self.stages.append(chain)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in self.stages:
            x = stage(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- MobileNetV2 -----------------------------------------------------------------------------
def _conv_bn_relu6(
    in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1
) -> _Chain:
    return _Chain(
        nn.Conv2d(
            in_channels, out_channels, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False
        ),
        nn.BatchNorm2d(out_channels),
        nn.ReLU6(inplace=True),
    )


class _InvertedResidual(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(in_channels * expand))
        self.use_res_connect = stride == 1 and in_channels == out_channels
        parts: list[nn.Module] = []
        if expand != 1:
            parts.append(_conv_bn_relu6(in_channels, hidden, 1))
        parts += [
            _conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, out_channels, 1, 1, 0, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.conv = _Chain(*parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2Reference(nn.Module):
    """torchvision's MobileNetV2."""

    def __init__(
        self,
        *,
        width_mult: float = 1.0,
        setting: Sequence[tuple[int, int, int, int]] = MOBILENETV2_SETTING,
        classes: int = 1000,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        channels = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [_conv_bn_relu6(3, channels, 3, 2)]
        for t, c, n, s in setting:
            out_channels = make_divisible(c * width_mult)
            for repeat in range(n):
                features.append(
                    _InvertedResidual(channels, out_channels, s if repeat == 0 else 1, t)
                )
                channels = out_channels
        features.append(_conv_bn_relu6(channels, last, 1))
        self.features = _Chain(*features)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = _Chain(nn.Dropout(dropout), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# -- transformers ----------------------------------------------------------------------------
class _SelfAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` called as self-attention, returning only its output."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__(hidden, heads, dropout=dropout, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x, x, x, need_weights=False)[0]


class _TransformerBlock(nn.Module):
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


class _ClassToken(nn.Module):
    """``cat([class_token.expand(n, -1, -1), x], dim=1)``, as torchvision's ViT."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)


class _LearnedPositions(nn.Module):
    """``x + pos_embedding``, as torchvision's ViT encoder."""

    def __init__(self, positions: int, hidden: int) -> None:
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, positions, hidden).normal_(std=0.02))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos_embedding


class ViTReference(nn.Module):
    """torchvision's ``VisionTransformer`` (pre-norm, GELU MLP, head on the class token)."""

    def __init__(
        self,
        *,
        image_size: int = 224,
        patch_size: int = 16,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        mlp_dim: int = 3072,
        classes: int = 1000,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.conv_proj = nn.Conv2d(3, hidden, patch_size, patch_size)
        self.class_token = _ClassToken(hidden)
        sequence = (image_size // patch_size) ** 2 + 1
        self.encoder = _ViTEncoder(sequence, layers, hidden, heads, mlp_dim, dropout)
        self.heads = _Chain()
        self.heads.add_module("head", nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model on a batch, as torchvision's ``VisionTransformer.forward``."""
        x = self._process_input(x)
        x = self.class_token(x)
        x = self.encoder(x)
        x = x[:, 0]
        x = self.heads(x)
        return x

    def _process_input(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x)
        n, hidden = x.shape[0], x.shape[1]
        x = x.reshape(n, hidden, -1)
        x = x.permute(0, 2, 1)
        return x


class _ViTEncoder(nn.Module):
    """torchvision's ViT ``Encoder``: ``ln(layers(dropout(input + pos_embedding)))``."""

    def __init__(
        self, sequence: int, layers: int, hidden: int, heads: int, mlp_dim: int, dropout: float
    ) -> None:
        super().__init__()
        self.pos_embedding = _LearnedPositions(sequence, hidden)
        if dropout:
            self.dropout = nn.Dropout(dropout)
        self.layers = _Chain(
            *(
                _TransformerBlock(
                    hidden,
                    heads,
                    mlp_dim,
                    norm="pre",
                    dropout=dropout,
                    activation=nn.GELU(),
                    activation_dropout=True,
                    style="torchvision",
                )
                for _ in range(layers)
            ),
            names=[f"encoder_layer_{i}" for i in range(layers)],
        )
        self.ln = nn.LayerNorm(hidden, eps=1e-6)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torchvision's name)
        input = self.pos_embedding(input)  # noqa: A001
        if hasattr(self, "dropout"):
            input = self.dropout(input)  # noqa: A001
        return self.ln(self.layers(input))


class _AddedEmbedding(nn.Embedding):
    """Rows looked up and added to ``x``: position ids ``arange(sequence)`` or zero token types.

    memtheory's ``PositionEmbedding`` and ``TokenTypeEmbedding``, whose output is the sum.
    """

    def __init__(self, rows: int, hidden: int, *, ids: str, inplace: bool = False) -> None:
        super().__init__(rows, hidden)
        self.ids, self.inplace = ids, inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence = x.shape[:2]
        if self.ids == "positions":
            ids = torch.arange(sequence)
        else:
            ids = torch.zeros(batch, sequence, dtype=torch.long)
        rows = super().forward(ids)
        if self.inplace:
            x += rows
            return x
        return x + rows


class _TiedDecoder(nn.Module):
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


class BertMLMReference(nn.Module):
    """Hugging Face's ``BertForMaskedLM`` (see the module docstring for the differences)."""

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
        self.token_type_embeddings = _AddedEmbedding(token_types, hidden, ids="zeros")
        self.position_embeddings = _AddedEmbedding(
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
            _TransformerBlock(
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
        self.predictions = _Chain()
        transform = _Chain()
        transform.add_module("dense", nn.Linear(hidden, hidden))
        transform.add_module("transform_act_fn", nn.GELU())
        transform.add_module("LayerNorm", nn.LayerNorm(hidden, eps=1e-12))
        self.predictions.add_module("transform", transform)
        self.predictions.add_module("decoder", _TiedDecoder(embedding, bias=True))

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        prediction_scores = self.predictions(sequence_output)
        return prediction_scores


class GPT2Reference(nn.Module):
    """Hugging Face's ``GPT2LMHeadModel`` (see the module docstring for the differences)."""

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
        self.wpe = _AddedEmbedding(positions, hidden, ids="positions")
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(
            _TransformerBlock(
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
        self.lm_head = _TiedDecoder(self.wte, bias=False)

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


# -- pairs -----------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class ReferencePair:
    """A memtheory builder and its PyTorch twin at the same small hyperparameters.

    Attributes
    ----------
    name : str
    build_module : callable
        ``build_module(dtype=torch.float32, seed=0)``: the reference module on
        CPU, seeded, in training mode.
    build_network : callable
        ``build_network()``: the builder's :class:`~memtheory.network.Network`
        at the same sizes and batch, ending with the loss layer that matches
        :attr:`loss`, with CPU dropout masks and ``nn.MultiheadAttention``
        (see :func:`as_measured`).
    example_input, example_target : callable
        ``example_input(seed=0)``: the batch; ``example_target(seed=0)``: its labels.
    loss : callable
        ``loss(output, target)`` for :func:`memtheory.torch.measure`.
    """

    name: str
    build_module: Callable[..., nn.Module]
    build_network: Callable[[], Network]
    example_input: Callable[..., torch.Tensor]
    example_target: Callable[..., torch.Tensor]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def batch(
        self, dtype: torch.dtype = torch.float32, seed: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the input (images converted to ``dtype``; token ids stay int64) and targets.

        Examples
        --------
        >>> x, y = PAIRS["ViT-style"].batch(torch.bfloat16)
        >>> x.dtype, y.dtype
        (torch.bfloat16, torch.int64)
        >>> PAIRS["GPT-2-style"].batch(torch.bfloat16)[0].dtype
        torch.int64
        """
        x = self.example_input(seed)
        if x.is_floating_point():
            x = x.to(dtype)
        return x, self.example_target(seed)


def _module(factory: Callable[[], nn.Module]) -> Callable[..., nn.Module]:
    def build(dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return factory().to(dtype).train()

    return build


def _randint(high: int, shape: tuple[int, ...]) -> Callable[..., torch.Tensor]:
    def make(seed: int = 0) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed + 1))

    return make


def _images(batch: int, size: int) -> Callable[..., torch.Tensor]:
    def make(seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(batch, 3, size, size, generator=generator).to(dtype)

    return make


BATCH = 3
"""Batch of every small pair (a size nobody tuned for)."""


def _resnet18_style() -> ReferencePair:
    blocks, width, image, classes = (2, 2, 1, 1), 8, 40, 10
    return ReferencePair(
        "ResNet-18-style",
        _module(lambda: ResNetReference("basic", blocks, width=width, classes=classes)),
        lambda: as_measured(
            resnet(
                blocks, block="basic", width=width, image_size=image, batch=BATCH, classes=classes
            ),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(classes, (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _resnet50_style() -> ReferencePair:
    blocks, width, image, classes = (2, 1, 1, 1), 4, 36, 7
    return ReferencePair(
        "ResNet-50-style",
        _module(lambda: ResNetReference("bottleneck", blocks, width=width, classes=classes)),
        lambda: as_measured(
            resnet(
                blocks,
                block="bottleneck",
                width=width,
                image_size=image,
                batch=BATCH,
                classes=classes,
            ),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(classes, (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _mobilenet_style() -> ReferencePair:
    setting = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2))
    width_mult, image, classes = 0.25, 40, 10
    return ReferencePair(
        "MobileNetV2-style",
        _module(
            lambda: MobileNetV2Reference(width_mult=width_mult, setting=setting, classes=classes)
        ),
        lambda: as_measured(
            mobilenet_v2(
                width_mult=width_mult,
                setting=setting,
                image_size=image,
                batch=BATCH,
                classes=classes,
            ),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(classes, (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _vit_style() -> ReferencePair:
    sizes = {"patch_size": 8, "layers": 2, "hidden": 32, "heads": 4, "mlp_dim": 48, "classes": 5}
    image = 24
    return ReferencePair(
        "ViT-style",
        _module(lambda: ViTReference(image_size=image, **sizes)),
        lambda: as_measured(
            vision_transformer(image_size=image, batch=BATCH, **sizes),
            CrossEntropyLoss(name="loss"),
        ),
        _images(BATCH, image),
        _randint(sizes["classes"], (BATCH,)),
        nn.CrossEntropyLoss(),
    )


def _bert_style() -> ReferencePair:
    sizes: dict[str, Any] = {
        "layers": 2,
        "hidden": 32,
        "heads": 4,
        "vocabulary": 101,
        "positions": 40,
    }
    sequence = 13
    return ReferencePair(
        "BERT-MLM-style",
        _module(lambda: BertMLMReference(**sizes)),
        lambda: as_measured(
            bert(**sizes, batch=BATCH, sequence=sequence, pooler=False, mlm_head=True, loss=True),
            None,
        ),
        _randint(sizes["vocabulary"], (BATCH, sequence)),
        _randint(sizes["vocabulary"], (BATCH, sequence)),
        masked_lm_loss,
    )


def _gpt2_style() -> ReferencePair:
    config = GPT2Config(layers=2, hidden=32, heads=4, vocabulary=97, positions=40)
    sequence = 11
    return ReferencePair(
        "GPT-2-style",
        _module(
            lambda: GPT2Reference(
                layers=config.layers,
                hidden=config.hidden,
                heads=config.heads,
                vocabulary=config.vocabulary,
                positions=config.positions,
            )
        ),
        lambda: as_measured(gpt2(config, batch=BATCH, sequence=sequence, loss=True), None),
        _randint(config.vocabulary, (BATCH, sequence)),
        _randint(config.vocabulary, (BATCH, sequence)),
        causal_lm_loss,
    )


PAIRS: dict[str, ReferencePair] = {
    pair.name: pair
    for pair in (
        _resnet18_style(),
        _resnet50_style(),
        _mobilenet_style(),
        _vit_style(),
        _bert_style(),
        _gpt2_style(),
    )
}
"""Every builder with its reference module at small sizes, by name."""
