"""Chapter 2, counting parameters.

Dense and convolutional layers (input depth, bias, groups); pooling has no parameters.
"""

from memtheory import BatchNorm2d, Conv2d, Dense, Flatten, Input, MaxPool2d, ReLU
from memtheory.exercises import Choice, Exercise, ExerciseSet, Expression, Integer, Number
from memtheory.exercises.derivation import quantity_text, shown
from memtheory.symbols import C
from memtheory.worked_examples import small_cnn_layers


def _dense(p, how):
    net = how.network([Input((p.inputs,), batch=p.batch), Dense(p.units)])
    return how.parameter_count(net)


def _conv(p, how):
    net = how.network([Input((p.channels, 50, 50), batch=p.batch), Conv2d(p.filters, p.kernel)])
    return how.parameter_count(net)


def lenet_layers(image, classes, c1=6, c2=16):
    """Build a LeNet-5-like network: two pooled 5x5 convolutions, then 120, 84, classes."""
    return [
        Input((1, image, image)),
        Conv2d(c1, 5),
        ReLU(),
        MaxPool2d(2),
        Conv2d(c2, 5),
        ReLU(),
        MaxPool2d(2),
        Flatten(),
        Dense(120),
        ReLU(),
        Dense(84),
        ReLU(),
        Dense(classes),
    ]


def _grouped(p, how):
    net = how.network(
        [Input((p.channels, 28, 28)), Conv2d(p.channels * p.multiplier, 3, groups=p.groups)]
    )
    return how.parameter_count(net)


_LAYER_OPTIONS = ("Conv2d(32, 3x3)", "Dense(10)", "MaxPool2d(2x2)", "BatchNorm2d")


def _no_parameters(p, how):
    shape_in = Input((3, 32, 32))
    layers = {
        "Conv2d(32, 3x3)": [shape_in, Conv2d(32, 3)],
        "Dense(10)": [shape_in, Flatten(), Dense(10)],
        "MaxPool2d(2x2)": [shape_in, MaxPool2d(2)],
        "BatchNorm2d": [shape_in, BatchNorm2d()],
    }
    counts = {name: how.parameter_count(how.network(stack)) for name, stack in layers.items()}
    return next(name for name in _LAYER_OPTIONS if counts[name] == 0)


def _first_dense_share(p, how):
    net = how.network(small_cnn_layers(hidden=p.hidden))
    first, total = net["dense_1"].parameters, how.parameter_count(net)
    return shown(
        f"dense_1's share: 100 x {quantity_text(first)} / {quantity_text(total)}, in percent",
        100 * first / total,
    )


SET = ExerciseSet(
    id="ch02",
    title="Counting parameters",
    intro="A dense layer has inputs x outputs weights plus one bias per output; a convolution has "
    "out_channels x (in_channels / groups) x kh x kw weights plus one bias per filter; pooling has "
    "no parameters.",
    exercises=(
        Exercise(
            id="q1",
            title="dense layer",
            question="A dense (fully connected) layer with a bias maps {inputs:,} input features "
            "to "
            "{units} outputs. The network is trained at batch {batch}. How many trainable "
            "parameters "
            "does the layer have?",
            params={
                "inputs": (784, 9_216, 512, 300, 4_096, 1_024),
                "units": (100, 500, 128, 10, 256, 64),
                "batch": (64, 32, 128),
            },
            answer=Integer(),
            solve=_dense,
            misconceptions=("forgot_bias", "parameters_times_batch"),
        ),
        Exercise(
            id="q2",
            title="convolution",
            question="A convolution with {filters} filters of {kernel}x{kernel}, with a bias, is "
            "applied to an input of depth {channels} and 50x50 pixels, at batch {batch}. How "
            "many trainable parameters does it have?",
            params={
                "filters": (32, 64, 16, 128, 96),
                "kernel": (3, 5, 7, 1),
                "channels": (3, 32, 64, 1, 16),
                "batch": (64, 32),
            },
            answer=Integer(),
            solve=_conv,
            misconceptions=("forgot_bias", "forgot_input_depth", "parameters_times_batch"),
        ),
        Exercise(
            id="q3",
            title="a LeNet-like network",
            question="A network takes {image}x{image} grayscale images through: a convolution with "
            "{c1} filters of 5x5, ReLU, 2x2 max pooling; a convolution with {c2} filters of 5x5, "
            "ReLU, 2x2 max pooling; then dense layers of 120, 84 and {classes} units. Every "
            "convolution and dense layer has a bias; nothing is padded. How many trainable "
            "parameters does it have?",
            params={
                "image": (32, 36, 28),
                "c1": (6, 8, 4),
                "c2": (16, 32, 12),
                "classes": (10, 26, 100),
            },
            answer=Integer(),
            solve=lambda p, how: how.parameter_count(
                how.network(lenet_layers(p.image, p.classes, p.c1, p.c2))
            ),
            misconceptions=("forgot_bias", "forgot_input_depth"),
            points=2,
        ),
        Exercise(
            id="q4",
            title="grouped convolution",
            question="A 3x3 convolution with a bias and groups={groups} takes {channels} input "
            "channels to {outputs} output channels. How many trainable parameters does it have?",
            params={
                "channels": (32, 64, 128, 48),
                "multiplier": (1, 2),
                "groups": (32, 2, 4, 8, 16),
            },
            constraint=lambda p: p.channels % p.groups == 0,
            derive=lambda p: {"outputs": p.channels * p.multiplier},
            answer=Integer(),
            solve=_grouped,
            misconceptions=("ignored_groups", "forgot_bias"),
        ),
        Exercise(
            id="q5",
            title="batch normalisation",
            question="A BatchNorm2d layer (affine, with running statistics) follows a convolution "
            "with {channels} output channels. How many trainable parameters does it have? (The "
            "running mean and variance are buffers, not parameters.)",
            params={"channels": (64, 128, 256, 32, 512)},
            answer=Integer(),
            solve=lambda p, how: how.parameter_count(
                how.network([Input((p.channels, 8, 8)), BatchNorm2d()])
            ),
        ),
        Exercise(
            id="q6",
            title="the layer without parameters",
            question="Each of these layers is applied to a 3x32x32 input. Which one has no "
            "trainable "
            "parameters?",
            answer=Choice(_LAYER_OPTIONS),
            solve=_no_parameters,
        ),
        Exercise(
            id="q7",
            title="convolution parameters as a formula",
            question="A convolution with {filters} filters of {kernel}x{kernel} and a bias is "
            "applied "
            "to an input with C channels. Write its number of trainable parameters as a formula in "
            "C.",
            params={"filters": (32, 64, 16, 128), "kernel": (3, 5, 7)},
            answer=Expression((C,)),
            solve=lambda p, how: how.parameter_count(
                how.network([Input((C, 32, 32)), Conv2d(p.filters, p.kernel)])
            ),
            misconceptions=("forgot_bias", "forgot_input_depth"),
        ),
        Exercise(
            id="q8",
            title="a multilayer perceptron",
            question="A multilayer perceptron maps 784 inputs through dense layers of {hidden1} "
            "and "
            "{hidden2} units (each followed by ReLU) to {classes} outputs; every dense layer has a "
            "bias. How many trainable parameters does it have?",
            params={
                "hidden1": (256, 512, 300, 128),
                "hidden2": (128, 100, 64, 256),
                "classes": (10, 26, 100),
            },
            answer=Integer(),
            solve=lambda p, how: how.parameter_count(
                how.network(
                    [
                        Input((784,)),
                        Dense(p.hidden1),
                        ReLU(),
                        Dense(p.hidden2),
                        ReLU(),
                        Dense(p.classes),
                    ]
                )
            ),
            misconceptions=("forgot_bias",),
        ),
        Exercise(
            id="q9",
            title="where the parameters are",
            question="The small CNN of a StackExchange question takes 50x50x3 images through two "
            "3x3 padded convolutions (32 and 64 filters), each followed by 2x2 max pooling with "
            "stride 2, then a dense layer of {hidden} units and a 10-way dense output with "
            "softmax. "
            "What percentage of its parameters sit in the {hidden}-unit dense layer?",
            params={"hidden": (500, 256, 1_000, 128)},
            answer=Number(rtol=0.0002, percent=True),
            solve=_first_dense_share,
        ),
    ),
)
