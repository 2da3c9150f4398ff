"""The sets of chapters 15 and 16: book answers recomputed by hand, by another route, or cited.

The generic checks (full marks for reference answers, blanks score zero, listed
misconceptions recognised) run over every set elsewhere; here each book answer is
derived independently of the exercise's solver.
"""

from fractions import Fraction

import pytest

import memtheory as mt
from memtheory.exercises import find_variant, load_sets
from memtheory.exercises.steps_residual import RESIDUAL_MISCONCEPTIONS
from memtheory.models import resnet18, resnet50

MIB = 2**20


@pytest.mark.parametrize("set_id", ["ch15", "ch16"])
def test_sets_have_six_or_more_exercises_of_several_kinds(set_id):
    """Each new chapter's set has at least 6 exercises mixing answer kinds."""
    chosen = load_sets().get(set_id)
    if chosen is None:
        pytest.skip(f"{set_id} not written yet")
    assert len(chosen.exercises) >= 6
    assert len({type(e.answer).__name__ for e in chosen.exercises}) >= 2


def test_residual_misconceptions_are_used_by_the_sets():
    """Every misconception of chapters 15-16 is listed by some exercise."""
    sets = load_sets()
    used = {m for s in sets.values() for e in s.exercises for m in e.misconceptions}
    assert {m.name for m in RESIDUAL_MISCONCEPTIONS} <= used


def test_ch15_batchnorm_buffers_by_hand():
    """64 channels in fp32: running mean and variance (2 x 64 x 4 bytes) and one int64 count."""
    assert find_variant("ch15.q1").expected == 2 * 64 * 4 + 8


def test_ch15_batchnorm_saved_by_hand():
    """bf16 input (32, 64, 56, 56) and two bf16 statistics per channel."""
    assert find_variant("ch15.q2").expected == 32 * 64 * 56 * 56 * 2 + 2 * 64 * 2


def test_ch15_resnet18_parameters_are_torchvisions():
    """Torchvision's model card for resnet18 (ResNet18_Weights.IMAGENET1K_V1) lists 11,689,512."""
    assert find_variant("ch15.q3").expected == 11_689_512


def test_ch15_rmsnorm_saved_by_hand():
    """Llama's RMSNorm, width 4096, bf16: fp32 input copy, fp32 inverse RMS, bf16 normalised."""
    assert find_variant("ch15.q6").expected == 4096 * 4 + 4 + 4096 * 2


def test_ch15_peak_is_the_symbolic_formula_evaluated():
    """ch15.q5 (ResNet-50 at batch 32) equals the batch-symbolic autograd peak evaluated at 32."""
    memory = mt.training_memory(resnet50(), optimizer="sgd", convention="autograd")
    assert find_variant("ch15.q5").expected * MIB == memory.evaluate(B=32).peak


def test_ch15_which_side_by_hand():
    """ResNet-18, Adam, fp32: 16 bytes per parameter against the saved activations per image."""
    per_image = mt.training_memory(resnet18(batch=1), optimizer="sgd", convention="autograd")
    per_image = per_image["saved_activations"]
    states = 16 * 11_689_512
    assert 8 * per_image < states < 9 * per_image  # the batch of 9 tips it to the activations
    assert find_variant("ch15.q8").expected == 1


GIB = 2**30


def test_ch16_llama3_8b_parameters_by_hand():
    """Llama 3 8B's config.json: V = 128,256, D = 4,096, F = 14,336, 32 layers, 8 kv heads of 128.

    Embedding and untied head 2VD; per layer q and o (D x D each), k and v (D x 1,024 each),
    three MLP matrices (D x F) and two RMSNorm weights (D); the final norm (D).
    """
    v, d, f, layers, kv = 128256, 4096, 14336, 32, 8 * 128
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    assert find_variant("ch16.q1").expected == 2 * v * d + layers * per_layer + d
    assert find_variant("ch16.q2").expected == 2 * v * d


def test_ch16_logits_and_loss_by_hand():
    """Batch 4 of 4,096 over 128,256 tokens: bf16 logits, fp32 log-probabilities, int64 labels."""
    logits = 4 * 4096 * 128256
    expected = logits * 2 + logits * 4 + 4 + 4 * 4096 * 8
    assert find_variant("ch16.q3").expected == Fraction(expected, GIB)


def test_ch16_kv_cache_by_hand():
    """Llama 3 8B, batch 8 of 8,192, bf16: 2 x 32 layers x 8 kv heads x 128 x 8,192 x 8 x 2."""
    assert find_variant("ch16.q5").expected == Fraction(2 * 32 * 8 * 128 * 8192 * 8 * 2, GIB)


def test_ch16_gqa_shrinks_only_the_cache():
    """GQA shrinks the cache, not what eager attention saves for backward.

    Eager attention repeats the kv heads before the matmuls (transformers' repeat_kv), so the
    keys and values saved for backward are full width (measured in test_llama_autograd.py).
    """
    assert find_variant("ch16.q6").expected == 0


def test_ch16_swiglu_saved_by_hand():
    """Llama 3 8B's MLP keeps gate, SiLU(gate), up and their product, 14,336 bf16 values each."""
    assert find_variant("ch16.q8").expected == 4 * 14336 * 2
