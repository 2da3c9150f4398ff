"""What the calculator page offers: its models, optimizers, recipes, attentions, conventions.

Each choice of the page is checked here (an unknown name is an
:class:`~memtheory.errors.UnsupportedError` listing the offered ones) and
turned into the :class:`~memtheory.recipes.Setup` it stands for (:func:`setup`).

Examples
--------
>>> CALCULATOR_MODELS["gpt2"].title
'GPT-2 small'
>>> choice_key("sgd", "pytorch-fp32", NO_ATTENTION, "breakdown")
'sgd|pytorch-fp32|-|breakdown'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.estimate.resolve import ResolvedModel, resolve_model
from memtheory.models import PRESETS
from memtheory.recipes import Setup
from memtheory.symbols import B, H, S
from memtheory.worked_examples import small_cnn_network

__all__ = [
    "ATTENTIONS",
    "CALCULATOR_MODELS",
    "CONVENTIONS",
    "CalculatorModel",
    "NO_ATTENTION",
    "OPTIMIZERS",
    "RECIPES",
    "attention_for",
    "attentions_of",
    "calculator_model",
    "choice_key",
    "require_known",
    "setup",
]


Kind = Literal["image", "sequence"]


@dataclass(frozen=True)
class CalculatorModel:
    """A model the calculator offers.

    Attributes
    ----------
    title : str
        As the page shows it.
    build : callable
        ``build(flash)`` returns the :class:`~memtheory.estimate.resolve.ResolvedModel`
        (the Network, symbolic in the batch ``B`` and the image side ``H`` or
        the sequence ``S``, and the dtype of its checkpoint), with SDPA's
        attention (``flash=True``) or eager attention.
    kind : {"image", "sequence"}
    default_size, max_size : int
        The image side or sequence length the page starts at, and the largest
        it accepts (a language model's position table).
    default_batch : int
    note : str
        What the model is, in a line.
    estimate_name : str or None
        The name ``memtheory estimate`` takes for it (None: not one of its models).
    """

    title: str
    build: Callable[[bool], ResolvedModel]
    kind: Kind
    default_size: int
    max_size: int
    default_batch: int
    note: str
    estimate_name: str | None = None

    @property
    def size_symbol(self) -> sp.Symbol:
        """``H`` for an image model, ``S`` for a language model."""
        return H if self.kind == "image" else S


def _stackexchange_cnn(flash: bool) -> ResolvedModel:
    network = small_cnn_network(image_size=H)
    return ResolvedModel(network, "StackExchange CNN", "image", None, "worked example", "fp32")


def _builder(name: str) -> Callable[[bool], ResolvedModel]:
    def build(flash: bool) -> ResolvedModel:
        return resolve_model(name, batch=B, sequence=S, image=H, flash=flash)

    return build


def _llama_positions() -> int:
    return int(PRESETS["llama-3-8b"].config["max_position_embeddings"])


CALCULATOR_MODELS: dict[str, CalculatorModel] = {
    "stackexchange-cnn": CalculatorModel(
        "StackExchange CNN", _stackexchange_cnn, "image", 50, 1024, 64,
        "two padded 3x3 convolutions with 2x2 pooling, a 500-unit layer, 10 classes "
        "(the worked example of chapter 8)",
    ),
    "vgg16": CalculatorModel(
        "VGG-16", _builder("vgg16"), "image", 224, 1024, 32, "torchvision's VGG-16, 1000 classes",
        "vgg16",
    ),
    "resnet50": CalculatorModel(
        "ResNet-50", _builder("resnet50"), "image", 224, 1024, 64,
        "torchvision's ResNet-50 with BatchNorm, 1000 classes", "resnet50",
    ),
    "gpt2": CalculatorModel(
        "GPT-2 small", _builder("gpt2"), "sequence", 1024, 1024, 8,
        "124M parameters, with its language-model loss", "gpt2",
    ),
    "gpt2-medium": CalculatorModel(
        "GPT-2 medium", _builder("gpt2-medium"), "sequence", 1024, 1024, 4,
        "355M parameters, with its language-model loss", "gpt2-medium",
    ),
    "bert-base": CalculatorModel(
        "BERT-base", _builder("bert-base-mlm"), "sequence", 128, 512, 32,
        "110M parameters, with its masked-LM head and loss", "bert-base-mlm",
    ),
    "llama-3-8b": CalculatorModel(
        "Llama-3-8B", _builder("llama-3-8b"), "sequence", 2048, _llama_positions(), 1,
        "Llama-style decoder (RMSNorm, SwiGLU, RoPE, grouped-query attention) from its config",
        "llama-3-8b",
    ),
}
"""The models the page offers, by key."""

OPTIMIZERS: dict[str, str] = {
    "adamw": "Adam or AdamW (same state; every recipe's)",
    "sgd+momentum": "SGD with momentum",
    "sgd": "SGD (no state)",
}
"""Optimizer key (memtheory's name) -> label; the recipes use AdamW, the others override it."""

RECIPES: dict[str, str] = {
    "hf-trainer": "hf-trainer: transformers' Trainer, bf16=True",
    "pytorch-amp": "pytorch-amp: a PyTorch loop under torch.autocast(bfloat16)",
    "pytorch-fp32": "pytorch-fp32: a PyTorch loop in fp32",
}
"""Recipe key (:data:`memtheory.recipes.RECIPES`) -> label."""

ATTENTIONS: dict[str, str] = {
    "sdpa": "SDPA, flash or memory-efficient (the recipes' default)",
    "eager": "eager (S x S scores and probabilities kept)",
}
"""Attention key (:attr:`Setup.attention <memtheory.recipes.Setup.attention>`) -> label;
language models only."""

CONVENTIONS: dict[str, str] = {
    "exact": "the step as PyTorch runs it (what memtheory estimate answers)",
    "breakdown": "teaching comparison: chapter 4's breakdown (an estimate, not a bound)",
}
"""How the step is counted -> label: ``"exact"`` is :func:`memtheory.estimate.estimate`'s
(the autograd convention wherever it follows the step), ``"breakdown"`` every kept output
and its gradient, for comparison with chapter 4."""

NO_ATTENTION = "-"
"""The attention key of an image model's choices (it has no attention)."""


def require_known(what: str, name: str, table: Mapping[str, str]) -> None:
    """Raise naming the choices when ``name`` is not a key of ``table``."""
    if name not in table:
        raise UnsupportedError(
            f"the calculator has no {what} {name!r}; choose one of {', '.join(table)}."
        )


def calculator_model(model: str) -> CalculatorModel:
    """Return the calculator's model named ``model``, or an error naming the ones it has."""
    if model not in CALCULATOR_MODELS:
        raise UnsupportedError(
            f"the calculator has no model {model!r}; choose one of {', '.join(CALCULATOR_MODELS)}."
        )
    return CALCULATOR_MODELS[model]


def attention_for(model: CalculatorModel, recipe: str, attention: str | None) -> str:
    """Return a choice's attention key: the recipe's if not given; images: :data:`NO_ATTENTION`."""
    if model.kind == "image":
        if attention not in (None, NO_ATTENTION):
            raise UnsupportedError(
                f"{model.title} has no attention: leave attention out (or {NO_ATTENTION!r})."
            )
        return NO_ATTENTION
    if attention is None:
        return Setup.recipe(recipe).attention
    require_known("attention", attention, ATTENTIONS)
    return attention


def setup(recipe: str, optimizer: str = "adamw", attention: str | None = None) -> Setup:
    """Return the :class:`~memtheory.recipes.Setup` of a choice: the recipe with the page's changes.

    Parameters
    ----------
    recipe : str
        A key of :data:`RECIPES`.
    optimizer : str, default "adamw"
        A key of :data:`OPTIMIZERS` (every recipe's is AdamW).
    attention : str, optional
        A key of :data:`ATTENTIONS` (default the recipe's; :data:`NO_ATTENTION`
        for an image model, which keeps the recipe's).

    Examples
    --------
    >>> setup("hf-trainer").label, setup("hf-trainer", "sgd", "eager").label
    ('hf-trainer', 'hf-trainer (optimizer=sgd, attention=eager)')
    """
    require_known("recipe", recipe, RECIPES)
    require_known("optimizer", optimizer, OPTIMIZERS)
    changes: dict[str, str] = {"optimizer": optimizer}
    if attention is not None and attention != NO_ATTENTION:
        require_known("attention", attention, ATTENTIONS)
        changes["attention"] = attention
    return Setup.recipe(recipe, **changes)


def choice_key(optimizer: str, recipe: str, attention: str, convention: str) -> str:
    """Return the key of a choice in :func:`bundle`'s ``choices``.

    Examples
    --------
    >>> choice_key("adamw", "hf-trainer", "sdpa", "exact")
    'adamw|hf-trainer|sdpa|exact'
    """
    return f"{optimizer}|{recipe}|{attention}|{convention}"


def attentions_of(model: CalculatorModel) -> list[str]:
    """Return the attention kernels the page offers for ``model`` (none for a vision model)."""
    return list(ATTENTIONS) if model.kind == "sequence" else [NO_ATTENTION]
