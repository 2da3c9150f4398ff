"""Builders for named architectures, from their hyperparameters.

==============  ==========================================  ===================
builder         architecture                                parameters
==============  ==========================================  ===================
``vgg16``       VGG-16 (torchvision)                        138,357,544
``resnet50``    ResNet-50 (torchvision), a residual graph   25,557,032
``bert_base``   BERT-base (Hugging Face ``BertModel``)      109,482,240
``gpt2``        GPT-2 small, medium, large, xl (Hugging     124,439,808 to
                Face ``GPT2LMHeadModel``)                   1,557,611,200
==============  ==========================================  ===================

Examples
--------
>>> from memtheory.models import vgg16
>>> vgg16(batch=1).summary().activation_count
15095272
"""

from memtheory.models.bert import bert, bert_base
from memtheory.models.gpt2 import GPT2_SIZES, GPT2Config, gpt2
from memtheory.models.resnet import RESNET50_BLOCKS, bottleneck, resnet, resnet50
from memtheory.models.transformer import transformer_block
from memtheory.models.vgg import VGG16_CONFIG, vgg, vgg16

__all__ = [
    "GPT2_SIZES",
    "RESNET50_BLOCKS",
    "VGG16_CONFIG",
    "GPT2Config",
    "bert",
    "bert_base",
    "bottleneck",
    "gpt2",
    "resnet",
    "resnet50",
    "transformer_block",
    "vgg",
    "vgg16",
]
