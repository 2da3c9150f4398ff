r"""The book's own teaching step: a plain fp32 loop, every tensor counted.

The book's early chapters count the step a textbook draws: fp32 weights, eager
attention (its :math:`S \times S` scores kept), the optimizer step's
for-loop implementation on the CPU, the logits held through the backward
pass. No library runs exactly this step by default, so it is not a recipe
(:data:`memtheory.recipes.RECIPES`); it is the baseline the book names its
changes against (``TEXTBOOK.changed(optimizer="sgd")``), defined once here so
that every chapter states the same one.

Examples
--------
>>> TEXTBOOK.precision, TEXTBOOK.attention, TEXTBOOK.implementation
('fp32', 'eager', 'for-loop')
>>> TEXTBOOK.changed(optimizer="sgd").label
'textbook (optimizer=sgd)'
"""

from __future__ import annotations

from memtheory.recipes.setup import Setup

__all__ = ["TEXTBOOK"]

TEXTBOOK = Setup(
    precision="fp32", optimizer="adam", attention="eager", device="cpu", name="textbook",
    source="the book's plain PyTorch training loop in fp32, every tensor counted by hand",
)
"""The textbook step: fp32, Adam, eager attention, CPU kernels, logits kept."""
