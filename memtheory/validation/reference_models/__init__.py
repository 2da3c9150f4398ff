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

==================  ============================================================
module              what it holds
==================  ============================================================
parts               the shared pieces: a chain of children, self-attention, the
                    transformer block in its three styles, tied decoder
convnets            :class:`ResNetReference`, :class:`MobileNetV2Reference`
vit_reference       :class:`ViTReference`
language_models     :class:`BertMLMReference`, :class:`GPT2Reference`
network_settings    :func:`as_measured`, :func:`as_hugging_face`: the builders'
                    networks as the references (or Hugging Face) run them
pairs               :class:`ReferencePair` and :data:`PAIRS`
==================  ============================================================

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

from memtheory.validation.reference_models.convnets import MobileNetV2Reference, ResNetReference
from memtheory.validation.reference_models.language_models import BertMLMReference, GPT2Reference
from memtheory.validation.reference_models.network_settings import as_hugging_face, as_measured
from memtheory.validation.reference_models.pairs import BATCH, PAIRS, ReferencePair
from memtheory.validation.reference_models.vit_reference import ViTReference

__all__ = [
    "BATCH",
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
