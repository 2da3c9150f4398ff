"""The training step behind one choice of the calculator page, derived once per distinct step.

The same derivation as :func:`memtheory.estimate.estimate` on one GPU
(:func:`step`), its memory (:func:`footprint`) and its assumptions in words
(:func:`assumptions`).

Examples
--------
>>> step("gpt2").convention
'autograd'
"""

from __future__ import annotations

from functools import cache

from memtheory.calculator.choices import (
    CALCULATOR_MODELS,
    CONVENTIONS,
    RECIPES,
    attention_for,
    calculator_model,
    require_known,
    setup,
)
from memtheory.conventions.autograd import AutogradConvention
from memtheory.estimate.resolve import ResolvedModel
from memtheory.estimate.step import Step, step_memory
from memtheory.footprint import Footprint

__all__ = ["assumptions", "footprint", "resolved_model", "step"]


@cache
def resolved_model(model: str, flash: bool) -> ResolvedModel:
    """Return the calculator's model, built once per attention kernel (cached)."""
    return CALCULATOR_MODELS[model].build(flash)


@cache
def _derived(
    model: str, flash: bool, optimizer: str, precision: str, exact: tuple[str, bool, str] | None
) -> Step:
    """One derivation per distinct step (recipes that agree on this model share it)."""
    network = resolved_model(model, flash).network
    if exact is None:
        return step_memory(network, optimizer=optimizer, precision=precision,
                           convention="breakdown")
    implementation, keeps_logits, loop = exact
    return step_memory(
        network, optimizer=optimizer, precision=precision, convention="auto",
        exact=AutogradConvention(implementation, keeps_logits=keeps_logits,  # type: ignore[arg-type]
                                 loop=loop),  # type: ignore[arg-type]
    )


def step(
    model: str,
    optimizer: str = "adamw",
    recipe: str = "hf-trainer",
    attention: str | None = None,
    convention: str = "exact",
) -> Step:
    """Return the training step the page shows for one choice, symbolic in B and H or S.

    The same derivation as :func:`memtheory.estimate.estimate` on one GPU: the
    model resolved with the recipe's attention as CUDA runs it (SDPA's math path,
    which keeps the S x S probabilities, for fp32 with grouped key/value heads:
    :meth:`Setup.flash_for <memtheory.recipes.Setup.flash_for>`), and
    :func:`~memtheory.estimate.step.step_memory` with the recipe's precision
    for the checkpoint's dtype (:meth:`Setup.precision_for
    <memtheory.recipes.Setup.precision_for>`) and its exact convention
    (:meth:`Setup.convention <memtheory.recipes.Setup.convention>`).

    Parameters
    ----------
    model : str
        A key of :data:`CALCULATOR_MODELS`.
    optimizer, recipe, attention, convention : str
        Keys of :data:`OPTIMIZERS`, :data:`RECIPES`, :data:`ATTENTIONS` (a
        language model's; default the recipe's) and :data:`CONVENTIONS`.

    Raises
    ------
    UnsupportedError
        For a name the page does not offer.

    Examples
    --------
    >>> found = step("gpt2", recipe="hf-trainer")
    >>> found.convention, found.precision
    ('autograd', 'autocast-bf16')
    >>> step("llama-3-8b", recipe="hf-trainer").precision
    'bf16'
    """
    spec = calculator_model(model)
    require_known("convention", convention, CONVENTIONS)
    require_known("recipe", recipe, RECIPES)
    attention = attention_for(spec, recipe, attention)
    chosen = setup(recipe, optimizer, attention)
    resolved, flash = chosen.built_for_kernel(
        lambda flash: resolved_model(model, flash and spec.kind == "sequence"),
        network=lambda built: built.network, checkpoint_dtype=lambda built: built.dtype)
    flash = flash and spec.kind == "sequence"
    exact = ((chosen.implementation, chosen.keeps_logits, chosen.loop) if convention == "exact"
             else None)
    return _derived(model, flash, chosen.optimizer, chosen.precision_for(resolved.dtype), exact)


def footprint(
    model: str,
    optimizer: str = "adamw",
    recipe: str = "hf-trainer",
    attention: str | None = None,
    convention: str = "exact",
) -> Footprint:
    """Return the memory of :func:`step` (its ``memory``), symbolic in B and H or S.

    Examples
    --------
    >>> memory = footprint("stackexchange-cnn", "adamw", "pytorch-fp32", convention="breakdown")
    >>> memory.evaluate(B=64, H=50).format("MiB")
    '145.64 MiB'
    """
    return step(model, optimizer, recipe, attention, convention).memory


def assumptions(
    model: str, optimizer: str = "adamw", recipe: str = "hf-trainer", attention: str | None = None
) -> list[str]:
    """Return the choice's assumptions in words, as ``memtheory estimate`` prints them.

    Examples
    --------
    >>> print(assumptions("llama-3-8b")[1])
    precision bf16 (the checkpoint's dtype, loaded with dtype="auto"): ...
    """
    spec = calculator_model(model)
    attention = attention_for(spec, recipe, attention)
    chosen = setup(recipe, optimizer, attention)
    said = chosen.describe(resolved_model(model, False).dtype)
    if spec.kind != "sequence":
        said = [line for line in said if not line.startswith("attention:")]
    return said
