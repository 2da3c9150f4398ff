"""Tiny Qwen2-VL and LLaVA training steps, measured on transformers: what is exact, the known gaps.

transformers 5.24 builds ``Qwen2VLForConditionalGeneration`` from a tiny
configuration (eager attention, fp32); ``memtheory.torch.measure`` runs one
SGD step on CPU with one 56 x 56 image per sequence (16 patches, 4 image
tokens). memtheory's network (``from_config(..., image=56, loss=True)``) is
a breakdown estimate (the autograd convention refuses the vision layers).
Exact: the parameters and their gradients. Known differences, pinned: the
vision tower's axial rotary buffers (``inv_freq`` and ``original_inv_freq``,
``head_dim // 4`` each) are not modelled; the measured input holds the pixel
values, ``image_grid_thw`` and ``mm_token_type_ids`` beside the token ids;
and the breakdown's peak is above the measured one by the amount measured
here (CPU, PyTorch 2.13, transformers 5.24, 27 November 2026).

LLaVA (a 56 x 56 image, 16 image tokens): the parameters are exact; the CLIP
layers after ``vision_feature_layer`` (-2: the last layer) and
``post_layernorm`` do not reach the loss, so PyTorch gives them no gradient,
while the breakdown counts one for every parameter (pinned, derived from the
configuration); the breakdown's peak gap is pinned as measured. LLaVA with a
SigLIP tower (no class token: ``"default"`` drops the first patch, 15 image
tokens): the same gradient gap, and SigLIP's ``position_ids`` buffer.

Gemma 3 (a 56 x 56 image, 16 patches pooled 2 x 2 to 4 image tokens): the
parameters and gradients are exact (every SigLIP layer reaches the loss); not
modelled, pinned: SigLIP's ``position_ids`` buffer (int64, one per patch) and
the text embedding's ``embed_scale`` scalar (fp32); the input holds the pixels
and ``token_type_ids``; the breakdown's peak gap is pinned as measured.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.torch import measure  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

IMAGE, VISION_START, VISION_END = 90, 92, 93
CONFIG = {"model_type": "qwen2_vl", "vocab_size": 96, "hidden_size": 32,
          "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "image_token_id": IMAGE, "video_token_id": 91,
          "vision_start_token_id": VISION_START, "vision_end_token_id": VISION_END,
          "bos_token_id": 0, "eos_token_id": 1,
          "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
          "vision_config": {"depth": 2, "embed_dim": 16, "hidden_size": 32, "mlp_ratio": 2,
                            "num_heads": 2}}
BATCH, SIDE, PATCH = 2, 56, 14

PEAK_GAP = 599_328
"""The breakdown's peak minus the measured peak, in bytes (measured: 571,992; memtheory's
breakdown: 1,171,320), CPU, PyTorch 2.13, transformers 5.24."""


class Logits(nn.Module):
    """The Hugging Face model, returning its logits (the loss is applied by measure)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, pixel_values, image_grid_thw, mm_token_type_ids):  # noqa: D102
        return self.model(input_ids=input_ids, pixel_values=pixel_values,
                          image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids,
                          use_cache=False).logits


@pytest.fixture(scope="module")
def step():
    """Measure the step, and build memtheory's breakdown of it."""
    values = {k: v for k, v in CONFIG.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model("qwen2_vl", attn_implementation="eager", **values)
    torch.manual_seed(0)
    module = Logits(transformers.AutoModelForImageTextToText.from_config(hf)).train()
    grid = SIDE // PATCH
    tokens = grid * grid // 4
    row = [5, 6, VISION_START] + [IMAGE] * tokens + [VISION_END, 7, 8]
    ids = torch.tensor([row] * BATCH)
    batch = {"input_ids": ids, "pixel_values": torch.randn(BATCH * grid * grid, 3 * 2 * 14 * 14),
             "image_grid_thw": torch.tensor([[1, grid, grid]] * BATCH),
             "mm_token_type_ids": (ids == IMAGE).long()}
    measured = measure(module, batch, loss=causal_lm_loss, target=ids.clone(),
                       optimizer=torch.optim.SGD(module.parameters(), lr=0.01), warmup_steps=1)
    net = from_config(CONFIG, batch=BATCH, sequence=len(row), image=SIDE, loss=True)
    return net, mt.training_memory(net, optimizer="sgd", precision="fp32"), measured, batch


def test_parameters_and_gradients_are_exact(step):
    """The vision tower, merger and language model: parameters and gradients to the byte."""
    net, predicted, measured, _ = step
    assert int(predicted.components["parameters"]) == measured.parameters
    assert int(predicted.components["gradients"]) == measured.gradients
    assert measured.parameters == 4 * int(net.parameter_count)


def test_known_gaps_buffers_and_inputs(step):
    """Not modelled: the vision rotary's two buffers; the pixels and grids of the input."""
    _, predicted, measured, batch = step
    head = CONFIG["vision_config"]["embed_dim"] // CONFIG["vision_config"]["num_heads"]
    assert measured.buffers - int(predicted.components["buffers"]) == 2 * (head // 4) * 4
    assert measured.input == sum(t.numel() * t.element_size() for t in batch.values())
    assert int(predicted.components["input"]) < measured.input


def test_the_breakdown_peak_gap_is_the_one_measured(step):
    """The breakdown estimate is above the measured peak by the pinned amount."""
    _, predicted, measured, _ = step
    assert int(predicted.peak) - measured.peak == PEAK_GAP


LLAVA_TEXT = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "pad_token_id": 0}
LLAVA_VISION = {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 24,
                "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 56,
                "patch_size": 14}
LLAVA = {"model_type": "llava", "image_token_index": IMAGE, "text_config": LLAVA_TEXT,
         "vision_config": LLAVA_VISION}

LLAVA_PEAK_GAP = 683_488
"""The breakdown's peak minus the measured peak, in bytes (measured: 563,112; memtheory's
breakdown: 1,246,600), CPU, PyTorch 2.13, transformers 5.24."""


class LlavaLogits(nn.Module):
    """LLaVA, returning its logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, pixel_values):  # noqa: D102
        return self.model(input_ids=input_ids, pixel_values=pixel_values,
                          use_cache=False).logits


def _measured_llava(config, image_tokens):
    """Measure a tiny LLaVA step (``image_tokens`` image positions) and build its breakdown."""
    vision = config["vision_config"]
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model("llava", attn_implementation="eager", **values)
    torch.manual_seed(0)
    module = LlavaLogits(transformers.AutoModelForImageTextToText.from_config(hf)).train()
    row = [5, 6] + [IMAGE] * image_tokens + [7, 8]  # transformers checks the count
    ids = torch.tensor([row] * BATCH)
    side = vision["image_size"]
    batch = {"input_ids": ids, "pixel_values": torch.randn(BATCH, 3, side, side)}
    measured = measure(module, batch, loss=causal_lm_loss, target=ids.clone(),
                       optimizer=torch.optim.SGD(module.parameters(), lr=0.01), warmup_steps=1)
    net = from_config(config, batch=BATCH, sequence=len(row), loss=True)
    return net, mt.training_memory(net, optimizer="sgd", precision="fp32"), measured, batch


def _unused_tower_parameters(vision):
    """The last encoder layer and post_layernorm: no gradient (LLaVA reads layer -2)."""
    width, ffn = vision["hidden_size"], vision["intermediate_size"]
    last_layer = 2 * 2 * width + 4 * (width * width + width) + (width * ffn + ffn) + (
        ffn * width + width)
    return last_layer + 2 * width


@pytest.fixture(scope="module")
def llava_step():
    """Measure LLaVA's step (CLIP: one token per patch), and build memtheory's breakdown."""
    patches = (LLAVA_VISION["image_size"] // LLAVA_VISION["patch_size"]) ** 2
    return _measured_llava(LLAVA, patches)


def test_llava_parameters_exact_and_the_unused_layers_have_no_gradient(llava_step):
    """Parameters exact; the gradient gap: the last CLIP layer and post_layernorm (fp32)."""
    _, predicted, measured, batch = llava_step
    assert int(predicted.components["parameters"]) == measured.parameters
    unused = _unused_tower_parameters(LLAVA_VISION)
    assert int(predicted.components["gradients"]) - measured.gradients == 4 * unused
    assert measured.input == sum(t.numel() * t.element_size() for t in batch.values())


def test_llava_breakdown_peak_gap_is_the_one_measured(llava_step):
    """The breakdown estimate is above the measured peak by the pinned amount."""
    _, predicted, measured, _ = llava_step
    assert int(predicted.peak) - measured.peak == LLAVA_PEAK_GAP


LLAVA_SIGLIP_VISION = {"model_type": "siglip_vision_model", "hidden_size": 16,
                       "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 56, "patch_size": 14, "vision_use_head": False}
LLAVA_SIGLIP = {**LLAVA, "vision_config": LLAVA_SIGLIP_VISION}

LLAVA_SIGLIP_PEAK_GAP = 666_266
"""The breakdown's peak minus the measured peak, in bytes (measured: 526,630; memtheory's
breakdown: 1,192,896), CPU, PyTorch 2.13, transformers 5.24."""


@pytest.fixture(scope="module")
def llava_siglip_step():
    """Measure LLaVA with a SigLIP tower ("default": the first patch dropped, 15 tokens)."""
    patches = (LLAVA_SIGLIP_VISION["image_size"] // LLAVA_SIGLIP_VISION["patch_size"]) ** 2
    return _measured_llava(LLAVA_SIGLIP, patches - 1)


def test_llava_siglip_parameters_exact_gradient_and_buffer_gaps(llava_siglip_step):
    """Parameters exact; no gradient for the last SigLIP layer and post_layernorm; position ids."""
    _, predicted, measured, _ = llava_siglip_step
    assert int(predicted.components["parameters"]) == measured.parameters
    unused = _unused_tower_parameters(LLAVA_SIGLIP_VISION)
    assert int(predicted.components["gradients"]) - measured.gradients == 4 * unused
    patches = (LLAVA_SIGLIP_VISION["image_size"] // LLAVA_SIGLIP_VISION["patch_size"]) ** 2
    assert measured.buffers - int(predicted.components["buffers"]) == 8 * patches


def test_llava_siglip_breakdown_peak_gap_is_the_one_measured(llava_siglip_step):
    """The breakdown estimate is above the measured peak by the pinned amount."""
    _, predicted, measured, _ = llava_siglip_step
    assert int(predicted.peak) - measured.peak == LLAVA_SIGLIP_PEAK_GAP

GEMMA3_TEXT = {"model_type": "gemma3_text", "vocab_size": 96, "hidden_size": 32,
               "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 8}
GEMMA3_VISION = {"model_type": "siglip_vision_model", "hidden_size": 16,
                 "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "image_size": 56, "patch_size": 14, "vision_use_head": False}
BOI, EOI = 91, 92
GEMMA3 = {"model_type": "gemma3", "image_token_index": IMAGE, "boi_token_index": BOI,
          "eoi_token_index": EOI, "mm_tokens_per_image": 4, "text_config": GEMMA3_TEXT,
          "vision_config": GEMMA3_VISION}

GEMMA3_PEAK_GAP = 509_612
"""The breakdown's peak minus the measured peak, in bytes (measured: 434,000; memtheory's
breakdown: 943,612, with Gemma's embed_scale buffer and its (1 + w) norms' fp32 saved
tensors), CPU, PyTorch 2.13, transformers 5.24."""


class Gemma3Logits(nn.Module):
    """Gemma 3, returning its logits (token_type_ids mark the image tokens, as the processor)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, pixel_values, token_type_ids):  # noqa: D102
        return self.model(input_ids=input_ids, pixel_values=pixel_values,
                          token_type_ids=token_type_ids, use_cache=False).logits


@pytest.fixture(scope="module")
def gemma3_step():
    """Measure Gemma 3's step, and build memtheory's breakdown of it."""
    values = {k: v for k, v in GEMMA3.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model("gemma3", attn_implementation="eager", **values)
    torch.manual_seed(0)
    module = Gemma3Logits(transformers.AutoModelForImageTextToText.from_config(hf)).train()
    side = GEMMA3_VISION["image_size"]
    row = [5, 6, BOI] + [IMAGE] * GEMMA3["mm_tokens_per_image"] + [EOI, 7, 8]
    ids = torch.tensor([row] * BATCH)
    batch = {"input_ids": ids, "pixel_values": torch.randn(BATCH, 3, side, side),
             "token_type_ids": (ids == IMAGE).long()}
    measured = measure(module, batch, loss=causal_lm_loss, target=ids.clone(),
                       optimizer=torch.optim.SGD(module.parameters(), lr=0.01), warmup_steps=1)
    net = from_config(GEMMA3, batch=BATCH, sequence=len(row), loss=True)
    return net, mt.training_memory(net, optimizer="sgd", precision="fp32"), measured, batch


def test_gemma3_parameters_and_gradients_are_exact(gemma3_step):
    """SigLIP tower, projector and Gemma 3 text model: parameters and gradients to the byte."""
    net, predicted, measured, _ = gemma3_step
    assert int(predicted.components["parameters"]) == measured.parameters
    assert int(predicted.components["gradients"]) == measured.gradients
    assert measured.parameters == 4 * int(net.parameter_count)


def test_gemma3_known_gaps_buffers_and_inputs(gemma3_step):
    """Not modelled: SigLIP's int64 position ids; pixels, type ids (embed_scale is modelled)."""
    _, predicted, measured, batch = gemma3_step
    patches = (GEMMA3_VISION["image_size"] // GEMMA3_VISION["patch_size"]) ** 2
    assert measured.buffers - int(predicted.components["buffers"]) == 8 * patches
    assert measured.input == sum(t.numel() * t.element_size() for t in batch.values())
    assert int(predicted.components["input"]) < measured.input


def test_gemma3_breakdown_peak_gap_is_the_one_measured(gemma3_step):
    """The breakdown estimate is above the measured peak by the pinned amount."""
    _, predicted, measured, _ = gemma3_step
    assert int(predicted.peak) - measured.peak == GEMMA3_PEAK_GAP
