"""The worked examples of the source documents, rebuilt with memtheory.

Each function rebuilds one document's example from its inputs and returns a
:class:`WorkedExample` whose figures put the printed numbers beside
memtheory's exact ones, with every difference explained.

========  ==================================================================
number    document
========  ==================================================================
``000``   a StackExchange question on training memory, and its answer
``001``   a StackExchange question on the per-layer memory of a small CNN
``002``   a forum thread on a large fully connected net trained with Adam
``003``   a blog post's "parameters x 4 + input x 4" formula
``004``   an online memory calculator and its two examples
========  ==================================================================

Examples
--------
>>> sorted(WORKED_EXAMPLES)
['000', '001', '002', '003', '004']
>>> worked_example("001").figure("P2 activations per image").printed
'9,216'
"""

from __future__ import annotations

from collections.abc import Callable

from memtheory.errors import UnknownNameError
from memtheory.worked_examples.blog_formula import blog_formula
from memtheory.worked_examples.fc_adam_forum import fc_adam_forum, fc_adam_network
from memtheory.worked_examples.figures import Figure, WorkedExample
from memtheory.worked_examples.memory_calculator import calculator_estimate, memory_calculator
from memtheory.worked_examples.small_cnn import small_cnn, small_cnn_layers, small_cnn_network
from memtheory.worked_examples.training_memory_question import (
    question_counts,
    training_memory_question,
)

__all__ = [
    "WORKED_EXAMPLES",
    "Figure",
    "WorkedExample",
    "blog_formula",
    "calculator_estimate",
    "fc_adam_forum",
    "fc_adam_network",
    "memory_calculator",
    "question_counts",
    "small_cnn",
    "small_cnn_layers",
    "small_cnn_network",
    "training_memory_question",
    "worked_example",
]

WORKED_EXAMPLES: dict[str, Callable[[], WorkedExample]] = {
    "000": training_memory_question,
    "001": small_cnn,
    "002": fc_adam_forum,
    "003": blog_formula,
    "004": memory_calculator,
}
"""Document number -> function rebuilding its worked example."""


def worked_example(document: str) -> WorkedExample:
    """Rebuild the worked example of source document ``document`` (``"000"`` to ``"004"``).

    Examples
    --------
    >>> worked_example("003").figure("total").printed
    '40'
    """
    try:
        build = WORKED_EXAMPLES[document]
    except KeyError:
        raise UnknownNameError(
            f"no worked example for document {document!r}; documents: {', '.join(WORKED_EXAMPLES)}"
        ) from None
    return build()
