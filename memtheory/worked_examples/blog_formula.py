"""Document 003: a blog post's formula, "parameters x 4 bytes + input size x 4 bytes".

Its example: a 2-million-parameter model needs 8 MB for the parameters and
32 MB for the input, 40 MB in all. The post does not say what input is 32 MB;
at 4 bytes an element it is 8 million elements. Its MB are decimal.
"""

from __future__ import annotations

from memtheory.counts import ModelCounts
from memtheory.memory import inference_memory, training_memory
from memtheory.worked_examples.figures import Figure, WorkedExample

__all__ = ["INPUT_ELEMENTS", "PARAMETERS", "blog_formula"]

PARAMETERS = 2_000_000
INPUT_ELEMENTS = 8_000_000  # 32 MB at 4 bytes each: inferred, the post does not say


def blog_formula() -> WorkedExample:
    """Rebuild the blog post's 40 MB and show what the formula leaves out.

    The formula is memtheory's inference breakdown with the activations left
    out; training adds gradients, optimizer state, activations and their gradients.

    Examples
    --------
    >>> blog_formula().figure("total").memtheory_value
    Decimal('40')
    """
    counts = ModelCounts(
        parameters=PARAMETERS, activations=0, input_elements=INPUT_ELEMENTS, batch=1
    )
    blog = inference_memory(counts)
    sgd = training_memory(counts, optimizer="sgd")
    adam = training_memory(counts, optimizer="adam")
    figures = (
        Figure("parameters", blog["parameters"], "MB", "8"),
        Figure("input", blog["input"], "MB", "32"),
        Figure("total", blog.total, "MB", "40"),
        Figure(
            "training with SGD, activations aside",
            sgd.total,
            "MB",
            explanation="Gradients are as large as the weights: +8 MB.",
        ),
        Figure(
            "training with Adam, activations aside",
            adam.total,
            "MB",
            explanation="Adam's two moments add 16 MB more: parameters cost 16 bytes each.",
        ),
    )
    return WorkedExample(
        document="003",
        filename="003_b7de700656502e5e.txt",
        source="a blog post on estimating GPU memory consumption of deep learning models",
        title="Two million parameters and a 32 MB input",
        inputs={
            "parameters": PARAMETERS,
            "input size (inferred)": INPUT_ELEMENTS,
            "precision": "fp32",
        },
        figures=figures,
        summary=(
            "The post's arithmetic is right (8 MB + 32 MB = 40 MB) but its formula is an inference "
            "formula without activations: training at least doubles the parameter term "
            "(gradients), "
            "Adam quadruples it, and every layer's activations, usually the largest term for a "
            "CNN, "
            "are missing, as are their gradients."
        ),
        breakdowns={"blog formula": blog, "breakdown, SGD": sgd, "breakdown, Adam": adam},
    )
