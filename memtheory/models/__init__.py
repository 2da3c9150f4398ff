"""Builders for named architectures, from their hyperparameters.

=================  ==========================================  ===================
builder            architecture                                parameters
=================  ==========================================  ===================
``vgg16``          VGG-16 (torchvision)                        138,357,544
``resnet18``       ResNet-18 (torchvision), basic blocks       11,689,512
``resnet34``       ResNet-34 (torchvision), basic blocks       21,797,672
``resnet50``       ResNet-50 (torchvision), bottleneck blocks  25,557,032
``mobilenet_v2``   MobileNetV2 (torchvision)                   3,504,872
``vit_b_16``       ViT-B/16 (torchvision)                      86,567,656
``bert_base``      BERT-base (Hugging Face ``BertModel``)      109,482,240
``bert_base_mlm``  BERT-base with the masked-LM head (Hugging  109,514,298
                   Face ``BertForMaskedLM``)
``gpt2``           GPT-2 small, medium, large, xl (Hugging     124,439,808 to
                   Face ``GPT2LMHeadModel``), loss optional    1,557,611,200
``decoder``        Llama, Mistral, Qwen2, Qwen3, Phi-3,        Llama-2-7B:
                   Gemma, Gemma 2, Mixtral                     6,738,415,616
                   (``LlamaForCausalLM`` and relatives)
``vision_``        Qwen2-VL, Qwen2.5-VL, LLaVA, Gemma 3: a     Qwen2-VL-2B:
``language``       vision tower, a projector, the language     2,208,985,600
                   model
=================  ==========================================  ===================

:func:`from_config` builds any of these from a Hugging Face ``config.json`` (a
path or a dict, never a download) or a preset name (:data:`PRESETS`:
``"llama-3-8b"``, ``"mixtral-8x7b"``, ...).

Examples
--------
>>> from memtheory.models import vgg16
>>> vgg16(batch=1).summary().activation_count
15095272
"""

from memtheory.models.bert import bert, bert_base, bert_base_mlm
from memtheory.models.decoder import DecoderConfig, active_parameter_count, decoder
from memtheory.models.gpt2 import GPT2_SIZES, GPT2Config, gpt2
from memtheory.models.hf_config import (
    MODEL_TYPES,
    decoder_config,
    from_config,
    load_config,
    preset,
)
from memtheory.models.mobilenet import (
    MOBILENETV2_SETTING,
    inverted_residual,
    make_divisible,
    mobilenet_v2,
)
from memtheory.models.presets import PRESETS, Preset
from memtheory.models.resnet import (
    RESNET18_BLOCKS,
    RESNET34_BLOCKS,
    RESNET50_BLOCKS,
    basic_block,
    bottleneck,
    resnet,
    resnet18,
    resnet34,
    resnet50,
)
from memtheory.models.transformer import transformer_block
from memtheory.models.vgg import VGG16_CONFIG, vgg, vgg16
from memtheory.models.vision_language import image_tokens, vision_language
from memtheory.models.vit import vision_transformer, vit_b_16

__all__ = [
    "GPT2_SIZES",
    "MOBILENETV2_SETTING",
    "MODEL_TYPES",
    "PRESETS",
    "RESNET18_BLOCKS",
    "RESNET34_BLOCKS",
    "RESNET50_BLOCKS",
    "VGG16_CONFIG",
    "DecoderConfig",
    "GPT2Config",
    "Preset",
    "active_parameter_count",
    "basic_block",
    "bert",
    "bert_base",
    "bert_base_mlm",
    "bottleneck",
    "decoder",
    "decoder_config",
    "from_config",
    "gpt2",
    "image_tokens",
    "inverted_residual",
    "load_config",
    "make_divisible",
    "mobilenet_v2",
    "preset",
    "resnet",
    "resnet18",
    "resnet34",
    "resnet50",
    "transformer_block",
    "vgg",
    "vgg16",
    "vision_language",
    "vision_transformer",
    "vit_b_16",
]
