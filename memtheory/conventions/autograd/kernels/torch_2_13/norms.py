"""How PyTorch 2.13 keeps the storages of the norms: LayerNorm, BatchNorm2d, RMS norms.

Examples
--------
>>> from memtheory.layers import RMSNorm
>>> from memtheory.symbols import B, S
>>> [t.dtype.name for t in rms_norm(RMSNorm(), ((B, S, 8),), input_dtype="bf16").saved]
['fp32', 'fp32', 'bf16']
"""

from __future__ import annotations

from dataclasses import replace

from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec
from memtheory.layers.kernel_plans import register_plan
from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.normalization import BatchNorm2d
from memtheory.layers.rms_norm import GemmaRMSNorm, RMSNorm
from memtheory.layers.upcast_norm import UpcastLayerNorm, UpcastRMSNorm

__all__ = [
    "batch_norm",
    "gemma_rms_norm",
    "layer_norm",
    "rms_norm",
    "upcast_layer_norm",
    "upcast_rms_norm",
]

_FP32 = as_dtype("fp32")


@register_plan(LayerNorm)
def layer_norm(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Its input, mean and inverse std: fp32 statistics under autocast when affine.

    Measured on CPU (PyTorch 2.13): the statistics follow the input's
    dtype, except under autocast with an affine 16-bit input, where they
    are fp32. It computes in its input's dtype (autocast leaves it alone).
    """
    assert isinstance(layer, LayerNorm)
    given = as_dtype(input_dtype or "fp32")
    mixed = autocast is not None and layer.elementwise_affine and given != _FP32
    statistics = _FP32 if mixed else None
    return Autograd(
        saved=tuple(
            s if s.role == "input" else replace(s, dtype=statistics)
            for s in layer.saved_for_backward(tuple(input_shapes[0]))
        )
    )


@register_plan(BatchNorm2d)
def batch_norm(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Its input and, in training, the batch statistics in the parameters' dtype.

    In eval mode it normalises with the running statistics and keeps only its input.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> len(batch_norm(BatchNorm2d(), ((B, 8, 4, 4),), training=False).saved)
    1
    """
    saved = layer.saved_for_backward(tuple(input_shapes[0]))
    if not training:
        return Autograd(saved=saved[:1])
    return Autograd(saved=saved, parameter_dtype=(1, 2))


@register_plan(RMSNorm)
def rms_norm(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return the saved storages of :class:`RMSNorm`, with dtypes and backward nodes.

    Measured on CPU (PyTorch 2.13): a 16-bit input is upcast to fp32 and
    the upcast copy is kept; the inverse RMS is fp32; the normalised input
    is in the input's dtype (``"llama"``) or fp32 (``"torch"``). Both run
    their backward as the same nodes (``torch.rms_norm`` decomposes on
    CPU): the upcast (16 bits), ``pow``, ``mean``, ``rsqrt``, the
    normalising ``mul`` and the scale, each with the gradients and
    temporaries it allocates (``pow``'s two fp32 products; the unsummed
    products behind the inverse RMS's and the scale's gradients); the two
    fp32 gradients of the input meet and are added, as autograd adds them.
    Without a gradient for the input only the scale's node is recorded.
    """
    assert isinstance(layer, RMSNorm)
    shape = tuple(input_shapes[0])
    layer.check_input(shape)
    fp32 = as_dtype("fp32")
    given = as_dtype(input_dtype) if input_dtype is not None else None
    saved = [
        TensorSpec("input", shape)
        if given in (None, fp32)
        else TensorSpec("intermediate", shape, fp32),
        TensorSpec("statistics", shape[:-1], fp32),
    ]
    if layer.elementwise_affine:
        normalised = given if layer.implementation == "llama" else fp32
        saved.append(TensorSpec("intermediate", shape, normalised))
    refused = None
    if given is not None and given != fp32:
        refused = (
            f"reading a {given.name} tensor that needs no gradient (the network's input), "
            "none of its fp32 intermediates is saved and its forward's own transients "
            "(the fp32 copy, x.pow(2), the product before the cast back) set the peak; "
            "that case is not measured. Put a layer with parameters before it, or feed "
            "fp32 (autocast)."
        )
    return Autograd(
        saved=tuple(saved),
        stages=_stages(layer, shape, given),
        without_input_gradient=refused,
    )


def _stages(layer: RMSNorm, shape: Shape, given: DType | None) -> tuple[Stage, ...]:
    """Its backward nodes in creation order, with the gradients and temporaries they make."""
    fp32 = as_dtype("fp32")
    full, rows = (
        TensorSpec("intermediate", shape, fp32),
        TensorSpec("statistics", shape[:-1], fp32),
    )
    stages: list[Stage] = []
    upcast = given not in (None, fp32)
    if upcast:  # x.to(fp32)
        stages.append(Stage("to fp32", edges=((-1, TensorSpec("input", shape, given)),)))
    into = len(stages) - 1  # where the gradient of the fp32 input goes (-1: the input)
    stages.append(Stage("pow", (0,), edges=((into, full),), temporaries=(full, full)))
    stages.append(Stage("mean", edges=((len(stages) - 1, full),)))
    stages.append(
        Stage("rsqrt", (1,), edges=((len(stages) - 1, rows),), temporaries=(rows, rows))
    )
    stages.append(
        Stage("mul", (0, 1), edges=((into, full), (len(stages) - 1, rows)), temporaries=(full,))
    )
    if layer.elementwise_affine:
        out = TensorSpec("output", shape, given)
        stages.append(
            Stage(
                "scale",
                (2,),
                edges=((len(stages) - 1, out),),
                temporaries=(out,),
                parameters=("weight",),
            )
        )
    return tuple(stages)


@register_plan(GemmaRMSNorm)
def gemma_rms_norm(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return the saved storages of :class:`GemmaRMSNorm`, with dtypes and backward nodes.

    Hugging Face's ``GemmaRMSNorm.forward`` (transformers 5.24, the same in
    Gemma 2 and 3): ``output = self._norm(x.float())``, then ``output *
    (1.0 + self.weight.float())``, then ``output.type_as(x)``. Where Llama's
    norm casts the normalised input back before the scale, Gemma scales in
    fp32: it keeps the fp32 input (or upcast copy), the fp32 inverse RMS, the
    fp32 normalised input and the fp32 ``1 + w`` (one row of features). Its
    backward: the cast back (16 bits: the gradient upcast to fp32), the
    scale (its fp32 product with the normalised input, summed into the
    weight's gradient), then the nodes of :func:`rms_norm`'s normalisation.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> plan = gemma_rms_norm(GemmaRMSNorm(), ((B, S, 8),), input_dtype="bf16")
    >>> [(t.shape, t.dtype.name) for t in plan.saved]
    [((B, S, 8), 'fp32'), ((B, S), 'fp32'), ((B, S, 8), 'fp32'), ((8,), 'fp32')]
    >>> [s.label for s in plan.stages]
    ['to fp32', 'pow', 'mean', 'rsqrt', 'mul', 'scale', 'to bf16']
    """
    assert isinstance(layer, GemmaRMSNorm)
    shape = tuple(input_shapes[0])
    layer.check_input(shape)
    given = as_dtype(input_dtype) if input_dtype is not None else None
    upcast = given not in (None, _FP32)
    full = TensorSpec("intermediate", shape, _FP32)
    saved = (
        TensorSpec("intermediate", shape, _FP32) if upcast else TensorSpec("input", shape),
        TensorSpec("statistics", shape[:-1], _FP32),
        full,
        TensorSpec("intermediate", shape[-1:], _FP32, label="1 + weight"),
    )
    norm = replace(layer, elementwise_affine=False, implementation="torch")
    stages = list(_stages(norm, shape, given))
    stages.append(
        Stage("scale", (2, 3), edges=((len(stages) - 1, full),), temporaries=(full,),
              parameters=("weight",))
    )
    if upcast:
        assert given is not None
        stages.append(Stage(f"to {given.name}", edges=((len(stages) - 1, full),)))
    refused = None
    if given is not None and upcast:
        refused = _unmeasured_input(given)
    return Autograd(saved=saved, stages=tuple(stages), without_input_gradient=refused)


@register_plan(UpcastRMSNorm)
def upcast_rms_norm(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return the saved storages of :class:`UpcastRMSNorm`, with dtypes and backward nodes.

    Hugging Face's ``Olmo2RMSNorm.forward`` (transformers 5.24, the same in
    OLMo 3): ``x.to(float32)``, the inverse RMS, then ``(self.weight *
    normalised).to(input_dtype)``. The scale multiplies the fp32 normalised
    input (the weight, in the model's dtype, is promoted, not copied): it
    keeps the fp32 input (or upcast copy), the fp32 inverse RMS and the fp32
    normalised input, as ``torch.nn.RMSNorm`` does, and scales in fp32. Its
    backward: the cast back (16 bits), the scale (the fp32 gradient of the
    normalised input and the fp32 product summed into the weight's
    gradient), then the nodes of :func:`rms_norm`'s normalisation.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> plan = upcast_rms_norm(UpcastRMSNorm(), ((B, S, 8),), input_dtype="bf16")
    >>> [(t.shape, t.dtype.name) for t in plan.saved]
    [((B, S, 8), 'fp32'), ((B, S), 'fp32'), ((B, S, 8), 'fp32')]
    >>> [s.label for s in plan.stages]
    ['to fp32', 'pow', 'mean', 'rsqrt', 'mul', 'scale', 'to bf16']
    """
    assert isinstance(layer, UpcastRMSNorm)
    shape = tuple(input_shapes[0])
    layer.check_input(shape)
    given = as_dtype(input_dtype) if input_dtype is not None else None
    upcast = given not in (None, _FP32)
    full = TensorSpec("intermediate", shape, _FP32)
    saved = (
        full if upcast else TensorSpec("input", shape),
        TensorSpec("statistics", shape[:-1], _FP32),
        full,
    )
    norm = replace(layer, elementwise_affine=False, implementation="torch")
    stages = list(_stages(norm, shape, given))
    stages.append(
        Stage("scale", (2,), edges=((len(stages) - 1, full),), temporaries=(full,),
              parameters=("weight",))
    )
    refused = None
    if given is not None and upcast:
        stages.append(Stage(f"to {given.name}", edges=((len(stages) - 1, full),)))
        refused = _unmeasured_input(given)
    return Autograd(saved=saved, stages=tuple(stages), without_input_gradient=refused)


@register_plan(UpcastLayerNorm)
def upcast_layer_norm(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return the saved storages of :class:`UpcastLayerNorm` (OLMo 1's), with backward nodes.

    Hugging Face's ``OlmoLayerNorm.forward`` (transformers 5.24):
    ``F.layer_norm(x.to(float32), ..., None, None).to(orig_dtype)``, no
    weight or bias. An fp32 input (fp32 training, and autocast's fp32
    residual stream) makes both casts no-ops: :func:`layer_norm`'s storages.
    A 16-bit input is copied to fp32, and ``layer_norm`` keeps that copy and
    fp32 statistics; its fp32 output is freed once it is cast back. Its
    backward: the cast back (an fp32 gradient), the normalisation (an fp32
    gradient), the upcast (a gradient in the input's dtype).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> norm = UpcastLayerNorm(elementwise_affine=False, bias=False)
    >>> plan = upcast_layer_norm(norm, ((B, S, 8),), input_dtype="bf16")
    >>> [(t.role, t.dtype.name) for t in plan.saved]
    [('intermediate', 'fp32'), ('statistics', 'fp32'), ('statistics', 'fp32')]
    >>> [s.label for s in plan.stages]
    ['to fp32', 'layer_norm', 'to bf16']
    """
    assert isinstance(layer, UpcastLayerNorm)
    given = as_dtype(input_dtype) if input_dtype is not None else None
    if given in (None, _FP32):
        return layer_norm(layer, input_shapes, training=training, input_dtype=input_dtype,
                          autocast=autocast)
    shape = tuple(input_shapes[0])
    full = TensorSpec("intermediate", shape, _FP32, label="fp32 input")
    saved = tuple(
        full if s.role == "input" else replace(s, dtype=_FP32)
        for s in layer.saved_for_backward(shape)
    )
    stages = (
        Stage("to fp32"),
        Stage("layer_norm", (0, 1, 2), edges=((0, full),)),
        Stage(f"to {given.name}", edges=((1, full),)),
    )
    return Autograd(
        saved=saved,
        stages=stages,
        transients=(TensorSpec("intermediate", shape, _FP32, label="fp32 output"),),
        without_input_gradient=_unmeasured_input(given),
    )


def _unmeasured_input(given: DType) -> str:
    """Why an upcasting norm refuses a 16-bit input that needs no gradient."""
    return (
        f"reading a {given.name} tensor that needs no gradient (the network's input), "
        "its forward's transients set the peak; that case is not measured. Put a layer "
        "with parameters before it, or feed fp32 (autocast)."
    )
