"""The sets of chapters 10-14: book answers checked against figures derived here or published.

The generic checks (reference answers score full marks for several learners,
blanks score zero, listed misconceptions are recognised) run over every set in
test_exercise_sets.py and test_exercise_misconceptions.py; here each book
answer is recomputed by another route: by hand from the question's numbers,
through another memtheory function, or from a paper.
"""

from fractions import Fraction

import pytest

from memtheory import training_memory
from memtheory.conventions.autograd import forward_storages
from memtheory.exercises import Params, check, find_variant, load_sets
from memtheory.exercises.model import Variant
from memtheory.exercises.technique_steps import LATER_MISCONCEPTIONS
from memtheory.gpus import usable_memory
from memtheory.models import gpt2, vgg16
from memtheory.recipes import Setup
from memtheory.symbols import B, S
from memtheory.techniques import generation_memory, uniform_memory, uniform_recompute
from memtheory.whatif import max_batch
from memtheory.worked_examples import small_cnn_network

GIB, GB = 2**30, 10**9
LATER = ("ch10", "ch11", "ch12", "ch13", "ch14")


def usable(sold_gb):
    """The book's one card budget (chapter 6): the vendor's GB read as GiB, less 1.5 GiB."""
    return Fraction(sold_gb * GIB) - Fraction(3, 2) * GIB


def test_every_later_chapter_has_a_set_of_six_or_more():
    """Chapters 10-14 have graded sets, each mixing answer kinds."""
    sets = load_sets()
    for set_id in LATER:
        assert len(sets[set_id].exercises) >= 6, set_id
        kinds = {type(e.answer).__name__ for e in sets[set_id].exercises}
        assert len(kinds) >= 2, (set_id, kinds)


def test_later_misconceptions_are_registered_and_used():
    """Each misconception of chapters 10-14 is in the registry and listed by a later set."""
    sets = load_sets()
    used = {m for s in LATER for e in sets[s].exercises for m in e.misconceptions}
    assert {m.name for m in LATER_MISCONCEPTIONS} <= used


def test_ch10_budget_of_a_16_gb_card():
    """A card sold as 16 GB: 16 GiB less the 1.5 GiB reserve = 14.5 GiB."""
    assert find_variant("ch10.q1").expected == Fraction(29, 2) == usable(16) / GIB


def test_ch10_budget_is_the_one_rule_of_memtheory_gpus():
    """Every ch10.q1 card is budgeted as memtheory.gpus budgets a named card of that size.

    The RTX 3060 (12 GB), T4 (16 GB), RTX 4090 (24 GB) and the A100s (40, 80 GB):
    usable_memory reads the vendor's GB as GiB and keeps its 1.5 GiB reserve.
    """
    exercise = load_sets()["ch10"].exercise("q1")
    for card, name in (
        (12, "RTX 3060"),
        (16, "T4"),
        (24, "RTX 4090"),
        (40, "A100-40GB"),
        (80, "A100-80GB"),
    ):
        variant = Variant("ch10", exercise, "x", Params(card=card))
        assert variant.expected * GIB == usable_memory(name).usable, card


def test_ch10_largest_batch_is_max_batch_of_the_autograd_peak():
    """ch10.q2's book answer (VGG-16, Adam, a 16 GB card) is max_batch under chapter 6's setup.

    Chapter 6 plans with the autograd peak of the pytorch-fp32 recipe with Adam and the
    card less the 1.5 GiB reserve; the old answer, 101, took the breakdown's total and a
    1 GiB + 10% budget that no chapter uses.
    """
    setup = Setup.recipe("pytorch-fp32", optimizer="adam")
    expected = max_batch(vgg16(), int(usable(16)), setup=setup)
    assert find_variant("ch10.q2").expected == expected
    breakdown = max_batch(vgg16(), int(usable(16)), setup=setup, convention="breakdown")
    assert breakdown < expected  # the breakdown overcounts: its answer is a named slip


def test_ch10_inplace_relu_keeps_only_the_convolution_output():
    """A 16-filter padded conv on 32x32 keeps 16 x 32 x 32 values; the in-place ReLU none."""
    assert find_variant("ch10.q3").expected == 16 * 32 * 32


def test_ch10_relu_pair_saves_the_same_in_place_or_not():
    """ch10.q3 grades what autograd keeps: the ReLU's output, F x size^2, with either ReLU.

    Chapter 10 measures that an in-place ReLU leaves the saved activations unchanged (the
    convolution saves its input, the ReLU its output). The exercise used to count every
    layer's output, the breakdown's saving the chapter shows is not one; that count, two
    outputs for ReLU(), is now the named slip breakdown_for_autograd.
    """
    exercise = load_sets()["ch10"].exercise("q3")
    for size in exercise.params["size"]:
        for filters in exercise.params["filters"]:
            answers = {
                relu: Variant(
                    "ch10", exercise, "x", Params(relu=relu, size=size, filters=filters)
                ).expected
                for relu in exercise.params["relu"]
            }
            assert set(answers.values()) == {filters * size * size}, (size, filters)
    result = check("ch10.q3", 2 * 16 * 32 * 32)  # the book's ReLU(): both outputs counted
    assert result.misconceptions == ("breakdown_for_autograd",)


def test_ch10_and_ch11_indices_agree_with_the_autograd_storages():
    """The int64 pooling indices of the small CNN, as the autograd convention lists them."""
    storages = forward_storages(small_cnn_network(batch=64))
    indices = sum(int(s.nbytes) for s in storages if s.role == "indices")
    saved = sum(int(s.nbytes) for s in storages if s.category == "saved_activations")
    assert indices == (25 * 25 * 32 + 12 * 12 * 64) * 64 * 8
    assert find_variant("ch10.q4").expected == Fraction(indices, 2**20)
    assert find_variant("ch11.q5").expected == 100 * Fraction(indices, saved)


def test_ch10_foreach_temporaries_are_every_parameter_once():
    """Foreach Adam's square roots of all second moments: the small CNN's parameters x 4 bytes."""
    # document 001's layers: two 3x3 convolutions (32, 64 filters), dense 12*12*64 -> 500 -> 10
    convolutions = (32 * 3 * 9 + 32) + (64 * 32 * 9 + 64)
    parameters = convolutions + (12 * 12 * 64 * 500 + 500) + (500 * 10 + 10)
    assert find_variant("ch10.q7").expected == Fraction(parameters * 4, 2**20)


def test_ch10_for_loop_temporaries_by_hand():
    """For-loop Adam: sqrt and quotient of one tensor with the previous denom, largest such sum."""
    tensors = [784 * 256, 256, 256 * 128, 128, 128 * 10, 10]  # in the order of the layers
    peak = max(2 * p + (tensors[i - 1] if i else 0) for i, p in enumerate(tensors))
    assert peak == 2 * 784 * 256
    assert find_variant("ch10.q8").expected == 100 * Fraction(peak, sum(tensors))


def test_ch12_crossover_is_34d_over_5a():
    """34*B*D*S = 5*B*a*S^2 at S = 34 D / (5 a) (Korthikanti et al. 2022, eq. 2's terms)."""
    assert find_variant("ch12.q3").expected == Fraction(34 * 768, 5 * 12)


def test_ch12_flash_saving_counts_the_three_square_tensors():
    """ch12.q6: GPT-2 small, S = 1,024, fp16: 12 layers x 12 heads x S x (5 S - 4) bytes.

    The three a x S x S tensors the chapter names (softmax output 2 bytes, dropout mask 1,
    dropped probabilities 2: Korthikanti et al.'s 5as/h) less the flash kernel's fp32
    log-sum-exp (4 bytes per row and head). Checked against the whole network's saved
    activations under the autograd convention. The question used to grade the two fp16
    tensors' elements (12 x 12 x 2 x S^2) after naming three.
    """
    s, heads, layers = 1024, 12, 12
    by_hand = layers * heads * s * (5 * s - 4)
    saved = {
        flash: training_memory(
            gpt2("small", flash=flash), optimizer="sgd", precision="fp16", convention="autograd"
        )["saved_activations"]
        for flash in (False, True)
    }
    network = (saved[False] - saved[True]).subs({B: 1, S: s})
    assert find_variant("ch12.q6").expected == by_hand == network
    two_tensors = layers * heads * 2 * s * s  # the old answer, in elements
    assert not check("ch12.q6", two_tensors).passed


def test_ch13_checkpointing_by_hand():
    """64 layers every 8: 8 - 1 kept inputs + 8 recomputed layers; 7 segments of 8 rerun."""
    assert find_variant("ch13.q1").expected == 8 - 1 + 8 == uniform_memory(64, 8)
    assert find_variant("ch13.q2").expected == 7 * 8 == uniform_recompute(64, 8)


def test_ch13_zero_stage_2_is_the_papers_figure():
    """ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, 64 GPUs, P_os+g: 16.6 GB."""
    expected = (2 + Fraction(2 + 12, 64)) * Fraction(7_500_000_000, GB)
    assert find_variant("ch13.q3").expected == expected
    assert round(float(expected), 1) == 16.6


@pytest.mark.parametrize(
    ("optimizer", "precision", "bytes_per_parameter"),
    [("adam", "mixed-fp16", 2 + 2 + 4 + 8), ("sgd+momentum", "fp32", 4 + 4 + 4)],
)
def test_ch13_bytes_per_parameter(optimizer, precision, bytes_per_parameter):
    """Adam in mixed precision: 16 bytes (ZeRO paper, section 3.1); momentum in fp32: 12."""
    set_ = load_sets()["ch13"]
    exercise = set_.exercise("q7")
    variant = set_.variant("q7")
    params = type(variant.params)(optimizer=optimizer, precision=precision)
    assert type(variant)("ch13", exercise, None, params).expected == bytes_per_parameter


def test_ch14_llama_cache_by_hand():
    """2 (K, V) x 32 layers x 32 heads x 128 x 4,096 tokens x 8 sequences x 2 bytes = 16 GiB."""
    assert find_variant("ch14.q1").expected == Fraction(2 * 32 * 32 * 128 * 4096 * 8 * 2, GIB)
    assert find_variant("ch14.q2").expected == (40 * GIB) // (2 * 32 * 32 * 128 * 4096 * 2)


def test_ch14_generation_agrees_with_generation_memory():
    """The weights-or-cache and largest-batch answers, through memtheory.techniques."""
    memory = generation_memory(gpt2("small")).evaluate(B=8, S=1024)
    weights, cache = memory.components["weights"], memory.components["kv_cache"]
    variant = find_variant("ch14.q6")
    assert variant.kind.options[variant.expected] == (
        "the weights" if weights > cache else "the key/value cache"
    )
    assert find_variant("ch14.q7").expected == max_batch(
        generation_memory(gpt2("medium")), int(usable(16)), S=1024
    )


def test_later_variants_differ_between_learners():
    """Two learners get different numbers, and different answers, for most exercises."""
    differ = 0
    ids = [full for s in LATER for full in load_sets()[s].ids]
    for exercise_id in ids:
        ada, bob = find_variant(exercise_id, "ada"), find_variant(exercise_id, "bob")
        differ += not ada.kind.matches(ada.expected, bob.expected)
    assert differ >= len(ids) // 2
