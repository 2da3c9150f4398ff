"""The training loop's own tensors: what a loop holds besides the model's step.

A plain loop (``loss = loss_fn(model(x), y); loss.backward(); opt.step()``)
holds the input, the targets and the loss, which the convention counts
already. Hugging Face's ``Trainer`` (transformers 5.24, with accelerate 1.15)
holds a few 0-dim tensors more, read from its source:

=============================  =====================================  ==========================
tensor                         made at (and why it lives)             dtype
=============================  =====================================  ==========================
``Trainer._tr_loss``           ``trainer.py:1647``                    fp32 (torch's default)
                               ``torch.tensor(0.0)``, the running
                               loss, added to in place every step
``num_items_in_batch``         ``trainer.py:2363`` the label tokens   fp32 (int64 count / int)
                               counted over the accumulated batch,
                               divided by the tensor/context/sequence
                               parallel size; kept by ``_run_epoch``
                               (``trainer.py:1881``) for the whole
                               optimizer step
``grad_norm``                  ``trainer.py:1939-1940``               the gradients' dtype
                               ``clip_grad_norm_``'s total norm       (``torch/nn/utils/
                               (``max_grad_norm > 0``) or the same    clip_grad.py:105``:
                               norm with ``max_norm=inf``             ``vector_norm`` of the
                               (``trainer.py:2796``) otherwise: the   per-gradient norms)
                               previous step's lives in a local of
                               ``_run_epoch`` until the next is made
``tr_loss_step`` (previous)    ``trainer.py:1917``; ``training_step`` the loss's (fp32:
                               returns ``loss.detach()``              ``ForCausalLMLoss``
                               (``trainer.py:2128``), which shares    upcasts the logits)
                               the loss's storage: the previous
                               micro-batch's lives until the next
                               ``training_step`` returns
``loss / 1``                   accelerate ``accelerator.py:2851``     the loss's
                               ``loss / self.gradient_accumulation_
                               steps`` (the Trainer gives accelerate
                               ``num_steps=1``, ``trainer.py:825``):
                               the root of the backward pass, alive
                               while ``backward()`` runs
=============================  =====================================  ==========================

None of them depends on ``max_grad_norm`` (the norm is taken either way),
``logging_steps`` (logging reads ``_tr_loss`` with ``.item()`` and zeroes it
in place) or ``gradient_accumulation_steps``. The previous ``grad_norm`` is
local to one epoch (``trainer.py:1844`` sets it to None as an epoch starts),
so the first step of an epoch holds one scalar fewer: the steady state is a
step inside an epoch. Two scalars of the Trainer's loss are transient and
never at a peak: ``fixed_cross_entropy`` (``loss_utils.py:42-47``) sums the
token losses and divides by ``num_items_in_batch`` (the sum is freed after
the division, while the loss's backward holds a B x S x V gradient), and
the backward of that division and of accelerate's makes one scalar gradient
each, freed before the logits' gradient is made.

Gradient clipping runs between the backward pass and the optimizer step:
:func:`clipping_temporaries` is what it holds at its most.

PyTorch Lightning's automatic optimization (Lightning 2.6.6,
``Trainer(precision="bf16-mixed")``, ``lightning/pytorch/...``) orders the
step differently and keeps one scalar more:

- ``loops/optimization/automatic.py:130-142`` ``Closure.closure`` runs
  ``training_step`` first and ``zero_grad`` after it (``core/module.py:1391``
  ``optimizer.zero_grad()``, ``set_to_none=True``), then the backward pass:
  the previous step's gradients are alive through the whole forward pass and
  the loss (:func:`zero_grad_after_forward`).
- ``automatic.py:80-83, 56-59``: ``ClosureResult`` replaces the loss by
  ``closure_loss = loss / accumulate_grad_batches`` (the loss itself is then
  freed: the division's backward keeps no tensor) and keeps a detached clone,
  ``loss.detach().clone()``; both live until ``consume_result``
  (``automatic.py:194``), after the optimizer step. One scalar in the loss's
  dtype more than a plain loop, from the forward's end to the step's end.
- ``plugins/precision/amp.py:113-114``: ``torch.autocast(device, dtype,
  cache_enabled=False)``: a cast of a weight or bias that no backward node
  keeps (every bias; the first layer's weight when its input needs no
  gradient) is freed once its layer ran, not at the forward's end
  (:func:`autocast_cache`).
- ``plugins/precision/precision.py:122-123``: the closure runs inside
  ``optimizer.step(closure=...)``, which holds what the closure returns (the
  clone) while it updates; no clipping unless ``gradient_clip_val`` is set.
- ``loops/fetchers.py:104-108``: a DataLoader with a length is not
  prefetched; only the current batch is alive.

Examples
--------
>>> scalars = loop_scalars("hf-trainer", loss_bytes=4, gradient_bytes=2)
>>> scalars.total, sorted(scalars.whole_step)
(18, ['Trainer._tr_loss', 'grad_norm', 'num_items_in_batch'])
>>> loop_scalars("plain", loss_bytes=4, gradient_bytes=4).total
0
>>> loop_scalars("lightning", loss_bytes=4, gradient_bytes=4).after_forward
{'ClosureResult.loss (detached clone)': 4}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import sympy as sp

from memtheory.errors import InvalidArgumentError

__all__ = [
    "LOOPS", "Loop", "LoopScalars", "autocast_cache", "clipping_temporaries", "loop_scalars",
    "zero_grad_after_forward",
]

Loop = Literal["plain", "hf-trainer", "lightning"]

LOOPS: dict[str, str] = {
    "plain": "a plain loop: it holds the input, the targets and the loss, nothing else",
    "hf-trainer": "transformers' Trainer (5.24, accelerate 1.15): its bookkeeping scalars "
    "(running loss, token count, gradient norm, previous loss, accelerate's scaled loss) "
    "and gradient clipping",
    "lightning": "PyTorch Lightning's automatic optimization (2.6): zero_grad after "
    "training_step (the previous gradients live through the forward), a clone of the loss "
    "kept to the step's end, autocast without its cache of weight casts",
}
"""The training loops the convention can assume, with what each holds."""

_FP32 = 4
"""Bytes of torch's default dtype (float32): ``torch.tensor(0.0)`` and an int64 / int."""


@dataclass(frozen=True)
class LoopScalars:
    """The loop's own 0-dim tensors, by when they are alive, in bytes.

    Attributes
    ----------
    whole_step : mapping of str to sympy expression
        Alive through the whole steady-state step.
    until_backward_ends : mapping of str to sympy expression
        Alive from the step's start until the backward pass returns.
    in_backward : mapping of str to sympy expression
        Made just before the backward pass, freed as it returns.
    after_forward : mapping of str to sympy expression
        Made as the forward pass (and the loss) ends, alive to the step's end.
    """

    whole_step: dict[str, sp.Expr] = field(default_factory=dict)
    until_backward_ends: dict[str, sp.Expr] = field(default_factory=dict)
    in_backward: dict[str, sp.Expr] = field(default_factory=dict)
    after_forward: dict[str, sp.Expr] = field(default_factory=dict)

    @property
    def total(self) -> sp.Expr:
        """Bytes of all of them (alive together during the backward pass)."""
        parts = (*self.whole_step.values(), *self.until_backward_ends.values(),
                 *self.in_backward.values(), *self.after_forward.values())
        return sp.Add(*parts) if parts else sp.S.Zero


def loop_scalars(loop: str, *, loss_bytes: sp.Expr | int,
                 gradient_bytes: sp.Expr | int) -> LoopScalars:
    """Return the 0-dim tensors ``loop`` holds besides the step's (see the module's table).

    Parameters
    ----------
    loop : {"plain", "hf-trainer", "lightning"}
    loss_bytes : int
        Bytes of the loss (its dtype's size).
    gradient_bytes : int
        Bytes of one element of the trainable parameters' gradients.

    Raises
    ------
    InvalidArgumentError
        For a loop not in :data:`LOOPS`.

    Examples
    --------
    >>> loop_scalars("hf-trainer", loss_bytes=4, gradient_bytes=4).in_backward
    {'loss / gradient_accumulation_steps (accelerate)': 4}
    >>> loop_scalars("keras", loss_bytes=4, gradient_bytes=4)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: loop must be one of plain, hf-trainer, ... got 'keras'.
    """
    _check(loop)
    if loop == "plain":
        return LoopScalars()
    loss, gradient = sp.sympify(loss_bytes), sp.sympify(gradient_bytes)
    if loop == "lightning":  # closure_loss replaces the loss, which the step counts already
        return LoopScalars(after_forward={"ClosureResult.loss (detached clone)": loss})
    return LoopScalars(
        whole_step={
            "Trainer._tr_loss": sp.Integer(_FP32),
            "num_items_in_batch": sp.Integer(_FP32),
            "grad_norm": gradient,
        },
        until_backward_ends={"tr_loss_step (the previous micro-batch's loss)": loss},
        in_backward={"loss / gradient_accumulation_steps (accelerate)": loss},
    )


def clipping_temporaries(loop: str, gradients: int, gradient_bytes: sp.Expr | int) -> sp.Expr:
    """Return the most bytes gradient clipping holds at once, besides the step's tensors.

    ``torch.nn.utils.clip_grad_norm_`` (PyTorch 2.13 ``clip_grad.py:88-107``)
    takes one 0-dim norm per gradient (``torch._foreach_norm`` on CUDA, one
    ``vector_norm`` each on CPU: the same storages), stacks them into one
    vector and takes its norm, which replaces the previous ``grad_norm`` (set
    to None first, ``trainer.py:1937``): at that moment the norms and their
    stack are alive, two 0-dim tensors per gradient. Scaling the gradients
    afterwards is in place. A plain loop clips nothing.

    Examples
    --------
    >>> clipping_temporaries("hf-trainer", gradients=21, gradient_bytes=4)
    168
    >>> clipping_temporaries("lightning", gradients=21, gradient_bytes=4)
    0
    """
    _check(loop)
    if loop != "hf-trainer":  # Lightning clips only when gradient_clip_val is set
        return sp.S.Zero
    return 2 * gradients * sp.sympify(gradient_bytes)


def zero_grad_after_forward(loop: str) -> bool:
    """Return whether ``loop`` frees the previous gradients after the forward, not before.

    Lightning's closure runs ``training_step`` and then ``zero_grad``
    (``loops/optimization/automatic.py:130-142``), so the previous step's
    gradients are alive through the forward pass and the loss.

    Examples
    --------
    >>> zero_grad_after_forward("lightning"), zero_grad_after_forward("hf-trainer")
    (True, False)
    """
    _check(loop)
    return loop == "lightning"


def autocast_cache(loop: str) -> bool:
    """Return whether ``loop`` runs ``torch.autocast`` with its cache of weight casts.

    torch's default is ``cache_enabled=True``; Lightning's ``MixedPrecision``
    plugin turns it off (``plugins/precision/amp.py:113-114``).

    Examples
    --------
    >>> autocast_cache("plain"), autocast_cache("lightning")
    (True, False)
    """
    _check(loop)
    return loop != "lightning"


def _check(loop: str) -> None:
    """Raise :class:`InvalidArgumentError` for a loop not in :data:`LOOPS`."""
    if loop not in LOOPS:
        raise InvalidArgumentError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}.")
