"""Vision-language models: a vision tower, a projector, a language model (Qwen2-VL, LLaVA, Gemma 3).

:func:`vision_language` builds Hugging Face's ``Qwen2VLForConditionalGeneration``,
``Qwen2_5_VLForConditionalGeneration``, ``LlavaForConditionalGeneration`` and
``Gemma3ForConditionalGeneration`` from their ``config.json`` as one network:
the token ids enter the language model's embeddings; beside them, one image
per sequence enters as pixel patches
(:class:`~memtheory.layers.vision_language.PixelPatches`) and runs through
the vision tower and the projector; the projected image features
replace the image-token positions of the text embeddings
(:class:`~memtheory.layers.vision_language.ImageTokenScatter`), and the
language model (:func:`~memtheory.models.decoder`) runs over the whole
sequence. The sequence length counts the image tokens: ``sequence`` is text
plus image tokens (:func:`image_tokens` says how many an image makes).

- **Qwen2-VL** (Wang et al. 2024, arXiv:2409.12191): a ``Conv3d`` over
  ``2 x 14 x 14`` patches (an image is two equal frames), ``depth`` pre-norm
  blocks (layer norms, fused ``qkv`` with biases, ``proj``, a QuickGELU MLP
  of ``mlp_ratio * embed_dim``), and the merger: a layer norm, each ``2 x 2``
  group of neighbouring patches concatenated, and a two-layer GELU MLP to the
  text width. An ``H x W`` image makes ``(H/14) (W/14)`` patches and
  ``(H/14)(W/14)/4`` image tokens (transformers' ``Qwen2VLImageProcessor``
  first rounds ``H`` and ``W`` to multiples of 28).
- **Qwen2.5-VL** (Bai et al. 2025, arXiv:2502.13923): the same layout with RMS
  norms, a gated SiLU MLP with biases, and ``out_hidden_size``.
- **LLaVA** (Liu et al. 2023, "Improved Baselines with Visual Instruction
  Tuning", LLaVA-1.5): a CLIP vision tower (a ``Conv2d`` patch embedding, a
  class token, learned positions, ``pre_layrnorm``, encoder layers,
  ``post_layernorm``); the features of layer ``vision_feature_layer`` (-2)
  without the class token (``"default"``; ``"full"`` keeps it), a two-layer
  GELU projector. An image is resized to ``image_size``: ``(image_size /
  patch_size)^2`` tokens (576 for CLIP ViT-L/14 at 336). LLaVA with a SigLIP
  tower (no class token, ``pre_layrnorm`` or pooling head; ``"default"`` drops
  the first patch, as transformers does) is built the same way.
- **Gemma 3** (Gemma Team 2025, arXiv:2503.19786): a SigLIP vision tower (a
  ``Conv2d`` patch embedding with a bias, learned positions, no class token,
  encoder layers with tanh-GELU MLPs, ``post_layernorm``); the projector
  averages each square of patches down to ``mm_tokens_per_image`` tokens
  (``4 x 4`` for SigLIP-So400m/14 at 896: 4,096 patches, 256 tokens), an RMS
  norm and an ``(vision, text)`` matrix; the language model is Gemma 3's
  (``gemma3_text``). An image is resized to ``image_size``; its tokens are
  fixed.

Parameter counts are exact, tensor for tensor, against transformers on the
``meta`` device (``tests/pytorch/test_vision_language_counts.py``). The
activations are a breakdown estimate: the vision tower's rotary tables (Qwen),
Qwen2.5-VL's windowed attention (modelled as attention over the whole image,
an upper bound), QuickGELU (modelled as GELU) and the multimodal rotary
position ids are approximations, and the autograd convention refuses the
model.

Examples
--------
>>> config = {"model_type": "qwen2_vl", "vocab_size": 96, "hidden_size": 32,
...     "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
...     "num_key_value_heads": 2, "vision_config": {"depth": 2, "embed_dim": 16,
...     "hidden_size": 32, "mlp_ratio": 2, "num_heads": 2}}
>>> from memtheory.models import decoder_config
>>> language = decoder_config(text_config(config))
>>> vision_language(config, language, image=56).parameter_count
51328
>>> image_tokens(config, 448)
256
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memtheory._shown import shown
from memtheory._validation import SizeLike
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.layers import GELU, Add, Dense, Layer, LayerNorm, Multiply, SiLU
from memtheory.layers.rms_norm import RMSNorm
from memtheory.layers.vision_language import (
    DropClassToken,
    EncoderAttention,
    FlatClassToken,
    FlatPositions,
    ImageTokenScatter,
    MatrixProjection,
    PatchMerge,
    PatchPool,
    PatchProjection,
    PixelPatches,
)
from memtheory.models._config_keys import config_flag, optional_int, required_value
from memtheory.models.decoder import DecoderConfig, decoder
from memtheory.models.decoder_stack import fused_projection
from memtheory.network import Network, Node
from memtheory.symbols import B, S

__all__ = [
    "ANY_RESOLUTION",
    "DEFAULT_IMAGE",
    "VISION_LANGUAGE",
    "image_tokens",
    "text_config",
    "vision_language",
]

VISION_LANGUAGE = ("qwen2_vl", "qwen2_5_vl", "llava", "gemma3")
"""The vision-language ``model_type`` values :func:`vision_language` builds."""

ANY_RESOLUTION = ("qwen2_vl", "qwen2_5_vl")
"""The families that take an image of any size (its tokens grow with it): ``image=`` applies.

LLaVA and Gemma 3 resize every image to their vision tower's ``image_size``.
"""

_FIXED_SIZE = ("llava", "gemma3")
"""The families whose image tokens the vision tower's ``image_size`` fixes."""

DEFAULT_IMAGE = 448
"""The image side memtheory assumes for Qwen2-VL when a question names none: 448 x 448,
1,024 patches, 256 image tokens. It is memtheory's choice, not the library's: Qwen2-VL's
processor takes any size between its ``min_pixels`` and ``max_pixels``; the network's name
(and ``memtheory estimate``'s first line) says which image was assumed."""

_LLAMA_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                   "num_hidden_layers": 32, "num_attention_heads": 32}
"""transformers' ``LlamaConfig`` defaults, which a LLaVA ``text_config`` relies on."""

_CLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                  "num_attention_heads": 12, "num_channels": 3, "image_size": 224,
                  "patch_size": 32}
"""``CLIPVisionConfig``'s defaults."""

_LLAVA_VISION = {"model_type": "clip_vision_model", "hidden_size": 1024,
                 "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                 "image_size": 336, "patch_size": 14}
"""``LlavaConfig``'s vision tower when ``vision_config`` is absent: CLIP ViT-L/14 at 336."""

_GEMMA3_TEXT = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                "head_dim": 256, "max_position_embeddings": 131072}
"""transformers' ``Gemma3TextConfig`` defaults, which a Gemma 3 ``text_config`` relies on."""

_SIGLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                    "num_attention_heads": 12, "num_channels": 3, "image_size": 224,
                    "patch_size": 16, "vision_use_head": True}
"""``SiglipVisionConfig``'s defaults (``Gemma3Config``'s vision tower when none is given)."""


@dataclass(frozen=True)
class _Tower:
    """The vision tower's sizes, read from ``vision_config``."""

    width: int
    depth: int
    heads: int
    ffn: int
    patch: int
    channels: int
    temporal: int
    merge: int
    out: int


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the language model's configuration, as a Llama-family ``config.json``.

    Qwen2-VL keeps the text keys at the top level (transformers 5 also reads
    a ``text_config``); LLaVA and Gemma 3 keep them in ``text_config``, whose
    missing keys take its family's defaults (``LlamaConfig``'s for a
    ``llama``, ``Gemma3TextConfig``'s for Gemma 3, whose top-level
    ``tie_word_embeddings``, True by default, ties the output layer).

    Examples
    --------
    >>> text_config({"model_type": "llava", "text_config": {"model_type": "llama",
    ...              "vocab_size": 32064}})["hidden_size"]
    4096
    >>> text_config({"model_type": "gemma3", "text_config": {}})["vocab_size"]
    262208
    """
    family = config.get("model_type")
    nested = config.get("text_config") or {}
    if not isinstance(nested, Mapping):
        raise InvalidArgumentError(
            f"from_config: 'text_config' must be an object, got {shown(nested)}."
        )
    if family == "llava":
        kind = nested.get("model_type", "llama")
        base = dict(_LLAMA_DEFAULTS) if kind == "llama" else {}
        return {**base, **nested, "model_type": kind}
    if family == "gemma3":
        tied = config_flag(config, "tie_word_embeddings", True)  # the text_config's is not read
        return {**_GEMMA3_TEXT, **nested, "model_type": "gemma3_text",
                "tie_word_embeddings": tied}
    skip = ("model_type", "vision_config", "text_config", "architectures")
    flat = {k: v for k, v in config.items() if k not in skip}
    text = {**flat, **nested, "model_type": "qwen2"}
    if "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    return text


def image_tokens(config: Mapping[str, Any], image: SizeLike | tuple[int, int]) -> int:
    """Return the image tokens one image of ``image`` pixels (a side, or height and width) makes.

    Qwen2-VL and Qwen2.5-VL: ``(H/14)(W/14)/4`` after rounding each side to a
    multiple of 28 (``Qwen2VLImageProcessor.smart_resize``; Wang et al. 2024,
    section 2.1: "a 224 x 224 image ... is compressed to 66 tokens", 64 image
    tokens plus the two vision start and end tokens). LLaVA: the image is
    resized to ``image_size``, ``(image_size / patch_size)^2`` tokens. Gemma 3:
    ``mm_tokens_per_image`` (256), as the projector's pooling gives them.

    Examples
    --------
    >>> image_tokens({"model_type": "qwen2_vl"}, 224)
    64
    >>> image_tokens({"model_type": "llava"}, 1000)
    576
    >>> image_tokens({"model_type": "gemma3", "vision_config": {"image_size": 896,
    ...     "patch_size": 14, "vision_use_head": False}}, 896)
    256
    """
    tower = _tower(config)
    if config.get("model_type") == "gemma3":
        side, kernel = _gemma3_pool(config, tower)
        return (side // kernel) ** 2
    if config.get("model_type") == "llava":
        vision = _llava_vision(config)
        side = int(vision["image_size"]) // tower.patch
        siglip = vision.get("model_type") == "siglip_vision_model"  # no class token
        return side * side + (0 if siglip else 1) - (1 if _drops_first(config) else 0)
    height, width = _sides(image)
    unit = tower.patch * tower.merge
    rows, columns = (max(1, round(side / unit)) for side in (height, width))
    return rows * columns


def _sides(image: SizeLike | tuple[int, int]) -> tuple[int, int]:
    """Read an image size: one side, or (height, width), whole numbers of pixels."""
    sides = image if isinstance(image, tuple) else (image, image)
    if len(sides) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                              for s in sides):
        raise InvalidArgumentError(
            f"from_config: image must be a side or (height, width) in whole pixels, got "
            f"{shown(image)}."
        )
    return int(sides[0]), int(sides[1])


def _llava_vision(config: Mapping[str, Any]) -> dict[str, Any]:
    vision = config.get("vision_config")
    if vision is None:
        return {**_CLIP_DEFAULTS, **_LLAVA_VISION}
    if not isinstance(vision, Mapping):
        raise InvalidArgumentError(
            f"from_config: 'vision_config' must be an object, got {shown(vision)}."
        )
    kind = vision.get("model_type", "clip_vision_model")
    if kind == "siglip_vision_model":
        return _without_head({**_SIGLIP_DEFAULTS, **vision}, "LLaVA")
    if kind != "clip_vision_model":
        raise UnsupportedError(
            f"from_config: LLaVA with a {kind!r} vision tower is not modelled; memtheory builds "
            "LLaVA with CLIP (clip_vision_model), as llava-1.5 has, or SigLIP "
            "(siglip_vision_model)."
        )
    return {**_CLIP_DEFAULTS, **vision}


def _without_head(values: dict[str, Any], family: str) -> dict[str, Any]:
    """Refuse SigLIP's pooling head, which these models build but never use."""
    if config_flag(values, "vision_use_head", True):
        raise UnsupportedError(
            f"from_config: {family} with vision_use_head true (SigLIP's pooling head, whose "
            f"output {family} discards: its parameters get no gradient) is not modelled; "
            "published checkpoints set \"vision_use_head\": false in vision_config: set it "
            "for an estimate."
        )
    return values


def _siglip_vision(config: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma 3's vision tower: a SigLIP one, without the pooling head Gemma 3 does not use."""
    vision = config.get("vision_config")
    if vision is None:
        vision = {}
    if not isinstance(vision, Mapping):
        raise InvalidArgumentError(
            f"from_config: 'vision_config' must be an object, got {shown(vision)}."
        )
    kind = vision.get("model_type", "siglip_vision_model")
    if kind != "siglip_vision_model":
        raise UnsupportedError(
            f"from_config: Gemma 3 with a {kind!r} vision tower is not modelled; memtheory builds "
            "Gemma 3 with SigLIP (siglip_vision_model), as its checkpoints have."
        )
    return _without_head({**_SIGLIP_DEFAULTS, **vision}, "Gemma 3")


def _gemma3_pool(config: Mapping[str, Any], tower: _Tower) -> tuple[int, int]:
    """Return Gemma 3's patches per side and the pooling kernel (``mm_tokens_per_image``)."""
    side = required_value(_siglip_vision(config), "image_size") // tower.patch
    tokens = optional_int(config, "mm_tokens_per_image", 256)
    tokens = 256 if tokens is None else tokens
    per_side = math.isqrt(max(tokens, 0))
    if per_side * per_side != tokens or not 1 <= per_side <= side:
        raise UnsupportedError(
            f"from_config: mm_tokens_per_image={tokens} must be a square of at most the "
            f"{side} x {side} patch grid (Gemma 3 averages square groups of patches); "
            "Gemma 3's checkpoints use 256."
        )
    return side, side // per_side


def _tower(config: Mapping[str, Any]) -> _Tower:
    """Read the vision tower's sizes (each family's configuration defaults)."""
    family = config.get("model_type")
    if family in _FIXED_SIZE:
        v = _llava_vision(config) if family == "llava" else _siglip_vision(config)
        return _Tower(
            width=required_value(v, "hidden_size"), depth=required_value(v, "num_hidden_layers"),
            heads=required_value(v, "num_attention_heads"),
            ffn=required_value(v, "intermediate_size"), patch=required_value(v, "patch_size"),
            channels=required_value(v, "num_channels"), temporal=1, merge=1, out=0)
    v = config.get("vision_config") or {}
    if not isinstance(v, Mapping):
        raise InvalidArgumentError(
            f"from_config: 'vision_config' must be an object, got {shown(v)}."
        )
    qwen25 = family == "qwen2_5_vl"
    width = optional_int(v, "hidden_size" if qwen25 else "embed_dim", 1280) or 1280
    ffn = (optional_int(v, "intermediate_size", 3420) if qwen25
           else width * (optional_int(v, "mlp_ratio", 4) or 4))
    return _Tower(
        width=width,
        depth=optional_int(v, "depth", 32) or 32,
        heads=optional_int(v, "num_heads", 16) or 16,
        ffn=ffn or 1,
        patch=optional_int(v, "patch_size", 14) or 14,
        channels=optional_int(v, "in_chans", 3) or 3,
        temporal=optional_int(v, "temporal_patch_size", 2) or 2,
        merge=optional_int(v, "spatial_merge_size", 2) or 2,
        out=optional_int(v, "out_hidden_size" if qwen25 else "hidden_size", 3584) or 3584,
    )


def vision_language(
    config: Mapping[str, Any],
    language: DecoderConfig,
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    image: SizeLike | tuple[int, int] | None = None,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
) -> Network:
    """Build a Qwen2-VL, Qwen2.5-VL, LLaVA or Gemma 3 model: one image per sequence.

    Parameters
    ----------
    config : mapping
        The model's ``config.json`` (``model_type`` one of :data:`VISION_LANGUAGE`).
    language : DecoderConfig
        The language model's sizes: :func:`~memtheory.models.decoder_config`
        of :func:`text_config` (what :func:`~memtheory.models.from_config` passes).
    batch, sequence : size
        Sequences per step, and tokens per sequence, the image tokens included.
    image : int or (int, int), optional
        Qwen: the image's side or (height, width) in pixels (default
        :data:`DEFAULT_IMAGE`). LLaVA and Gemma 3: the image is resized to
        the vision tower's ``image_size``; leave it unset.
    flash, lm_head, loss : bool
        As :func:`~memtheory.models.decoder`.

    Examples
    --------
    >>> from memtheory.models import decoder_config
    >>> qwen = {"model_type": "qwen2_vl", "vocab_size": 96, "hidden_size": 32,
    ...     "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...     "num_key_value_heads": 2, "vision_config": {"depth": 2, "embed_dim": 16,
    ...     "hidden_size": 32, "mlp_ratio": 2, "num_heads": 2}}
    >>> small = vision_language(qwen, decoder_config(text_config(qwen)), batch=1, sequence=512,
    ...                         image=56)
    >>> large = vision_language(qwen, decoder_config(text_config(qwen)), batch=1, sequence=512,
    ...                         image=112)
    >>> small.parameter_count == large.parameter_count  # a larger image: more tokens, no weights
    True
    """
    family = config.get("model_type")
    if family not in VISION_LANGUAGE:
        raise UnsupportedError(
            f"vision_language: model_type {family!r} is not one of {', '.join(VISION_LANGUAGE)}."
        )
    c = language
    tower = _tower(config)
    if family in _FIXED_SIZE:
        if image is not None:
            raise InvalidArgumentError(
                f"from_config: {'LLaVA' if family == 'llava' else 'Gemma 3'} resizes every image "
                "to its vision tower's image_size; leave image unset."
            )
        if family == "llava":
            vision = _llava(config, tower, c.hidden, flash=flash)
            side = int(_llava_vision(config)["image_size"])
        else:
            vision = _gemma3(config, tower, c.hidden, flash=flash)
            side = int(_siglip_vision(config)["image_size"])
        height, width = side, side
    else:
        height, width = _sides(image if image is not None else DEFAULT_IMAGE)
        unit = tower.patch * tower.merge
        rows, columns = (max(1, round(side / unit)) * tower.merge for side in (height, width))
        height, width = rows * tower.patch, columns * tower.patch  # as the processor resizes
        vision = _qwen(str(family), tower, rows * columns, flash=flash)
    tokens = image_tokens(config, (height, width))
    vision.append(Node(ImageTokenScatter(tokens, name="model.image_scatter"),
                       inputs=("model.embed_tokens", vision[-1].name or "")))
    return decoder(c, batch=batch, sequence=sequence, flash=flash, lm_head=lm_head, loss=loss,
                   name=_name(str(family), height, width, config), vision=vision)


def _name(family: str, height: int, width: int, config: Mapping[str, Any]) -> str:
    """Return the network's name, saying the image and its tokens (part of the sequence)."""
    tokens = image_tokens(config, (height, width))
    return (f"{family} (one {height}x{width} image per sequence: {tokens} of its tokens are "
            "image tokens)")


def _attention(prefix: str, heads: int, width: int, *, flash: bool) -> EncoderAttention:
    return EncoderAttention(heads, kv_heads=heads, head_dim=width // heads, flash=flash,
                                 name=f"{prefix}.attention")


def _qwen(family: str, t: _Tower, patches: int, *, flash: bool) -> list[Layer | Node]:
    """Qwen2-VL's or Qwen2.5-VL's vision tower and merger, from the pixel patches."""
    qwen25 = family == "qwen2_5_vl"
    norm = RMSNorm if qwen25 else LayerNorm
    features = t.channels * t.temporal * t.patch * t.patch
    items: list[Layer | Node] = [
        Node(PixelPatches(patches, features, name="pixel_values"), inputs=("input_ids",)),
        PatchProjection(t.width, kernel=(t.channels, t.temporal, t.patch, t.patch),
                        name="model.visual.patch_embed.proj"),
    ]
    source = "model.visual.patch_embed.proj"
    for index in range(t.depth):
        block = f"model.visual.blocks.{index}"
        attn = f"{block}.attn"
        items.append(Node(norm(name=f"{block}.norm1"), inputs=(source,)))
        q, k, v = fused_projection(f"{attn}.qkv", attn, f"{block}.norm1", t.width, t.width,
                                   True, items)
        items += [
            Node(_attention(attn, t.heads, t.width, flash=flash), inputs=(q, k, v)),
            Dense(t.width, name=f"{attn}.proj"),
            Node(Add(name=f"{block}.add_1"), inputs=(source, f"{attn}.proj")),
            norm(name=f"{block}.norm2"),
        ]
        mlp = f"{block}.mlp"
        if qwen25:
            items += [
                Dense(t.ffn, name=f"{mlp}.gate_proj"),
                SiLU(name=f"{mlp}.act_fn"),
                Node(Dense(t.ffn, name=f"{mlp}.up_proj"), inputs=(f"{block}.norm2",)),
                Node(Multiply(name=f"{mlp}.mul"), inputs=(f"{mlp}.act_fn", f"{mlp}.up_proj")),
                Dense(t.width, name=f"{mlp}.down_proj"),
            ]
        else:
            items += [Dense(t.ffn, name=f"{mlp}.fc1"), GELU(name=f"{mlp}.act"),
                      Dense(t.width, name=f"{mlp}.fc2")]
        mlp_out = items[-1].name or ""
        items.append(Node(Add(name=f"{block}.add_2"), inputs=(f"{block}.add_1", mlp_out)))
        source = f"{block}.add_2"
    group = t.merge * t.merge
    items += [
        Node(norm(name="model.visual.merger.ln_q"), inputs=(source,)),
        PatchMerge(group, name="model.visual.merger.merge"),
        Dense(group * t.width, name="model.visual.merger.mlp.0"),
        GELU(name="model.visual.merger.mlp.1"),
        Dense(t.out, name="model.visual.merger.mlp.2"),
    ]
    return items


def _drops_first(config: Mapping[str, Any]) -> bool:
    """Whether LLaVA drops the first position of the features (``"default"``) or keeps all."""
    strategy = config.get("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise UnsupportedError(
            f"from_config: LLaVA's vision_feature_select_strategy must be 'default' or 'full' "
            f"(transformers' two), got {shown(strategy)}."
        )
    return strategy == "default"


def _llava(config: Mapping[str, Any], t: _Tower, hidden: int, *, flash: bool) -> list[Layer | Node]:
    """LLaVA's CLIP or SigLIP vision tower, the selected layer's features and the projector.

    CLIP: a class token and ``pre_layrnorm``; SigLIP: a patch embedding with a
    bias, no class token, tanh-GELU MLPs. ``"default"`` drops the first
    position (CLIP's class token; with SigLIP, as transformers does, the first
    patch); ``"full"`` keeps all.
    """
    vision = _llava_vision(config)
    siglip = vision.get("model_type") == "siglip_vision_model"
    side = required_value(vision, "image_size") // t.patch
    patches = side * side
    tower = "model.vision_tower"
    items: list[Layer | Node] = [
        Node(PixelPatches(patches, t.channels * t.patch * t.patch, name="pixel_values"),
             inputs=("input_ids",)),
        PatchProjection(t.width, kernel=(t.channels, t.patch, t.patch), bias=siglip,
                        name=f"{tower}.embeddings.patch_embedding"),
    ]
    if siglip:
        items.append(FlatPositions(patches, name=f"{tower}.embeddings.position_embedding"))
        source = f"{tower}.embeddings.position_embedding"
    else:
        items += [FlatClassToken(name=f"{tower}.embeddings.class_embedding"),
                  FlatPositions(patches + 1, name=f"{tower}.embeddings.position_embedding"),
                  LayerNorm(name=f"{tower}.pre_layrnorm")]
        source = f"{tower}.pre_layrnorm"
    outputs = _encoder(items, tower, t, source, flash=flash,
                       approximate="tanh" if siglip else "none")
    items.append(Node(LayerNorm(name=f"{tower}.post_layernorm"), inputs=(outputs[-1],)))
    chosen = outputs[_feature_layer(config, t.depth)]
    if _drops_first(config):
        items.append(Node(DropClassToken(name="model.image_features"), inputs=(chosen,)))
        chosen = "model.image_features"
    bias = config_flag(config, "multimodal_projector_bias", True)
    items += [
        Node(Dense(hidden, bias=bias, name="model.multi_modal_projector.linear_1"),
             inputs=(chosen,)),
        GELU(name="model.multi_modal_projector.act"),
        Dense(hidden, bias=bias, name="model.multi_modal_projector.linear_2"),
    ]
    return items


def _encoder(items: list[Layer | Node], tower: str, t: _Tower, source: str, *, flash: bool,
             approximate: Literal["none", "tanh"] = "none") -> list[str]:
    """Append CLIP's or SigLIP's encoder layers to ``items``; return each hidden state's name."""
    outputs = [source]
    for index in range(t.depth):
        layer = f"{tower}.encoder.layers.{index}"
        attn = f"{layer}.self_attn"
        items.append(Node(LayerNorm(name=f"{layer}.layer_norm1"), inputs=(outputs[-1],)))
        for part in ("q", "k", "v"):
            items.append(Node(Dense(t.width, name=f"{attn}.{part}_proj"),
                              inputs=(f"{layer}.layer_norm1",)))
        items += [
            Node(_attention(attn, t.heads, t.width, flash=flash),
                 inputs=(f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj")),
            Dense(t.width, name=f"{attn}.out_proj"),
            Node(Add(name=f"{layer}.add_1"), inputs=(outputs[-1], f"{attn}.out_proj")),
            LayerNorm(name=f"{layer}.layer_norm2"),
            Dense(t.ffn, name=f"{layer}.mlp.fc1"),
            GELU(approximate=approximate, name=f"{layer}.mlp.activation_fn"),
            Dense(t.width, name=f"{layer}.mlp.fc2"),
            Node(Add(name=f"{layer}.add_2"), inputs=(f"{layer}.add_1", f"{layer}.mlp.fc2")),
        ]
        outputs.append(f"{layer}.add_2")
    return outputs


def _gemma3(config: Mapping[str, Any], t: _Tower, hidden: int, *,
            flash: bool) -> list[Layer | Node]:
    """Gemma 3's SigLIP vision tower and its projector (pool, soft-embedding norm, matrix)."""
    side, kernel = _gemma3_pool(config, t)
    patches = side * side
    tower = "model.vision_tower"
    items: list[Layer | Node] = [
        Node(PixelPatches(patches, t.channels * t.patch * t.patch, name="pixel_values"),
             inputs=("input_ids",)),
        PatchProjection(t.width, kernel=(t.channels, t.patch, t.patch), bias=True,
                        name=f"{tower}.embeddings.patch_embedding"),
        FlatPositions(patches, name=f"{tower}.embeddings.position_embedding"),
    ]
    outputs = _encoder(items, tower, t, f"{tower}.embeddings.position_embedding", flash=flash,
                       approximate="tanh")
    projector = "model.multi_modal_projector"
    items += [
        Node(LayerNorm(name=f"{tower}.post_layernorm"), inputs=(outputs[-1],)),
        PatchPool(side, kernel, name=f"{projector}.avg_pool"),
        RMSNorm(name=f"{projector}.mm_soft_emb_norm"),
        MatrixProjection(hidden, name=f"{projector}.mm_input_projection_weight"),
    ]
    return items


def _feature_layer(config: Mapping[str, Any], depth: int) -> int:
    """Return the index into the hidden states (embeddings, then each layer) LLaVA reads."""
    index = config.get("vision_feature_layer", -2)
    if isinstance(index, bool) or not isinstance(index, int) or not -depth - 1 <= index <= depth:
        raise UnsupportedError(
            f"from_config: vision_feature_layer must be one layer's index (-{depth + 1} to "
            f"{depth}), got {shown(index)}; a list of layers is not modelled."
        )
    return index % (depth + 1)
