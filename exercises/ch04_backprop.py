"""Chapter 4, backpropagation and the x2.

Activation gradients, and the misconception of per-image parameter gradients.
"""

from memtheory import Dense, Input, ModelCounts, ReLU
from memtheory.dtypes import dtype
from memtheory.exercises import (
    Choice,
    Exercise,
    ExerciseSet,
    Expression,
    Integer,
    Number,
    Quantity,
    at,
)
from memtheory.exercises.derivation import quantity_text, shown
from memtheory.models import vgg16
from memtheory.symbols import B
from memtheory.worked_examples import small_cnn_layers, small_cnn_network
from memtheory.worked_examples.training_memory_question import ACTIVATIONS_PER_IMAGE

ACTIVATIONS = (
    ACTIVATIONS_PER_IMAGE,
    int(small_cnn_network().activation_count / B),
    int(vgg16().activation_count / B),
    1_000_000,
)
"""Activations per image: a StackExchange question's, the small CNN's, VGG-16's, a round number."""

FP32 = dtype("fp32").bytes


def _activation_side(memory):
    return shown(
        "The activation side: activations + their gradients, in bytes",
        memory["activations"] + memory["activation_gradients"],
    )


def _activations_only(activations):
    return ModelCounts.per_sample(parameters=0, activations=activations, input_elements=0)


_GRADIENT_OPTIONS = (
    "one gradient per parameter, summed over the images of the batch",
    "one gradient per parameter for every image of the batch",
    "no parameter gradients: only the activations get gradients",
)


def _gradient_storage(p, how):
    counts = ModelCounts.per_sample(parameters=1_000, activations=100, input_elements=10)
    gradients = how.training_memory(counts, optimizer="sgd")["gradients"]
    if gradients == 0:
        return _GRADIENT_OPTIONS[2]
    return _GRADIENT_OPTIONS[1] if B in gradients.free_symbols else _GRADIENT_OPTIONS[0]


def _weights_and_gradients(p, how):
    counts = ModelCounts.per_sample(parameters=p.parameters, activations=0, input_elements=0)
    memory = how.training_memory(counts, optimizer="sgd")
    return at(memory["parameters"] + memory["gradients"], B=p.batch)


def _ratio(p, how):
    counts = _activations_only(p.activations)
    training = at(_activation_side(how.training_memory(counts, optimizer="sgd")), B=p.batch)
    inference = shown(
        "A forward pass alone keeps the activations only, in bytes",
        how.inference_memory(counts)["activations"],
    )
    return shown(
        "The ratio: training's activation side / the forward pass's",
        training / at(inference, B=p.served),
    )


def _distinct_ratio(p):
    """Return whether the batches divide and no listed mistake gives the right ratio (1 or 2)."""
    return p.batch % p.served == 0 and p.batch // p.served > 2


def _mlp_total(p, how):
    net = how.network([Input((784,)), Dense(p.hidden), ReLU(), Dense(10)])
    return at(how.training_memory(net, optimizer="sgd").total, B=p.batch)


def _cnn_gradient_values(p, how):
    memory = how.training_memory(how.network(small_cnn_network().layers), optimizer="sgd")
    nbytes = at(memory["activation_gradients"], B=p.batch)
    return shown(
        f"Gradient values: {quantity_text(nbytes)} bytes / {FP32} bytes per fp32 value",
        nbytes / FP32,
    )


SET = ExerciseSet(
    id="ch04",
    title="Backpropagation and the x2",
    intro="The backward pass keeps every forward activation and produces a gradient of the same "
    "size for it: activations count twice in training. Parameter gradients are summed over the "
    "batch: one per parameter.",
    exercises=(
        Exercise(
            id="q1",
            title="activation memory of a batch",
            question="A network keeps {activations:,} activations per image. Training at batch "
            "{batch} in fp32, how much memory do the activations and their gradients take "
            "together?",
            params={"activations": ACTIVATIONS, "batch": (128, 64, 32, 256)},
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                _activation_side(
                    how.training_memory(_activations_only(p.activations), optimizer="sgd")
                ),
                B=p.batch,
            ),
            misconceptions=("forgot_x2", "activations_per_image", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q2",
            title="activation memory of one image",
            question="A network keeps {activations:,} activations per image. How much memory do "
            "the "
            "activations of one image and their gradients take in fp32?",
            params={"activations": ACTIVATIONS},
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                _activation_side(
                    how.training_memory(_activations_only(p.activations), optimizer="sgd")
                ),
                B=1,
            ),
            misconceptions=("forgot_x2", "mib_vs_mb"),
        ),
        Exercise(
            id="q3",
            title="how parameter gradients are kept",
            question="A network is trained with mini-batches of many images. How are the gradients "
            "of its parameters kept during one training step?",
            answer=Choice(_GRADIENT_OPTIONS),
            solve=_gradient_storage,
            misconceptions=("per_image_gradients", "parameters_times_batch"),
        ),
        Exercise(
            id="q4",
            title="weights and their gradients",
            question="A model with {parameters:,} parameters is trained with plain SGD at batch "
            "{batch}, in fp32. How much memory do the weights and their gradients take together "
            "(nothing else)?",
            params={
                "parameters": (19_072_984, 4_632_902, 138_357_544, 25_557_032),
                "batch": (128, 64, 32),
            },
            answer=Quantity("MiB"),
            solve=_weights_and_gradients,
            misconceptions=(
                "per_image_gradients",
                "parameters_times_batch",
                "forgot_gradients",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q5",
            title="activation memory as a formula in B",
            question="The small CNN of a StackExchange question ({image}x{image}x3 images, two 3x3 "
            "padded convolutions with 32 and 64 filters each followed by 2x2 max pooling with "
            "stride "
            "2, dense layers of {hidden} and 10 units, softmax) is trained in fp32. Counting every "
            "layer's output once and not the input, write the bytes of the activations and their "
            "gradients as a formula in the batch size B.",
            params={"image": (50, 54, 46, 58), "hidden": (500, 256, 1_000)},
            answer=Expression((B,)),
            solve=lambda p, how: _activation_side(
                how.training_memory(
                    how.network(small_cnn_layers(image_size=p.image, hidden=p.hidden)),
                    optimizer="sgd",
                )
            ),
            misconceptions=("forgot_x2", "input_as_activations", "round_in_pooling"),
            points=2,
        ),
        Exercise(
            id="q6",
            title="training over inference",
            question="A network keeps {activations:,} activations per image, in fp32. It is "
            "trained at batch {batch}, and served by a forward pass alone at batch {served}. "
            "Counting as the breakdown convention does (every activation with its gradient, all "
            "at once: the x2, an overcount of what a framework holds at its peak), how many "
            "times as much memory do the activations take in the training step as in the "
            "forward pass?",
            params={
                "activations": ACTIVATIONS,
                "batch": (64, 128, 32, 256, 16),
                "served": (16, 8, 4, 1, 32, 2),
            },
            constraint=_distinct_ratio,
            answer=Number(rtol=0, what="a whole ratio"),
            solve=_ratio,
            misconceptions=("forgot_x2", "activations_per_image"),
        ),
        Exercise(
            id="q7",
            title="an MLP's training step",
            question="A multilayer perceptron maps 784 inputs through a dense layer of {hidden} "
            "units, a ReLU (not in place: it keeps its own output) and a dense layer of 10 "
            "outputs; "
            "both dense layers have a bias. It is trained with plain SGD at batch {batch} in fp32. "
            "Counting the "
            "weights, their gradients, every layer's output with its gradient, and the input "
            "batch, "
            "how much memory does a training step need?",
            params={"hidden": (500, 256, 1_000, 128), "batch": (128, 64, 256)},
            answer=Quantity("MiB"),
            solve=_mlp_total,
            misconceptions=(
                "forgot_x2",
                "forgot_relu_output",
                "per_image_gradients",
                "parameters_times_batch",
                "forgot_gradients",
                "input_left_out",
                "input_as_activations",
            ),
            points=2,
        ),
        Exercise(
            id="q8",
            title="activation gradients of a batch",
            question="The small CNN of a StackExchange question (50x50x3 images, two 3x3 padded "
            "convolutions with 32 and 64 filters each followed by 2x2 max pooling with stride 2, "
            "dense layers of 500 and 10 units, softmax) is trained at batch {batch}. How many "
            "activation-gradient values does the backward pass produce for the whole batch "
            "(one per activation; every layer's output counted once, not the input)?",
            params={"batch": (64, 32, 128, 16)},
            answer=Integer(),
            solve=_cnn_gradient_values,
            misconceptions=("activations_per_image", "input_as_activations"),
        ),
    ),
)
