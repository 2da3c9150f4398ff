"""Document 000: a StackExchange question on training memory, and an answer applying CS231n's rule.

The asker has 532,752 activations and 19,072,984 parameters, a 180x50x1
input and a batch of 128, all fp32. Both the question and the answer divide
by :math:`1024^2` and write "MB": their numbers are MiB.
"""

from __future__ import annotations

import sympy as sp

from memtheory.counts import ModelCounts
from memtheory.layers import Input
from memtheory.layers.base import elements
from memtheory.memory import training_memory
from memtheory.worked_examples.figures import Figure, WorkedExample

__all__ = [
    "ACTIVATIONS_PER_IMAGE",
    "BATCH",
    "PARAMETERS",
    "question_counts",
    "training_memory_question",
]

PARAMETERS = 19_072_984
ACTIVATIONS_PER_IMAGE = 532_752
BATCH = 128
IMAGE = Input((1, 50, 180), batch=1)  # width 180, height 50, depth 1, channels first


def _r(text: str) -> sp.Rational:
    return sp.Rational(text)


def question_counts() -> ModelCounts:
    """Return the question's model as per-sample counts, times the symbolic batch ``B``.

    Examples
    --------
    >>> question_counts().input_elements
    9000*B
    """
    image_elements = elements(IMAGE.output_shape(()))
    return ModelCounts.per_sample(
        parameters=PARAMETERS, activations=ACTIVATIONS_PER_IMAGE, input_elements=image_elements
    )


def training_memory_question() -> WorkedExample:
    """Rebuild the training-memory question's numbers with the rule-of-thumb convention.

    Examples
    --------
    >>> example = training_memory_question()
    >>> example.figure("answer: total").printed, example.figure("answer: total").memtheory_value
    ('742.34', Decimal('742.93'))
    """
    image_elements = elements(IMAGE.output_shape(()))
    counts = question_counts()
    rule = training_memory(counts, convention="rule_of_thumb")
    one_image = rule.evaluate(B=1)
    batch = rule.evaluate(B=BATCH)
    parameter_side = batch["parameters"] + batch["gradients"] + batch["optimizer_state"]
    mib = "MiB"
    figures = (
        Figure("input elements per image", image_elements, "elements", "9,000"),
        Figure(
            "question: activations",
            one_image["activations"],
            mib,
            "2.03",
            written_unit="MB",
            explanation="Forward activations of a single image: the question never multiplies them "
            "by the batch of 128, which is its largest omission.",
        ),
        Figure("question: parameters x 3", parameter_side, mib, "218.27", written_unit="MB"),
        Figure(
            "question: miscellaneous (input batch)", batch["input"], mib, "4.39", written_unit="MB"
        ),
        Figure(
            "question: total",
            one_image["activations"] + parameter_side + batch["input"],
            mib,
            "224,69",
            written_unit="MB",
            decimal_comma=True,
            document_arithmetic=_r("2.03") + _r("218.27") + _r("4.39"),
            explanation="The question (writing a decimal comma) adds its three already-rounded "
            "parts (2.03 + 218.27 + 4.39); "
            "the exact sum of its own terms is 235,614,816 bytes = 224.70 MiB. Either way it "
            "leaves out the activations of 127 images and every activation gradient.",
        ),
        Figure(
            "question: per-image gradients",
            batch["activation_gradients"],
            mib,
            "260.13",
            written_unit="MB",
            explanation="The size is right for the wrong reason: parameter gradients are summed "
            "over the batch, never kept per image, but the batch's activations do each get a "
            "gradient of the same size, and that is exactly 532,752 x 128 values.",
        ),
        Figure(
            "answer: activations x 2 per image",
            one_image["activations"] + one_image["activation_gradients"],
            mib,
            "4.06",
            written_unit="MB",
        ),
        Figure(
            "answer: total",
            batch.total,
            mib,
            "742.34",
            written_unit="MB",
            document_arithmetic=_r("4.06") * BATCH + _r("218.27") + _r("4.39"),
            explanation="The answer rounds the per-image activations to 4.06 MiB before "
            "multiplying "
            "by 128; the exact 4.0646 MiB x 128 is 520.27 MiB, not 519.68, so the total is "
            "779,021,856 bytes = 742.93 MiB (779.02 MB), 0.59 MiB more than printed.",
        ),
    )
    return WorkedExample(
        document="000",
        filename="000_4a31cdadab1a729f.txt",
        source="a StackExchange question on training memory, with an answer applying CS231n's rule",
        title="532,752 activations and 19 million parameters at batch 128",
        inputs={
            "parameters": PARAMETERS,
            "activations per image": ACTIVATIONS_PER_IMAGE,
            "input": "180x50x1 (width x height x depth)",
            "batch": BATCH,
            "precision": "fp32",
        },
        figures=figures,
        summary=(
            "The rule of thumb counts the parameters three times (weights, gradients, one "
            "optimizer copy) and the activations twice (values and gradients) for every image in "
            "the batch. The question forgets the batch for activations; the answer applies the "
            "rule but rounds before multiplying, and labels MiB as MB."
        ),
        breakdowns={
            "rule of thumb, batch 128": batch,
            "breakdown, SGD with momentum, batch 128": training_memory(
                counts, optimizer="sgd+momentum"
            ).evaluate(B=BATCH),
            "breakdown, Adam, batch 128": training_memory(counts, optimizer="adam").evaluate(
                B=BATCH
            ),
        },
    )
