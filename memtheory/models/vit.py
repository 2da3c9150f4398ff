"""Vision transformers (Dosovitskiy et al. 2021), as torchvision's ``VisionTransformer``.

A convolution with kernel and stride equal to the patch size embeds each
patch (``conv_proj``); the patches become a sequence, a learned class token
goes in front and a learned position tensor is added; pre-norm encoder blocks
(``x + attn(ln_1(x))``, then ``h + mlp(ln_2(h))`` with a GELU MLP) run over
it; a final layer norm (``encoder.ln``), and the classifier reads the class
token (``heads.head``). torchvision's ViT-B/16 uses no dropout, and PyTorch
passes the input itself through a dropout of probability 0, so the builder
leaves those dropouts out.

Examples
--------
>>> vit_b_16(batch=1).parameter_count
86567656
"""

from __future__ import annotations

from memtheory._validation import SizeLike, as_size
from memtheory.errors import ShapeError
from memtheory.layers import (
    ClassToken,
    Conv2d,
    Dense,
    Dropout,
    Input,
    Layer,
    LayerNorm,
    LearnedPositions,
    PatchSequence,
    SelectToken,
)
from memtheory.models.transformer import block_calls, transformer_block
from memtheory.network import Network, Node, module_calls
from memtheory.sliding_window import conv_output_size
from memtheory.symbols import B

__all__ = ["vision_transformer", "vit_b_16"]


def vision_transformer(
    *,
    image_size: SizeLike = 224,
    patch_size: int = 16,
    layers: int = 12,
    hidden: SizeLike = 768,
    heads: SizeLike = 12,
    mlp_dim: SizeLike = 3072,
    classes: SizeLike = 1000,
    dropout: float = 0.0,
    attention_dropout: float = 0.0,
    batch: SizeLike = B,
) -> Network:
    """Build a vision transformer over ``image_size`` x ``image_size`` RGB images.

    Parameters
    ----------
    image_size : size, default 224
        A multiple of ``patch_size`` (torchvision requires it); may be a symbol,
        in which case the patches per side are ``floor(image_size / patch_size)``.
    patch_size : int, default 16
    layers, hidden, heads, mlp_dim : size
        Encoder blocks, width, attention heads and MLP width (12, 768, 12, 3072
        for ViT-B).
    classes : size, default 1000
    dropout, attention_dropout : float, default 0.0
    batch : size, default ``B``

    Examples
    --------
    >>> net = vision_transformer(image_size=32, patch_size=8, layers=2, hidden=64, heads=4,
    ...                          mlp_dim=128, classes=10)
    >>> net["encoder.pos_embedding"].output_shape, net.output_shape
    ((B, 17, 64), (B, 10))
    """
    image_size = as_size(image_size, "image_size", "vision_transformer")
    patches_per_side = image_size / patch_size
    if patches_per_side.is_number and not patches_per_side.is_integer:
        raise ShapeError(
            f"vision_transformer: image_size {image_size} is not a multiple of the patch size "
            f"{patch_size}. Resize the images to a multiple of it."
        )
    if not patches_per_side.is_number:
        patches_per_side = conv_output_size(image_size, patch_size, patch_size)
    sequence = patches_per_side**2 + 1
    calls: list[tuple[str, str]] = []
    items: list[Layer | Node] = [
        Input((3, image_size, image_size), batch=batch),
        Conv2d(hidden, patch_size, stride=patch_size, name="conv_proj"),
        PatchSequence(name="patches"),
        ClassToken(name="class_token"),
        LearnedPositions(sequence, name="encoder.pos_embedding"),
    ]
    source = "encoder.pos_embedding"
    if dropout:
        items.append(Dropout(dropout, name="encoder.dropout"))
        source = "encoder.dropout"
    for index in range(layers):
        block = transformer_block(
            f"encoder.layers.encoder_layer_{index}",
            source,
            hidden=hidden,
            heads=heads,
            ffn_hidden=mlp_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            norm="pre",
            activation_dropout=True,
            skip_zero_dropout=True,
        )
        items += block
        calls += block_calls(block, "torchvision")
        source = block[-1].name or ""
    items += [
        LayerNorm(name="encoder.ln"),
        SelectToken(0, name="class_output"),
        Dense(classes, name="heads.head"),
    ]
    # torchvision: encoder, encoder.layers and heads are called as modules (module_calls).
    calls += module_calls([item.name or "" for item in items[1:]])
    return Network(items, name="ViT", calls=calls)


def vit_b_16(
    *, image_size: SizeLike = 224, batch: SizeLike = B, classes: SizeLike = 1000
) -> Network:
    """Build ViT-B/16: 16x16 patches, 12 blocks of width 768, 12 heads; 86,567,656 parameters.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> vit_b_16(image_size=H)["class_token"].output_shape
    (B, floor(H/16)**2 + 1, 768)
    """
    network = vision_transformer(
        image_size=image_size,
        patch_size=16,
        layers=12,
        hidden=768,
        heads=12,
        mlp_dim=3072,
        classes=classes,
        batch=batch,
    )
    network.name = "ViT-B/16"
    return network
