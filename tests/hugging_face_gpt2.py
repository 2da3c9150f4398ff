"""GPT-2 as ``memtheory estimate gpt2`` builds it: the builder with Hugging Face's ``gelu_new``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memtheory.models import GPT2_SIZES, gpt2
from memtheory.network import Network


def hf_gpt2(size: str = "small", **options: Any) -> Network:
    """Return :func:`~memtheory.models.gpt2` of ``size`` with transformers' ``gelu_new``.

    transformers' GPT-2 configurations say ``activation_function="gelu_new"``;
    the textbook builder counts one fused GELU. ``options`` are gpt2's.
    """
    return gpt2(replace(GPT2_SIZES[size], activation="gelu_new"), **options)
