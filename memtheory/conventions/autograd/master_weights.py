"""A 16-bit model with an fp32 master copy: DeepSpeed's bf16 step, read from its source.

``torch.optim`` keeps no master copy; DeepSpeed's bf16 mode under ZeRO does
(``precision="mixed-bf16"``). Its forward and backward are the 16-bit
model's, exactly as ``model.to(torch.bfloat16)`` runs them (the autograd
convention's timeline at :func:`working_precision`); what DeepSpeed adds is
modelled from its source (:data:`DEEPSPEED`), not measured:

* **fp32 master weights**, a flat fp32 copy of the rank's partition of the
  weights (``stage3.py:1120-1122`` ``fp32_partitioned_groups_flat``,
  ``converted.clone().detach()``; ``stage_1_and_2.py:509``
  ``single_partition_of_fp32_groups``), alive through the step;
* **fp32 optimizer state** on that flat copy (DeepSpeed's ``FusedAdam``,
  ``ops/adam/fused_adam.py:153-157``: ``exp_avg`` and ``exp_avg_sq`` like
  the fp32 partition; its ``state["step"]`` is a Python int, so no step
  counter tensors);
* **16-bit gradients**: the gradient accumulation dtype is the model's,
  bf16, unless ``data_types.grad_accum_dtype`` says otherwise
  (``engine.py:1492-1493``);
* **the optimizer step's fp32 gradient**: for each sub-group, DeepSpeed
  flattens the rank's 16-bit gradients into a new tensor and casts it to fp32
  (``stage3.py:2401-2402``, ``self.flatten(self.averaged_gradients[i]).to(fp32)``;
  ``stage_1_and_2.py:2357-2361``), so at that moment the flat 16-bit copy and
  the fp32 gradient are alive on top of the gradients; the flat copy dies
  when the cast returns (``del flat_grad_partition``), the fp32 gradient is
  the master copy's ``.grad`` through the optimizer step and is freed after
  it (``stage3.py:2452``, ``stage_1_and_2.py:2382-2383``). Unscaling and
  clipping multiply it in place (``stage3.py:2705``); the updated master is
  copied into the 16-bit weights in place (``stage3.py:2589-2590``). The
  optimizer sees one flat fp32 tensor per sub-group (``stage3.py:1210``), so
  its own temporaries are those of one tensor of the master's size (none for
  a fused kernel, DeepSpeed's ``FusedAdam``).

One replica's step holds the whole model's; under ZeRO each of these is at
the device's share (:func:`~memtheory.techniques.parallel.parallel_memory`).
ZeRO-3 steps ``sub_group_size`` (default :math:`10^9` elements,
``zero/config.py:175``) at a time: the fp32 gradient of the largest
sub-group, not of the whole partition, is alive; one sub-group per rank is
assumed here (the whole partition), which is high by at most 6 bytes per
element of the partition above ``sub_group_size``.

Examples
--------
>>> from memtheory.precision import precision
>>> working_precision(precision("mixed-bf16")).describe()
'parameters bf16, gradients bf16, optimizer_state bf16, activations bf16, ...'
>>> cast_moment(10, precision("mixed-bf16"))  # 10 elements: bf16 flat copy + fp32 gradient
{'flat 16-bit gradient': 20, 'fp32 gradient': 40}
"""

from __future__ import annotations

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.precision import Precision

__all__ = ["CAST_MOMENT", "DEEPSPEED", "MASTER_GRADIENT", "cast_moment", "working_precision"]

DEEPSPEED = "DeepSpeed 0.19.6 (commit edaa722, deepspeed/runtime/zero/stage3.py, stage_1_and_2.py)"
"""The DeepSpeed source the master-weight step was read from."""

CAST_MOMENT = "optimizer step: gradients cast to fp32"
"""The timeline's moment at which the flat 16-bit gradient and its fp32 copy are both alive."""

MASTER_GRADIENT = "fp32 gradient"
"""The storage name of the master copy's fp32 gradient in the timeline."""


def working_precision(precision: Precision) -> Precision:
    """Return the precision the forward and backward run in: the 16-bit model's, uniformly.

    Raises
    ------
    UnsupportedError
        When the gradients or activations are not in the weights' dtype (a
        master copy over anything but a uniformly 16-bit model).

    Examples
    --------
    >>> from memtheory.precision import precision
    >>> working_precision(precision("mixed-fp16")).parameters.name
    'fp16'
    """
    low = precision.parameters
    if precision.gradients != low or precision.activations != low or (
        precision.activation_gradients != low
    ):
        raise UnsupportedError(
            "a master copy is modelled over a model whose weights, gradients and activations "
            f"share one dtype (DeepSpeed's bf16 mode: precision='mixed-bf16'); got "
            f"{precision.describe()}."
        )
    return Precision.uniform(low)


def cast_moment(elements: sp.Expr | int, precision: Precision) -> dict[str, sp.Expr]:
    """Return the storages the optimizer step adds when it casts ``elements`` gradients to fp32.

    The flat 16-bit copy of the gradients (``self.flatten(...)``) and its
    cast to the master dtype (``.to(fp32)``), both alive as the cast returns.

    Examples
    --------
    >>> from memtheory.precision import precision
    >>> cast_moment(sp.Symbol("n"), precision("mixed-fp16"))
    {'flat 16-bit gradient': 2*n, 'fp32 gradient': 4*n}
    """
    master = precision.master_weights
    if master is None:
        raise UnsupportedError(
            f"precision {precision.describe()} keeps no master copy: nothing is cast to fp32."
        )
    count = sp.sympify(elements)
    return {
        "flat 16-bit gradient": count * precision.gradients.bytes,
        MASTER_GRADIENT: count * master.bytes,
    }
