"""Chapter 13, memory techniques: gradient checkpointing, ZeRO's stages, CPU offload."""

import sympy as sp

from memtheory.exercises import CORRECT as _CORRECT
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Quantity, at
from memtheory.exercises.derivation import quantity_text, shown
from memtheory.exercises.shared import parameters_only
from memtheory.exercises.technique_steps import (
    checkpoint_peak,
    checkpoint_recompute,
    offloaded,
    zero_states,
)
from memtheory.models import gpt2
from memtheory.optimizers import optimizer
from memtheory.symbols import P
from memtheory.techniques.zero import MODEL_STATES


def _billions(p):
    return int(sp.Rational(str(p.billions)) * 10**9)


def _zero_total(p, how, stage):
    return zero_states(how, _billions(p), p.devices, stage).total


def _lowest_stage(p, how):
    limit = how.to_bytes(p.card, "GB")
    fitting = [stage for stage in range(4) if _zero_total(p, how, stage) <= limit]
    if not fitting:
        return -1  # no stage fits: the constraint keeps such variants out
    return shown(
        f"The lowest stage whose bytes per device fit {quantity_text(limit)} bytes", fitting[0]
    )


def _mixed_adam(p, how):
    return how.training_memory(
        parameters_only(_billions(p)), optimizer="adam", precision="mixed-fp16"
    )


_PRECISIONS = {
    "mixed-fp16": "mixed precision (fp16 weights and gradients, fp32 master weights and state)",
    "fp32": "fp32",
    "mixed-bf16": "mixed precision (bf16 weights and gradients, fp32 master weights and state)",
}


def _per_parameter(p, how):
    memory = zero_states(how, P, 1, 0, optimizer=p.optimizer, precision=p.precision)
    return sp.expand(memory.total).coeff(P)


_SIDES = (
    "the model states (weights, gradients, optimizer state, master weights)",
    "the activations and their gradients",
)


def _larger_side(p, how):
    memory = how.training_memory(gpt2("small"), optimizer="adam", precision="mixed-fp16")
    states = sum(v for k, v in memory.components.items() if k in MODEL_STATES)
    rest = memory.total - states
    return _SIDES[0] if at(states - rest, B=p.batch, S=p.sequence) > 0 else _SIDES[1]


SET = ExerciseSet(
    id="ch13",
    title="Checkpointing, sharding and offload",
    intro="Checkpointing a chain of n equal layers every k layers keeps ceil(n/k) - 1 segment "
    "inputs plus one segment's k layers: ceil(n/k) - 1 + min(k, n) layers' worth, and reruns "
    "every segment but the last. ZeRO splits the model states over N_d data-parallel devices: "
    "stage 1 the optimizer state and master weights, stage 2 the gradients too, stage 3 the "
    "weights as well. Offload moves what the optimizer step touches to the CPU.",
    exercises=(
        Exercise(
            id="q1",
            title="the checkpointed peak",
            question="A chain of {layers} layers, each keeping the same activation memory (one "
            "layer's worth), is trained with a checkpoint every {interval} layers. How many "
            "layers' worth of activations are kept at the peak of the backward pass?",
            params={"layers": (64, 100, 48, 30), "interval": (8, 10, 6, 7, 4)},
            answer=Integer(),
            solve=lambda p, how: checkpoint_peak(how, p.layers, p.interval),
            misconceptions=("checkpoint_inputs_only",),
        ),
        Exercise(
            id="q2",
            title="the price in recomputation",
            question="A chain of {layers} equal layers is trained with a checkpoint every "
            "{interval} layers. How many layers does the backward pass rerun?",
            params={"layers": (64, 100, 48, 30), "interval": (8, 10, 6, 7, 4)},
            answer=Integer(),
            solve=lambda p, how: checkpoint_recompute(how, p.layers, p.interval),
            misconceptions=("recompute_every_segment",),
        ),
        Exercise(
            id="q3",
            title="model states per device under ZeRO",
            question="A model of {billions} billion parameters is trained with Adam in mixed "
            "precision (fp16 weights and gradients, fp32 master weights and Adam state) on "
            "{devices} data-parallel GPUs with ZeRO stage {stage}. How much memory do the model "
            "states take on each GPU?",
            params={
                "billions": (7.5, 1.5, 3, 13),
                "devices": (64, 8, 16, 32),
                "stage": (2, 1, 3),
            },
            answer=Quantity("GB"),
            solve=lambda p, how: _zero_total(p, how, p.stage),
            misconceptions=(
                "zero_wrong_stage",
                "forgot_master_weights",
                "wrong_optimizer_factor",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q4",
            title="which ZeRO stage",
            question="A model of {billions} billion parameters is trained with Adam in mixed "
            "precision on {devices} data-parallel GPUs, each with {card} GB for the model states. "
            "What is the lowest ZeRO stage (0 to 3) at which they fit?",
            params={
                "billions": (7.5, 1.5, 3, 13),
                "devices": (64, 8, 16),
                "card": (32, 16, 24, 40, 80),
            },
            constraint=lambda p: _lowest_stage(p, _CORRECT) >= 0,
            answer=Integer(),
            solve=_lowest_stage,
            misconceptions=("zero_wrong_stage",),
        ),
        Exercise(
            id="q5",
            title="what offload leaves on the GPU",
            question="A model of {billions} billion parameters is trained with Adam in mixed "
            "precision on one GPU with ZeRO-Offload: the gradients, the Adam state and the fp32 "
            "master weights move to the CPU. How much of the model states stays on the GPU?",
            params={"billions": (1.5, 7.5, 3, 13)},
            answer=Quantity("GB"),
            solve=lambda p, how: offloaded(how, _mixed_adam(p, how)).gpu.total,
            misconceptions=("offload_wrong_components", "mib_vs_mb"),
        ),
        Exercise(
            id="q6",
            title="host memory for offload",
            question="A model of {billions} billion parameters is trained with Adam in mixed "
            "precision on one GPU with ZeRO-Offload (gradients, Adam state and fp32 master "
            "weights on the CPU). How much host memory do the offloaded model states need?",
            params={"billions": (1.5, 7.5, 3, 13)},
            answer=Quantity("GB"),
            solve=lambda p, how: offloaded(how, _mixed_adam(p, how)).cpu.total,
            misconceptions=(
                "offload_wrong_components",
                "forgot_master_weights",
                "wrong_optimizer_factor",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q7",
            title="bytes per parameter",
            question="A model is trained with {optimizer_title} in {precision_title}. How many "
            "bytes of model states (weights, gradients, optimizer state, and master weights where "
            "there are some) does each parameter cost?",
            params={
                "optimizer": ("adam", "sgd+momentum", "sgd", "rmsprop"),
                "precision": ("mixed-fp16", "fp32", "mixed-bf16"),
            },
            derive=lambda p: {
                "optimizer_title": optimizer(p.optimizer).title,
                "precision_title": _PRECISIONS[p.precision],
            },
            answer=Integer(unit="B"),
            solve=_per_parameter,
            misconceptions=(
                "forgot_master_weights",
                "wrong_optimizer_factor",
                "forgot_gradients",
                "forgot_optimizer_state",
            ),
        ),
        Exercise(
            id="q8",
            title="which side dominates",
            question="GPT-2 small is trained with Adam in mixed precision on batches of {batch} "
            "sequences of {sequence} tokens. Which is larger?",
            params={"batch": (4, 8, 1, 16), "sequence": (512, 256, 128, 1024)},
            answer=Choice(_SIDES),
            solve=_larger_side,
            misconceptions=("forgot_x2", "activations_per_image"),
        ),
    ),
)
