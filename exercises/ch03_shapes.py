"""Chapter 3, shapes and activations.

Output sizes with the floor, stride, padding and dilation (25 -> 12); activations per image.
"""

from memtheory import Conv2d, Input, MaxPool2d
from memtheory.exercises import Exercise, ExerciseSet, Expression, Integer, at
from memtheory.symbols import H
from memtheory.worked_examples import small_cnn_layers


def _height(how, layers):
    return how.network(layers).output_shape[2]


def _conv_batch_outputs(p, how):
    net = how.network([Input((p.channels, p.size, p.size)), Conv2d(p.filters, 3, padding=1)])
    return at(how.activation_count(net), B=p.batch)


SET = ExerciseSet(
    id="ch03",
    title="Shapes and activations",
    intro="A window of k taps with dilation d, stride s and padding p fits "
    "floor((n + 2p - d(k-1) - 1)/s) + 1 times along a dimension of n: a window that does not fit "
    "is dropped. Activations are the values the layers output and keep.",
    exercises=(
        Exercise(
            id="q1",
            title="pooling an odd size",
            question="A 2x2 max pooling with stride 2 (no padding, PyTorch's default floor mode) "
            "is "
            "applied to a {size}x{size} feature map. What is the height of its output?",
            params={"size": (25, 27, 31, 45, 13, 57)},
            answer=Integer(),
            solve=lambda p, how: _height(how, [Input((8, p.size, p.size)), MaxPool2d(2, stride=2)]),
            misconceptions=("round_in_pooling",),
        ),
        Exercise(
            id="q2",
            title="overlapping pooling",
            question="A 3x3 max pooling with stride 2 (no padding, floor mode), as in AlexNet, is "
            "applied to a {size}x{size} feature map. What is the height of its output?",
            params={"size": (28, 56, 14, 112, 30, 60)},
            answer=Integer(),
            solve=lambda p, how: _height(how, [Input((8, p.size, p.size)), MaxPool2d(3, stride=2)]),
            misconceptions=("round_in_pooling",),
        ),
        Exercise(
            id="q3",
            title="strided convolution",
            question="A convolution with {kernel}x{kernel} kernels, stride {stride} and padding "
            "{padding} on each side is applied to a {size}x{size} image. What is the height of its "
            "output?",
            params={
                "size": (224, 227, 32, 64, 100),
                "kernel": (7, 11, 3, 5),
                "stride": (2, 4, 1, 3),
                "padding": (3, 0, 1, 2),
            },
            constraint=lambda p: p.size + 2 * p.padding >= p.kernel,
            answer=Integer(),
            solve=lambda p, how: _height(
                how,
                [
                    Input((3, p.size, p.size)),
                    Conv2d(16, p.kernel, stride=p.stride, padding=p.padding),
                ],
            ),
            misconceptions=("output_size_off_by_one", "floor_ceil_swapped"),
        ),
        Exercise(
            id="q4",
            title="dilated convolution",
            question="A 3x3 convolution with dilation {dilation}, stride 1 and padding {padding} "
            "is "
            "applied to a {size}x{size} feature map. What is the height of its output?",
            params={"size": (32, 64, 28, 50), "dilation": (2, 3, 4), "padding": (0, 1, 2)},
            answer=Integer(),
            solve=lambda p, how: _height(
                how,
                [
                    Input((16, p.size, p.size)),
                    Conv2d(16, 3, padding=p.padding, dilation=p.dilation),
                ],
            ),
            misconceptions=("output_size_off_by_one",),  # stride 1: no rounding to get wrong
        ),
        Exercise(
            id="q5",
            title="output size as a formula",
            question="A convolution with {kernel}x{kernel} kernels, stride {stride} and padding "
            "{padding} is applied to an H x H image. Write the height of its output as a formula "
            "in H.",
            params={"kernel": (3, 5, 7), "stride": (2, 1, 3), "padding": (1, 0, 2, 3)},
            answer=Expression((H,)),
            solve=lambda p, how: _height(
                how,
                [
                    Input((3, H, H)),
                    Conv2d(8, p.kernel, stride=p.stride, padding=p.padding),
                ],
            ),
        ),
        Exercise(
            id="q6",
            title="repeated pooling as a formula",
            question="An H x H feature map goes through {pools} max poolings of 2x2 with stride 2, "
            "one after the other (floor mode). Write the height of the result as a formula in H.",
            params={"pools": (2, 3, 4, 5)},
            answer=Expression((H,)),
            solve=lambda p, how: _height(
                how, [Input((8, H, H)), *[MaxPool2d(2) for _ in range(p.pools)]]
            ),
            misconceptions=("round_in_pooling",),
        ),
        Exercise(
            id="q7",
            title="activations per image",
            question="A CNN takes {image}x{image}x3 images through a 3x3 convolution with "
            "{filters1} filters and padding 1, 2x2 max pooling with stride 2, a 3x3 convolution "
            "with "
            "{filters2} filters and padding 1, 2x2 max pooling with stride 2, a dense layer of "
            "{hidden} units, a dense layer of 10 units and a softmax. Counting the output of every "
            "layer once (both convolutions, both poolings, both dense layers and the softmax; "
            "flattening is a view and adds nothing) and not the input, how many activation values "
            "does it keep per image?",
            params={
                "image": (50, 54, 46, 42, 58),
                "filters1": (32, 16, 24),
                "filters2": (64, 32, 48),
                "hidden": (500, 256, 128),
            },
            answer=Integer(),
            solve=lambda p, how: at(
                how.activation_count(
                    how.network(
                        small_cnn_layers(
                            image_size=p.image, filters=(p.filters1, p.filters2), hidden=p.hidden
                        )
                    )
                ),
                B=1,
            ),
            misconceptions=("input_as_activations", "round_in_pooling"),
            points=2,
        ),
        Exercise(
            id="q8",
            title="one layer's output for a batch",
            question="A 3x3 convolution with {filters} filters and padding 1 is applied to a batch "
            "of "
            "{batch} images of {channels}x{size}x{size}. How many values does its output hold, for "
            "the whole batch?",
            params={
                "filters": (32, 64, 16),
                "batch": (64, 32, 128, 16),
                "channels": (3, 1),
                "size": (50, 32, 64, 28),
            },
            answer=Integer(),
            solve=_conv_batch_outputs,
            misconceptions=("activations_per_image", "input_as_activations"),
        ),
        Exercise(
            id="q9",
            title="ceil mode",
            question="A 2x2 max pooling with stride 2 and ceil_mode=True (a partial window at the "
            "edge counts) is applied to a {size}x{size} feature map. What is the height of its "
            "output?",
            params={"size": (25, 27, 13, 51, 7)},
            answer=Integer(),
            solve=lambda p, how: _height(
                how,
                [
                    Input((8, p.size, p.size)),
                    MaxPool2d(2, stride=2, ceil_mode=True),
                ],
            ),
            misconceptions=("floor_ceil_swapped", "output_size_off_by_one"),
        ),
    ),
)
