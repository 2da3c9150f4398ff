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

from functools import lru_cache
from typing import TypeAlias

import sympy as sp

from memtheory.max_pruning import provably_nonnegative

__all__ = ["conv_output_size", "effective_kernel", "pool_output_size", "window_steps"]

Size: TypeAlias = sp.Expr | int


def effective_kernel(kernel: Size, dilation: Size = 1) -> sp.Expr:
    """Return the span of a dilated window: :math:`d(k-1)+1` input positions.

    Examples
    --------
    >>> effective_kernel(3, dilation=2)
    5
    """
    return sp.sympify(dilation) * (sp.sympify(kernel) - 1) + 1


def window_steps(
    size: Size, kernel: Size, stride: Size = 1, padding: Size = 0, dilation: Size = 1
) -> sp.Expr:
    r"""Return :math:`(n + 2p - d(k-1) - 1) / s`: the strides a sliding window takes, unrounded.

    The one sliding-window formula: a convolution floors it and adds 1
    (:func:`conv_output_size`), a pooling layer in ``ceil_mode`` rounds it up
    (:func:`pool_output_size`), and the exercises' rounding misconception rounds
    it half up.

    Parameters
    ----------
    size, kernel, stride, padding, dilation : int or sympy expression
        As in :class:`torch.nn.Conv2d`; ``padding`` is added on each side.

    Examples
    --------
    >>> window_steps(25, 2, stride=2)
    23/2
    """
    size, padding, stride = sp.sympify(size), sp.sympify(padding), sp.sympify(stride)
    return (size + 2 * padding - effective_kernel(kernel, dilation)) / stride


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
    return _rounded(sp.floor, window_steps(size, kernel, stride, padding, dilation)) + 1


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
        :math:`\min(\lceil (n+2p-d(k-1)-1)/s \rceil + 1, \lfloor (n+p-1)/s \rfloor + 1)`;
        the first term alone where :math:`p + s \le d(k-1)+1`, which makes it the smaller
        for every whole :math:`n`).

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
    rounded_up = _rounded(sp.ceiling, window_steps(size, kernel, stride, padding, dilation))
    size, padding, stride = sp.sympify(size), sp.sympify(padding), sp.sympify(stride)
    span = sp.sympify(effective_kernel(kernel, dilation))
    rounded_up = _rounded(sp.ceiling, (size + 2 * padding - span) / stride)
    if (padding + stride - span).is_nonpositive:
        # ceil((n + 2p - span + s)/s) <= ceil((n + p)/s) = floor((n + p - 1)/s) + 1 for every
        # whole n when p + s <= span: the last window always starts inside, and the size
        # stays one rounding deep instead of doubling with each pooling.
        return rounded_up + 1
    last_start_inside = _rounded(sp.floor, (size + padding - 1) / stride)
    return sp.Min(rounded_up + 1, last_start_inside + 1)


def _rounded(rounding: type[sp.floor] | type[sp.ceiling], argument: sp.Expr) -> sp.Expr:
    """Return ``rounding(argument)`` as sympy gives it, without re-walking nested floors.

    sympy's ``floor`` inspects its whole argument (sign, number-ness, free
    symbols) every time it is built; in a deep network the argument holds the
    previous layer's size, itself a floor of a floor ..., so a network's
    shapes would cost time quadratic in its depth. The functions at the top of
    the argument are replaced by dummies with the same assumptions (integer,
    sign), sympy rounds that, and the result is rebuilt with each new floor
    left as sympy returned it (not evaluated a second time).

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> _rounded(sp.floor, sp.floor(H / 2) / 2 - 1)
    floor(floor(H/2)/2) - 1
    """
    inner = dict.fromkeys(
        atom
        for term in sp.Add.make_args(argument)
        for factor in sp.Mul.make_args(term)
        for atom in (factor.as_base_exp()[0],)
        if atom.is_Function
    )
    if not inner:
        return rounding(argument)
    proxies = {atom: _proxy(position, _facts(atom)) for position, atom in enumerate(inner)}
    stand_in = argument.xreplace(proxies)
    if stand_in.is_integer:  # sympy returns an integer argument as it is
        return argument
    result = rounding(stand_in)
    return _rebuilt(result, {proxy: atom for atom, proxy in proxies.items()})


@lru_cache(maxsize=1024)
def _facts(atom: sp.Expr) -> tuple[tuple[str, bool], ...]:
    """Return the facts about an atom that sympy's rounding looks at: integer, nonnegative.

    Nonnegative only where the terms show it: asking sympy for the sign would
    walk down every nested floor again.
    """
    rounded = isinstance(atom, sp.floor | sp.ceiling)
    facts = {"integer": True if rounded else atom.is_integer}
    if rounded and provably_nonnegative(atom.args[0]):
        facts["nonnegative"] = True
    return tuple((fact, value) for fact, value in facts.items() if value is not None)


@lru_cache(maxsize=256)
def _proxy(position: int, facts: tuple[tuple[str, bool], ...]) -> sp.Dummy:
    """Return the stand-in for the ``position``-th atom of an argument with these facts.

    The same stand-ins serve every layer, so the rounding of, say, ``d/2 - 1``
    is worked out once and then found in sympy's cache.
    """
    return sp.Dummy(f"atom{position}", **dict(facts))


def _rebuilt(expression: sp.Expr, atoms: dict[sp.Expr, sp.Expr]) -> sp.Expr:
    if expression in atoms:
        return atoms[expression]
    if not expression.args:
        return expression
    arguments = [_rebuilt(argument, atoms) for argument in expression.args]
    if isinstance(expression, (sp.floor, sp.ceiling)):  # already rounded by sympy: keep as is
        return expression.func(*arguments, evaluate=False)
    return expression.func(*arguments)
