r"""OLMo's norms, which compute in fp32 and cast back only at the end.

OLMo's ``OlmoLayerNorm`` (a layer norm without weight or bias) upcasts its
input to fp32 before ``layer_norm`` and casts the result back; OLMo 2's
``Olmo2RMSNorm`` (OLMo 3's too) multiplies by its scale *before* the cast
back (Llama's after). Their parameters are :class:`~memtheory.layers.LayerNorm`'s and
:class:`~memtheory.layers.rms_norm.RMSNorm`'s.

OLMo 2's norm keeps, as PyTorch runs it, the fp32 input (or its fp32 copy),
the fp32 inverse RMS and the fp32 normalised input that the scale
multiplies (:func:`memtheory.conventions.autograd.kernels.torch_2_13.norms.upcast_rms_norm`):
tiny OLMo 2 and OLMo 3 steps are exact in fp32, bf16 and under autocast
(``tests/pytorch/test_olmo_autograd.py``). OLMo's layer norm keeps, from a
16-bit input, its fp32 copy and fp32 statistics
(:func:`memtheory.conventions.autograd.kernels.torch_2_13.norms.upcast_layer_norm`):
tiny OLMo steps are exact in fp32, bf16 and under autocast, with and without
``clip_qkv`` (``tests/pytorch/test_family_autograd.py``).

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

@dataclass(frozen=True)
class UpcastLayerNorm(LayerNorm):
    """OLMo's layer norm: fp32 ``layer_norm`` of an upcast input, cast back."""

    kind = "UpcastLayerNorm"
    autograd_checked = True  # tests/pytorch/test_family_autograd.py


@dataclass(frozen=True)
class UpcastRMSNorm(RMSNorm):
    """OLMo 2's RMS norm: the scale multiplies the fp32 result before the cast back."""

    kind = "UpcastRMSNorm"
    autograd_checked = True  # tests/pytorch/test_olmo_autograd.py
