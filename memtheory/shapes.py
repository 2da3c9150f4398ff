r"""Output-size formulas of sliding-window layers (convolution and pooling).

One spatial dimension of size :math:`n`, a window of :math:`k` taps spaced by
the dilation :math:`d`, moved in steps of the stride :math:`s` over the input
padded by :math:`p` on each side, fits

.. math:: n_\text{out} = \left\lfloor \frac{n + 2p - d(k-1) - 1}{s} \right\rfloor + 1

times. Pooling can round up instead (``ceil_mode``), with PyTorch's rule that
the last window must start inside the input or its left padding.

Derived in the book's chapter "Shapes and activations".

Examples
--------
>>> conv_output_size(50, 3, padding=1)
50
>>> pool_output_size(25, 2, stride=2)
12
>>> pool_output_size(25, 2, stride=2, ceil_mode=True)
13
>>> from memtheory.symbols import H
>>> conv_output_size(H, 3, stride=2, padding=1)
floor(H/2 - 1/2) + 1
"""

from __future__ import annotations

from typing import TypeAlias

import sympy as sp

__all__ = ["conv_output_size", "effective_kernel", "pool_output_size"]

Size: TypeAlias = sp.Expr | int


def effective_kernel(kernel: Size, dilation: Size = 1) -> sp.Expr:
    """Return the span of a dilated window: :math:`d(k-1)+1` input positions.

    Examples
    --------
    >>> effective_kernel(3, dilation=2)
    5
    """
    return sp.sympify(dilation) * (sp.sympify(kernel) - 1) + 1


def conv_output_size(
    size: Size, kernel: Size, stride: Size = 1, padding: Size = 0, dilation: Size = 1
) -> sp.Expr:
    """Return how many window positions fit along one dimension (floor mode).

    Parameters
    ----------
    size, kernel, stride, padding, dilation : int or sympy expression
        As in :class:`torch.nn.Conv2d`; ``padding`` is added on each side.

    Examples
    --------
    >>> conv_output_size(224, 7, stride=2, padding=3)
    112
    """
    size, padding, stride = sp.sympify(size), sp.sympify(padding), sp.sympify(stride)
    return sp.floor((size + 2 * padding - effective_kernel(kernel, dilation)) / stride) + 1


def pool_output_size(
    size: Size,
    kernel: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    *,
    ceil_mode: bool = False,
) -> sp.Expr:
    r"""Return the output size of a pooling window along one dimension.

    Parameters
    ----------
    size, kernel, padding, dilation : int or sympy expression
        As in :class:`torch.nn.MaxPool2d`.
    stride : int or sympy expression, optional
        Defaults to ``kernel``, as in PyTorch.
    ceil_mode : bool
        Round up instead of down, but never start a window beyond the input
        and its left padding (so the result is
        :math:`\min(\lceil (n+2p-d(k-1)-1)/s \rceil + 1, \lfloor (n+p-1)/s \rfloor + 1)`).

    Examples
    --------
    >>> pool_output_size(5, 2, stride=2, ceil_mode=True)
    3
    >>> pool_output_size(4, 2, stride=2, padding=1, ceil_mode=True)
    3
    """
    stride = kernel if stride is None else stride
    if not ceil_mode:
        return conv_output_size(size, kernel, stride, padding, dilation)
    size, padding, stride = sp.sympify(size), sp.sympify(padding), sp.sympify(stride)
    rounded_up = sp.ceiling((size + 2 * padding - effective_kernel(kernel, dilation)) / stride) + 1
    last_start_inside = sp.floor((size + padding - 1) / stride) + 1
    return sp.Min(rounded_up, last_start_inside)
