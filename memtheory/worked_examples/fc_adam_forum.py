"""Document 002: a forum thread on a 240k -> 1024 -> 512 -> 240k fully connected net with Adam.

Batch 128, fp32 (MXNet 0.11). The asker observes about 6 GB in use and
estimates first 1.5 GB, then 4.5 GB. "240k" is read as 240,000; the first
post's arithmetic uses 237k (the real vocabulary size, presumably), and its
"G" there is GiB, while the later figures are decimal.
"""

from __future__ import annotations

import sympy as sp

from memtheory.layers import Dense, Input
from memtheory.memory import training_memory
from memtheory.network import Network
from memtheory.worked_examples.figures import Figure, WorkedExample

__all__ = ["BATCH", "WIDTH", "fc_adam_forum", "fc_adam_network"]

WIDTH = 240_000
FIRST_POST_WIDTH = 237_000
BATCH = 128


def fc_adam_network(width: int = WIDTH, batch: int | sp.Expr | None = None) -> Network:
    """Build the thread's network: ``width`` -> 1024 -> 512 -> ``width``, fully connected.

    Examples
    --------
    >>> fc_adam_network().parameter_count
    369405824
    """
    image = Input((width,)) if batch is None else Input((width,), batch=batch)
    return Network([image, Dense(1024), Dense(512), Dense(width)], name="forum FC net")


def fc_adam_forum() -> WorkedExample:
    """Rebuild the forum thread's figures and explain the observed ~6 GB.

    Examples
    --------
    >>> example = fc_adam_forum()
    >>> example.figure("observed memory").memtheory_value
    Decimal('6')
    """
    net = fc_adam_network()
    first_post = fc_adam_network(FIRST_POST_WIDTH)
    adam = training_memory(net, optimizer="adam").evaluate(B=BATCH)
    first, last = net["dense_1"], net["dense_3"]
    first_237, last_237 = first_post["dense_1"], first_post["dense_3"]
    weights_plus_moments = adam["parameters"] + adam["optimizer_state"]
    data = net.summary(B=BATCH)
    data_elements = data.input_elements + sp.Mul(*data.rows[-1].output_shape)
    figures = (
        Figure(
            "first post: input layer weights",
            first.weights * 4,
            "GiB",
            "0.9",
            written_unit="G",
            document_arithmetic=sp.Integer(first_237.weights * 4) / 2**30,
            explanation="1024 x 237k x 4 bytes is 0.90 GiB; with 240k it is 0.92 GiB (0.98 GB).",
        ),
        Figure(
            "first post: output layer weights",
            last.weights * 4,
            "GiB",
            "0.45",
            written_unit="G",
            document_arithmetic=sp.Integer(last_237.weights * 4) / 2**30,
            explanation="The post used 237k inputs: 512 x 237,000 x 4 bytes = 0.45 GiB. With the "
            "stated 240k it is 0.46 GiB; the bias (240,000 values) is left out either way.",
        ),
        Figure("reply: input layer weights", first.weights * 4, "GB", "1", written_unit="G"),
        Figure("reply: output layer weights", last.weights * 4, "GB", "0.5", written_unit="G"),
        Figure(
            "reply: Adam triples the weights",
            weights_plus_moments,
            "GB",
            "4.5",
            written_unit="G",
            document_arithmetic=(sp.Integer(1) + sp.Rational(1, 2)) * 3,
            explanation="(1 + 0.5) x 3 rounds each layer up before tripling, and x 3 is the "
            "weights "
            "and Adam's two moments only. Exactly, weights and moments are 4.43 GB; the gradients "
            "make it x 4: 5.91 GB.",
        ),
        Figure("reply: input and output data", data_elements * 4, "GB", "0.25", written_unit="G"),
        Figure(
            "observed memory",
            adam.total,
            "GiB",
            "6",
            written_unit="G",
            explanation="Weights, gradients and Adam's two moments (16 bytes per parameter) are "
            "5.91 GB; forward activations, their gradients and the input add 0.37 GB: 6.28 GB, "
            "i.e. 5.85 GiB. That is the size of the 'about 6G' the asker saw, not a prediction "
            "of it: the observation was MXNet 0.11 on a GPU, with the CUDA context, workspaces "
            "and the allocator's caching on top, and the estimate leaves out the batch's "
            "240k-wide targets (0.12 GB).",
        ),
    )
    return WorkedExample(
        document="002",
        filename="002_ba89e9fe3133ba81.txt",
        source="a forum thread on GPU memory of a large fully connected network trained with Adam",
        title="A 240k -> 1024 -> 512 -> 240k network with Adam at batch 128",
        inputs={
            "layers": "240k -> 1024 -> 512 -> 240k",
            "optimizer": "Adam",
            "batch": BATCH,
            "precision": "fp32",
        },
        figures=figures,
        summary=(
            "The two 240k-wide weight matrices hold 99.9% of the 369 million parameters. Adam "
            "needs 16 bytes per parameter (weight, gradient, two moments), 5.91 GB, and the "
            "activations of the batch add little: the parameters, four times, account for the "
            "size of the observed ~6 GB, which also held what a GPU framework adds."
        ),
        breakdowns={
            "breakdown, Adam, batch 128": adam,
            "breakdown, SGD, batch 128": training_memory(net, optimizer="sgd").evaluate(B=BATCH),
        },
        network=net,
    )
