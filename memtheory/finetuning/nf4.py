r"""4-bit NormalFloat (NF4) weights with double-quantized constants, as QLoRA stores them.

Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs" (NeurIPS 2023,
arXiv:2305.14314), Section 3: each block of 64 weights is stored as 4-bit codes
plus one quantization constant (its absolute maximum). Kept in fp32, the
constants cost :math:`32/64 = 0.5` bits per weight; *double quantization*
stores them as 8-bit floats instead, with one fp32 constant for every 256 of
them: :math:`8/64 + 32/(64 \cdot 256) = 0.127` bits per weight. For a tensor
of :math:`n` weights (bytes, rounded up to whole blocks and bytes):

.. math::

    \lceil n/2 \rceil + \lceil n/64 \rceil + 4\lceil \lceil n/64 \rceil / 256 \rceil

What is *not* counted: the 16-entry code book and the small per-tensor state
objects that bitsandbytes keeps beside each tensor (a few hundred bytes per
tensor, not per weight). During the forward and backward passes each layer
dequantizes its weight to the compute dtype (bf16) one layer at a time: a
transient copy of the largest layer, which :func:`dequantized_copy_bytes` sizes.

Examples
--------
>>> nf4_bytes(64 * 256)  # 8192 bytes of codes, 256 8-bit constants, one fp32 constant
8452
>>> float(nf4_bits_per_parameter())  # the paper's 4 + 0.127 bits
4.126953125
"""

from __future__ import annotations

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike, dtype

__all__ = [
    "NF4_BLOCK",
    "NF4_SECOND_BLOCK",
    "constant_bits_per_parameter",
    "dequantized_copy_bytes",
    "nf4_bits_per_parameter",
    "nf4_bytes",
    "nf4_constant_bytes",
]

NF4_BLOCK = 64
"""Weights per first-level quantization block (QLoRA Section 3; bitsandbytes' default)."""

NF4_SECOND_BLOCK = 256
"""First-level constants per second-level block under double quantization (QLoRA Section 3)."""


def nf4_constant_bytes(
    elements: SizeLike, *, double_quant: bool = True, block: int = NF4_BLOCK,
    second_block: int = NF4_SECOND_BLOCK,
) -> sp.Expr:
    """Bytes of the quantization constants of one tensor of ``elements`` weights.

    fp32 absolute maxima per ``block`` weights, or with ``double_quant`` one
    byte each plus an fp32 constant per ``second_block`` of them.

    Examples
    --------
    >>> nf4_constant_bytes(64 * 256), nf4_constant_bytes(64 * 256, double_quant=False)
    (260, 1024)
    """
    n = as_size(elements, "elements", "nf4_constant_bytes")
    blocks = sp.ceiling(n / block)
    if not double_quant:
        return 4 * blocks
    return blocks + 4 * sp.ceiling(blocks / second_block)


def nf4_bytes(
    elements: SizeLike, *, double_quant: bool = True, block: int = NF4_BLOCK,
    second_block: int = NF4_SECOND_BLOCK,
) -> sp.Expr:
    """Bytes of one tensor of ``elements`` weights stored in NF4: codes plus constants.

    Examples
    --------
    >>> nf4_bytes(4096 * 4096)  # one 4096x4096 projection of a 7B model
    8654848
    """
    n = as_size(elements, "elements", "nf4_bytes")
    return sp.ceiling(n / 2) + nf4_constant_bytes(
        n, double_quant=double_quant, block=block, second_block=second_block
    )


def constant_bits_per_parameter(
    *, double_quant: bool = True, block: int = NF4_BLOCK, second_block: int = NF4_SECOND_BLOCK
) -> sp.Rational:
    """Bits of quantization constants per weight, exactly (0.5 without, 0.127 with DQ).

    Examples
    --------
    >>> constant_bits_per_parameter(double_quant=False), constant_bits_per_parameter()
    (1/2, 65/512)
    """
    if not double_quant:
        return sp.Rational(32, block)
    return sp.Rational(8, block) + sp.Rational(32, block * second_block)


def nf4_bits_per_parameter(*, double_quant: bool = True) -> sp.Rational:
    """Bits per weight of NF4 storage, constants included, for large tensors.

    Examples
    --------
    >>> nf4_bits_per_parameter(double_quant=False)
    9/2
    """
    return 4 + constant_bits_per_parameter(double_quant=double_quant)


def dequantized_copy_bytes(elements: SizeLike, compute: DTypeLike = "bf16") -> sp.Expr:
    """Bytes of the compute-dtype copy a 4-bit layer dequantizes its weight into.

    Examples
    --------
    >>> dequantized_copy_bytes(4096 * 4096)
    33554432
    """
    return as_size(elements, "elements", "dequantized_copy_bytes") * dtype(compute).bytes
