"""Hugging Face's language-model losses as plain PyTorch functions, for measured steps.

:func:`causal_lm_loss` is ``transformers``' ``ForCausalLMLoss`` (fp32 logits,
labels shifted left, mean cross-entropy) and :func:`masked_lm_loss`
``BertForMaskedLM``'s loss: what :func:`~memtheory.torch.measure` runs after a
decoder or BERT built without its own loss, so that the step keeps what
Hugging Face's keeps.

Examples
--------
>>> import torch
>>> logits = torch.zeros(1, 3, 5)
>>> labels = torch.tensor([[1, 2, 3]])
>>> round(causal_lm_loss(logits, labels).item(), 4) == round(float(torch.log(torch.tensor(5.0))), 4)
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)

__all__ = ["causal_lm_loss", "masked_lm_loss"]


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's ``ForCausalLMLoss``: fp32 logits, labels shifted left, mean cross-entropy."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=-100)
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(
        logits.view(-1, logits.shape[-1]), shift_labels.view(-1), ignore_index=-100
    )


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``BertForMaskedLM``'s loss: cross-entropy over every position, in the logits' dtype."""
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
