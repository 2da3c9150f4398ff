"""Every assumption of a training step in one value, and the recipes real stacks use.

==========  ==============================================================
module      what it does
==========  ==============================================================
setup       :class:`Setup`: precision, optimizer implementation, attention
            kernel, who keeps the logits, sharding, adapters, quantization,
            the card reserve; it prints itself as ``assumed:`` lines
catalog     :data:`RECIPES`: the defaults of PyTorch, transformers'
            ``Trainer``, peft, QLoRA, DeepSpeed, FSDP2 and Lightning, each
            with the source it was read from
==========  ==============================================================

Examples
--------
>>> Setup.recipe("hf-trainer").attention
'sdpa'
"""

from memtheory.recipes.catalog import (
    RECIPE_REGISTRY,
    RECIPES,
    REFUSED_RECIPES,
    TRL_RECIPES,
    Recipe,
    TRLRecipe,
    default_recipe,
    recipe,
    trl_recipe_name,
)
from memtheory.recipes.setup import AS_LOADED, Setup, setup_from
from memtheory.recipes.textbook import TEXTBOOK

__all__ = [
    "AS_LOADED",
    "RECIPES",
    "RECIPE_REGISTRY",
    "REFUSED_RECIPES",
    "Recipe",
    "Setup",
    "TEXTBOOK",
    "TRLRecipe",
    "TRL_RECIPES",
    "default_recipe",
    "recipe",
    "setup_from",
    "trl_recipe_name",
]
