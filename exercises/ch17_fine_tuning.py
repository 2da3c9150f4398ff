"""Chapter 17, fine-tuning: LoRA's adapters, the frozen base, NF4 weights, 8-bit Adam."""

from memtheory import Dense, Input, Network, ReLU
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Number, Quantity
from memtheory.exercises.derivation import note, shown
from memtheory.exercises.step_log import took
from memtheory.exercises.steps_scaling import (
    adam8bit_state,
    constant_bits,
    finetune_step,
    lora_trainable,
    model_states,
    nf4_storage,
)
from memtheory.finetuning import LoRA
from memtheory.layers import CrossEntropyLoss
from memtheory.models import GPT2Config, gpt2


def _gpt(p, **sizes):
    """Build a GPT-2-shaped model of the question's depth and width (heads of width 128)."""
    return gpt2(GPT2Config(layers=p.layers, hidden=p.hidden, heads=p.hidden // 128), **sizes)


def _lora_states(p, how):
    net = _gpt(p, batch=1, sequence=1)
    memory = finetune_step(how, net, lora=LoRA(p.rank), optimizer="adam", precision="bf16")
    return model_states(memory)


def _twin(p, how):
    """Return the trainable state of the chapter's measured twin (LoRA on the middle Linear)."""
    net = Network(
        [
            Input((16,), batch=5),
            Dense(p.hidden, name="fc1"),
            ReLU(),
            Dense(p.hidden, name="fc2"),
            Dense(8, name="fc3"),
            CrossEntropyLoss(),
        ]
    )
    memory = finetune_step(
        how,
        net,
        lora=LoRA(p.rank, targets="fc2"),
        optimizer="adam",
        precision="fp32",
        convention="autograd",
    )
    return shown(
        "Only the adapter trains: its gradients + its Adam state, in bytes",
        memory["gradients"] + memory["optimizer_state"],
    )


_SAVED = (
    "its input, as a trainable Linear does",
    "nothing for its own weight gradient; the same input is kept by the adapter's lora_A",
    "its output",
    "nothing at all, since the adapter's lora_A recomputes its input",
)


def _what_frozen_base_keeps(p, how):
    took("frozen_saved")
    note(
        "A frozen Linear needs its input only for its weight's gradient, which is not computed; "
        "its input's gradient needs only the weight. The adapter's lora_A, a trainable Linear on "
        "the same input, keeps that input (one storage, shared)"
    )
    return _SAVED[1]


SET = ExerciseSet(
    id="ch17",
    title="Fine-tuning",
    intro="LoRA freezes every weight and trains, beside each targeted linear map of n_in inputs "
    "and n_out outputs, A (r x n_in) and B (n_out x r): r (n_in + n_out) parameters with "
    "gradients and optimizer state; the frozen base is kept once, in its dtype. QLoRA stores "
    "the frozen linear weights as 4-bit NF4 codes with one constant per 64 weights (8-bit, "
    "double-quantized, with an fp32 constant per 256 of them). 8-bit Adam keeps each moment in "
    "one byte per value with an fp32 constant per 256 values; tensors under 4,096 values keep "
    "fp32 state.",
    exercises=(
        Exercise(
            id="q1",
            title="LoRA's trainable parameters",
            question="A GPT-2-shaped model has {layers} layers of width {hidden}. LoRA of rank "
            "{rank} adapts the query and value projections (q_proj, v_proj, each {hidden} x "
            "{hidden}) of every layer. How many parameters does it train?",
            params={
                "layers": (96, 32, 48, 24),
                "hidden": (12288, 4096, 8192, 2048),
                "rank": (4, 8, 16, 2),
            },
            answer=Integer(),
            solve=lambda p, how: lora_trainable(how, _gpt(p), LoRA(p.rank)),
            misconceptions=("lora_one_matrix",),
        ),
        Exercise(
            id="q2",
            title="the model states of a LoRA step",
            question="A GPT-2-shaped model has {layers} layers of width {hidden} and is "
            "fine-tuned with LoRA of rank {rank} on q_proj and v_proj, everything in bf16 (the "
            "frozen base, the adapters, their gradients and Adam's two moments). How much memory "
            "do the model states take (everything but the activations)?",
            params={"layers": (32, 24, 48), "hidden": (4096, 2048, 8192), "rank": (8, 16, 4)},
            answer=Quantity("GB"),
            solve=_lora_states,
            misconceptions=("frozen_keeps_state", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q3",
            title="NF4's bits per weight",
            question="QLoRA stores a frozen weight matrix as 4-bit codes in blocks of {block} "
            "weights, each block with an 8-bit constant; the constants are themselves quantized "
            "in groups of {second}, each group with one fp32 constant. How many bits does a "
            "weight cost, constants included (large matrices, whole blocks)?",
            params={"block": (64, 32, 128), "second": (256, 128, 512)},
            answer=Number(rtol=0.0005, what="bits per weight"),
            solve=lambda p, how: shown(
                "Bits per weight: 4 for the code + the constants' share",
                4 + constant_bits(how, block=p.block, second_block=p.second),
            ),
            misconceptions=("nf4_forgot_constants", "nf4_constants_fp32"),
        ),
        Exercise(
            id="q4",
            title="one projection in NF4",
            question="A frozen {rows} x {columns} projection is stored in NF4 as QLoRA does: "
            "blocks of 64 weights, double-quantized constants (8-bit, one fp32 constant per 256 "
            "of them). How many bytes does it take?",
            params={"rows": (4096, 8192, 5120, 11008), "columns": (4096, 8192, 5120)},
            answer=Integer(unit="B"),
            solve=lambda p, how: nf4_storage(how, p.rows * p.columns),
            misconceptions=("nf4_forgot_constants", "nf4_constants_fp32"),
        ),
        Exercise(
            id="q5",
            title="8-bit Adam's state",
            question="A Linear layer of {n_in} inputs and {n_out} outputs, with a bias, is "
            "trained with bitsandbytes' 8-bit Adam. How many bytes of optimizer state does it "
            "keep?",
            params={"n_in": (4096, 1024, 768), "n_out": (1024, 4096, 3072, 64)},
            answer=Integer(unit="B"),
            solve=lambda p, how: adam8bit_state(how, [(p.n_out, p.n_in), (p.n_out,)]),
            misconceptions=(
                "adam8bit_forgot_constants",
                "adam8bit_paper_block",
                "adam8bit_small_tensors",
            ),
        ),
        Exercise(
            id="q6",
            title="the measured twin's trainable state",
            question="Three Linear layers (16 to {hidden}, a ReLU, {hidden} to {hidden}, "
            "{hidden} to 8) are fine-tuned with LoRA of rank {rank} on the middle one only, in "
            "fp32 with Adam. How many bytes do the gradients and the optimizer state take "
            "together?",
            params={"hidden": (32, 48, 64), "rank": (4, 2, 8)},
            answer=Integer(unit="B"),
            solve=_twin,
            misconceptions=("frozen_keeps_state",),
        ),
        Exercise(
            id="q7",
            title="what a frozen Linear keeps",
            question="In a LoRA layer, base_layer(x) + lora_B(lora_A(x)) x alpha/r, the "
            "base_layer is a frozen Linear. What does autograd keep for the backward pass on the "
            "base_layer's account?",
            answer=Choice(_SAVED),
            solve=_what_frozen_base_keeps,
        ),
    ),
)
