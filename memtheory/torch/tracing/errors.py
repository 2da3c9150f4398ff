"""What a trace cannot follow, said plainly: the operation, the module, and what to do.

Fake tensors carry shapes, not values. An operation whose output shape
depends on the values (``nonzero``, ``unique``, boolean-mask indexing), code
that reads a value (``.item()``, ``if (x > 0).any():``), and an operator with
no fake ("meta") implementation (a custom C++ extension) cannot be traced;
:func:`untraceable` turns PyTorch's exception into a
:class:`~memtheory.errors.UntraceableError` naming both.
"""

from __future__ import annotations

from memtheory.errors import MemtheoryError, UntraceableError

__all__ = ["untraceable"]

_MEASURE = "measure the model at a fixed size with memtheory.torch.measure instead"


def untraceable(error: BaseException, op: str, where: str) -> BaseException:
    """Return the memtheory error for PyTorch's ``error`` in ``op`` at ``where``, or ``error``.

    Parameters
    ----------
    error : BaseException
        What PyTorch raised while running ``op`` on fake tensors.
    op : str
        The operator (``"aten.nonzero.default"``); empty when not known.
    where : str
        The moment: phase and module (``"forward encoder.layer.0"``).

    Examples
    --------
    >>> from torch._subclasses.fake_tensor import DynamicOutputShapeException
    >>> import torch
    >>> print(untraceable(DynamicOutputShapeException(torch.ops.aten.nonzero.default),
    ...                   "aten.nonzero.default", "forward head"))
    aten.nonzero.default in forward head returns a shape that depends on the tensor's values \
(data-dependent), which fake tensors do not have: rewrite the model so that shapes follow the \
input sizes only (e.g. a mask multiplied in rather than boolean indexing), or measure the model \
at a fixed size with memtheory.torch.measure instead.
    """
    if isinstance(error, MemtheoryError):
        return error
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    from memtheory.torch.tracing.sizes import DataDependentSize

    named = getattr(error, "func", None)
    op = op or (str(named) if named is not None else "code")
    if isinstance(error, DynamicOutputShapeException | DataDependentSize):
        reason = (
            "returns a shape that depends on the tensor's values (data-dependent), which fake "
            "tensors do not have: rewrite the model so that shapes follow the input sizes only "
            "(e.g. a mask multiplied in rather than boolean indexing), or "
        )
    elif isinstance(error, DataDependentOutputException | GuardOnDataDependentSymNode):
        reason = (
            "reads a tensor's values (.item(), a branch on a tensor, ...), which fake tensors do "
            "not have: make the branch depend on sizes only, or "
        )
    elif isinstance(error, UnsupportedOperatorException):
        reason = (
            "has no fake (meta) implementation, so its output size is unknown without running "
            "it: register one with torch.library.register_fake, or "
        )
    else:
        return error
    return UntraceableError(f"{op} in {where} {reason}{_MEASURE}.")
