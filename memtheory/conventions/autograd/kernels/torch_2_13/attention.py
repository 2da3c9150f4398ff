r"""How PyTorch 2.13 keeps the storages of attention: eager, SDPA (flash, math), fast path, flash.

The attention layers (:class:`~memtheory.layers.MultiHeadAttention`,
:class:`~memtheory.layers.GroupedQueryAttention` and its soft-capped variant)
say what they compute; this module says how PyTorch 2.13 runs it, measured on
CPU (``tests/pytorch/layer_harness.py``, ``tests/pytorch/test_layer_saved.py``,
``tests/pytorch/test_llama_autograd.py``):

* Hugging Face's eager attention (``matmul``, ``softmax``, dropout);
* ``nn.MultiheadAttention`` with ``scaled_dot_product_attention``: the CPU
  flash kernel, or its math path when dropout is active;
* ``nn.MultiheadAttention``'s eval fast path under ``no_grad``;
* a CUDA flash kernel (:func:`cuda_flash`, Dao et al. 2022): an assumption
  this CPU-measured library cannot check, one rule for every attention layer.

Examples
--------
>>> from memtheory.layers import MultiHeadAttention
>>> cpu_kernel(MultiHeadAttention(4, dropout=0.1, implementation="torch"), training=True)
'math'
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

import sympy as sp

from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.layers.base import (
    Autograd,
    ForwardMoment,
    Layer,
    Role,
    Shape,
    Stage,
    TensorSpec,
)
from memtheory.layers.kernel_plans import register_plan
from memtheory.layers.saved_storages import compute_dtype

if TYPE_CHECKING:  # the layers' modules load when a network uses them, not with memtheory
    from memtheory.layers.attention import MultiHeadAttention
    from memtheory.layers.falcon_attention import FalconAttention
    from memtheory.layers.grouped_attention import GroupedQueryAttention
    from memtheory.layers.softcap import SoftCappedAttention

__all__ = [
    "cpu_kernel",
    "cuda_flash",
    "falcon_attention",
    "grouped_query_attention",
    "multi_head_attention",
    "soft_capped_attention",
]

_BOOL = as_dtype("bool")
_FP32 = as_dtype("fp32")
_INT64 = as_dtype("int64")

_LABELS = {
    "queries": "queries Q",
    "keys": "keys K",
    "values": "values V",
    "probabilities": "softmax P",
    "heads_output": "context PV (heads merged)",
    "packed": "packed Q, K, V projection",
    "row_statistics": "softmax row statistics",
    "input": "input",
}
"""What each saved tensor of attention is, for listings (``TensorSpec.label``)."""

_DROPPED = "dropped P (input of PV)"


# -- one flash kernel for every attention layer --------------------------------------------
def cuda_flash(
    queries: TensorSpec,
    keys: TensorSpec,
    values: TensorSpec,
    output: TensorSpec,
    rows: Shape,
) -> tuple[TensorSpec, ...]:
    """Return what a CUDA flash kernel keeps: Q, K, V, its output and an fp32 log-sum-exp.

    FlashAttention (Dao et al. 2022) and PyTorch's memory-efficient SDPA keep
    no :math:`s^2` tensor: they recompute the probabilities in the backward
    from one fp32 log-sum-exp per row and head, and regenerate the dropout
    mask from the random seed. An assumption, not measured on CPU. ``rows``
    is ``(batch, heads, sequence)``.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> q = TensorSpec("input", (B, S, 32))
    >>> [(t.role, t.shape) for t in cuda_flash(q, q, q, q, (B, 4, S))][-1]
    ('statistics', (B, 4, S))
    """
    statistics = TensorSpec("statistics", rows, _FP32, label="logsumexp")
    return (queries, keys, values, output, statistics)


# -- nn.MultiheadAttention and Hugging Face's eager attention -------------------------------
def cpu_kernel(layer: MultiHeadAttention, training: bool = True) -> str:
    """Return the kernel PyTorch 2.13 runs on CPU: ``"flash"``, ``"math"`` or ``"eager"``.

    ``implementation="torch"`` calls ``scaled_dot_product_attention``, which
    on CPU runs its flash kernel unless dropout is active (training with
    ``dropout > 0``): then it runs the math path. ``"eager"`` writes the
    matmuls and softmax out. ``flash=True`` is reported as ``"flash"``.

    Examples
    --------
    >>> from memtheory.layers import MultiHeadAttention
    >>> attn = MultiHeadAttention(4, dropout=0.1, implementation="torch")
    >>> cpu_kernel(attn, training=True), cpu_kernel(attn, training=False)
    ('math', 'flash')
    """
    if layer.flash:
        return "flash"
    if layer.implementation == "eager":
        return "eager"
    return "math" if training and layer.dropout else "flash"


@register_plan("memtheory.layers.attention.MultiHeadAttention")
def multi_head_attention(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return every storage the backward of :class:`MultiHeadAttention` keeps, with its dtype.

    Measured on CPU (PyTorch 2.13, ``tests/pytorch/layer_harness.py`` and
    ``tests/pytorch/test_layer_saved.py``). ``input_dtype`` is the input's
    dtype; ``autocast`` the low dtype of CPU autocast, if on (the projections
    then compute in it). Left unset, an fp32 run with the activation dtype
    unspecified. The layer's kernel choices pick the path:

    * ``"eager"``: the input (or its autocast cast), contiguous copies of
      Q, K and V (``matmul`` on head-split views copies them; with one head
      it reads them as views of the packed projection), the softmax
      output, in training with dropout its mask (``bool``, or the compute
      dtype with ``device="cpu"``) and the dropped probabilities, and the
      merged heads (the input of the output projection), all in the
      compute dtype.
    * ``"torch"``, flash kernel (no active dropout): a contiguous copy of
      the batch-first input, the packed Q/K/V projection (Q, K and V are
      views of it, so all of it stays alive), one fp32 log-sum-exp per
      row and head, and the kernel's output (the output projection's input).
    * ``"torch"``, math path (training with dropout): the input copy,
      scaled Q and K, softmax output, dropout mask and dropped
      probabilities in fp32 (the CPU math path upcasts 16-bit inputs), V
      (at fp32 a view of the packed projection, which it keeps whole; at
      16 bits its fp32 copy), and the heads' output.
    * ``flash=True`` (CUDA, an assumption, not measured here): the input,
      Q, K, V, the heads' output and an fp32 log-sum-exp. With
      ``device="cpu"`` in training with dropout, SDPA's CPU math path
      (the CPU flash kernel refuses dropout): the input, fp32 copies of
      Q, K and V, the fp32 probabilities, dropout noise and dropped
      probabilities, and the heads' output (:func:`_sdpa_math`).
    * eval mode under ``no_grad`` (``training=False``, :attr:`Autograd.no_grad`)
      with ``"torch"``: ``nn.MultiheadAttention``'s fast path, one
      operation (``_native_multi_head_attention``) that keeps nothing;
      under autocast it casts the query, key and value separately. With
      an odd number of heads, without biases, or under autocast with a
      query that is not fp32 (its dtype then differs from the fp32
      ``in_proj_bias``) PyTorch skips the fast path, and the convention
      refuses the inference peak (:attr:`Autograd.inference_refusal`).

    The formulas assume at least two sequences of at least two positions:
    at batch 1 or sequence length 1 PyTorch's reshapes become views, and
    the copies of the input (torch) or of Q, K and V (eager) are not made.
    Grouped-query heads (``kv_heads``) are not measured.


    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> from memtheory.layers import MultiHeadAttention
    >>> attn = MultiHeadAttention(12, dropout=0.1, implementation="torch")
    >>> [(s.shape, s.dtype.name) for s in multi_head_attention(
    ...     attn, ((B, S, 768),), input_dtype="bf16").saved if s.role == "mask"]
    [((B, 12, S, S), 'fp32')]
    """
    layer = cast("MultiHeadAttention", layer)  # registered for this class (and subclasses)
    shape = tuple(input_shapes[0])
    saved = _storages(layer, shape, input_dtype, training, autocast)
    if input_dtype is None:  # the activation dtype left open: what follows it says None
        saved = tuple(
            s if s.role == "statistics" or s.dtype != _FP32 else replace(s, dtype=None)
            for s in saved
        )
    stages: tuple[Stage, ...] = ()
    if cpu_kernel(layer, training) == "flash" and not layer.flash:
        stages = _flash_stages(layer, shape, compute_dtype(input_dtype or "fp32", autocast))
    no_grad, refusal = None, None
    if not training and layer.implementation == "torch" and not layer.flash:
        refusal = _fast_path_refusal(layer, input_dtype, autocast)
        if refusal is None:
            no_grad = _fast_path(shape, autocast)
    return Autograd(
        saved=saved,
        autocast="low",
        weight_copy="if the input needs a gradient",
        stages=stages,
        no_grad=no_grad,
        inference_refusal=refusal,
    )


def _fast_path_refusal(
    layer: MultiHeadAttention, input_dtype: DTypeLike | None, autocast: DTypeLike | None
) -> str | None:
    """Say why ``nn.MultiheadAttention`` skips its eval fast path here, or None if it runs."""
    query = as_dtype(input_dtype) if input_dtype is not None else None
    if sp.Mod(layer.heads, 2) != 0 or not layer.bias:
        return (
            "with an odd number of heads or without biases nn.MultiheadAttention "
            "skips its eval fast path, and the transients of the path it runs "
            "instead (two packed projections alive at once, then the kernel's "
            "output) are not modelled. Use an even number of heads with biases."
        )
    if autocast is not None and query is not None and query != _FP32:
        return (
            f"under autocast a query that arrives in {query.name} (the "
            "output of a layer autocast ran at low precision, or a LayerNorm fed by "
            "one) does not match nn.MultiheadAttention's fp32 in_proj_bias, so PyTorch "
            "skips its eval fast path; the transients of the path it runs instead (the "
            "packed projection and its contiguous copy alive at once, then the "
            "output projection's weight casts) are not modelled. Its inference peak "
            "is known when the query arrives in fp32 (a residual stream kept in fp32)."
        )
    return None


def _fast_path(input_shape: Shape, autocast: DTypeLike | None) -> tuple[TensorSpec, ...]:
    """Return what eval mode under ``no_grad`` allocates besides the output: the fast path.

    Measured on CPU (PyTorch 2.13): ``nn.MultiheadAttention`` then calls
    ``_native_multi_head_attention``, one dispatcher operation: what it
    allocates inside is no tensor any other operation sees, and around it
    only its output is new. Under autocast its query, key and value
    arguments are cast one by one: three casts of the input, the first of
    which is the layer's input cast, so two more.
    """
    if autocast is None:
        return ()
    cast = TensorSpec("intermediate", input_shape, as_dtype(autocast), label="input cast")
    return (cast, cast)


def _flash_stages(
    layer: MultiHeadAttention, input_shape: Shape, compute: DType
) -> tuple[Stage, ...]:
    """Return nn.MultiheadAttention's backward nodes on the CPU flash path, in creation order.

    Measured on CPU (PyTorch 2.13): the output projection hands the flash
    kernel's backward the heads' gradient, which makes the gradients of Q,
    K and V; each is copied twice by the backward of the reshapes that
    split the heads, and ``unbind``'s backward (one ``select`` per tensor)
    rebuilds the packed gradient from each, zero-filled, adding the three
    as autograd adds them; the backward of the packed projection's reshape
    copies the sum, which the input projection's backward reads.
    """
    shapes = layer.tensor_shapes(input_shape)
    one = TensorSpec("intermediate", shapes["input"], compute)
    packed = TensorSpec("intermediate", shapes["packed"], compute)
    stages = [
        Stage("in_proj", (0,), edges=((-1, one),), parameters=("in_proj_weight", "in_proj_bias")),
        Stage("reshape packed", edges=((0, packed),)),
    ]
    stages += [Stage(f"select {t}", edges=((1, packed),)) for t in "qkv"]
    stages += [Stage(f"merge heads {t}", edges=((2 + i, one),)) for i, t in enumerate("qkv")]
    stages += [Stage(f"split heads {t}", edges=((5 + i, one),)) for i, t in enumerate("qkv")]
    stages.append(Stage("flash", (1, 2, 3), edges=tuple((8 + i, one) for i in range(3))))
    stages.append(
        Stage("out_proj", (3,), edges=((11, one),), parameters=("out_proj.weight", "out_proj.bias"))
    )
    return tuple(stages)


class _Specs:
    """Build attention's saved tensors by name (``"queries"``) for one input shape and dtype."""

    def __init__(self, layer: MultiHeadAttention, input_shape: Shape, compute: DType) -> None:
        self.shapes = layer.tensor_shapes(input_shape)
        self.compute = compute

    def __call__(
        self, role: Role, key: str, kind: DType | None = None, label: str | None = None
    ) -> TensorSpec:
        return TensorSpec(
            role,
            self.shapes[key],
            kind if kind is not None else self.compute,
            label=label or _LABELS[key],
        )


def _storages(
    layer: MultiHeadAttention,
    input_shape: Shape,
    input_dtype: DTypeLike | None,
    training: bool,
    autocast: DTypeLike | None,
) -> tuple[TensorSpec, ...]:
    layer.check_input(input_shape)
    given = as_dtype(input_dtype or "fp32")
    spec = _Specs(layer, input_shape, compute_dtype(given, autocast))
    kernel = cpu_kernel(layer, training)
    if layer.flash and layer.device == "cpu" and training and layer.dropout:
        return _sdpa_math(spec)
    if layer.flash:
        return (
            spec("input", "input", given),
            *cuda_flash(
                spec("intermediate", "queries"),
                spec("intermediate", "keys"),
                spec("intermediate", "values"),
                spec("intermediate", "heads_output"),
                spec.shapes["row_statistics"],
            ),
        )
    if kernel == "eager":
        return _eager(layer, spec, given, training, autocast)
    if kernel == "flash":
        return (
            spec("intermediate", "input"),
            spec("intermediate", "packed"),
            spec("statistics", "row_statistics", _FP32),
            spec("intermediate", "heads_output"),
        )
    return _math(spec)


def _sdpa_math(spec: _Specs) -> tuple[TensorSpec, ...]:
    """List transformers' SDPA call on CPU with dropout: the math path, fp32 at 16 bits.

    The CPU flash kernel refuses dropout (``check_for_dropout``), so
    ``_scaled_dot_product_attention_math`` runs on the head-split views of
    the packed projection: it upcasts 16-bit Q, K and V to fp32
    (``allowFP16BF16ReductionMathSDP`` is off by default), scales Q and K,
    and ``matmul`` keeps contiguous copies of them; the softmax output, the
    dropout noise and the dropped probabilities are fp32, and so is the copy
    of V the second ``matmul`` keeps; its output is cast back, and the heads'
    merged output (the output projection's input) is in the compute dtype.
    In fp32 the same bytes as Hugging Face's eager attention with its CPU
    dropout. Measured against transformers' GPT-2 (``attn_pdrop=0.1``) on
    CPU at fp32, bf16 and autocast-bf16 (``tests/pytorch/test_gpt2_recipes.py``).
    """
    return (
        TensorSpec("input", spec.shapes["input"]),
        spec("intermediate", "queries", _FP32),
        spec("intermediate", "keys", _FP32),
        spec("intermediate", "probabilities", _FP32),
        spec("mask", "probabilities", _FP32, "dropout mask on P"),
        spec("intermediate", "probabilities", _FP32, _DROPPED),
        spec("intermediate", "values", _FP32),
        spec("intermediate", "heads_output"),
    )


def _math(spec: _Specs) -> tuple[TensorSpec, ...]:
    """List SDPA's CPU math path's tensors (training with dropout): fp32 copies at 16 bits."""
    values = (
        spec("intermediate", "packed")
        if spec.compute == _FP32
        else spec("intermediate", "values", _FP32)
    )
    return (
        spec("intermediate", "input"),
        spec("intermediate", "queries", _FP32),
        spec("intermediate", "keys", _FP32),
        spec("intermediate", "probabilities", _FP32),
        spec("mask", "probabilities", _FP32, "dropout mask on P"),
        spec("intermediate", "probabilities", _FP32, _DROPPED),
        values,
        spec("intermediate", "heads_output"),
    )


def _eager(
    layer: MultiHeadAttention,
    spec: _Specs,
    given: DType,
    training: bool,
    autocast: DTypeLike | None,
) -> tuple[TensorSpec, ...]:
    """List Hugging Face's eager attention's tensors: Q, K, softmax, dropout, V, heads' output."""
    compute = spec.compute
    dropout = training and bool(layer.dropout)
    # the input (or, under autocast, its cast); with separate projections under autocast,
    # the key and value projections cast it again (autocast caches no activation casts)
    first: tuple[TensorSpec, ...] = (TensorSpec("input", spec.shapes["input"]),)
    if not layer.packed and autocast is not None and given != compute:
        again = TensorSpec("intermediate", spec.shapes["input"], compute, label="input cast")
        first += (again, again)
    mask = compute if layer.device == "cpu" else _BOOL
    middle: tuple[TensorSpec, ...] = (
        (
            spec("mask", "probabilities", mask, "dropout mask on P"),
            spec("intermediate", "probabilities", label=_DROPPED),
        )
        if dropout
        else ()
    )
    softmax = spec("intermediate", "probabilities")
    if layer.additive_mask and compute != _FP32 and autocast is not None:
        # scores + fp32 mask is fp32: fp32 probabilities, cast back to V's dtype
        softmax = spec("intermediate", "probabilities", _FP32)
        if not dropout:
            middle = (spec("intermediate", "probabilities"),)
    scores = (*_causal_condition(layer, spec.shapes["input"][1]), softmax, *middle)
    if layer.heads == 1:
        # One head: matmul reads Q, K and V as strided views of the packed projection.
        return (*first, spec("intermediate", "packed"), *scores,
                spec("intermediate", "heads_output"))
    return (
        *first,
        spec("intermediate", "queries"),
        spec("intermediate", "keys"),
        *scores,
        spec("intermediate", "values"),
        spec("intermediate", "heads_output"),
    )


def _causal_condition(layer: MultiHeadAttention, sequence: sp.Expr) -> tuple[TensorSpec, ...]:
    """Return the ``bool`` condition ``torch.where`` keeps: the buffer's view, or its own."""
    if not layer.causal:
        return ()
    if layer.mask_buffer is not None:
        return (TensorSpec("buffer", (1, 1, layer.mask_buffer, layer.mask_buffer), _BOOL),)
    return (TensorSpec("mask", (sequence, sequence), _BOOL, label="causal mask"),)


# -- Llama's attention: Hugging Face's eager_attention_forward ------------------------------
@register_plan("memtheory.layers.grouped_attention.GroupedQueryAttention")
def grouped_query_attention(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return what the backward of :class:`GroupedQueryAttention` keeps, with dtypes.

    See :meth:`GroupedQueryAttention.autograd`, which asks this plan.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> from memtheory.layers.grouped_attention import GroupedQueryAttention
    >>> attn = GroupedQueryAttention(4, kv_heads=2, head_dim=8, flash=True)
    >>> [t.role for t in grouped_query_attention(
    ...     attn, ((B, S, 32), (B, S, 16), (B, S, 16))).saved]
    ['input', 'input', 'input', 'output', 'statistics']
    """
    layer = cast("GroupedQueryAttention", layer)  # registered for this class (and subclasses)
    query, key, value = (tuple(s) for s in input_shapes)
    if layer.flash:
        return Autograd(
            saved=cuda_flash(
                TensorSpec("input", query),
                TensorSpec("input", key, operand=1),
                TensorSpec("input", value, operand=2),
                TensorSpec("output", query),
                (query[0], layer.heads, query[1]),
            ),
            # scaled_dot_product_attention is on autocast's low-precision list (CPU and
            # CUDA): the rotated fp32 queries and keys are cast to the low dtype first.
            autocast="low",
        )
    given = as_dtype(input_dtype) if input_dtype is not None else None
    if autocast is not None:  # matmul is on autocast's low-precision list
        given = as_dtype(autocast)
    batch, sequence = query[0], query[1]
    per_head = (batch, layer.heads, sequence, layer.head_dim)
    scores = (batch, layer.heads, sequence, sequence)
    saved = _grouped_saved(per_head, scores, given, training and bool(layer.dropout))
    return Autograd(
        saved=saved,
        autocast="low",
        stages=_grouped_stages(layer, saved, key, value, given),
        transients=(TensorSpec("intermediate", scores, _FP32, label="fp32 scores"),),
    )


def _grouped_saved(
    per_head: Shape, scores: Shape, given: DType | None, dropout: bool
) -> tuple[TensorSpec, ...]:
    """List the eager path's saved tensors: Q, K copies, fp32 softmax (its cast), dropout, V."""
    softmax = TensorSpec(
        "intermediate", scores, _FP32 if given is not None else None, label="softmax"
    )
    saved = [
        TensorSpec("intermediate", per_head, given, label="queries"),
        TensorSpec("intermediate", per_head, given, label="keys"),
        softmax,
    ]
    if given not in (None, _FP32):
        saved.append(TensorSpec("intermediate", scores, given, label="probabilities"))
    if dropout:
        saved.append(TensorSpec("mask", scores, _BOOL, label="dropout mask"))
        saved.append(TensorSpec("intermediate", scores, given, label="dropped"))
    saved.append(TensorSpec("intermediate", per_head, given, label="values"))
    return tuple(saved)


def _grouped_stages(
    layer: GroupedQueryAttention,
    saved: tuple[TensorSpec, ...],
    key: Shape,
    value: Shape,
    given: DType | None,
    capped: bool = False,
) -> tuple[Stage, ...]:
    r"""Its backward nodes in creation order (eager path), with what each allocates.

    Measured on CPU (PyTorch 2.13): :math:`QK^\top` (its ``bmm`` makes
    the queries' and the keys' gradients; with groups, the keys' is summed
    over each group into a new key-sized tensor), the scale, the cast of
    the scores to fp32 inside ``softmax(dtype=float32)`` (16 bits), the
    softmax, the cast back (16 bits), dropout, :math:`PV` (the values' and
    the probabilities' gradients), and the reshape of the incoming
    gradient into heads (a contiguous copy). The mask's ``add`` hands its
    gradient on and is not listed. ``capped``: Gemma 2's soft-capping after
    the scale, three nodes that each make a scores-sized gradient (the
    division by the cap, ``tanh``, which keeps its output, and the product
    by the cap).
    """
    per_head, scores = saved[0].shape, saved[2].shape
    label = {spec.label: position for position, spec in enumerate(saved)}
    low = given not in (None, _FP32)

    def grad(shape: Shape, kind: DType | None = given) -> TensorSpec:
        return TensorSpec("intermediate", shape, kind)

    stages: list[Stage] = []
    k_to, v_to = -2, -3  # where the keys' and values' gradients go: the inputs, or repeat_kv
    if sp.sympify(layer.kv_heads) != sp.sympify(layer.heads):
        # repeat_kv's expand sums each group's gradients into a key/value-sized one
        stages = [
            Stage("repeat keys", edges=((-2, grad(key)),)),
            Stage("repeat values", edges=((-3, grad(value)),)),
        ]
        k_to, v_to = 0, 1
    stages.append(
        Stage(
            "q @ k^T",
            (label["queries"], label["keys"]),
            edges=((-1, grad(per_head)), (k_to, grad(per_head))),
            kept_for=((label["queries"], k_to), (label["keys"], -1)),
        )
    )
    stages.append(Stage("scale", edges=((len(stages) - 1, grad(scores)),)))
    if capped:
        stages.append(Stage("divide by cap", edges=((len(stages) - 1, grad(scores)),)))
        stages.append(Stage("tanh", (label["tanh"],), edges=((len(stages) - 1, grad(scores)),)))
        stages.append(Stage("times cap", edges=((len(stages) - 1, grad(scores)),)))
    if low:
        stages.append(Stage("softmax input to fp32", edges=((len(stages) - 1, grad(scores)),)))
    stages.append(
        Stage("softmax", (label["softmax"],), edges=((len(stages) - 1, grad(scores, _FP32)),))
    )
    if low:
        stages.append(Stage("to low", edges=((len(stages) - 1, grad(scores, _FP32)),)))
    if "dropout mask" in label:
        stages.append(
            Stage("dropout", (label["dropout mask"],), edges=((len(stages) - 1, grad(scores)),))
        )
    probabilities = label.get("dropped", label.get("probabilities", label["softmax"]))
    stages.append(
        Stage(
            "p @ v",
            (probabilities, label["values"]),
            edges=((len(stages) - 1, grad(scores)), (v_to, grad(per_head))),
            kept_for=((probabilities, v_to), (label["values"], len(stages) - 1)),
        )
    )
    stages.append(Stage("merge heads", edges=((len(stages) - 1, grad(per_head)),)))
    return tuple(stages)


@register_plan("memtheory.layers.softcap.SoftCappedAttention")
def soft_capped_attention(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return :func:`grouped_query_attention`'s storages and the ``tanh`` output (eager).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> from memtheory.layers.softcap import SoftCappedAttention
    >>> attn = SoftCappedAttention(4, kv_heads=2, head_dim=8, softcap=50.0)
    >>> [t.label for t in soft_capped_attention(
    ...     attn, ((B, S, 32), (B, S, 16), (B, S, 16))).saved]
    ['queries', 'keys', 'tanh', 'softmax', 'values']
    """
    layer = cast("SoftCappedAttention", layer)  # registered for this class (and subclasses)
    plain = grouped_query_attention(
        layer, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
    )
    if layer.flash:
        return plain
    keys = plain.saved[1]
    batch, heads, sequence = keys.shape[0], keys.shape[1], keys.shape[2]
    tanh = TensorSpec("intermediate", (batch, heads, sequence, sequence), keys.dtype,
                      label="tanh")
    saved = (*plain.saved[:2], tanh, *plain.saved[2:])
    given = as_dtype(input_dtype) if input_dtype is not None else None
    if autocast is not None:  # as grouped_query_attention: the scores in the low dtype
        given = as_dtype(autocast)
    key, value = (tuple(shape) for shape in input_shapes[1:3])
    stages = _grouped_stages(layer, saved, key, value, given, capped=True)
    return replace(plain, saved=saved, stages=stages)


@register_plan("memtheory.layers.falcon_attention.FalconAttention")
def falcon_attention(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return what Falcon's eager attention keeps: no fp32 softmax, and the key/value indices.

    transformers 5.24 ``FalconAttention.forward``, eager: ``F.softmax(...,
    dtype=hidden_states.dtype)`` keeps only its output, in the model's dtype
    (Llama's keeps an fp32 one and its cast); with fewer key/value heads
    than query heads, ``fused_qkv[..., [-2], :]`` and ``[..., [-1], :]``
    each keep a one-element int64 index, and ``matmul`` broadcasts the
    single key and value head into per-head copies of the size
    ``repeat_kv``'s would have; the value heads' index copy lives until the
    attention returns. The backward nodes are
    :func:`grouped_query_attention`'s, the softmax's gradient in the
    model's dtype. Its forward runs as three moments
    (:class:`~memtheory.layers.base.ForwardMoment`): ``q @ k^T`` (autocast's
    casts of the queries and keys freed after it), the softmax (the scores,
    their sum with the model's causal mask and the probabilities alive: the
    peak) and ``p @ v`` (the scores freed, the probabilities' low cast and
    the values' per-head copy made). With ``broadcast`` (the 40B layout) the
    keys and values arrive with every head: no index, no group sums. With
    ``flash``, Falcon's SDPA call: :func:`_falcon_sdpa`.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> from memtheory.layers.falcon_attention import FalconAttention
    >>> plan = falcon_attention(FalconAttention(4, kv_heads=1, head_dim=8),
    ...                         ((B, S, 32), (B, S, 8), (B, S, 8)), input_dtype="bf16")
    >>> [(t.label, t.dtype and t.dtype.name) for t in plan.saved]  # None: the model's dtype
    [('queries', None), ('keys', None), ('softmax', None), ('values', None), \
('key index', 'int64'), ('value index', 'int64')]
    """
    layer = cast("FalconAttention", layer)  # registered for this class (and subclasses)
    if layer.flash:
        return _falcon_sdpa(layer, input_shapes, training, input_dtype, autocast)
    query, key, value = (tuple(s) for s in input_shapes)
    given = as_dtype(input_dtype) if input_dtype is not None else None
    mixed = as_dtype(autocast) if autocast is not None else None
    batch, sequence = query[0], query[1]
    per_head = (batch, layer.heads, sequence, layer.head_dim)
    scores = (batch, layer.heads, sequence, sequence)
    # Without autocast everything is in the model's dtype; under it the low scores plus the
    # fp32 mask are fp32, and the fp32 softmax is cast to the low dtype by ``p @ v``, as
    # Llama's softmax(dtype=float32) is.
    saved = list(_grouped_saved(per_head, scores, mixed, training and bool(layer.dropout)))
    if sp.sympify(layer.kv_heads) != sp.sympify(layer.heads) and not layer.broadcast:
        # fused_qkv[..., [-2], :] and [..., [-1], :]: their index nodes run with the sums
        saved.append(TensorSpec("intermediate", (1,), _INT64, label="key index"))
        saved.append(TensorSpec("intermediate", (1,), _INT64, label="value index"))
    stages = _falcon_stages(layer, tuple(saved), key, value, mixed)
    low = mixed or given
    transients = [
        TensorSpec("intermediate", scores, low, label="q @ k^T"),
        TensorSpec("intermediate", scores, _FP32 if mixed else given, label="plus mask"),
    ]
    if "key index" in (t.label for t in saved):
        # fused_qkv[..., [-1], :]: the value heads' copy, alive until the attention returns
        transients.append(TensorSpec("intermediate", value, low, label="value copy"))
    return Autograd(
        saved=tuple(saved),
        autocast="low",
        stages=tuple(stages),
        transients=tuple(transients),
        forward_moments=_FALCON_MOMENTS,
    )


_FALCON_MOMENTS = (
    ForwardMoment(
        "q @ k^T", ("queries", "keys", "q @ k^T"), frees=("input cast", "queries", "keys")
    ),
    ForwardMoment("softmax", ("plus mask", "softmax"), frees=("q @ k^T", "plus mask")),
    ForwardMoment("p @ v", ("probabilities", "values")),
)
"""Falcon's forward peaks at its softmax: the scores, their sum with the mask and the
probabilities alive; autocast's casts of the queries and keys freed once ``q @ k^T`` ran;
the probabilities' low cast and the values' per-head copy (both made by ``p @ v``) and the
output not yet made."""


def _falcon_stages(
    layer: FalconAttention,
    saved: tuple[TensorSpec, ...],
    key: Shape,
    value: Shape,
    mixed: DType | None,
) -> tuple[Stage, ...]:
    """Falcon's backward nodes in creation order: ``matmul`` broadcasts the single key head.

    :func:`_grouped_stages`' nodes, but the sum of the keys' (values')
    per-head gradient into one head is ``matmul``'s own expand, made just
    before its ``bmm``: it runs right after that ``bmm``'s backward, where
    ``repeat_kv``'s runs last. Without autocast the softmax's gradient is
    in the model's dtype.
    """
    per_head, scores = saved[0].shape, saved[2].shape
    label = {spec.label: position for position, spec in enumerate(saved)}
    grouped = "key index" in label

    def grad(shape: Shape, kind: DType | None = mixed) -> TensorSpec:
        return TensorSpec("intermediate", shape, kind)

    stages: list[Stage] = []
    k_to, v_to = -2, -3
    if grouped:
        # the index nodes of the split run after the whole attention's backward
        indices = (label["key index"], label["value index"])
        stages.append(Stage("expand keys", indices, edges=((-2, grad(key)),)))
        k_to = 0
    stages.append(
        Stage(
            "q @ k^T",
            (label["queries"], label["keys"]),
            edges=((-1, grad(per_head)), (k_to, grad(per_head))),
            kept_for=((label["queries"], k_to), (label["keys"], -1)),
        )
    )
    stages.append(Stage("scale", edges=((len(stages) - 1, grad(scores)),)))
    if mixed is not None:  # the low scores plus the fp32 mask: promoted, cast back
        stages.append(Stage("softmax input to fp32", edges=((len(stages) - 1, grad(scores)),)))
    softmax = _FP32 if mixed is not None else None
    stages.append(
        Stage("softmax", (label["softmax"],), edges=((len(stages) - 1, grad(scores, softmax)),))
    )
    if mixed is not None:
        stages.append(Stage("to low", edges=((len(stages) - 1, grad(scores, _FP32)),)))
    if "dropout mask" in label:
        stages.append(
            Stage("dropout", (label["dropout mask"],), edges=((len(stages) - 1, grad(scores)),))
        )
    before = len(stages) - 1
    if grouped:
        stages.append(Stage("expand values", edges=((-3, grad(value)),)))
        v_to = len(stages) - 1
    probabilities = label.get("dropped", label.get("probabilities", label["softmax"]))
    stages.append(
        Stage(
            "p @ v",
            (probabilities, label["values"]),
            edges=((before, grad(scores)), (v_to, grad(per_head))),
            kept_for=((probabilities, v_to), (label["values"], before)),
        )
    )
    stages.append(Stage("merge heads", edges=((len(stages) - 1, grad(per_head)),)))
    return tuple(stages)


def _falcon_sdpa(
    layer: FalconAttention,
    input_shapes: tuple[Shape, ...],
    training: bool,
    input_dtype: DTypeLike | None,
    autocast: DTypeLike | None,
) -> Autograd:
    """Falcon's SDPA call: the math path on fewer key/value heads, else the flash kernel.

    transformers 5.24 ``FalconAttention.forward`` with ``attn_implementation="sdpa"``
    hands ``scaled_dot_product_attention`` the model's ``bool`` causal mask
    (:class:`~memtheory.layers.causal_mask.CausalMask` ``boolean``) and no
    ``enable_gqa``. With as many key/value heads as query heads (the 40B layout's
    broadcast ones, or ``multi_query=False``) PyTorch 2.13 runs its CPU flash
    kernel, which keeps what :func:`grouped_query_attention`'s flash plan keeps and
    the mask converted to the queries' dtype, ``(B, 1, S, S)``, one per layer. With
    fewer (the multi-query 7B layout) it runs its math path (:func:`_falcon_math`).
    Measured on CPU (``tests/pytorch/test_family_autograd.py``,
    ``tests/pytorch/test_peft_tied.py``): exact in fp32, bf16 and under autocast,
    at 6, 13 and 160 positions, and under transformers' ``Trainer``.
    """
    if sp.sympify(layer.kv_heads) != sp.sympify(layer.heads) and not layer.broadcast:
        return _falcon_math(layer, input_shapes, input_dtype, autocast)
    plan = grouped_query_attention(
        layer, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
    )
    query = tuple(input_shapes[0])
    mask = TensorSpec("mask", (query[0], 1, query[1], query[1]), label="mask cast")
    return replace(plan, saved=(*plan.saved, mask))


def _falcon_math(
    layer: FalconAttention,
    input_shapes: tuple[Shape, ...],
    input_dtype: DTypeLike | None,
    autocast: DTypeLike | None,
) -> Autograd:
    """Falcon's SDPA call on fewer key/value heads: PyTorch 2.13's math path, in fp32.

    ``_scaled_dot_product_attention_math`` casts 16-bit queries, keys and values
    to fp32 (``allowFP16BF16ReductionMathSDP`` is off), scales the queries and the
    transposed keys, and ``matmul`` broadcasts the single key (value) head into a
    contiguous per-head copy that its ``bmm`` keeps; the fp32 softmax is kept, the
    output is cast back. The backward runs in fp32 and sums each per-head key
    (value) gradient into one head before the casts back; the split's index
    nodes (``fused_qkv[..., [-2], :]``) keep their one-element indices as on the
    eager path. Measured on CPU (PyTorch 2.13), see :func:`_falcon_sdpa`.
    """
    query, key, value = (tuple(s) for s in input_shapes)
    low = as_dtype(autocast) if autocast is not None else (
        as_dtype(input_dtype) if input_dtype is not None else None)
    batch, sequence = query[0], query[1]
    per_head = (batch, layer.heads, sequence, layer.head_dim)
    scores = (batch, layer.heads, sequence, sequence)

    def fp32(shape: Shape, label: str | None = None) -> TensorSpec:
        return TensorSpec("intermediate", shape, _FP32, label=label)

    def grad(shape: Shape, kind: DType | None) -> TensorSpec:
        return TensorSpec("intermediate", shape, kind)

    saved = (
        fp32(per_head, "queries"), fp32(per_head, "keys"), fp32(scores, "softmax"),
        fp32(per_head, "values"),
        TensorSpec("intermediate", (1,), _INT64, label="key index"),
        TensorSpec("intermediate", (1,), _INT64, label="value index"),
    )
    stages = (
        Stage("key index", (4, 5), edges=((-2, grad(key, low)),)),
        Stage("value index", edges=((-3, grad(value, low)),)),
        Stage("queries to fp32", edges=((-1, grad(query, low)),)),
        Stage("keys to fp32", edges=((0, grad(key, low)),)),
        Stage("values to fp32", edges=((1, grad(value, low)),)),
        Stage("scale queries", edges=((2, grad(per_head, _FP32)),)),
        Stage("scale keys", edges=((3, grad(key, _FP32)),)),
        Stage("expand keys", edges=((6, grad(key, _FP32)),)),
        Stage("q @ k^T", (0, 1), edges=((5, grad(per_head, _FP32)), (7, grad(per_head, _FP32))),
              kept_for=((0, 7), (1, 5))),
        Stage("add mask", gradient_is_view=True, edges=((8, grad(scores, _FP32)),)),
        Stage("softmax", (2,), edges=((9, grad(scores, _FP32)),)),
        Stage("expand values", edges=((4, grad(value, _FP32)),)),
        Stage("p @ v", (2, 3), edges=((10, grad(scores, _FP32)), (11, grad(per_head, _FP32))),
              kept_for=((2, 11), (3, 10))),
        Stage("to low", edges=((12, grad(per_head, _FP32)),)),
        Stage("merge heads", edges=((13, grad(per_head, low)),)),
    )
    transients = (
        fp32(per_head, "queries fp32"), fp32(key, "keys fp32"), fp32(value, "values fp32"),
        fp32(key, "keys scaled"), fp32(scores, "q @ k^T"),
        fp32(per_head, "p @ v"), TensorSpec("intermediate", per_head, low, label="output cast"),
    )
    return Autograd(saved=saved, autocast="low", stages=stages, transients=transients)
