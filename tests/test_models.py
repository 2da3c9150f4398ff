"""Named architectures against their published numbers."""

import pytest
import sympy as sp

from memtheory.errors import InvalidSizeError, ShapeError, UnknownNameError
from memtheory.models import (
    GPT2_SIZES,
    RESNET50_BLOCKS,
    bert,
    bert_base,
    bert_base_mlm,
    gpt2,
    make_divisible,
    mobilenet_v2,
    resnet18,
    resnet34,
    resnet50,
    vgg16,
    vit_b_16,
)
from memtheory.network import parameter_shapes
from memtheory.symbols import B, H, S


def test_vgg16_parameter_count_matches_torchvision():
    """VGG-16 has 138,357,544 parameters (torchvision's model card for vgg16)."""
    assert vgg16(batch=1).parameter_count == 138_357_544


def test_vgg16_activations_match_cs231n_table_minus_input_plus_dropout():
    """CS231n's per-layer VGG-16 table sums to 15,237,608 values with the 224x224x3 input.

    memtheory counts the input separately, ReLUs in place (no new memory), and the two
    dropout outputs of 4096 values that the table does not list.
    """
    cs231n_table_total = 15_237_608
    net = vgg16(batch=1)
    assert net.activation_count == cs231n_table_total - 224 * 224 * 3 + 2 * 4096


def test_vgg16_symbolic_image_size_agrees_with_numeric():
    """VGG-16 built over the symbol H gives the 224 network's counts at H=224."""
    symbolic = vgg16(image_size=H, batch=1).summary(H=224)
    numeric = vgg16(batch=1).summary()
    assert symbolic.parameter_count == numeric.parameter_count
    assert symbolic.activation_count == numeric.activation_count


def test_resnet50_parameter_count_matches_torchvision():
    """ResNet-50 has 25,557,032 parameters (torchvision's ResNet50_Weights.IMAGENET1K_V1 card)."""
    assert resnet50(batch=1).parameter_count == 25_557_032


def test_resnet50_is_a_graph_of_sixteen_bottlenecks_with_four_projections():
    """Stages of 3, 4, 6, 3 blocks; each stage's first block projects its shortcut."""
    net = resnet50(batch=1)
    adds = [row for row in net.rows if row.layer.kind == "Add"]
    assert len(adds) == sum(RESNET50_BLOCKS) == 16
    projected = [row.inputs[1] for row in adds if "downsample" in row.inputs[1]]
    assert projected == [f"layer{i}.0.downsample.1" for i in (1, 2, 3, 4)]
    assert net["layer4.2.relu3"].output_shape == (1, 2048, 7, 7)


def test_resnet50_symbolic_image_size_agrees_with_numeric():
    """ResNet-50 over the symbol H gives the 224 network's counts at H=224."""
    symbolic = resnet50(image_size=H, batch=1).summary(H=224)
    numeric = resnet50(batch=1).summary()
    assert symbolic.parameter_count == numeric.parameter_count
    assert symbolic.activation_count == numeric.activation_count


def test_bert_base_parameter_count_matches_hugging_face():
    """bert-base-uncased BertModel has 109,482,240 parameters, embeddings and pooler included.

    Source: sum(p.numel() for p in BertModel.from_pretrained("bert-base-uncased").parameters());
    Devlin et al. 2019 round it to "110M". It breaks down as 23,837,184 for the embeddings
    (word 30,522 x 768, position 512 x 768, token type 2 x 768, layer norm 2 x 768), 12 layers
    of 7,087,872, and the pooler's 768 x 768 + 768.
    """
    embeddings = (30_522 + 512 + 2) * 768 + 2 * 768
    layer = 4 * (768 * 768 + 768) + 2 * 768 + (768 * 3072 + 3072) + (3072 * 768 + 768) + 2 * 768
    pooler = 768 * 768 + 768
    assert bert_base().parameter_count == 109_482_240 == embeddings + 12 * layer + pooler


@pytest.mark.parametrize(
    ("size", "published"),
    [
        ("small", 124_439_808),
        ("medium", 354_823_168),
        ("large", 774_030_080),
        ("xl", 1_557_611_200),
    ],
)
def test_gpt2_parameter_counts_match_hugging_face(size, published):
    """GPT-2 124M/355M/774M/1.5B: GPT2LMHeadModel.from_pretrained("gpt2[-size]").num_parameters().

    The lm_head is tied to wte, so it adds nothing; nanoGPT's "123.65M" for gpt2 is the same
    count without the 1024 x 768 position table.
    """
    assert gpt2(size).parameter_count == published


def test_gpt2_parameter_count_is_the_closed_form():
    """V*h + n_pos*h + L*(12h^2 + 13h) + 2h: embeddings, L blocks, the final layer norm."""
    config = GPT2_SIZES["small"]
    h, layers = config.hidden, config.layers
    closed = config.vocabulary * h + config.positions * h + layers * (12 * h * h + 13 * h) + 2 * h
    assert gpt2(config).parameter_count == closed


def test_gpt2_flash_attention_drops_exactly_the_s_squared_activations():
    """Standard attention keeps P and dropped P per head per layer: 2*L*a*B*S^2 more elements."""
    config = GPT2_SIZES["small"]
    standard, flash = gpt2("small").activation_count, gpt2("small", flash=True).activation_count
    assert sp.expand(standard - flash - 2 * config.layers * config.heads * B * S**2) == 0


def test_gpt2_refuses_sequences_longer_than_its_positions():
    """GPT-2 has 1,024 learned positions (n_positions): 1,025 tokens raise ShapeError."""
    with pytest.raises(ShapeError, match="1024"):
        gpt2("small", sequence=1025)


def test_unknown_gpt2_size_lists_the_known_ones():
    """A misspelt size raises UnknownNameError listing small, medium, large, xl."""
    with pytest.raises(UnknownNameError, match="small, medium, large, xl"):
        gpt2("huge")


# -- ResNet-18/34, MobileNetV2, ViT-B/16, BERT-MLM: published counts and structure ------------
# torchvision's counts are the "num_params" of each model's weights enum (its model card):
# ResNet18_Weights.IMAGENET1K_V1, ResNet34_Weights.IMAGENET1K_V1,
# MobileNet_V2_Weights.IMAGENET1K_V1, ViT_B_16_Weights.IMAGENET1K_V1.
@pytest.mark.parametrize(
    ("build", "published"),
    [
        (resnet18, 11_689_512),
        (resnet34, 21_797_672),
        (resnet50, 25_557_032),
        (mobilenet_v2, 3_504_872),
        (vit_b_16, 86_567_656),
    ],
)
def test_torchvision_models_match_their_model_cards(build, published):
    """Parameter totals from torchvision's model cards; the tensors add up to the same total."""
    net = build(batch=1)
    assert net.parameter_count == published
    assert sum(sp.Mul(*shape) for _, shape in parameter_shapes(net)) == published


def test_resnet18_and_34_project_only_where_stride_or_width_change():
    """Basic blocks keep stage 1's width: only stages 2-4 open with a downsample projection."""
    for net, blocks in ((resnet18(batch=1), (2, 2, 2, 2)), (resnet34(batch=1), (3, 4, 6, 3))):
        adds = [row for row in net.rows if row.layer.kind == "Add"]
        assert len(adds) == sum(blocks)
        projected = [row.inputs[1] for row in adds if "downsample" in row.inputs[1]]
        assert projected == [f"layer{i}.0.downsample.1" for i in (2, 3, 4)]
        assert net["avgpool"].input_shape == (1, 512, 7, 7)


def test_mobilenet_v2_structure_as_torchvision_builds_it():
    """17 inverted residual blocks; a shortcut where stride 1 keeps the width (10 of them).

    Of the stages of 1, 2, 3, 4, 3, 3, 1 blocks (widths 16, 24, 32, 64, 96, 160, 320),
    every block but the first of its stage keeps its width at stride 1: 0+1+2+3+2+2+0 = 10
    sums. ReLU6s: the stem, two per block with an expansion (16), one in the first block
    (t = 1), and the final 1x1 convolution's.
    """
    net = mobilenet_v2(batch=1)
    adds = [row for row in net.rows if row.layer.kind == "Add"]
    assert len(adds) == 10
    depthwise = [row for row in net.rows if row.layer.kind == "Conv2d" and row.layer.groups != 1]
    assert len(depthwise) == 17
    assert all(row.layer.groups == row.input_shape[1] for row in depthwise)
    assert net["features.18.2"].output_shape == (1, 1280, 7, 7)
    assert [row.layer.kind for row in net.rows].count("ReLU6") == 1 + 2 * 16 + 1 + 1


def test_make_divisible_rounds_as_torchvision():
    """_make_divisible: nearest multiple of 8, at least 8, never more than 10% down."""
    assert [make_divisible(v) for v in (32, 16 * 0.35, 24 * 0.5, 96 * 0.75, 1280 * 1.4)] == [
        32,
        8,
        16,
        72,
        1792,
    ]
    assert make_divisible(36) == 40  # 36 -> 40 (ties round up)
    assert make_divisible(67) == 64 and make_divisible(68) == 72


def test_vit_b_16_sequence_and_symbolic_image_size():
    """224 / 16 = 14 patches a side: 196 + the class token = 197 positions of width 768."""
    net = vit_b_16(batch=1)
    assert net["encoder.pos_embedding"].output_shape == (1, 197, 768)
    assert net.output_shape == (1, 1000)
    symbolic = vit_b_16(image_size=H, batch=1).summary(H=224)
    numeric = net.summary()
    assert symbolic.parameter_count == numeric.parameter_count
    assert symbolic.activation_count == numeric.activation_count
    assert not [row for row in net.rows if row.layer.kind == "Dropout"]  # p = 0 everywhere


def test_bert_base_mlm_is_bert_without_pooler_plus_the_head():
    """BertForMaskedLM (bert-base-uncased): 109,514,298 parameters.

    BertModel without its pooler (108,891,648) plus the head's dense 768 x 768 + 768 and
    layer norm 2 x 768, and the decoder's own bias of 30,522; the decoder's matrix is the
    word embedding's (tied).
    """
    head = 768 * 768 + 768 + 2 * 768 + 30_522
    net = bert_base_mlm()
    assert net.parameter_count == bert_base(pooler=False).parameter_count + head == 109_514_298
    assert net.output_shape == (B, S, 30522)
    assert bert_base_mlm(loss=True).output_shape == ()
    with pytest.raises(InvalidSizeError, match="pooler=False"):
        bert(layers=1, hidden=8, heads=2, mlm_head=True)


def test_gpt2_with_its_loss_keeps_the_fp32_log_probabilities():
    """loss=True ends GPT-2 with the causal-LM loss over (B, S, 50257) logits."""
    net = gpt2("small", loss=True)
    assert net.output_shape == ()
    assert net.parameter_count == gpt2("small").parameter_count
    saved = net["loss"].saved
    assert saved[0].shape == (B, S, 50257) and saved[0].dtype.name == "fp32"
    with pytest.raises(InvalidSizeError, match="lm_head"):
        gpt2("small", lm_head=False, loss=True)


def test_vit_b_16_at_384_matches_the_swag_model_card():
    """ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1 (384 x 384): 86,859,496 parameters.

    Only the position table grows: 24 x 24 patches + the class token = 577 positions.
    """
    net = vit_b_16(image_size=384, batch=1)
    assert net.parameter_count == 86_859_496
    assert net.parameter_count - vit_b_16(batch=1).parameter_count == (577 - 197) * 768
