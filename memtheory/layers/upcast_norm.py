r"""OLMo's norms, which compute in fp32 and cast back only at the end.

OLMo's ``OlmoLayerNorm`` (a layer norm without weight or bias) upcasts its
input to fp32 before ``layer_norm`` and casts the result back; OLMo 2's
``Olmo2RMSNorm`` multiplies by its scale *before* the cast back (Llama's
after). Their parameters are :class:`~memtheory.layers.LayerNorm`'s and
:class:`~memtheory.layers.rms_norm.RMSNorm`'s. In fp32 the steps are those of
the plain norms (a tiny OLMo and OLMo 2 step is exact at fp32); in bf16 they
keep fp32 copies the plain norms do not (measured on CPU, PyTorch 2.13,
transformers 5: 4,272 and 6,336 bytes more saved at batch 2, 6 tokens, width
32): the autograd convention refuses them rather than give a number that is
exact at one precision only.

Examples
--------
>>> from memtheory.symbols import B, S
>>> UpcastLayerNorm(elementwise_affine=False, bias=False).parameter_count((B, S, 64))
0
>>> UpcastRMSNorm().parameter_count((B, S, 64))
64
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.rms_norm import RMSNorm

__all__ = ["UpcastLayerNorm", "UpcastRMSNorm"]

_REFUSAL = (
    "OLMo's norms compute in fp32 and cast back at the end, keeping fp32 copies of their "
    "input at 16-bit precision that the plain norms do not; not modelled."
)


@dataclass(frozen=True)
class UpcastLayerNorm(LayerNorm):
    """OLMo's layer norm: fp32 ``layer_norm`` of an upcast input, cast back."""

    kind = "UpcastLayerNorm"
    autograd_checked = False
    autograd_refusal = _REFUSAL


@dataclass(frozen=True)
class UpcastRMSNorm(RMSNorm):
    """OLMo 2's RMS norm: the scale multiplies the fp32 result before the cast back."""

    kind = "UpcastRMSNorm"
    autograd_checked = False
    autograd_refusal = _REFUSAL
