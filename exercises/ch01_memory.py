"""Chapter 1, why memory runs out: the consumers of training memory, and MB versus MiB.

Every answer is computed by memtheory; the numbers of the first variant are
those of the book (a StackExchange question on training memory, and the
small CNN of another).
"""

from memtheory import Input, Network
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Number, Quantity, at
from memtheory.exercises.derivation import shown
from memtheory.exercises.shared import (
    MODELS,
    model_names,
    model_values,
    parameter_side,
    parameters_only,
)
from memtheory.footprint import COMPONENT_TITLES


def _weights(p, how):
    counts = parameters_only(p.parameters)
    return how.inference_memory(counts)["parameters"]


def _zero_with_sgd(p, how):
    counts = MODELS[p.model]
    memory = how.training_memory(counts, optimizer="sgd").components
    zero = [name for name in _COMPONENTS if at(memory.get(name, 0), B=64) == 0]
    return COMPONENT_TITLES[zero[0]]


_COMPONENTS = ("parameters", "gradients", "optimizer_state", "activations", "activation_gradients")
_SIDES = (
    "the parameter side: weights, their gradients and the optimizer state",
    "the activation side: forward activations and their gradients",
)


def _larger_side(p, how):
    memory = how.training_memory(MODELS[p.model], optimizer=p.optimizer)
    activation_side = memory["activations"] + memory["activation_gradients"]
    return _SIDES[0] if at(parameter_side(memory) - activation_side, B=p.batch) > 0 else _SIDES[1]


def _total(p, how):
    return at(how.training_memory(MODELS[p.model], optimizer=p.optimizer).total, B=p.batch)


def _input_bytes(p, how):
    batch = Network([Input((p.channels, p.height, p.width), batch=p.batch)])
    return how.inference_memory(batch)["input"]


_MODEL_NAMES = model_names()

SET = ExerciseSet(
    id="ch01",
    title="Why memory runs out",
    intro="Training memory has four consumers (the parameters, their gradients, the optimizer "
    "state, the activations with their gradients) plus the input batch; sizes are bytes, and "
    "MB (10^6 bytes) is not MiB (2^20 bytes).",
    exercises=(
        Exercise(
            id="q1",
            title="weights in MiB",
            question="A model has {parameters:,} parameters stored as fp32 (4 bytes each). How "
            "much "
            "memory do its weights alone take?",
            params={"parameters": (19_072_984, 4_632_902, 25_557_032, 110_000_000, 138_357_544)},
            answer=Quantity("MiB"),
            solve=_weights,
            misconceptions=("mib_vs_mb",),
        ),
        Exercise(
            id="q2",
            title="GB to GiB",
            question="A dataset takes {size} GB on disk, in decimal gigabytes. How many GiB "
            "is "
            "that?",
            params={"size": (16, 8, 12, 24, 40, 80)},
            answer=Quantity("GiB", rtol=0.001),
            solve=lambda p, how: how.to_bytes(p.size, "GB"),
            misconceptions=("mib_vs_mb",),
        ),
        Exercise(
            id="q3",
            title="MiB to MB",
            question="A framework reports {size:,} MiB in use. Express that in decimal megabytes.",
            params={"size": (743, 512, 2_048, 300, 4_096, 11_000)},
            answer=Quantity("MB", rtol=0.001),
            solve=lambda p, how: how.to_bytes(p.size, "MiB"),
            misconceptions=("mib_vs_mb",),
        ),
        Exercise(
            id="q4",
            title="binary over decimal",
            question="How many times larger is one {binary} than one {decimal}?",
            params={"pair": (("GiB", "GB"), ("MiB", "MB"), ("KiB", "kB"), ("TiB", "TB"))},
            derive=lambda p: {"binary": p.pair[0], "decimal": p.pair[1]},
            answer=Number(rtol=0.0005, what="a ratio"),
            solve=lambda p, how: shown(
                f"The ratio: bytes in one {p.pair[0]} / bytes in one {p.pair[1]}",
                how.to_bytes(1, p.pair[0]) / how.to_bytes(1, p.pair[1]),
            ),
        ),
        Exercise(
            id="q5",
            title="the component plain SGD does not need",
            question="{model_title} is trained with plain SGD (no momentum). Which of these memory "
            "components is zero?",
            params={"model": _MODEL_NAMES[:1]},
            derive=lambda p: {"model_title": p.model[0].upper() + p.model[1:]},
            answer=Choice(tuple(COMPONENT_TITLES[c] for c in _COMPONENTS)),
            solve=_zero_with_sgd,
        ),
        Exercise(
            id="q6",
            title="parameters or activations",
            question="{model_title} has {parameters:,} parameters and keeps {activations:,} "
            "activations per image. It is trained with {optimizer_title} at batch {batch}, all in "
            "fp32. Which side of training memory is larger?",
            params={
                "model": _MODEL_NAMES,
                "optimizer": ("adam", "sgd+momentum", "sgd"),
                "batch": (128, 64, 32, 8),
            },
            derive=model_values,
            answer=Choice(_SIDES),
            solve=_larger_side,
            misconceptions=("activations_per_image", "forgot_x2", "parameters_times_batch"),
        ),
        Exercise(
            id="q7",
            title="total training memory",
            question="{model_title} has {parameters:,} parameters, keeps {activations:,} "
            "activations per image, and reads {inputs:,} input values per image. It is trained "
            "with "
            "{optimizer_title} at batch {batch}, everything in fp32. Counting the weights, their "
            "gradients, the optimizer state, the activations with their gradients, and the input "
            "batch, how much memory does one training step need?",
            params={
                "model": _MODEL_NAMES,
                "optimizer": ("sgd+momentum", "adam", "rmsprop"),
                "batch": (128, 64, 32, 16),
            },
            derive=model_values,
            answer=Quantity("MiB"),
            solve=_total,
            misconceptions=(
                "forgot_x2",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "forgot_gradients",
                "parameters_times_batch",
                "per_image_gradients",
                "activations_per_image",
                "input_as_activations",
                "input_left_out",
                "mib_vs_mb",
            ),
            points=3,
            partial={"mib_vs_mb": 2},  # the memory right, the unit misread
        ),
        Exercise(
            id="q8",
            title="bytes of an input batch",
            question="A batch of {batch} images, each {height} pixels high, {width} pixels wide "
            "and of depth {channels} (values per pixel), is fed to a network as fp32. How many "
            "bytes does the input batch take?",
            params={
                "batch": (128, 64, 32, 256),
                "height": (50, 224, 32, 28),
                "width": (180, 224, 32, 28),
                "channels": (1, 3),
            },
            answer=Integer(unit="B"),
            solve=_input_bytes,
        ),
    ),
)
