r"""Quantised weights for inference: fewer bits per weight, plus the scales that undo them.

A linear layer's :math:`n_\text{out} \times n_\text{in}` weight matrix is
stored as :math:`b`-bit integers and one scale per *group* of consecutive
input weights of each output row (``group_size``; per row when ``None``),
with, for an asymmetric scheme, one integer zero point per group. The
bytes of one matrix:

.. math::

   n_\text{out} n_\text{in} \frac{b}{8}
   + n_\text{out} \lceil n_\text{in} / g \rceil (s + z/8)
   + n_\text{in} \cdot i

for scale bytes :math:`s`, zero-point bits :math:`z` and group-index bytes
:math:`i` per input feature. The schemes and their storage, as their
documentation and reference code lay them out:

* ``"int8"``: bitsandbytes' LLM.int8() (Dettmers et al. 2022): int8
  weights and one fp32 absolute-maximum statistic per output row
  (``bitsandbytes.functional.int8_vectorwise_quant`` returns the int8 matrix
  and fp32 row statistics; https://huggingface.co/docs/bitsandbytes/reference/functional).
* ``"int4"``: GPTQ (Frantar et al. 2022) as AutoGPTQ stores it: 4-bit
  weights packed eight to an int32 (``qweight``), fp16 ``scales`` of
  ``(n_in / g, n_out)``, 4-bit zero points packed eight to an int32
  (``qzeros``) and one int32 group index per input feature (``g_idx``);
  ``group_size`` 128 by default
  (https://github.com/AutoGPTQ/AutoGPTQ, ``auto_gptq/nn_modules/qlinear``).
* ``"awq"``: AWQ (Lin et al. 2023) in AutoAWQ's GEMM layout: the same packed
  4-bit weights, fp16 scales and packed zero points per group of 128, no
  group index.

What is quantised: the linear layers' weight matrices (a mixture of
experts' expert matrices included), as ``load_in_8bit`` and GPTQ/AWQ
checkpoints do; embeddings, norms, biases and, by default, the output
projection (``lm_head``, which Hugging Face's quantizers leave out) stay in
the compute dtype. Derived in the book's chapter "Inference and the KV cache".

Examples
--------
>>> scheme = quantization("int4")
>>> scheme.matrix_bytes(4096, 4096)   # 4 bits + fp16 scale and 4-bit zero per 128, g_idx
8732672
>>> quantization("int4", group_size=64).group_size
64
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidSizeError, UnknownNameError
from memtheory.registry import Registry

__all__ = ["QUANTIZATIONS", "WeightQuantization", "quantization"]


@dataclass(frozen=True)
class WeightQuantization:
    """How a quantisation scheme stores a linear layer's weight matrix.

    Parameters
    ----------
    name : str
    bits : int
        Bits per weight.
    group_size : int or None
        Input weights per scale; None: one scale per output row.
    scale_dtype : dtype
        The scales' element type.
    zero_bits : int, default 0
        Bits per zero point (0: symmetric, none stored).
    group_index_dtype : dtype or None
        One entry per input feature mapping it to its group (GPTQ's ``g_idx``).
    skip : tuple of str, default ("lm_head",)
        Layer names left unquantised.
    source : str
        Where the layout is documented.

    Examples
    --------
    >>> int8 = quantization("int8")
    >>> int8.matrix_bytes(4, 8)   # 32 int8 weights + 4 fp32 row scales
    48
    """

    name: str
    bits: int
    group_size: int | None
    scale_dtype: DType
    zero_bits: int = 0
    group_index_dtype: DType | None = None
    skip: tuple[str, ...] = ("lm_head",)
    source: str = ""

    def __post_init__(self) -> None:
        if self.bits not in (2, 3, 4, 8):
            raise InvalidSizeError(
                f"quantization {self.name!r}: bits must be 2, 3, 4 or 8, got {self.bits!r}."
            )
        if self.group_size is not None and (
            isinstance(self.group_size, bool)
            or not isinstance(self.group_size, int)
            or self.group_size < 1
        ):
            raise InvalidSizeError(
                f"quantization {self.name!r}: group_size must be a positive whole number or "
                f"None (one scale per output row), got {self.group_size!r}."
            )

    def matrix_bytes(self, out_features: SizeLike, in_features: SizeLike) -> sp.Expr:
        """Bytes of one quantised ``out_features x in_features`` matrix with its scales.

        Examples
        --------
        >>> quantization("awq").matrix_bytes(4096, 4096)   # no g_idx
        8716288
        """
        rows, columns = sp.sympify(out_features), sp.sympify(in_features)
        groups = sp.Integer(1) if self.group_size is None else sp.ceiling(columns / self.group_size)
        per_group = self.scale_dtype.bytes + sp.Rational(self.zero_bits, 8)
        index = columns * self.group_index_dtype.bytes if self.group_index_dtype else 0
        packed = rows * columns * sp.Rational(self.bits, 8)
        return sp.expand(packed + rows * groups * per_group + index)

    def describe(self) -> str:
        """``4-bit, groups of 128, fp16 scales, 4-bit zeros``."""
        groups = "per row" if self.group_size is None else f"groups of {self.group_size}"
        parts = [f"{self.bits}-bit", groups, f"{self.scale_dtype.name} scales"]
        if self.zero_bits:
            parts.append(f"{self.zero_bits}-bit zeros")
        if self.group_index_dtype:
            parts.append(f"{self.group_index_dtype.name} group index")
        return ", ".join(parts)


_SCHEMES = {
    "int8": WeightQuantization(
        "int8", 8, None, as_dtype("fp32"),
        source="bitsandbytes LLM.int8(): int8_vectorwise_quant (fp32 row statistics)",
    ),
    "int4": WeightQuantization(
        "int4", 4, 128, as_dtype("fp16"), zero_bits=4, group_index_dtype=as_dtype("int32"),
        source="GPTQ in AutoGPTQ's layout: qweight, qzeros (int32-packed), fp16 scales, g_idx",
    ),
    "awq": WeightQuantization(
        "awq", 4, 128, as_dtype("fp16"), zero_bits=4,
        source="AWQ in AutoAWQ's GEMM layout: packed qweight and qzeros, fp16 scales",
    ),
}

QUANTIZATIONS: Registry[WeightQuantization] = Registry(
    "quantization",
    _SCHEMES,
    aliases={"llm.int8": "int8", "bnb-int8": "int8", "load_in_8bit": "int8", "gptq": "int4",
             "w4a16": "int4", "int4-gptq": "int4"},
    hint="(or describe one with memtheory.techniques.WeightQuantization)",
)
"""Quantisation schemes by name: ``"int8"`` (LLM.int8()), ``"int4"`` (GPTQ), ``"awq"``."""


def quantization(
    scheme: str | WeightQuantization,
    *,
    group_size: int | None | str = "default",
    scale_dtype: DTypeLike | None = None,
) -> WeightQuantization:
    """Return a scheme by name, with its group size or scale dtype changed if asked.

    Examples
    --------
    >>> quantization("gptq", group_size=32).describe()
    '4-bit, groups of 32, fp16 scales, 4-bit zeros, int32 group index'
    >>> quantization("int5")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownNameError: unknown quantization 'int5'. Did you mean 'int8'? ...
    """
    if isinstance(scheme, WeightQuantization):
        found = scheme
    elif isinstance(scheme, str):
        found = QUANTIZATIONS[scheme]
    else:
        raise UnknownNameError(
            f"quantization: pass a scheme name ({', '.join(QUANTIZATIONS)}) or a "
            f"WeightQuantization, got {type(scheme).__name__}.",
            name=scheme,
            known=tuple(QUANTIZATIONS),
        )
    if group_size != "default":
        found = replace(found, group_size=group_size)  # type: ignore[arg-type]
    if scale_dtype is not None:
        found = replace(found, scale_dtype=as_dtype(scale_dtype))
    return found
