"""Gradient accumulation in ``estimate``: micro-batches per optimizer step and the global batch.

With :math:`m > 1` micro-batches per optimizer step, the gradients of the
first micro-batch stay alive through the forward and backward passes of the
others (``zero_grad`` runs only after the optimizer step), so every moment of
the step before the optimizer's holds them: the step's timeline is raised by
the gradients (:func:`accumulated`). In the backward pass some of them are
counted already, so the raised moments there are an upper bound. The
activations stay those of one micro-batch (chapter "Batch size",
:mod:`memtheory.techniques.accumulation`). Without a timeline (the breakdown
convention sums every component, gradients included), nothing changes.

Examples
--------
>>> accumulation_steps(batch=4, data=2, grad_accum=None, global_batch=64)
8
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from memtheory._shown import shown
from memtheory.conventions.autograd.live_bytes import SumBuilder
from memtheory.errors import InvalidArgumentError
from memtheory.memory_breakdown import MemoryBreakdown

__all__ = ["accumulated", "accumulation_steps"]


def accumulation_steps(
    *, batch: int, data: int, grad_accum: int | None, global_batch: int | None
) -> int:
    """Return the micro-batches per optimizer step, from ``grad_accum`` or ``global_batch``.

    The global batch is ``batch * grad_accum * data`` (micro-batch per GPU,
    accumulation steps, data-parallel GPUs); given one, the other follows,
    and both must agree when both are given.

    Examples
    --------
    >>> accumulation_steps(batch=8, data=1, grad_accum=4, global_batch=None)
    4
    >>> accumulation_steps(batch=8, data=1, grad_accum=None, global_batch=20)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: --global-batch 20 is not a multiple of ...
    """
    for value, name in ((grad_accum, "grad_accum"), (global_batch, "global_batch")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise InvalidArgumentError(
                f"{name} must be a positive whole number, got {shown(value)}."
            )
    per_step = batch * data
    if global_batch is None:
        return grad_accum or 1
    if global_batch % per_step:
        raise InvalidArgumentError(
            f"--global-batch {global_batch} is not a multiple of the micro-batch x data-parallel "
            f"GPUs ({batch} x {data} = {per_step}): choose a global batch that is, or another "
            "--batch."
        )
    steps = global_batch // per_step
    if grad_accum is not None and grad_accum != steps:
        raise InvalidArgumentError(
            f"--grad-accum {grad_accum} and --global-batch {global_batch} disagree: "
            f"{batch} x {grad_accum} x {data} GPUs = {batch * grad_accum * data}. Give one."
        )
    return steps


def accumulated(memory: MemoryBreakdown, steps: int) -> MemoryBreakdown:
    """Return ``memory`` with the gradients alive through every moment before the optimizer step.

    The moments from gradient clipping on hold the gradients already, and so do
    the moments where the step holds every gradient (Lightning's loop, whose
    ``zero_grad`` runs after the forward: the previous window's gradients are
    alive there in every micro-batch, accumulating or not). Under
    the Hugging Face ``Trainer``'s loop (a ``loop_scalars`` component), every
    moment also holds the other micro-batches' data: ``get_batch_samples``
    fetches the ``steps`` micro-batches of one optimizer step before the first
    runs (transformers 5.24 ``trainer.py:1881``), and they live until it ends.

    Examples
    --------
    >>> from memtheory.precision import precision
    >>> m = MemoryBreakdown({"gradients": 10, "saved_activations": 5}, "training", "autograd",
    ...     precision("fp32"), timeline={"forward x": 5, "backward x": 12, "optimizer step": 10})
    >>> dict(accumulated(m, 4).timeline)
    {'forward x': 15, 'backward x': 22, 'optimizer step': 10}
    """
    gradients = memory.components.get("gradients", 0)
    if steps == 1 or not memory.timeline or not gradients:
        return memory
    prefetched = 0
    if "loop_scalars" in memory.components:
        data = sum(memory.components.get(name, 0) for name in ("input", "targets"))
        prefetched = (steps - 1) * data
    added = {
        moment: _gradients_added(moment, memory.timeline_parts.get(moment, {}), gradients)
        for moment in memory.timeline
    }
    builder = SumBuilder()  # each moment plus what it gains, as sympy adds them (no flatten)
    timeline = {
        moment: builder.add(value, prefetched, added[moment])
        for moment, value in memory.timeline.items()
    }
    parts = {
        moment: {**alive, "gradients": alive.get("gradients", 0) + added.get(moment, 0)}
        for moment, alive in memory.timeline_parts.items()
    }
    note = (
        f"gradient accumulation over {steps} micro-batches: the gradients stay alive through "
        "the later micro-batches' forward and backward passes, added to every moment before "
        "the optimizer step (an upper bound in the backward pass, which counts some already)"
    )
    if prefetched:
        note += "; the Trainer holds all the micro-batches' data through the step"
    return replace(memory, timeline=timeline, timeline_parts=parts,
                   notes=(*memory.notes, note))


_AFTER_BACKWARD = ("optimizer", "gradient clipping")
"""The moments after the last micro-batch's backward pass: the gradients are counted there."""


def _gradients_added(moment: str, alive: Mapping[str, object], gradients: object) -> object:
    """Return the gradient bytes accumulation adds at ``moment``: none where all are counted.

    After the backward pass, and wherever the step already holds every gradient
    (Lightning's loop keeps the previous step's through the forward and the loss,
    ``Setup(loop="lightning")``), accumulation adds nothing; elsewhere it adds them all
    (in the backward pass, where some are counted already, an upper bound).

    Examples
    --------
    >>> _gradients_added("forward x", {"gradients": 10}, 10), _gradients_added("forward x", {}, 10)
    (0, 10)
    """
    if moment.startswith(_AFTER_BACKWARD) or alive.get("gradients", 0) == gradients:
        return 0
    return gradients
