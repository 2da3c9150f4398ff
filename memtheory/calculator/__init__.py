r"""The book's live calculator: memtheory's formulas compiled to exact JavaScript at build time.

The calculator page of the book runs in a browser with no Python behind it.
So that it can never disagree with the library, nothing on it is a formula
typed in JavaScript: :func:`bundle` derives the step of every model, recipe,
attention kernel and optimizer the page offers through the same code path as
:func:`memtheory.estimate.estimate` (:func:`~memtheory.estimate.resolve.resolve_model`
with the recipe's attention, then :func:`~memtheory.estimate.step.step_memory`
with the recipe's precision for the checkpoint's dtype and its exact
convention, :meth:`Setup.convention() <memtheory.recipes.Setup.convention>`),
and compiles each component, the total and the peak to JavaScript with
:class:`ExactJavaScriptPrinter`, a subclass of sympy's JavaScript code printer.
The page therefore shows ``memtheory estimate``'s numbers for a single GPU.

Recipes
    A :class:`~memtheory.recipes.Setup` holds every assumption of the step:
    the precision (or the checkpoint's dtype), the optimizer implementation,
    the attention kernel, whether the loop keeps the logits, the reserve. The
    page offers :data:`RECIPES` and prints the recipe's assumptions
    (:meth:`Setup.describe <memtheory.recipes.Setup.describe>`) under the result.
    The breakdown convention (chapter 4's estimate, not a bound) is there as a labelled
    teaching comparison (:data:`CONVENTIONS`).
Exact arithmetic
    The printer does not emit JavaScript numbers (doubles, exact only up to
    :math:`2^{53}`, which a Llama-size step times a large batch passes). Every
    constant becomes a rational of two ``BigInt``\ s and every operation a call
    into a twenty-line runtime (:data:`RUNTIME`): ``A`` adds, ``M`` multiplies,
    ``P`` raises to a whole power, ``F`` and ``C`` are ``floor`` and
    ``ceiling``, ``X`` is ``Max``. A value is exact at any size.
The peak
    The exact step's peak is the largest moment of its timeline: a ``Max`` of
    one candidate per moment, which :mod:`memtheory.max_pruning` has already
    pruned to the candidates that can be the largest (:func:`peak_candidates`).
    The bundle ships those candidates, each with the label of the moment it
    belongs to, so the page shows where the peak happens.
The largest batch
    Every candidate is a polynomial in the batch ``B`` whose coefficients are
    sums of positive terms (checked here as the bundle is built: a model for
    which this fails is refused), so the peak never decreases as ``B`` grows.
    :data:`SEARCH` doubles ``B`` until the peak passes the card's usable
    memory (the card less the recipe's reserve, as
    :func:`memtheory.gpus.usable_memory` computes it), then bisects: the
    largest batch is exact in about :math:`2\log_2 B` evaluations.
Sizes PyTorch refuses
    Besides the sizes every layer needs (:meth:`Network.size_checks
    <memtheory.network.Network.size_checks>`), a ``BatchNorm2d`` in training
    needs more than one value per channel (``batch x height x width > 1``):
    ResNet-50 at batch 1 and an image side of 32 or less ends at a 1 x 1 map,
    which PyTorch refuses. The bundle carries those counts
    (:func:`batchnorm_counts`) and the page refuses such a step.

Where things are
    ============  ==============================================================
    module        what it holds
    ============  ==============================================================
    js_printer    :class:`ExactJavaScriptPrinter`, :func:`exact_js`, :data:`RUNTIME`
    choices       what the page offers (:data:`CALCULATOR_MODELS`, :data:`RECIPES`,
                  ...) and :func:`setup`, :func:`choice_key`
    choice_steps  :func:`step`, :func:`footprint`, :func:`assumptions` of one choice
    peaks         :func:`peak_candidates`: the peak, one flat candidate per moment
    size_limits   :func:`batchnorm_counts` and the smallest size a model takes
    bundle        :func:`bundle` (everything compiled) and :func:`source_examples`
    page_script   :func:`bundle_script` and the page's search, :data:`SEARCH`
    ============  ==============================================================

Examples
--------
>>> from memtheory.symbols import B, H
>>> import sympy as sp
>>> exact_js(3 * B * sp.floor(H / 2) ** 2 + 7)
'A(7n,M(3n,B,P(F(M(Q(1n,2n),H)),2)))'
>>> CALCULATOR_MODELS["gpt2"].title
'GPT-2 small'
"""

from memtheory.calculator.bundle import bundle, source_examples
from memtheory.calculator.choice_steps import assumptions, footprint, step
from memtheory.calculator.choices import (
    ATTENTIONS,
    CALCULATOR_MODELS,
    CONVENTIONS,
    NO_ATTENTION,
    OPTIMIZERS,
    RECIPES,
    CalculatorModel,
    choice_key,
    setup,
)
from memtheory.calculator.js_printer import RUNTIME, ExactJavaScriptPrinter, exact_js
from memtheory.calculator.page_script import SEARCH, bundle_script
from memtheory.calculator.peaks import peak_candidates
from memtheory.calculator.size_limits import batchnorm_counts

__all__ = [
    "ATTENTIONS",
    "CALCULATOR_MODELS",
    "CONVENTIONS",
    "NO_ATTENTION",
    "OPTIMIZERS",
    "RECIPES",
    "RUNTIME",
    "SEARCH",
    "CalculatorModel",
    "ExactJavaScriptPrinter",
    "assumptions",
    "batchnorm_counts",
    "bundle",
    "bundle_script",
    "choice_key",
    "exact_js",
    "footprint",
    "peak_candidates",
    "setup",
    "source_examples",
    "step",
]
