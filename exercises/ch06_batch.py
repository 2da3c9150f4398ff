"""Chapter 6, batch size: memory is affine in the batch; the largest batch that fits a GPU."""

from memtheory.exercises import Choice, Exercise, ExerciseSet, Expression, Integer, Quantity, at
from memtheory.exercises.reasoning import CORRECT
from memtheory.exercises.shared import (
    MODELS,
    model_names,
    model_values,
    noted_max_value,
    noted_max_value_formula,
)
from memtheory.optimizers import optimizer
from memtheory.symbols import B, size_symbol
from memtheory.units import format_bytes
from memtheory.worked_examples import small_cnn_layers

M = size_symbol("M")
"""GPU memory in bytes, for formulas."""


def _total(p, how):
    return how.training_memory(MODELS[p.model], optimizer=p.optimizer).total


def _measured(p):
    total = CORRECT.training_memory(MODELS[p.model], optimizer=p.optimizer).total
    return {
        **model_values(p),
        "first": format_bytes(at(total, B=32), "MiB"),
        "second": format_bytes(at(total, B=64), "MiB"),
    }


_DOUBLING = (
    "it doubles",
    "it grows, but less than double",
    "it grows more than double",
    "it stays the same",
)


def _doubling(p, how):
    total = how.training_memory(MODELS[p.model], optimizer=p.optimizer).total
    once, twice = at(total, B=p.batch), at(total, B=2 * p.batch)
    if twice == once:
        return _DOUBLING[3]
    if twice == 2 * once:
        return _DOUBLING[0]
    return _DOUBLING[1] if twice < 2 * once else _DOUBLING[2]


SET = ExerciseSet(
    id="ch06",
    title="Batch size",
    intro="Training memory is affine in the batch size B: a fixed part (weights, gradients, "
    "optimizer state) plus B times a per-sample part (activations with their gradients, and the "
    "input). The largest batch that fits solves total(B) <= memory.",
    exercises=(
        Exercise(
            id="q1",
            title="memory as a formula in B",
            question="The small CNN of a StackExchange question, on {image}x{image}x3 images (two "
            "3x3 padded convolutions with 32 and 64 filters, each followed by 2x2 max pooling with "
            "stride 2, dense layers of 500 and 10 units, softmax), is trained with "
            "{optimizer_title} in fp32. Counting weights, gradients, optimizer state, every "
            "layer's "
            "output with its gradient, and the input batch, write the bytes of a training step as "
            "a formula in the batch size B.",
            params={"image": (50, 54, 46, 58), "optimizer": ("adam", "sgd+momentum", "sgd")},
            derive=lambda p: {"optimizer_title": optimizer(p.optimizer).title},
            answer=Expression((B,)),
            solve=lambda p, how: (
                how.training_memory(
                    how.network(small_cnn_layers(image_size=p.image)), optimizer=p.optimizer
                ).total
            ),
            misconceptions=(
                "forgot_x2",
                "parameters_times_batch",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "per_image_gradients",
                "input_left_out",
                "input_as_activations",
            ),
            points=2,
        ),
        Exercise(
            id="q2",
            title="the largest batch that fits",
            question="{model_title} has {parameters:,} parameters, keeps {activations:,} "
            "activations "
            "per image and reads {inputs:,} input values per image. It is trained with "
            "{optimizer_title} in fp32 on a GPU with {gpu} GiB of memory. Counting weights, "
            "gradients, optimizer state, activations with their gradients, and the input batch "
            "(and "
            "nothing else), what is the largest batch size that fits?",
            params={
                "model": model_names(),
                "optimizer": ("adam", "sgd+momentum", "sgd"),
                "gpu": (4, 8, 12, 16, 24),
            },
            derive=model_values,
            answer=Integer(),
            solve=lambda p, how: noted_max_value(_total(p, how), B, how.to_bytes(p.gpu, "GiB")),
            misconceptions=(
                "forgot_x2",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "parameters_times_batch",
                "per_image_gradients",
                "input_left_out",
                "activations_per_image",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q3",
            title="extrapolating in the batch",
            question="A training step of {model} with {optimizer_title} in fp32 needs {first} at "
            "batch 32 and {second} at batch 64. How much does it need at batch {batch}?",
            params={
                "model": model_names(),
                "optimizer": ("adam", "sgd+momentum"),
                "batch": (256, 128, 512, 96),
            },
            derive=_measured,
            answer=Quantity("MiB"),
            solve=lambda p, how: at(_total(p, how), B=p.batch),
            misconceptions=("mib_vs_mb",),
        ),
        Exercise(
            id="q4",
            title="the cost of one more image",
            question="{model_title} has {parameters:,} parameters, keeps {activations:,} "
            "activations "
            "per image and reads {inputs:,} input values per image; it is trained with "
            "{optimizer_title} in fp32. How much memory does each additional image of the batch "
            "add?",
            params={
                "model": model_names(1, 2, 0),
                "optimizer": ("adam", "sgd+momentum", "rmsprop"),
            },
            derive=model_values,
            answer=Quantity("MiB"),
            solve=lambda p, how: _total(p, how).diff(B),
            misconceptions=(
                "forgot_x2",
                "input_left_out",
                "input_as_activations",
                "per_image_gradients",
                "parameters_times_batch",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q5",
            title="the part that does not depend on the batch",
            question="{model_title} has {parameters:,} parameters, keeps {activations:,} "
            "activations "
            "per image and reads {inputs:,} input values per image; it is trained with "
            "{optimizer_title} in fp32. How much of its training memory does not depend on the "
            "batch size?",
            params={
                "model": model_names(2, 0, 1),
                "optimizer": ("adam", "sgd+momentum", "rmsprop"),
            },
            derive=model_values,
            answer=Quantity("MiB"),
            solve=lambda p, how: at(_total(p, how), B=0),
            misconceptions=(
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "forgot_gradients",
                "activations_per_image",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q6",
            title="a larger image in a budget given in GB",
            question="The small CNN of a StackExchange question (two 3x3 padded convolutions with "
            "32 "
            "and 64 filters, each followed by 2x2 max pooling with stride 2, dense layers of 500 "
            "and "
            "10 units, softmax) is fed {image}x{image}x3 images and trained with {optimizer_title} "
            "in fp32 with {gpu} GB (decimal, 10^9 bytes) of GPU memory free for the step. Counting "
            "weights, gradients, optimizer "
            "state, every layer's output with its gradient, and the input batch, what is the "
            "largest "
            "batch that fits?",
            params={
                "image": (224, 128, 160, 192),
                "optimizer": ("adam", "sgd+momentum"),
                "gpu": (8, 16, 12, 24),
            },
            derive=lambda p: {"optimizer_title": optimizer(p.optimizer).title},
            answer=Integer(),
            solve=lambda p, how: noted_max_value(
                how.training_memory(
                    how.network(small_cnn_layers(image_size=p.image)), optimizer=p.optimizer
                ).total,
                B,
                how.to_bytes(p.gpu, "GB"),
            ),
            misconceptions=("mib_vs_mb", "forgot_x2", "forgot_optimizer_state", "input_left_out"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q7",
            title="the largest batch as a formula",
            question="{model_title} has {parameters:,} parameters, keeps {activations:,} "
            "activations "
            "per image and reads {inputs:,} input values per image; it is trained with "
            "{optimizer_title} in fp32. Write the largest batch that fits in M bytes of GPU memory "
            "as a formula in M (assume at least one image fits; use floor()).",
            params={"model": model_names(), "optimizer": ("adam", "sgd+momentum", "rmsprop")},
            derive=model_values,
            answer=Expression((M,)),
            solve=lambda p, how: noted_max_value_formula(_total(p, how), B, M),
            misconceptions=(
                "forgot_x2",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "input_left_out",
            ),
        ),
        Exercise(
            id="q8",
            title="doubling the batch",
            question="{model_title} is trained with {optimizer_title} in fp32 at batch {batch}. If "
            "the batch is doubled, what happens to the training memory?",
            params={
                "model": model_names(),
                "optimizer": ("adam", "sgd+momentum", "sgd"),
                "batch": (32, 64, 16),
            },
            derive=model_values,
            answer=Choice(_DOUBLING),
            solve=_doubling,
            misconceptions=("parameters_times_batch",),
        ),
    ),
)
