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
from typing import TypeAlias, cast

import sympy as sp
from sympy.core.cache import cacheit

from memtheory.max_pruning import provably_nonnegative

__all__ = [
    "collapse_rounding",
    "conv_output_size",
    "effective_kernel",
    "pool_output_size",
    "window_steps",
]

Size: TypeAlias = sp.Expr | int
Rounding: TypeAlias = type[sp.floor] | type[sp.ceiling]


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


@cacheit
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


@cacheit
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
        for every whole :math:`n`, and the second alone where :math:`p + s > d(k-1)+1` and
        the stride is a whole number; the ``Min`` is kept only where neither is known).

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
    n, padding = sp.sympify(size), sp.sympify(padding)
    step = sp.sympify(stride)
    span = sp.sympify(effective_kernel(kernel, dilation))
    slack = padding + step - span
    if slack.is_nonpositive:
        # ceil((n + 2p - span + s)/s) <= ceil((n + p)/s) = floor((n + p - 1)/s) + 1 for every
        # whole n when p + s <= span: the last window always starts inside, and the size
        # stays one rounding deep instead of doubling with each pooling.
        return _rounded(sp.ceiling, (n + 2 * padding - span) / step) + 1
    last_start_inside = _rounded(sp.floor, (n + padding - 1) / step) + 1
    if slack.is_positive and n.is_integer and step.is_integer:
        # The other way round: ceil(m/s) = floor((m + s - 1)/s) for whole m, and
        # n + 2p - span + s - 1 > n + p - 1, so the last window's start is the smaller.
        return last_start_inside
    rounded_up = _rounded(sp.ceiling, (n + 2 * padding - span) / step)
    return sp.Min(rounded_up + 1, last_start_inside)


def _rounded(rounding: Rounding, argument: sp.Expr) -> sp.Expr:
    """Return ``rounding(argument)``, one rounding deep, without re-walking nested floors.

    A rounding of a rounding is first collapsed (:func:`collapse_rounding`), so
    the sizes after a chain of strided layers hold one floor each, not one per
    layer. sympy's ``floor`` then inspects its whole argument (sign,
    number-ness, free symbols) every time it is built, so the functions at the
    top of the argument are replaced by dummies with the same assumptions
    (integer, sign), sympy rounds that, and the result is rebuilt with each new
    floor left as sympy returned it (not evaluated a second time).

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> _rounded(sp.floor, sp.floor(H / 2) / 2 - 1)
    floor(H/4) - 1
    >>> _rounded(sp.floor, sp.floor(H / 2) * 3 / 2)
    floor(3*floor(H/2)/2)
    """
    rounding, argument = collapse_rounding(rounding, argument)
    inner = dict.fromkeys(
        atom
        for term in sp.Add.make_args(argument)
        for factor in sp.Mul.make_args(term)
        for atom in (factor.as_base_exp()[0],)
        if atom.is_Function
    )
    if not inner:
        quick = _rounded_polynomial(rounding, argument)
        return rounding(argument) if quick is None else quick
    proxies = {atom: _proxy(position, _facts(atom)) for position, atom in enumerate(inner)}
    stand_in = argument.xreplace(proxies)
    if stand_in.is_integer:  # sympy returns an integer argument as it is
        return argument
    result = rounding(stand_in)
    return _rebuilt(result, {proxy: atom for atom, proxy in proxies.items()})


def collapse_rounding(rounding: Rounding, argument: sp.Expr) -> tuple[Rounding, sp.Expr]:
    r"""Return the rounding and argument with inner roundings collapsed: the same value everywhere.

    For a positive integer :math:`b`, an integer :math:`m` and any real :math:`y`,

    .. math::
        \left\lfloor \frac{\lfloor y \rfloor + m}{b} \right\rfloor
            = \left\lfloor \frac{y + m}{b} \right\rfloor, \qquad
        \left\lceil \frac{\lceil y \rceil + m}{b} \right\rceil
            = \left\lceil \frac{y + m}{b} \right\rceil,

    (:math:`\lfloor y \rfloor + m = \lfloor y + m \rfloor`, and an integer
    :math:`q b` is at most :math:`\lfloor z \rfloor` exactly when it is at most
    :math:`z`); and the other rounding of a whole number over :math:`b` is
    :math:`\lceil j/b \rceil = \lfloor (j + b - 1)/b \rfloor`,
    :math:`\lfloor j/b \rfloor = \lceil (j - b + 1)/b \rceil`. So a strided
    layer applied to a size that is already a floor (or ceiling) plus whole
    numbers rounds once: a chain of 2x2 poolings over ``H`` gives
    ``floor(H/4)``, ``floor(H/8)``, ... instead of floors nested as deep as the
    chain. Anything else (a rounding with a coefficient other than
    :math:`1/b`, or a rest that is not provably whole) is returned as it is.

    Parameters
    ----------
    rounding : sympy.floor or sympy.ceiling
        The rounding about to be applied to ``argument``.
    argument : sympy expression

    Returns
    -------
    (rounding, argument)
        To be rounded instead; ``rounding`` changes where the inner rounding
        was the other one.

    Examples
    --------
    >>> from memtheory.symbols import H
    >>> collapse_rounding(sp.floor, sp.floor(H / 2 - sp.Rational(1, 2)) / 2 - sp.Rational(1, 2))
    (floor, H/4 - 3/4)
    >>> collapse_rounding(sp.ceiling, sp.floor(H / 2) / 2)
    (floor, H/4 + 1/2)
    """
    while True:
        found = _inner_rounding(argument)
        if found is None:
            return rounding, argument
        inner, divisor, whole = found
        shift = whole
        if inner.func is not rounding:
            shift += divisor - 1 if rounding is sp.ceiling else 1 - divisor
            rounding = cast(Rounding, inner.func)
        argument = (inner.args[0] + shift) / divisor


def _inner_rounding(argument: sp.Expr) -> tuple[sp.Expr, int, sp.Expr] | None:
    """Return ``(r, b, m)`` where ``argument = (r + m)/b``: a rounding, a positive integer, a whole.

    ``None`` if no rounding in the sum has a coefficient ``1/b`` (``b > 1``) with the rest
    whole over it.
    """
    terms = sp.Add.make_args(argument)
    for position, term in enumerate(terms):
        coefficient, factor = term.as_coeff_Mul()
        if not (
            isinstance(factor, (sp.floor, sp.ceiling))
            and coefficient.is_Rational
            and coefficient.p == 1
            and coefficient.q > 1  # over 1, the argument is whole: _rounded keeps it as it is
        ):
            continue
        divisor = int(coefficient.q)
        whole = sp.Add(*terms[:position], *terms[position + 1 :]) * divisor
        if whole.is_Integer or (not whole.is_Number and _provably_whole(whole)):
            return factor, divisor, whole
    return None


def _rounded_polynomial(rounding: Rounding, argument: sp.Expr) -> sp.Expr | None:
    """Return ``rounding(argument)`` as sympy writes it, for a polynomial in integer symbols.

    sympy takes the whole terms out (an integer, or an integer times integer
    symbols) and rounds the rest, left unevaluated; but first it asks for the
    sign of the argument, which costs tens of milliseconds when a coefficient
    is as small as :math:`2^{-80}` (the side after 80 poolings). ``None``
    where a term is not a rational times integer symbols.
    """
    constant, variable = argument.as_coeff_Add()
    if not constant.is_Rational:
        return None
    whole: list[sp.Expr] = []
    rest: list[sp.Expr] = []
    for term in sp.Add.make_args(variable):
        coefficient, factor = term.as_coeff_Mul()
        if not (coefficient.is_Rational and _provably_whole(factor)):
            return None
        (whole if coefficient.is_Integer else rest).append(term)
    if not rest:  # a whole polynomial plus a number
        return sp.Add(*whole) + rounding(constant)
    (whole if constant.is_Integer else rest).append(constant)
    return sp.Add(*whole) + rounding(sp.Add(*rest), evaluate=False)


def _provably_whole(expression: sp.Expr) -> bool:
    """Whether every term is an integer times integer atoms (size symbols, roundings, ...)."""
    for term in sp.Add.make_args(expression):
        coefficient, rest = term.as_coeff_Mul()
        if not coefficient.is_Integer:
            return False
        for factor in sp.Mul.make_args(rest):
            base, exponent = factor.as_base_exp()
            whole_power = exponent.is_Integer and exponent >= 0
            rounded = isinstance(base, (sp.floor, sp.ceiling))
            if not (whole_power and (rounded or base.is_integer)):
                return False
    return True


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
