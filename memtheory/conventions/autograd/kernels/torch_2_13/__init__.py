"""Kernel plans checked against PyTorch 2.13 on CPU (``memtheory.torch.measure``)."""

from __future__ import annotations

from memtheory.conventions.autograd.kernels.torch_2_13 import (
    activations,
    attention,
    experts,
    latent_attention,
    losses,
    norms,
    optimizers,
)

__all__ = ["activations", "attention", "experts", "latent_attention", "losses", "norms",
           "optimizers"]
