"""Misconceptions: each named mistake is recognised in a learner's answer, with its named feedback.

The first group of tests writes each mistaken answer by hand from a formula in
the test, on the book's numbers: those of the seed documents (a StackExchange
question on training memory: 19,072,984 parameters, 532,752 activations per
image, 180x50x1 inputs, batch 128; a StackExchange question on a small CNN:
50x50x3 inputs, 3x3 convolutions with 32 and 64 filters, 2x2/2 pooling, dense
500 and 10, batch 64; a blog post: 2,000,000 parameters and a 32 MB input) or
stated in the question. The second group checks every (exercise, misconception)
pair the sets list, with the mistaken answer memtheory recomputes.
"""

from fractions import Fraction

import pytest

from memtheory.exercises import MISCONCEPTIONS, check, find_variant, grade_variant, load_sets

MIB, GIB, MB = 2**20, 2**30, 10**6

# Document 000, a StackExchange question on training memory.
P000, A000, BATCH000 = 19_072_984, 532_752, 128
# Document 001, the small CNN: parameters and activations per image, as its answer lists them.
P001 = (32 * 3 * 9 + 32) + (64 * 32 * 9 + 64) + (12 * 12 * 64 * 500 + 500) + (500 * 10 + 10)
A001 = 50 * 50 * 32 + 25 * 25 * 32 + 25 * 25 * 64 + 12 * 12 * 64 + 500 + 10 + 10  # softmax too
I001 = 50 * 50 * 3


def size(nbytes, unit, scale):
    """Write a byte count in ``unit`` with six decimals, as a learner with a calculator would."""
    return f"{float(Fraction(nbytes, scale)):.6f} {unit}"


HAND_WRITTEN = {
    # 784 x 100 weights, no bias (the question says "with a bias").
    "forgot_bias": ("ch02.q1", 784 * 100),
    # 32 filters of 3x3 counted without the 3 input channels: 32 x 9 + 32 (document 001: "3x3x3").
    "forgot_input_depth": ("ch02.q2", 32 * 3 * 3 + 32),
    # groups=32 ignored: 32 x 32 x 9 weights + 32 biases.
    "ignored_groups": ("ch02.q4", 32 * 32 * 9 + 32),
    # document 001: (25 - 2)/2 + 1 = 12.5, rounded up to 13 instead of floored to 12.
    "round_in_pooling": ("ch03.q1", 13),
    # 19,072,984 x 4 bytes divided by 10^6 but labelled MiB.
    "mib_vs_mb": ("ch01.q1", size(P000 * 4, "MiB", MB)),
    # 78,500 parameters times the batch of 64 the question mentions.
    "parameters_times_batch": ("ch02.q1", (784 * 100 + 100) * 64),
    # weights once, plus a gradient per image of the batch of 128.
    "per_image_gradients": ("ch04.q4", size(P000 * 4 * (1 + BATCH000), "MiB", MIB)),
    # document 000's question: 532,752 x 128 values of 4 bytes, without the gradients: 260.13 MiB.
    "forgot_x2": ("ch04.q1", size(A000 * 4 * BATCH000, "MiB", MIB)),
    # document 000's question: activations and gradients of a single image: 4.06 MiB.
    "activations_per_image": ("ch04.q1", size(A000 * 2 * 4, "MiB", MIB)),
    # Adam in fp32 without its state: a weight and a gradient, 8 bytes.
    "forgot_optimizer_state": ("ch05.q2", 4 + 4),
    # Adam counted with one state value (the x3 rule): 25,557,032 x 4 bytes.
    "wrong_optimizer_factor": ("ch05.q1", size(25_557_032 * 4, "MiB", MIB)),
    # weights only, no gradients: 19,072,984 x 4 bytes.
    "forgot_gradients": ("ch04.q4", size(P000 * 4, "MiB", MIB)),
    # mixed precision with bf16 at batch 64, no fp32 master weights: 2 + 2 + 8 bytes per parameter.
    "forgot_master_weights": (
        "ch07.q7",
        size(P001 * (2 + 2 + 8) + A001 * 64 * (2 + 2) + I001 * 64 * 4, "MiB", MIB),
    ),
    # document 001's answer counts the input in its per-image total: 149,736 + 7,500.
    "input_as_activations": ("ch03.q7", A001 + I001),
    # document 001's batch total without the 64 x 7,500 input values.
    "input_left_out": ("ch08.q5", size((A001 - 10) * 64 * 4, "MB", MB)),
    # Chapters 10-14 (memtheory.exercises.technique_steps), on each question's stated numbers.
    # GPT-2 small, S = 1,024, fp16: 12 layers x 12 heads x S^2 x (2 + 2) bytes, without the
    # one-byte mask, less the flash kernel's fp32 log-sum-exp (12 x 12 x S x 4 bytes).
    "attention_mask_left_out": ("ch12.q6", 12 * 12 * 1024 * (4 * 1024 - 4)),
    # the same with the mask (5 bytes per S^2 element) and no log-sum-exp subtracted.
    "flash_logsumexp_left_out": ("ch12.q6", 12 * 12 * 1024 * 1024 * 5),
    # document 001, batch 64: pooled outputs 25x25x32 and 12x12x64, indices at 4 bytes.
    "indices_as_floats": ("ch10.q4", size((25 * 25 * 32 + 12 * 12 * 64) * 64 * 4, "MiB", MIB)),
    # ch10.q7, document 001 with foreach Adam: the for-loop's two copies of the 12*12*64 x 500
    # weight and the 64 conv2 biases before it, instead of every parameter once.
    "swapped_step_implementation": (
        "ch10.q7",
        size((2 * 12 * 12 * 64 * 500 + 64) * 4, "MiB", MIB),
    ),
    # width 768, 12 heads: 34*D*S = 5*S^2 with a = 1 instead of 12.
    "attention_one_head": ("ch12.q3", f"{34 * 768 / 5}"),
    # 64 layers, a checkpoint every 8: the 8 kept inputs, without the recomputed segment.
    "checkpoint_inputs_only": ("ch13.q1", 64 // 8),
    # 64 layers, every 8: all 8 segments of 8 layers rerun, the last one too.
    "recompute_every_segment": ("ch13.q2", 8 * 8),
    # ZeRO paper, Figure 1 (7.5B parameters, 64 GPUs): stage 1's (2 + 2 + 12/64) x 7.5 GB, 31.4.
    "zero_wrong_stage": ("ch13.q3", size(int((4 + Fraction(12, 64)) * 7_500_000_000), "GB", 10**9)),
    # 1.5B parameters: only the Adam state moved; fp16 weights, fp16 gradients, fp32 master stay.
    "offload_wrong_components": ("ch13.q5", size(1_500_000_000 * (2 + 2 + 4), "GB", 10**9)),
    # Llama 2 7B (32 layers, 32 heads of 128), batch 8 of 4,096 tokens, fp16: keys only.
    "kv_forgot_values": ("ch14.q1", size(32 * 32 * 128 * 4096 * 8 * 2, "GiB", GIB)),
    # the same cache for one layer instead of 32.
    "kv_one_layer": ("ch14.q1", size(2 * 32 * 128 * 4096 * 8 * 2, "GiB", GIB)),
    # the same cache at 4 bytes per value.
    "kv_fp32": ("ch14.q1", size(2 * 32 * 32 * 128 * 4096 * 8 * 4, "GiB", GIB)),
    # 40 query heads sharing 8 key/value heads, counted as 40: no shrinking at all.
    "kv_ignored_shared_heads": ("ch14.q3", 1),
    # Chapters 17-18 (memtheory.exercises.steps_scaling), on each question's stated numbers.
    # LoRA paper, GPT-3 175B, r=4 on q and v of 96 layers: A counted (4 x 12288), B forgotten.
    "lora_one_matrix": ("ch17.q1", 96 * 2 * 4 * 12288),
    # 16-32-32-8 Linears with biases all trained in fp32 with Adam: weight gradient + 2 moments.
    "frozen_keeps_state": ("ch17.q6", 3 * 4 * ((16 * 32 + 32) + (32 * 32 + 32) + (32 * 8 + 8))),
    # QLoRA Section 3: 4 bits of code only, no constants.
    "nf4_forgot_constants": ("ch17.q4", 4096 * 4096 // 2),
    # QLoRA Section 3: fp32 constants, 4 + 32/64 bits per weight.
    "nf4_constants_fp32": ("ch17.q3", "4.5"),
    # 1024 x 4096 weight at 2 bytes per value, no absmax; the 1024 bias in fp32 Adam.
    "adam8bit_forgot_constants": ("ch17.q5", 2 * 4096 * 1024 + 8 * 1024),
    # the same layer with one fp32 constant per block of 2,048 values (the paper's block).
    "adam8bit_paper_block": ("ch17.q5", 2 * 4096 * 1024 + 8 * 4096 * 1024 // 2048 + 8 * 1024),
    # the 1024 bias quantized too: 2 bytes + 8 per 256 values, like the weight.
    "adam8bit_small_tensors": (
        "ch17.q5",
        2 * 4096 * 1024 + 8 * 4096 * 1024 // 256 + 2 * 1024 + 8 * 1024 // 256,
    ),
    # 1.5B parameters under DDP: 16 bytes of states, the bucket copy of the gradients forgotten.
    "ddp_forgot_buckets": ("ch18.q3", size(1_500_000_000 * 16, "GB", 10**9)),
    # pipeline of 8 stages, 32 micro-batches, stage 0: GPipe's 32 instead of 1F1B's 8.
    "pipeline_wrong_in_flight": ("ch18.q5", 32),
    # 8B on 16 GPUs, optimizer offloaded: one GPU's 14 x 8B / 16 bytes, not the 8 of a node.
    "host_ram_one_device": ("ch18.q6", size(14 * 8 * 10**9 // 16, "GB", 10**9)),
    # Korthikanti Table 2, s=2048, h=12288, a=96, t=8: sbh(34 + 5as/h)/t, as if sequence parallel.
    "tensor_parallel_wrong_split": ("ch18.q4", size(2048 * 12288 * (34 + 80) // 8, "MiB", MIB)),
    # ch19: BatchNorm on (8, 16, 32, 32) fp32 without its 2 x 16 statistics.
    "batchnorm_input_only": ("ch19.q1", 8 * 16 * 32 * 32 * 4),
    # ch19: a 16-channel block with the running mean and variance counted: 2 x 2304 + 2 x 64.
    "buffers_as_parameters": ("ch19.q2", 2 * 2304 + 2 * 64),
    # ch19: 48 MiB per image plus 500 MiB on all 24 GiB of an RTX 4090.
    "no_card_reserve": ("ch19.q3", (24 * 1024 - 500) // 48),
    # ch19: the 4090's 24 GB read as 24 x 10^9 bytes, less 1.5 GiB: 434.4 images.
    "card_gb_as_decimal": ("ch19.q3", 434),
    # ch19: 22.5 GiB = 23,040 MiB fits (23040 - 500) // 48 = 469, beyond the trace's B < 16.
    "ignored_trace_conditions": ("ch19.q4", (23040 - 500) // 48),
    # ch20: 1,000 fp32 numbers counted as their 4,000 bytes.
    "no_block_rounding": ("ch20.q1", 4000),
    # ch20: 4 MB reserved as its 7,813 blocks of 512 bytes instead of a 20 MiB segment.
    "reserved_is_allocated": ("ch20.q4", size(7813 * 512, "MiB", MIB)),
    # Chapters 15-16 (memtheory.exercises.steps_residual).
    # 64 channels, fp32: running mean and variance (2 x 64 x 4 bytes), without the int64 count.
    "bn_forgot_batch_count": ("ch15.q1", 2 * 64 * 4),
    # a bf16 batch of (32, 64, 56, 56): the input alone, without the 2 x 64 bf16 statistics.
    "norm_forgot_statistics": ("ch15.q2", 32 * 64 * 56 * 56 * 2),
    # ResNet-18's BatchNorm channels: stem 64, then 4 x 64, 4 x 128 + 128 (projection),
    # 4 x 256 + 256, 4 x 512 + 512 = 4,800; a running mean and variance each, as parameters.
    "running_stats_as_parameters": (
        "ch15.q3",
        11_689_512 + 2 * (64 + 4 * 64 + 5 * 128 + 5 * 256 + 5 * 512),
    ),
    # Llama's RMSNorm of width 4096 in bf16, its fp32 input copy and fp32 statistic as bf16:
    # 4096 x 2 + 2 + the bf16 normalised 4096 x 2.
    "norm_saved_in_model_dtype": ("ch15.q6", 4096 * 2 + 2 + 4096 * 2),
    # ResNet-18, batch 32, fp32: every layer's output (5,169,640 per image, the breakdown's
    # count) instead of what autograd saves.
    "breakdown_for_autograd": ("ch15.q4", size(5_169_640 * 32 * 4, "MiB", MIB)),
    # vocabulary 128,256, batch 4 of 4,096, bf16: logits (2 bytes) and bf16 log-probabilities
    # (2 bytes, no upcast), the int64 shifted labels and the 4-byte total weight.
    "logits_in_model_dtype": (
        "ch16.q3",
        size(4 * 4096 * 128256 * (2 + 2) + 4 * 4096 * 8 + 2, "GiB", GIB),
    ),
    # Llama 3 8B: 128,256 x 4,096 embedding, the output head taken as the same matrix.
    "assumed_tied_embeddings": ("ch16.q2", 128256 * 4096),
    # Llama 3 8B with k_proj and v_proj of 4,096 x 4,096 instead of 4,096 x 1,024 (32 layers).
    "gqa_full_width_projections": ("ch16.q1", 8_030_261_248 + 32 * 2 * 4096 * (4096 - 1024)),
    # Chapters 3, 4 and 7 (memtheory.exercises.steps_sizes), on the questions' stated numbers.
    # 3x3 with dilation 2 on 32x32, no padding: 32 - 2(3 - 1) - 1 = 27, without the + 1.
    "output_size_off_by_one": ("ch03.q4", 32 - 2 * (3 - 1) - 1),
    # 7x7, stride 2, padding 3 on 224: (224 + 6 - 7)/2 = 111.5 rounded up, + 1 (also what a span
    # one short gives at stride 2: the grader lists both).
    "floor_ceil_swapped": ("ch03.q3", 111 + 1 + 1),
    # 784 -> 500 -> ReLU -> 10 with biases, batch 128, SGD, fp32: the 500 ReLU outputs (and their
    # gradients) left out of the 500 + 500 + 10 per image; weights and gradients, the input.
    "forgot_relu_output": (
        "ch04.q7",
        size(
            (784 * 500 + 500 + 500 * 10 + 10) * 8 + (500 + 10) * 128 * 8 + 784 * 128 * 4,
            "MiB",
            MIB,
        ),
    ),
    # 1,000,000 fp16 values counted at 4 bytes each.
    "half_vs_single": ("ch07.q1", 1_000_000 * 4),
}


def test_every_misconception_has_a_hand_written_case():
    """The hand-written cases cover the whole registry."""
    assert set(HAND_WRITTEN) == set(MISCONCEPTIONS)


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_mistake_gets_its_named_feedback(name):
    """A mistaken answer worked out by hand is graded wrong and named in the feedback."""
    exercise_id, answer = HAND_WRITTEN[name]
    result = check(exercise_id, answer)
    assert not result.passed
    assert name in result.misconceptions + result.candidates, result.feedback
    assert MISCONCEPTIONS[name].title in result.feedback
    assert f"[{name}]" in result.feedback


def test_small_cnn_parameter_count_is_the_books():
    """The document 001 sums above agree with the book's variant of ch08 (4,632,902 and 149,736)."""
    assert find_variant("ch08.q4").expected == P001 == 4_632_902
    assert find_variant("ch03.q7").expected == A001 == 149_736


def test_forgotten_x2_is_the_training_question_figure():
    """Forgetting the x2 gives the 260.13 MiB the training-memory question printed."""
    assert size(A000 * 4 * BATCH000, "MiB", MIB).startswith("260.13")


PAIRS = [
    (full, name, seed)
    for s in load_sets().values()
    for full, exercise in zip(s.ids, s.exercises, strict=True)
    for name in exercise.misconceptions
    for seed in (None, "alice")
]


@pytest.mark.parametrize(("exercise_id", "name", "seed"), PAIRS)
def test_every_listed_misconception_is_recognised(exercise_id, name, seed):
    """For every exercise and variant, each way a listed mistake changes the answer is named."""
    variant = find_variant(exercise_id, seed)
    mistaken = [m for m in variant.mistaken_answers() if m.name == name]
    if not mistaken:
        pytest.skip("this variant's numbers hide the mistake")
    for answer in mistaken:
        result = grade_variant(variant, variant.kind.solution_text(answer.value))
        assert result.status == "incorrect"
        assert name in result.misconceptions + result.candidates, (answer.detail, result.feedback)


def test_wrong_answer_matching_no_misconception_gets_plain_feedback():
    """An answer that no listed mistake explains is marked wrong without naming one."""
    result = check("ch02.q1", 12345)
    assert not result.passed and result.misconceptions == ()
    assert result.feedback.startswith("Not correct.")


def test_answers_matching_two_misconceptions_name_neither_but_list_both():
    """With momentum, forgetting the state or the gradients gives the same total: both listed.

    Neither is named as the mistake made; both are candidates the grader cannot tell apart.
    """
    variant = find_variant("ch01.q7")
    state = next(m for m in variant.mistaken_answers() if m.name == "forgot_optimizer_state")
    result = grade_variant(variant, variant.kind.solution_text(state.value))
    assert result.misconceptions == ()
    assert {"forgot_optimizer_state", "forgot_gradients"} <= set(result.candidates)
    assert "matches 2 possible slips" in result.feedback
    assert "This is the answer you get" not in result.feedback


def test_correct_answer_is_never_taken_for_a_misconception():
    """A mistake that does not change the answer (SGD keeps no state) is not reported."""
    variant = find_variant("ch01.q5")
    assert all(m.name != "forgot_optimizer_state" for m in variant.mistaken_answers())
    assert check("ch01.q5", "c").passed


def test_misconception_registry_entries_are_complete():
    """Every misconception has a title, a hint, and at least one way to recompute an answer."""
    for name, entry in MISCONCEPTIONS.items():
        assert entry.name == name
        assert entry.title and entry.hint.endswith(".")
        assert entry.ways and all(way.detail for way in entry.ways)
