"""Ceil-mode pooling keeps one rounding per layer where the last window always starts inside."""

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from memtheory import Input, MaxPool2d, Network
from memtheory.sliding_window import pool_output_size
from memtheory.symbols import H


def _pytorch(n, kernel, stride, padding, dilation):
    """PyTorch's pooling_output_shape (aten/src/ATen/native/Pool.h), ceil_mode=True, in integers."""
    span = dilation * (kernel - 1) + 1
    out = -(-(n + 2 * padding - span) // stride) + 1
    if (out - 1) * stride >= n + padding:  # the last window must start inside
        out -= 1
    return out


@given(
    st.integers(1, 6), st.integers(1, 4), st.integers(0, 3), st.integers(1, 3), st.integers(1, 200)
)
def test_ceil_mode_size_is_pytorchs_at_every_whole_size(kernel, stride, padding, dilation, n):
    """The size (with or without its Min) is PyTorch's wherever the window fits."""
    span = dilation * (kernel - 1) + 1
    if padding > kernel // 2 or n + 2 * padding < span:
        return  # PyTorch refuses these
    size = pool_output_size(H, kernel, stride, padding, dilation, ceil_mode=True)
    assert size.subs(H, n) == _pytorch(n, kernel, stride, padding, dilation)


@pytest.mark.parametrize(("stride", "padding"), [(2, 0), (2, 1), (3, 1)])
def test_a_deep_ceil_mode_chain_stays_one_rounding_deep(stride, padding):
    """Eight 2x2 ceil-mode poolings: no Min, one rounding per size (not one per layer, or more).

    With padding 1 the last window may start in the padding (PyTorch's Min); issue 27 measured
    such a chain taking 130 s at depth 7 when each size doubled the one before.
    """
    pool = MaxPool2d(2, stride=stride, padding=padding, ceil_mode=True)
    net = Network([Input((1, H, H)), *(pool for _ in range(8))])
    sizes = [sp.sympify(row.output_shape[-1]) for row in net.rows[1:]]
    assert not any(size.has(sp.Min) for size in sizes)
    assert [len(size.atoms(sp.floor, sp.ceiling)) for size in sizes] == [1] * len(sizes)
    for n in (1, 2, 255, 256, 257, 1000, 3**9 + 1):
        value = n
        for size in sizes:
            value = _pytorch(value, 2, stride, padding, 1)
            assert size.subs(H, n) == value
