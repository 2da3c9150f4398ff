"""Sizes after strided layers stay one rounding deep, and equal the unsimplified formulas.

The reference values are computed here in plain integers and fractions
(``math.floor`` / ``math.ceil`` of :class:`fractions.Fraction`), and for whole
layer chains with PyTorch's rules (``torch.nn.Conv2d`` and ``MaxPool2d``
documentation; ``aten/src/ATen/native/Pool.h`` for ceil mode), never from the
expressions under test.
"""

import math
from fractions import Fraction

import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.sliding_window import (
    _rounded_polynomial,
    collapse_rounding,
    conv_output_size,
    pool_output_size,
)
from memtheory.symbols import B, H, W

ROUNDINGS = {"floor": (sp.floor, math.floor), "ceiling": (sp.ceiling, math.ceil)}


@settings(max_examples=300, deadline=None)
@given(
    outer=st.sampled_from(sorted(ROUNDINGS)),
    inner=st.sampled_from(sorted(ROUNDINGS)),
    slope=st.integers(-6, 6),
    offset=st.integers(-40, 40),
    denominator=st.integers(1, 9),
    whole=st.integers(-30, 30),
    divisor=st.integers(2, 12),
    sides=st.lists(st.integers(1, 10**6), min_size=1, max_size=8),
)
def test_a_rounding_of_a_rounding_collapses_to_one_with_the_same_values(
    outer, inner, slope, offset, denominator, whole, divisor, sides
):
    """round_o((round_i(y) + m)/b) = the collapsed rounding, for every whole H (any real y)."""
    (outer_sp, outer_py), (inner_sp, inner_py) = ROUNDINGS[outer], ROUNDINGS[inner]
    y = (slope * H + offset) / sp.Integer(denominator)
    rounding, argument = collapse_rounding(outer_sp, (inner_sp(y) + whole) / divisor)
    assert not argument.has(sp.floor, sp.ceiling)
    collapsed = rounding(argument)
    for side in sides:
        nested = outer_py(
            Fraction(inner_py(Fraction(slope * side + offset, denominator)) + whole, divisor)
        )
        assert collapsed.xreplace({H: side}) == nested


def test_what_does_not_collapse_is_left_as_it_is():
    """A coefficient other than 1/b, or a rest that is not whole over b, keeps the inner floor."""
    for argument in (
        3 * sp.floor(H / 2) / 2,  # 3/2: not 1/b
        sp.floor(H / 2) / 2 + sp.Rational(1, 3),  # 2 * 1/3 is not whole
        sp.floor(H / 2) / 2 + H / 3,  # 2 * H/3 is not provably whole
    ):
        assert collapse_rounding(sp.floor, argument) == (sp.floor, argument)


layer = st.tuples(
    st.booleans(),  # pooling (else a convolution)
    st.integers(1, 5),  # kernel
    st.integers(1, 4),  # stride
    st.integers(0, 3),  # padding
    st.integers(1, 3),  # dilation
    st.booleans(),  # ceil mode (pooling only)
)


def _pytorch_size(n, pooling, kernel, stride, padding, dilation, ceil_mode):
    """Output size by PyTorch's rule, in integers; None where PyTorch refuses the layer."""
    span = dilation * (kernel - 1) + 1
    if n + 2 * padding < span or (pooling and 2 * padding > span):
        return None
    steps = n + 2 * padding - span
    if not (pooling and ceil_mode):
        return steps // stride + 1
    out = -(-steps // stride) + 1
    if (out - 1) * stride >= n + padding:  # the last window must start inside
        out -= 1
    return out


@settings(max_examples=150, deadline=None)
@given(
    chain=st.lists(layer, min_size=1, max_size=12),
    sides=st.lists(st.integers(1, 5000), min_size=1, max_size=6),
)
def test_a_chain_of_strided_layers_is_pytorchs_size_and_one_rounding_deep(chain, sides):
    """Conv and pooling layers over H: one floor per size, PyTorch's at every side it accepts."""
    size = H
    sizes = []
    for pooling, kernel, stride, padding, dilation, ceil_mode in chain:
        if pooling:
            padding = min(padding, (dilation * (kernel - 1) + 1) // 2)
            size = pool_output_size(size, kernel, stride, padding, dilation, ceil_mode=ceil_mode)
        else:
            size = conv_output_size(size, kernel, stride, padding, dilation)
        sizes.append(size)
    assert all(len(s.atoms(sp.floor, sp.ceiling)) <= 1 and not s.has(sp.Min) for s in sizes)
    for side in sides:
        n = side
        for (pooling, kernel, stride, padding, dilation, ceil_mode), size in zip(
            chain, sizes, strict=True
        ):
            if pooling:
                padding = min(padding, (dilation * (kernel - 1) + 1) // 2)
            n = _pytorch_size(n, pooling, kernel, stride, padding, dilation, ceil_mode)
            if n is None or n < 1:
                break
            assert size.xreplace({H: side}) == n


monomial = st.sampled_from([sp.Integer(1), H, W, B * H, H**2, H * W**2])


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([sp.floor, sp.ceiling]),
    st.lists(st.tuples(st.integers(-20, 20), st.integers(1, 8), monomial), min_size=1, max_size=5),
)
def test_rounding_a_polynomial_is_the_expression_sympy_builds(rounding, terms):
    """The shortcut past sympy's sign queries builds sympy's expression, argument for argument."""
    argument = sp.Add(*(sp.Rational(p, q) * m for p, q, m in terms))
    quick = _rounded_polynomial(rounding, argument)
    expected = rounding(argument)
    assert quick == expected and type(quick) is type(expected) and quick.args == expected.args
