"""Vision-language models (Qwen2-VL, Qwen2.5-VL, LLaVA, Gemma 3): image tokens, serving, refusals.

The parameter counts are checked against transformers in
``tests/pytorch/test_vision_language_counts.py`` and a measured training step
in ``tests/pytorch/test_vision_language_measured.py``; here, without PyTorch:
the image tokens an image makes, that serving caches only the language
model's keys and values, that a training step estimates and says it is a
breakdown, and the refusals.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory.errors import InvalidArgumentError, ShapeError, UnsupportedError
from memtheory.estimate import estimate
from memtheory.estimate.serving_model import served_model
from memtheory.layers.vision_language import (
    EncoderAttention,
    ImageTokenScatter,
    PatchPool,
    PixelPatches,
)
from memtheory.models import from_config
from memtheory.models.vision_language import image_tokens
from memtheory.symbols import B, S

TEXT = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096}
QWEN2_VL = {"model_type": "qwen2_vl", **TEXT, "vision_config": {
    "depth": 2, "embed_dim": 16, "hidden_size": 32, "mlp_ratio": 2, "num_heads": 2}}
QWEN2_5_VL = {"model_type": "qwen2_5_vl", **TEXT, "vision_config": {
    "depth": 2, "hidden_size": 16, "intermediate_size": 24, "num_heads": 2,
    "out_hidden_size": 32}}
LLAVA = {"model_type": "llava", "text_config": {"model_type": "llama", **TEXT},
         "vision_config": {"model_type": "clip_vision_model", "hidden_size": 16,
                           "intermediate_size": 24, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "image_size": 56, "patch_size": 14}}
GEMMA3 = {"model_type": "gemma3", "mm_tokens_per_image": 4,
          "text_config": {"model_type": "gemma3_text", **TEXT, "head_dim": 8},
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16,
                            "intermediate_size": 24, "num_hidden_layers": 2,
                            "num_attention_heads": 2, "image_size": 56, "patch_size": 14,
                            "vision_use_head": False}}


@given(st.integers(1, 40), st.integers(1, 40))
def test_qwen_image_tokens_are_the_patches_over_four(rows, columns):
    """An image of whole 28-pixel units makes (H/14)(W/14)/4 tokens (Wang et al. 2024, 2.1)."""
    height, width = 28 * rows, 28 * columns
    assert image_tokens(QWEN2_VL, (height, width)) == (height // 14) * (width // 14) // 4


def test_qwen2_vl_paper_example():
    """Wang et al. 2024 (arXiv:2409.12191), section 2.1: 224 x 224 is 64 image tokens plus 2."""
    assert image_tokens(QWEN2_VL, 224) + 2 == 66


def test_llava_image_tokens_are_fixed_by_the_tower():
    """LLaVA resizes to image_size: (56 / 14)^2 tokens, whatever the image; a CLIP-L/336 576."""
    assert image_tokens(LLAVA, 1000) == (56 // 14) ** 2
    assert image_tokens({"model_type": "llava"}, 10) == (336 // 14) ** 2


@pytest.mark.parametrize("config", [QWEN2_VL, QWEN2_5_VL, LLAVA, GEMMA3],
                         ids=lambda c: c["model_type"])
def test_the_vision_path_feeds_the_sequence(config):
    """The image features enter the language model's sequence: the output is (B, S, vocab)."""
    net = from_config(config, batch=2, sequence=64)
    assert net.output_shape == (2, 64, TEXT["vocab_size"])
    scatter = next(r for r in net.rows if isinstance(r.layer, ImageTokenScatter))
    tokens = scatter.input_shapes[1][1]
    assert tokens == image_tokens(config, 448)
    assert str(tokens) in net.name


@pytest.mark.parametrize("config", [QWEN2_VL, QWEN2_5_VL, LLAVA, GEMMA3],
                         ids=lambda c: c["model_type"])
def test_serving_caches_only_the_language_models_keys_and_values(config):
    """KV cache per sequence: 2 x layers x KV heads x head width x context x 2 bytes (bf16)."""
    context = 1024  # shorter than Gemma 3's default 4096-token sliding window
    served = served_model(config, context=context, compute="bf16")
    head = TEXT["hidden_size"] // TEXT["num_attention_heads"]  # GEMMA3's head_dim is the same
    expected = 2 * TEXT["num_hidden_layers"] * TEXT["num_key_value_heads"] * head * context * 2
    assert served.kv_per_sequence == expected
    net = from_config(config, batch=1, sequence=context)
    assert any(isinstance(r.layer, EncoderAttention) for r in net.rows)


@pytest.mark.parametrize("config", [QWEN2_VL, LLAVA, GEMMA3], ids=lambda c: c["model_type"])
def test_training_estimates_say_they_are_a_breakdown(config):
    """Full fine-tuning and LoRA answer, with the breakdown convention and its reason.

    peft 0.21 has no default LoRA targets for these model types (``get_peft_model``
    asks for ``target_modules``), so neither does ``estimate``: they are named.
    """
    answer = estimate(config, batch=1, sequence=512)
    assert answer.convention_name.startswith("breakdown")
    with pytest.raises(UnsupportedError, match="--lora-targets"):
        estimate(config, batch=1, sequence=512, lora=8)
    lora = estimate(config, batch=1, sequence=512, lora=8, lora_targets=("q_proj", "v_proj"))
    assert 0 < lora.settings["trainable"] < answer.settings["trainable"]
    assert "breakdown" in lora.report()


def test_image_size_is_read_for_qwen_and_refused_for_llava():
    """A larger image makes more patches (more activations); LLaVA refuses an image size."""
    small = from_config(QWEN2_VL, batch=1, sequence=512, image=56)
    large = from_config(QWEN2_VL, batch=1, sequence=512, image=112)
    patches = [next(r for r in n.rows if isinstance(r.layer, PixelPatches)).output_shape[1]
               for n in (small, large)]
    assert patches == [(56 // 14) ** 2, (112 // 14) ** 2]
    with pytest.raises(UnsupportedError, match="LLaVA resizes"):
        from_config(LLAVA, image=336)
    with pytest.raises(UnsupportedError, match="Qwen2-VL"):
        from_config({"model_type": "llama", **TEXT}, image=336)
    with pytest.raises(InvalidArgumentError, match="whole pixels"):
        from_config(QWEN2_VL, image=(0, 28))


def test_estimate_takes_qwens_image_side_and_refuses_it_elsewhere():
    """estimate(image=...) sizes Qwen2-VL's image (default 448); LLaVA and Llama refuse one."""
    default = estimate(QWEN2_VL, batch=1, sequence=2048)
    larger = estimate(QWEN2_VL, batch=1, sequence=2048, image=896)
    assert default.settings["image"] == 448 and larger.settings["image"] == 896
    assert f"{image_tokens(QWEN2_VL, 896)} of its tokens are image tokens" in larger.report()
    assert f"{image_tokens(QWEN2_VL, 448)} of its tokens are image tokens" in default.report()
    assert int(larger.peak) > int(default.peak)  # four times the patches in the vision tower
    for fixed in (LLAVA, GEMMA3):  # each image resized to the tower's size: fixed tokens
        with pytest.raises(InvalidArgumentError, match="resizes every image"):
            estimate(fixed, batch=1, sequence=2048, image=448)
    with pytest.raises(InvalidArgumentError, match="--image applies to vision models"):
        estimate({"model_type": "llama", **TEXT}, batch=1, sequence=2048, image=448)


def test_a_projector_of_the_wrong_width_is_refused():
    """A merger ending at another width than the language model's is a clear ShapeError."""
    wrong = {**QWEN2_VL, "vision_config": {**QWEN2_VL["vision_config"], "hidden_size": 48}}
    with pytest.raises(ShapeError, match="hidden size"):
        from_config(wrong)
    assert ImageTokenScatter().merged_shape(((B, S, 32), (B, 4, 32))) == (B, S, 32)


def test_unmodelled_vision_towers_are_refused():
    """LLaVA with another tower, SigLIP's head, a list of feature layers: refused, saying why."""
    other = {**LLAVA, "vision_config": {**LLAVA["vision_config"],
                                        "model_type": "pixtral"}}
    with pytest.raises(UnsupportedError, match="clip_vision_model.*siglip_vision_model"):
        from_config(other)
    siglip = {**LLAVA, "vision_config": {**LLAVA["vision_config"],
                                         "model_type": "siglip_vision_model"}}
    with pytest.raises(UnsupportedError, match="vision_use_head"):
        from_config(siglip)
    with pytest.raises(UnsupportedError, match="'default' or 'full'"):
        from_config({**LLAVA, "vision_feature_select_strategy": "cls"})
    with pytest.raises(UnsupportedError, match="vision_feature_layer"):
        from_config({**LLAVA, "vision_feature_layer": [-2, -5]})


def test_a_sequence_shorter_than_the_image_tokens_is_refused():
    """LLaVA's 16 image tokens (56 / 14 squared) need a sequence of at least 16: 8 is refused."""
    tokens = (56 // 14) ** 2
    assert estimate(LLAVA, batch=1, sequence=tokens).peak > 0
    with pytest.raises(ShapeError, match=f"at least {tokens} positions.*use a larger one"):
        estimate(LLAVA, batch=1, sequence=tokens - 1)


GEMMA3_4B_VISION = {"model_type": "siglip_vision_model", "hidden_size": 1152,
                    "image_size": 896, "intermediate_size": 4304, "num_attention_heads": 16,
                    "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}
"""google/gemma-3-4b-it's vision_config (typed in from its config.json)."""


def test_gemma3_image_tokens_are_the_pooled_patches():
    """Gemma 3 report (arXiv:2503.19786), 2.1: an 896 x 896 image is 256 tokens, whatever its size.

    SigLIP/14 at 896 makes a 64 x 64 patch grid; the projector averages
    squares of (64 / 16)^2 patches into mm_tokens_per_image = 16^2 tokens.
    """
    config = {"model_type": "gemma3", "vision_config": GEMMA3_4B_VISION}
    side = 896 // 14
    assert image_tokens(config, 10) == image_tokens(config, 2000) == (side // (side // 16)) ** 2
    assert image_tokens(GEMMA3, 1) == 4
    net = from_config({**config, "text_config": GEMMA3["text_config"]}, batch=1, sequence=300)
    pool = next(r for r in net.rows if isinstance(r.layer, PatchPool))
    assert pool.input_shape[1] == side * side and pool.output_shape[1] == 256


@given(st.integers(1, 8), st.integers(1, 8))
def test_gemma3_pools_any_square_grid(per_side, kernel):
    """A grid of per_side * kernel patches a side, pooled by kernel: per_side^2 image tokens."""
    side = per_side * kernel
    config = {**GEMMA3, "mm_tokens_per_image": per_side ** 2,
              "vision_config": {**GEMMA3["vision_config"], "image_size": side * 14}}
    assert image_tokens(config, 1) == per_side ** 2


def test_gemma3_refusals_say_what_to_do():
    """An image size, SigLIP's pooling head, another tower, a non-square token count: refused."""
    with pytest.raises(UnsupportedError, match="so does Gemma 3"):
        from_config(GEMMA3, image=336)
    vision = GEMMA3["vision_config"]
    with pytest.raises(UnsupportedError, match="vision_use_head"):
        from_config({**GEMMA3, "vision_config": {**vision, "vision_use_head": True}})
    with pytest.raises(UnsupportedError, match="vision_use_head"):
        from_config({"model_type": "gemma3"})  # SiglipVisionConfig's default keeps the head
    with pytest.raises(UnsupportedError, match="siglip_vision_model"):
        from_config({**GEMMA3, "vision_config": {**vision, "model_type": "clip_vision_model"}})
    with pytest.raises(UnsupportedError, match="mm_tokens_per_image=3"):
        from_config({**GEMMA3, "mm_tokens_per_image": 3})
    with pytest.raises(InvalidArgumentError, match="'mm_tokens_per_image' must be a positive"):
        from_config({**GEMMA3, "mm_tokens_per_image": 0})
    with pytest.raises(UnsupportedError, match="mm_tokens_per_image=25"):
        from_config({**GEMMA3, "mm_tokens_per_image": 25})  # 5 a side, on a 4 x 4 grid


def test_llama_3_2_vision_is_still_refused_with_the_nearest_family():
    """Llama-3.2-Vision (mllama: cross-attention layers) is refused, naming llava as nearest."""
    with pytest.raises(UnsupportedError, match="cross-attention.*llava"):
        from_config({"model_type": "mllama"})


def test_gemma3_4b_serving_caches_its_sliding_windows():
    """gemma-3-4b-it (text_config as published): 5 of 34 layers full, 29 slide over 1,024 tokens.

    Gemma3TextConfig's defaults: 4 KV heads of 256, one full-attention layer
    in every 6; the published text_config sets 34 layers and a 1,024 window.
    """
    config = {"model_type": "gemma3", "vision_config": GEMMA3_4B_VISION,
              "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                              "model_type": "gemma3_text", "num_hidden_layers": 34,
                              "sliding_window": 1024}}
    context, window, layers = 8192, 1024, 34
    full = layers // 6
    served = served_model(config, context=context, compute="bf16")
    per_token = 2 * 4 * 256 * 2  # K and V, 4 heads of 256, bf16
    assert served.kv_per_sequence == per_token * (full * context + (layers - full) * window)


@pytest.mark.parametrize(("strategy", "dropped"), [("default", 1), ("full", 0)])
@pytest.mark.parametrize("tower", ["clip_vision_model", "siglip_vision_model"])
def test_llava_tokens_follow_the_tower_and_the_strategy(tower, strategy, dropped):
    """CLIP adds a class token, SigLIP none; "default" drops the first position, "full" none."""
    vision = {**LLAVA["vision_config"], "model_type": tower, "vision_use_head": False}
    config = {**LLAVA, "vision_config": vision, "vision_feature_select_strategy": strategy}
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    expected = patches + (1 if tower == "clip_vision_model" else 0) - dropped
    assert image_tokens(config, 1) == expected
    net = from_config(config, batch=1, sequence=64)
    scatter = next(r for r in net.rows if isinstance(r.layer, ImageTokenScatter))
    assert scatter.input_shapes[1][1] == expected
