"""What a trace cannot follow, said plainly: the operation, the module, and what to do.

Fake tensors carry shapes, not values. An operation whose output shape
depends on the values (``nonzero``, ``unique``, boolean-mask indexing), code
that reads a value (``.item()``, ``if (x > 0).any():``), and an operator with
no fake ("meta") implementation (a custom C++ extension) cannot be traced;
:func:`untraceable` turns PyTorch's exception into a
:class:`~memtheory.errors.UntraceableError` naming both.
"""

from __future__ import annotations

import sys

from memtheory.errors import MemtheoryError, UntraceableError

__all__ = ["failed", "located", "untraceable"]

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
        _locate(error, op, where)
        return error
    return UntraceableError(f"{op} in {where} {reason}{_MEASURE}.")


def _locate(error: BaseException, op: str, where: str) -> None:
    """Note on ``error`` the innermost operation and moment it came from (the first note wins)."""
    if getattr(error, "_memtheory_where", None) is None:
        try:
            error._memtheory_where = (op, where)  # type: ignore[attr-defined]
        except AttributeError:  # an exception type with __slots__: nothing to note
            pass


def located(error: BaseException) -> str:
    """Say where ``error`` was raised in the traced step: ``"aten.cat.default in forward up"``.

    Examples
    --------
    >>> error = RuntimeError("sizes differ")
    >>> untraceable(error, "aten.cat.default", "forward up") is error
    True
    >>> located(error)
    'aten.cat.default in forward up'
    >>> located(ValueError())
    "the model's code"
    """
    op, where = getattr(error, "_memtheory_where", None) or ("", "")
    if op and op != "code" and where:
        return f"{op} in {where}"
    return f"code in {where}" if where else "the model's code"


def _said(error: BaseException) -> str:
    """Return the first line of PyTorch's message, at most 200 characters."""
    text = str(error).strip().splitlines()
    first = text[0] if text else type(error).__name__
    return first if len(first) <= 200 else first[:197] + "..."


def _advice(error: BaseException) -> str:
    text = str(error).lower()
    if isinstance(error, RecursionError):
        return (
            f"The step passed Python's recursion limit ({sys.getrecursionlimit()}): fix a "
            "forward that calls itself without end, or raise the limit with "
            "sys.setrecursionlimit() if the model is only deep."
        )
    if "cuda" in text or "device" in text:
        return (
            "trace follows CPU storages, as memtheory.torch.measure does: leave device moves "
            "out of forward (move tensors with x.to(self.weight.device), not x.to('cuda')), "
            "or measure the step on the GPU."
        )
    if "numpy" in text or "tolist" in text or ".item" in text:
        return (
            "The code reads tensor values (.numpy(), .tolist()), which fake tensors do not "
            "have: keep the computation in torch, or " + _MEASURE + "."
        )
    return (
        "Check that the model runs one real step on the example inputs; if it does, "
        + _MEASURE
        + "."
    )


def failed(error: BaseException, sizes: str = "") -> UntraceableError:
    """Return the memtheory error for a raw exception the traced step raised.

    Parameters
    ----------
    error : BaseException
        What the step raised on fake tensors (PyTorch's or the model's own).
    sizes : str, optional
        Which sizes were tried, for the message (``"at every size tried near B=4, S=16"``).

    Examples
    --------
    >>> error = RuntimeError("PyTorch is not linked with support for cuda devices")
    >>> _ = untraceable(error, "aten._to_copy.default", "forward encoder")
    >>> print(failed(error))
    aten._to_copy.default in forward encoder failed on fake tensors (RuntimeError: PyTorch is \
not linked with support for cuda devices). trace follows CPU storages, ...
    """
    from memtheory.torch.tracing.budget import overdue

    ran_out = overdue()  # the budget's error, lost in a tensor operator's TypeError handling
    if ran_out is not None:
        return ran_out
    at = f" {sizes}" if sizes else ""
    return UntraceableError(
        f"{located(error)} failed on fake tensors{at} ({type(error).__name__}: {_said(error)}). "
        + _advice(error)
    )
