"""Trace a PyTorch training step on fake tensors into exact memory formulas.

====================  ====================================================================
module                job
====================  ====================================================================
api                   :func:`trace`: the entry point
shapes                a module traced from shapes alone: ``(B, 3, H, H)`` in, a footprint out
sizes                 the user's size symbols, PyTorch's shape expressions in plain sympy
fakes                 a model's parameters and its example inputs (views made fresh) as fake tensors
clashes               a ``dims`` size the model fixes too (3 channels, a width of 64), named
storages              following storages op by op, bytes as polynomials
plain_cache           PyTorch's fake-tensor cache, skipped where a size is a floor
cache_keys            that cache's keys, each tensor's metadata written straight in
first_hit_checks      that cache's entries checked on their first hit, not when made
unsafe_views          ``aten._unsafe_view`` faked through that cache as the ``aten.view`` it is
cached_views          a view rebuilt from that cache without a storage it throws away
numbers_memo          PyTorch's symbolic size reads ask sympy's ``is_number`` once per expression
size_arithmetic_memo  each sum, product and comparison of symbolic sizes worked out once
rewrites              a few functions run by their size-generic operator, sizes kept symbolic
running_statistics    batch norm in training without the fake update of its running statistics
modules               which module runs: moment labels, per-module records
step                  the training step and inference pass, as ``measure`` runs them
kernels               where CPU kernels return other dtypes or storages than fake kernels
kernels_onednn        oneDNN's LSTM workspace, to the byte (pages, hence ceilings)
opaque                kernels no fake tensor can size, refused by name
quiet                 PyTorch's fake-tensor error log silenced while trace words the errors
dtype_checks          the dtype checks CPU kernels make and fake kernels skip
branch_values         input values that decide a branch (a Hugging Face all-ones mask)
guards                where the formulas hold (PyTorch's guards), and sizes the code fixed
verify                conditions traced beyond, and dropped where the bytes are the same
fit                   exact polynomials from traces at several fixed sizes, when code fixes sizes
layout                a traced step laid out as numbers for a fit, and the fit read back
totals                a step's totals fitted where its operations change with the sizes
region                where a fitted recurrent step's formulas hold, checked by tracing
ones                  a size of 1 the formulas miss, answered by a trace taken there
result                :class:`TracedMemory`, the Footprint a trace returns
kept_conditions       values derived from a result keep its conditions: arithmetic, subs, pickles
errors                what cannot be traced, said with the operator and the module
budget                a time budget: a forward that hangs ends in a clear error
====================  ====================================================================
"""

from memtheory.torch.tracing.api import trace
from memtheory.torch.tracing.result import ModuleRow, TracedMemory

__all__ = ["ModuleRow", "TracedMemory", "trace"]
