"""Element types and how many bytes one element of each takes.

This is the single table of element sizes in memtheory; every byte count
multiplies an element count by an entry here.

Examples
--------
>>> dtype("fp16").bytes
2
>>> dtype("bfloat16").name
'bf16'
>>> dtype("torch.int64").bytes
8
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memtheory.errors import UnknownDTypeError
from memtheory.registry import Registry

__all__ = ["DTYPES", "DTYPE_REGISTRY", "DType", "DTypeLike", "dtype"]


@dataclass(frozen=True, order=True)
class DType:
    """An element type.

    Parameters
    ----------
    bytes : int
        Bytes one element occupies.
    name : str
        Short canonical name (``"fp32"``, ``"bf16"``, ``"int64"``).
    kind : {"float", "int", "bool"}
        Family of the type.
    description : str
        One line for tables and error messages.
    exponent_bits, mantissa_bits : int, default 0
        A float's split of its bits after the sign bit: IEEE 754 for fp64, fp32
        and fp16, the bfloat16 format for bf16, and Micikevicius et al. (2022),
        "FP8 Formats for Deep Learning", for fp8_e4m3 and fp8_e5m2. Zero for
        integer types.

    Examples
    --------
    >>> dtype("fp32") > dtype("bf16")
    True
    >>> bf16 = dtype("bf16")
    >>> 1 + bf16.exponent_bits + bf16.mantissa_bits == 8 * bf16.bytes
    True
    """

    bytes: int
    name: str
    kind: Literal["float", "int", "bool"]
    description: str
    exponent_bits: int = 0
    mantissa_bits: int = 0

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType(8, "fp64", "float", "IEEE 754 double precision", 11, 52),
        DType(4, "fp32", "float", "IEEE 754 single precision", 8, 23),
        DType(2, "fp16", "float", "IEEE 754 half precision (5-bit exponent)", 5, 10),
        DType(2, "bf16", "float", "bfloat16 (8-bit exponent, 7-bit mantissa)", 8, 7),
        DType(1, "fp8_e4m3", "float", "8-bit float, 4-bit exponent", 4, 3),
        DType(1, "fp8_e5m2", "float", "8-bit float, 5-bit exponent", 5, 2),
        DType(8, "int64", "int", "64-bit integer (PyTorch's index type)"),
        DType(4, "int32", "int", "32-bit integer"),
        DType(2, "int16", "int", "16-bit integer"),
        DType(1, "int8", "int", "8-bit integer (quantised weights)"),
        DType(1, "uint8", "int", "8-bit unsigned integer (raw image pixels)"),
        DType(1, "bool", "bool", "boolean, one byte per element"),
    )
}
"""Every element type memtheory knows, by canonical name."""

DTYPE_REGISTRY: Registry[DType] = Registry(
    "dtype",
    DTYPES,
    aliases={
        "float64": "fp64",
        "double": "fp64",
        "float32": "fp32",
        "float": "fp32",
        "single": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "float8_e4m3fn": "fp8_e4m3",
        "float8_e5m2": "fp8_e5m2",
        "long": "int64",
        "int": "int32",
        "short": "int16",
        "qint8": "int8",
    },
    error=UnknownDTypeError,
    hint="(or a NumPy/PyTorch spelling such as float16, half, torch.bfloat16)",
    prefixes=("torch.", "numpy.", "np."),
)
"""The dtypes by any accepted spelling: NumPy's and PyTorch's names, any case."""

DTypeLike = str | DType


def dtype(spec: DTypeLike) -> DType:
    """Look up an element type by name.

    Parameters
    ----------
    spec : str or DType
        A canonical name (``"fp32"``), a NumPy/PyTorch spelling (``"float16"``,
        ``"torch.bfloat16"``), or a :class:`DType`, returned unchanged.

    Returns
    -------
    DType

    Raises
    ------
    UnknownDTypeError
        If the name is not known; the message lists the known names.

    Examples
    --------
    >>> dtype("half")
    DType(bytes=2, name='fp16', kind='float', description='IEEE 754 half precision ...)
    >>> dtype("fp12")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownDTypeError: unknown dtype 'fp12'. Did you mean 'fp16'? Known dtypes: ...
    """
    if isinstance(spec, DType):
        return spec
    return DTYPE_REGISTRY[spec]
