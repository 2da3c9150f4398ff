"""How PyTorch 2.13 keeps the storages of the losses: what each saves, casts and allocates.

Measured on CPU with :func:`memtheory.torch.measure` (``derivatives.yaml``
says what each saves): MSE keeps its input and the targets and returns its
scalar in an input-sized storage; L1 runs as ``(input - target).abs().mean()``
and keeps the difference; BCE with logits keeps its input and the targets,
and its backward makes one input-sized temporary (the sigmoid);
cross-entropy runs as log-softmax then NLL. Under CPU autocast each runs in
fp32 (a 16-bit input is first cast to an fp32 copy).

Examples
--------
>>> from memtheory.layers import MSELoss
>>> from memtheory.symbols import B
>>> mse_loss(MSELoss(), ((B, 10),)).output_elements
10*B
"""

from __future__ import annotations

from memtheory.dtypes import DTypeLike, dtype
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec, elements
from memtheory.layers.kernel_plans import register_plan
from memtheory.layers.losses import BCEWithLogitsLoss, L1Loss, MSELoss
from memtheory.layers.softmax import CrossEntropyLoss, LanguageModelLoss

__all__ = [
    "bce_with_logits_loss",
    "cross_entropy_loss",
    "l1_loss",
    "language_model_loss",
    "mse_loss",
]


@register_plan(MSELoss)
def mse_loss(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Input and targets; the output storage input-sized; fp32 under autocast.

    ``mse_loss`` reduces its element-wise buffer in place, so its scalar
    result lives in an input-sized storage.
    """
    shape = tuple(input_shapes[0])
    return Autograd(
        saved=layer.saved_for_backward(shape),
        autocast="fp32",
        output_elements=elements(shape),
        target=TensorSpec("target", shape),
    )


@register_plan(L1Loss)
def l1_loss(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return the difference kept by ``abs``, its result a transient; fp32 under autocast.

    Backward: the mean's gradient (input-sized), then ``grad * diff.sgn()``
    (the sign is an input-sized temporary), then the subtraction hands its
    gradient on.
    """
    shape = tuple(input_shapes[0])
    return Autograd(
        saved=layer.saved_for_backward(shape),
        autocast="fp32",
        target=TensorSpec("target", shape),
        transients=(TensorSpec("intermediate", shape, label="absolute values"),),
        stages=(
            Stage("sub", (), gradient_is_view=True),
            Stage("abs", (0,), temporaries=(TensorSpec("intermediate", shape),)),
            Stage("mean"),
        ),
    )


@register_plan(BCEWithLogitsLoss)
def bce_with_logits_loss(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Input and targets; one input-sized temporary in backward; fp32 under autocast."""
    shape = tuple(input_shapes[0])
    return Autograd(
        saved=layer.saved_for_backward(shape),
        autocast="fp32",
        target=TensorSpec("target", shape),
        stages=(Stage("", (0, 1), temporaries=(TensorSpec("intermediate", shape),)),),
    )


@register_plan(CrossEntropyLoss)
def cross_entropy_loss(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Two nodes: log-softmax keeps its output; NLL keeps it, the total weight, the targets."""
    saved = layer.saved_for_backward(tuple(input_shapes[0]))
    return Autograd(
        saved=saved,
        target=saved[2],
        autocast="fp32",
        stages=(Stage("log_softmax", (0,)), Stage("nll_loss", (0, 1, 2))),
    )


@register_plan(LanguageModelLoss)
def language_model_loss(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Log-softmax and NLL as for :func:`cross_entropy_loss`, fp32 when upcast; the labels.

    CPU autocast runs the cross-entropy in fp32 (measured on PyTorch 2.13), so
    even without ``upcast`` the log-probabilities are fp32 under autocast
    (``autocast="fp32"``).

    With ``shift`` (transformers 5 ``loss/loss_utils.py`` ``ForCausalLMLoss``)
    the labels are first padded by one position, ``F.pad(labels, (0, 1),
    value=ignore_index)``: a ``(batch, sequence + 1)`` int64 tensor that the
    function's ``labels`` variable holds while the cross-entropy runs, freed
    when it returns (a transient); its ``[..., 1:].contiguous()`` is the
    shifted labels that NLL keeps. With one sequence in the batch that slice
    is already contiguous (a single row), so ``.contiguous()`` returns the
    view: NLL keeps the padded storage itself, ``S + 1`` labels, and there is
    no second one (measured on CPU, PyTorch 2.13: 8 bytes more saved than
    a copy of ``S`` labels, one fewer storage at the loss's forward moment).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> spec = language_model_loss(LanguageModelLoss(upcast=False), ((B, S, 97),))
    >>> [(t.label or t.role, t.dtype) for t in spec.saved][:2]
    [('log-probabilities', None), ('total weight', None)]
    >>> [(t.label, t.shape, t.dtype.name) for t in language_model_loss(
    ...     LanguageModelLoss(), ((B, S, 97),)).transients]
    [('padded labels', (B, S + 1), 'int64')]

    One sequence: the shifted labels are a view of the padded ones.

    >>> one = language_model_loss(LanguageModelLoss(), ((1, S, 97),))
    >>> one.saved[2].shape, one.transients
    ((1, S + 1), ())
    """
    assert isinstance(layer, LanguageModelLoss)
    shape = tuple(input_shapes[0])
    _, labels = layer.saved_for_backward(shape)
    fp32 = dtype("fp32") if layer.upcast else None
    padded = (shape[0], shape[1] + 1)
    one_row = layer.shift and shape[0] == 1  # labels[..., 1:] of one row: already contiguous
    saved = (
        TensorSpec("intermediate", shape, fp32, label="log-probabilities"),
        TensorSpec("intermediate", (), fp32, label="total weight"),
        TensorSpec(
            labels.role, padded if one_row else labels.shape, labels.dtype,
            label="shifted labels" if layer.shift else None,
        ),
    )
    return Autograd(
        saved=saved,
        target=TensorSpec("target", shape[:2], dtype("int64")),
        transients=(
            (TensorSpec("intermediate", padded, dtype("int64"), label="padded labels"),)
            if layer.shift and not one_row else ()
        ),
        autocast="fp32",
        compute_dtype=fp32,
        stages=(Stage("log_softmax", (0,)), Stage("nll_loss", (0, 1, 2))),
    )
