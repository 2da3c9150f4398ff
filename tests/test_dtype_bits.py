"""Each float type's sign, exponent and mantissa bits fill its bytes, as NumPy and PyTorch say."""

import importlib.util

import numpy as np
import pytest

from memtheory.dtypes import DTYPES, dtype

FLOATS = [d for d in DTYPES.values() if d.kind == "float"]


@pytest.mark.parametrize("element", FLOATS, ids=str)
def test_sign_exponent_and_mantissa_fill_the_bytes(element):
    """One sign bit, the exponent and the mantissa are the element's whole width."""
    assert element.exponent_bits > 0 and element.mantissa_bits > 0
    assert 1 + element.exponent_bits + element.mantissa_bits == 8 * element.bytes


@pytest.mark.parametrize(("name", "numpy_type"),
                         [("fp64", np.float64), ("fp32", np.float32), ("fp16", np.float16)])
def test_ieee_types_match_numpy(name, numpy_type):
    """NumPy's finfo gives the IEEE 754 split of fp64, fp32 and fp16."""
    info = np.finfo(numpy_type)
    assert (dtype(name).exponent_bits, dtype(name).mantissa_bits) == (info.nexp, info.nmant)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"])
def test_16_and_8_bit_floats_match_torch(name):
    """torch.finfo's eps is 2**-mantissa_bits; its bits are the whole width."""
    import torch

    torch_type = {"bf16": torch.bfloat16, "fp16": torch.float16,
                  "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[name]
    info = torch.finfo(torch_type)
    assert info.bits == 8 * dtype(name).bytes
    assert info.eps == 2.0 ** -dtype(name).mantissa_bits


def test_integer_types_have_no_float_split():
    """Integers and booleans keep the defaults: no exponent, no mantissa."""
    others = [d for d in DTYPES.values() if d.kind != "float"]
    assert all(d.exponent_bits == d.mantissa_bits == 0 for d in others)
