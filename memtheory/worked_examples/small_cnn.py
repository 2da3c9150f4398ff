"""Document 001: a StackExchange question on the per-layer memory of a small CNN.

Input 50x50x3; two 3x3 convolutions (32 and 64 filters, padded), each
followed by 2x2 max pooling with stride 2; a 500-unit fully connected layer;
a 10-way softmax output; batch 64; fp32. The accepted answer counts the
activations per layer, per image and for the batch, in decimal units
(K = 1000, MB = 10^6 bytes); another answer gives the parameter formulas and
the "parameters x 3 x 4 bytes" rule.
"""

from __future__ import annotations

import sympy as sp

from memtheory.layers import Conv2d, Dense, Flatten, Input, Layer, MaxPool2d, Softmax
from memtheory.memory import training_memory
from memtheory.network import Network
from memtheory.worked_examples.figures import Figure, WorkedExample

__all__ = ["BATCH", "LISTED_LAYERS", "small_cnn", "small_cnn_layers", "small_cnn_network"]

BATCH = 64

LISTED_LAYERS = {
    "Input": "input",
    "C1": "conv2d_1",
    "P1": "maxpool2d_1",
    "C2": "conv2d_2",
    "P2": "maxpool2d_2",
    "FC": "dense_1",
    "Output": "dense_2",
}
"""The answer's layer names, mapped to the network's."""


def small_cnn_layers(
    *,
    image_size: int | sp.Expr = 50,
    hidden: int | sp.Expr = 500,
    batch: int | sp.Expr | None = None,
    filters: tuple[int, int] = (32, 64),
    classes: int = 10,
) -> list[Layer]:
    """Return the question's CNN as a list of layers, for callers that rebuild or alter it.

    Takes the keyword arguments of :func:`small_cnn_network`, and the
    filters and classes, for exercises that vary them.

    Parameters
    ----------
    image_size : size, default 50
        Side of the square RGB input.
    hidden : size, default 500
        Units of the dense layer before the 10-way output.
    batch : size, optional
        Defaults to the symbol ``B``.
    filters : (int, int), default (32, 64)
        Filters of the two convolutions; the question's are 32 and 64.
    classes : int, default 10
        Units of the output layer.

    Examples
    --------
    >>> [layer.kind for layer in small_cnn_layers()][:3]
    ['Input', 'Conv2d', 'MaxPool2d']
    >>> small_cnn_layers(image_size=32, hidden=100)[-3].units
    100
    >>> small_cnn_layers(filters=(16, 8), classes=100)[3].out_channels
    8
    """
    first, second = filters
    shape = (3, image_size, image_size)
    image = Input(shape) if batch is None else Input(shape, batch=batch)
    return [
        image,
        Conv2d(first, 3, padding=1),
        MaxPool2d(2, stride=2),
        Conv2d(second, 3, padding=1),
        MaxPool2d(2, stride=2),
        Flatten(),
        Dense(hidden),
        Dense(classes),
        Softmax(),
    ]


def small_cnn_network(
    *,
    image_size: int | sp.Expr = 50,
    hidden: int | sp.Expr = 500,
    batch: int | sp.Expr | None = None,
) -> Network:
    """Build the question's CNN; the batch stays the symbol ``B`` unless given.

    Takes the same keyword arguments as :func:`small_cnn_layers`.

    Parameters
    ----------
    image_size : size, default 50
        Side of the square RGB input; the question's is 50, and a symbol such as
        ``H`` gives the network for every image size.
    hidden : size, default 500
        Units of the dense layer before the 10-way output; the question's is 500.
    batch : size, optional
        Defaults to the symbol ``B``.

    Examples
    --------
    >>> small_cnn_network().parameter_count
    4632902
    >>> from memtheory.symbols import H
    >>> small_cnn_network(image_size=H).parameter_count
    32000*floor(H/4)**2 + 24902
    """
    layers = small_cnn_layers(image_size=image_size, hidden=hidden, batch=batch)
    return Network(layers, name="StackExchange CNN")


def _outputs(net: Network, **values: object) -> dict[str, sp.Expr]:
    rows = {row.name: row for row in net.summary(**values).rows}
    return {label: sp.Mul(*rows[name].output_shape) for label, name in LISTED_LAYERS.items()}


def small_cnn() -> WorkedExample:
    """Rebuild the small CNN question's per-layer activations, totals and parameter counts.

    Examples
    --------
    >>> example = small_cnn()
    >>> example.figure("P2 activations per image").memtheory_value
    Decimal('9216')
    """
    net = small_cnn_network()
    one = _outputs(net, B=1)
    batch = _outputs(net, B=BATCH)
    per_image = [
        Figure(f"{label} activations per image", one[label], "elements", printed)
        for label, printed in zip(
            LISTED_LAYERS,
            ("7,500", "80,000", "20,000", "40,000", "9,216", "500", "10"),
            strict=True,
        )
    ]
    per_batch = [
        Figure(f"{label} activations, batch {BATCH}", batch[label], "elements", printed)
        for label, printed in zip(
            LISTED_LAYERS,
            ("480,000", "5,120,000", "1,280,000", "2,560,000", "589,824", "32,000", "640"),
            strict=True,
        )
    ]
    listed_sum = sum(one[label] for label in ("Input", "C1", "P1", "C2", "P2", "FC"))
    pooled = one["P2"]
    per_image[4] = Figure(
        "P2 activations per image",
        pooled,
        "elements",
        "9,216",
        explanation="25 -> 12: the 2x2 window with stride 2 fits floor((25 - 2)/2) + 1 = 12 times; "
        "the last row and column of the 25x25 map are never pooled. Ceil mode would give 13.",
    )
    totals = [
        Figure(
            "per-image total",
            listed_sum,
            "K elements",
            "157.2",
            explanation="The answer's written sum lists 7.5K + 80K + 20K + 40K + 0.5K (148K) but "
            "its total, 157.2K, does include P2's 9.2K; the output's 10 values are left out as "
            "'next to nothing' (with them: 157,226).",
        ),
        Figure(
            "per-image total in bytes",
            listed_sum * 4,
            "kB",
            "628.8",
            written_unit="KB",
            document_arithmetic=sp.Rational("157.2") * 4,
            explanation="The answer multiplies the rounded 157.2K by 4 bytes; exactly, 157,216 "
            "values are 628,864 bytes = 628.9 kB (614.13 KiB).",
        ),
        Figure(
            f"batch {BATCH} total in bytes",
            sum(batch.values()) * 4,
            "MB",
            "40",
            explanation="All seven listed tensors for 64 images are 10,062,464 values, 40,249,856 "
            "bytes: 40.25 MB, or 38.39 MiB. The answer's '~40MB' is decimal.",
        ),
    ]
    rows = {row.name: row for row in net.rows}
    parameter_figures = [
        Figure(f"{label} parameters", rows[name].parameters, "elements", explanation=formula)
        for label, name, formula in (
            (
                "C1",
                "conv2d_1",
                "32 filters x 3x3 x 3 input channels + 32 biases = 896 (not 32x3x3 = 288:"
                " each filter spans the input's full depth, and has a bias).",
            ),
            ("C2", "conv2d_2", "64 x 3x3 x 32 + 64 = 18,496."),
            ("FC", "dense_1", "9,216 inputs x 500 + 500 = 4,608,500: the flattened 12x12x64 map."),
            ("Output", "dense_2", "500 x 10 + 10 = 5,010."),
        )
    ]
    parameters = net.parameter_count
    rule = training_memory(net, convention="rule_of_thumb")
    parameter_figures += [
        Figure(
            "total parameters",
            parameters,
            "elements",
            explanation="Pooling and softmax have none; the first dense layer holds 99.5%.",
        ),
        Figure(
            "parameters x 3 x 4 bytes",
            rule["parameters"] + rule["gradients"] + rule["optimizer_state"],
            "MB",
            explanation="The third answer's rough rule: 55.59 MB (53.02 MiB). It leaves out the "
            "activations, which at batch 64 add 2 x 40.25 MB.",
        ),
    ]
    return WorkedExample(
        document="001",
        filename="001_6d4ccb306ff647fb.txt",
        source="a StackExchange question on per-layer CNN memory, with its answers",
        title="A small CNN on 50x50x3 images at batch 64",
        inputs={
            "input": "50x50x3",
            "layers": "C1 32 3x3 padded, P1 2x2/2, C2 64 3x3 padded, P2 2x2/2, FC 500, softmax 10",
            "batch": BATCH,
            "precision": "fp32",
        },
        figures=(*per_image, *per_batch, *totals, *parameter_figures),
        summary=(
            "Every listed activation count is reproduced exactly, including the floor in 25 -> 12. "
            "The answer's per-image and batch totals hold up to rounding; its sum leaves the "
            "output "
            "out and writes one term fewer than it adds."
        ),
        breakdowns={
            "rule of thumb, batch 64": rule.evaluate(B=BATCH),
            "breakdown, SGD with momentum, batch 64": training_memory(
                net, optimizer="sgd+momentum"
            ).evaluate(B=BATCH),
            "breakdown, Adam, batch 64": training_memory(net, optimizer="adam").evaluate(B=BATCH),
        },
        network=net,
    )
