"""The practitioner's front door: ``memtheory estimate`` and the Python API behind it.

==============  ================================================================
module          what it does
==============  ================================================================
resolve         a model name, config or ``file.py:factory`` to a Network
step            one replica's step: exact (autograd) where checked, else breakdown, and why
devices         :func:`fewest_gpus`: the fewest devices a sharded step fits on
plan            :func:`estimate`: footprint per device, budget, largest batch/sequence
trl_step        ``--recipe trl-dpo`` / ``trl-sft``: TRL's trainers, by their step functions
command         the ``memtheory estimate`` subcommand
serving_model   one served model's per-GPU weights (in a format), cache, working memory
serving_gguf    GGUF weights: llama.cpp's block types and the per-tensor types of its mixes
serving         :func:`serving_memory`: vLLM serving, KV blocks, max concurrency
serve_command   the ``memtheory serve`` subcommand
cache_key       where the caches live, and the digest of the code that wrote them
answer_cache    a question asked again: its printed answer read back, without sympy
==============  ================================================================

Examples
--------
>>> from memtheory.estimate import estimate
>>> answer = estimate("gpt2", batch=8, sequence=1024, gpu="RTX 4090")
>>> answer.fits
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtheory._lazy import lazy_attribute

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from memtheory.estimate.answer import Estimate
    from memtheory.estimate.devices import DeviceSearch, fewest_gpus
    from memtheory.estimate.plan import estimate
    from memtheory.estimate.resolve import (
        BUILDER_REGISTRY,
        BUILDERS,
        Builder,
        ResolvedModel,
        resolve_model,
    )
    from memtheory.estimate.serving import ServingMemory, serving_memory
    from memtheory.estimate.step import Step, step_memory

_HOMES = {
    "BUILDERS": "memtheory.estimate.resolve",
    "BUILDER_REGISTRY": "memtheory.estimate.resolve",
    "Builder": "memtheory.estimate.resolve",
    "DeviceSearch": "memtheory.estimate.devices",
    "Estimate": "memtheory.estimate.answer",
    "ResolvedModel": "memtheory.estimate.resolve",
    "ServingMemory": "memtheory.estimate.serving",
    "Step": "memtheory.estimate.step",
    "estimate": "memtheory.estimate.plan",
    "fewest_gpus": "memtheory.estimate.devices",
    "resolve_model": "memtheory.estimate.resolve",
    "serving_memory": "memtheory.estimate.serving",
    "step_memory": "memtheory.estimate.step",
}
"""Where each public name lives: the subcommands' parsers (``command``, ``serve_command``)
import this package without deriving anything, so ``memtheory grade`` starts without it."""

__all__ = [
    "BUILDERS",
    "BUILDER_REGISTRY",
    "Builder",
    "DeviceSearch",
    "Estimate",
    "ResolvedModel",
    "ServingMemory",
    "Step",
    "estimate",
    "fewest_gpus",
    "resolve_model",
    "serving_memory",
    "step_memory",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (see ``_HOMES``)."""
    return lazy_attribute("memtheory.estimate", _HOMES, name)
