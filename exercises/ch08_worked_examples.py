"""Chapter 8, the worked examples.

The source documents' examples, rebuilt with memtheory.worked_examples, and varied.
"""

from memtheory import Conv2d, Input, ModelCounts
from memtheory.dtypes import dtype
from memtheory.exercises import Exercise, ExerciseSet, Integer, Number, Quantity, at
from memtheory.exercises.derivation import note_lines, quantity_text, shown
from memtheory.worked_examples import (
    calculator_estimate,
    fc_adam_network,
    small_cnn_layers,
    small_cnn_network,
)
from memtheory.worked_examples.blog_formula import INPUT_ELEMENTS
from memtheory.worked_examples.training_memory_question import (
    ACTIVATIONS_PER_IMAGE,
    PARAMETERS,
    question_counts,
)

FP32 = dtype("fp32").bytes


def _listed_tensors(p, how):
    net = how.network(small_cnn_network().layers[:-1])  # the answer lists no separate softmax
    elements = how.input_elements(net) + how.activation_count(net)
    return at(elements * FP32, B=p.batch)


def _stem_ratio(p, how):
    stem = how.network([Input((3, p.size, p.size)), Conv2d(64, 7, stride=2, padding=3)])
    values = at(how.activation_count(stem), B=1)
    return shown(f"{quantity_text(values)} / {p.factor:,}", values / p.factor)


def _calculator_terms(estimate):
    """Record the calculator's four terms, then return their sum (bytes)."""
    lines = ["The calculator's terms, in bytes:"]
    lines += [f"  {name}: {quantity_text(value)}" for name, value in estimate.components.items()]
    note_lines(lines)
    return shown("Their sum, in bytes", estimate.total)


SET = ExerciseSet(
    id="ch08",
    title="The worked examples",
    intro="The source documents' examples, redone exactly: a StackExchange question on training "
    "memory and its answer, a StackExchange question on a small CNN, a forum thread on a large "
    "fully connected net with Adam, a blog post's formula, and an online memory calculator.",
    exercises=(
        Exercise(
            id="q1",
            title="the rule of thumb, exactly",
            question="A StackExchange question gives a network with {parameters:,} parameters and "
            "{activations:,} activations per image, 180x50x1 fp32 inputs and a batch of {batch}. "
            "Apply the rule of thumb of its answer exactly: parameters x 3 (weights, gradients, "
            "one "
            "optimizer copy), activations x 2 for every image of the batch, plus the input batch. "
            "How much memory is that?",
            params={"batch": (128, 64, 32, 256)},
            derive=lambda p: {"parameters": PARAMETERS, "activations": ACTIVATIONS_PER_IMAGE},
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                how.training_memory(question_counts(), convention="rule_of_thumb").total, B=p.batch
            ),
            misconceptions=(
                "activations_per_image",
                "forgot_x2",
                "per_image_gradients",
                "wrong_optimizer_factor",
                "input_left_out",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q2",
            title="the gradients the question feared",
            question="The same question worries that {activations:,} values per image are also "
            "kept "
            "as gradients for each of the {batch} images of the batch. How much memory, in fp32, "
            "do "
            "the activation gradients of the batch take?",
            params={"batch": (128, 64, 32, 256)},
            derive=lambda p: {"activations": ACTIVATIONS_PER_IMAGE},
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                how.training_memory(question_counts(), optimizer="sgd")["activation_gradients"],
                B=p.batch,
            ),
            misconceptions=("activations_per_image", "mib_vs_mb"),
        ),
        Exercise(
            id="q3",
            title="25 -> 12",
            question="The small CNN of a StackExchange question (3x3 padded convolutions with 32 "
            "and 64 filters, each followed by 2x2 max pooling with stride 2) is fed "
            "{image}x{image}x3 "
            "images. How many values per image does the second pooling output?",
            params={"image": (50, 54, 46, 58, 42)},
            answer=Integer(),
            solve=lambda p, how: at(
                how.network(small_cnn_layers(image_size=p.image))["maxpool2d_2"].activations, B=1
            ),
            misconceptions=("round_in_pooling",),
        ),
        Exercise(
            id="q4",
            title="the small CNN's parameters",
            question="The same CNN (then a dense layer of 500 units and a 10-way dense output with "
            "softmax; every convolution and dense layer has a bias) is fed {image}x{image}x3 "
            "images. "
            "How many trainable parameters does it have?",
            params={"image": (50, 54, 46, 58, 42)},
            answer=Integer(),
            solve=lambda p, how: how.parameter_count(
                how.network(small_cnn_layers(image_size=p.image))
            ),
            misconceptions=("forgot_bias", "forgot_input_depth", "round_in_pooling"),
            points=2,
        ),
        Exercise(
            id="q5",
            title="the answer's batch total",
            question="The answer to that question lists, per image, the input (50x50x3) and the "
            "outputs of both convolutions, both poolings, the 500-unit layer and the 10-unit "
            "output "
            "(no separate softmax). For a batch of {batch} in fp32, how many bytes do these "
            "tensors "
            "take together?",
            params={"batch": (64, 32, 128, 16)},
            answer=Quantity("MB"),
            solve=_listed_tensors,
            misconceptions=(
                "input_left_out",
                "activations_per_image",
                "round_in_pooling",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q6",
            title="about 6 GB with Adam",
            question="A forum thread trains a fully connected net {width:,} -> 1024 -> 512 -> "
            "{width:,} (with biases) with Adam in fp32 at batch {batch}. Counting weights, "
            "gradients, Adam's two moments, every layer's output with its gradient, and the input "
            "batch, how much memory does a training step need?",
            params={"width": (240_000, 237_000, 100_000, 50_000), "batch": (128, 64, 256)},
            answer=Quantity("GiB"),
            solve=lambda p, how: at(
                how.training_memory(
                    how.network(fc_adam_network(p.width).layers), optimizer="adam"
                ).total,
                B=p.batch,
            ),
            misconceptions=(
                "forgot_gradients",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q7",
            title="the blog's formula, trained",
            question="A blog post estimates {parameters:,} fp32 parameters and a 32 MB input "
            "({inputs:,} fp32 values) as parameters x 4 bytes + input x 4 bytes. Training with "
            "Adam adds the gradients and two moments. Leaving activations aside, how much memory "
            "is "
            "that?",
            params={"parameters": (2_000_000, 5_000_000, 10_000_000, 1_000_000)},
            derive=lambda p: {"inputs": INPUT_ELEMENTS},
            answer=Quantity("MB"),
            solve=lambda p, how: (
                how.training_memory(
                    ModelCounts(
                        parameters=p.parameters,
                        activations=0,
                        input_elements=INPUT_ELEMENTS,
                        batch=1,
                    ),
                    optimizer="adam",
                ).total
            ),
            misconceptions=(
                "forgot_gradients",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "input_left_out",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q8",
            title="the calculator's BERT-base",
            question="An online calculator estimates BERT-base (110,000,000 fp32 parameters, AdamW "
            "with its state in fp32, fp32 gradients) at batch {batch} and sequence length "
            "{sequence}, with activations guessed as batch x sequence x 37,000 fp16 values. Adding "
            "its four terms (weights, optimizer state, gradients, activations), how much is that?",
            params={"batch": (32, 16, 64), "sequence": (128, 256, 512)},
            answer=Quantity("MiB"),
            solve=lambda p, how: _calculator_terms(
                calculator_estimate(
                    parameters=110_000_000,
                    parameter_dtype="fp32",
                    batch=p.batch,
                    sequence_length=p.sequence,
                    optimizer_name="adamw",
                    gradient_dtype="fp32",
                    activation_dtype="fp16",
                    activation_factor=37_000,
                )
            ),
            misconceptions=("mib_vs_mb",),
        ),
        Exercise(
            id="q9",
            title="what the calculator's activations miss",
            question="The same calculator guesses ResNet-50's activations as {factor:,} values per "
            "image. Its first layer alone, a convolution with 64 filters of 7x7, stride 2 and "
            "padding 3 on a {size}x{size}x3 image, outputs how many times as many values per "
            "image?",
            params={"factor": (1_000,), "size": (224, 256, 192, 288, 320)},
            answer=Number(rtol=0.001, what="a ratio"),
            solve=_stem_ratio,
        ),
    ),
)
