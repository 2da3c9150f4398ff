r"""How PyTorch 2.13 runs transformers' grouped mixture of experts (Mixtral's sparse MoE block).

transformers 5.24 decorates ``MixtralExperts`` with ``@use_experts_implementation``;
a model built without ``experts_implementation`` gets ``"grouped_mm"``
(``PreTrainedModel.get_correct_experts_implementation``), and on CPU with
PyTorch newer than 2.10 ``_can_use_grouped_mm`` is true, so
``grouped_mm_experts_forward`` runs ``torch.nn.functional.grouped_mm``. It
sorts the :math:`T k` (token, expert) pairs by expert (:math:`T = B S` tokens,
:math:`k` = ``top_k``), gathers the rows, runs the up and down projections of
every expert as one grouped matrix product each, weights the rows in fp32 and
sums them back per token. Every tensor has :math:`T k` rows, however the
router splits them among the experts: only the offsets (``E`` int32) say
where each expert's rows start. The step's storages therefore do not depend
on the routing; what one expert gets changes nothing here.

Examples
--------
>>> from memtheory.layers import MixtureOfExperts
>>> from memtheory.symbols import B, S
>>> moe = MixtureOfExperts(4, top_k=2, ffn_hidden=16, router="mixtral")
>>> spec = grouped_experts(moe, ((B, S, 8),))
>>> [s.label for s in spec.saved][7:11]
['gathered rows', 'offsets', 'routing weights (sorted)', 'gate and up']
>>> spec.saved[10].shape
(2*B*S, 32)
"""

from __future__ import annotations

import sympy as sp

from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import UnsupportedError
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec
from memtheory.layers.kernel_plans import register_plan

__all__ = ["grouped_experts"]

_FP32, _INT64, _INT32 = as_dtype("fp32"), as_dtype("int64"), as_dtype("int32")
_BYTE = as_dtype("uint8")  # a storage stated in bytes

_AUTOCAST = (
    "under torch.autocast the router's linear map runs in the low dtype while "
    "torch.nn.functional.grouped_mm, which autocast does not cover, casts its input to the "
    "experts' fp32 weights; that path has not been measured. Cast the model (precision "
    "'bf16') or train in fp32."
)


@register_plan("memtheory.layers.moe.MixtureOfExperts")
def grouped_experts(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return the router's and the grouped experts' saved tensors and backward nodes.

    Measured on CPU (PyTorch 2.13, transformers 5.24,
    ``tests/pytorch/test_moe_autograd.py``) in fp32 and bf16, with balanced
    and skewed routing. The router (``MixtralTopKRouter``) keeps its input,
    the fp32 softmax, the top-k indices, and, for the in-place
    renormalisation ``w /= w.sum(-1)``, a copy of the weights before it and
    their sum. The experts keep the sort's permutation, the gathered rows'
    token positions, the gathered rows, the offsets, the sorted routing
    weights (fp32), the up projection's output (gate and up halves), the
    activated gate, the product, the down projection's output and the
    inverse permutation. In a 16-bit model the weighted rows are fp32 (a
    16-bit tensor times fp32 weights), and the sum over the :math:`k` rows of a
    token is cast back.

    Examples
    --------
    >>> from memtheory.layers import MixtureOfExperts
    >>> from memtheory.symbols import B, S
    >>> moe = MixtureOfExperts(4, top_k=2, ffn_hidden=16, router="mixtral")
    >>> spec = grouped_experts(moe, ((B, S, 8),), input_dtype="bf16")
    >>> [stage.label for stage in spec.stages][-3:]
    ['reshape', 'sum over k', 'to bf16']
    """
    if autocast is not None:
        raise UnsupportedError(f"{layer.label}: {_AUTOCAST}")
    shape = tuple(input_shapes[0])
    layer.check_input(shape)
    given = as_dtype(input_dtype) if input_dtype is not None else _FP32
    return Autograd(
        saved=_saved(layer, shape),
        stages=_stages(layer, shape, given),
        transients=_transients(layer, shape, given),
        without_input_gradient=(
            "reading the network's input, it keeps neither the router's input nor the "
            "gathered rows' gradient path; that case is not measured. Put a layer with "
            "parameters before it."
        ),
        inference_refusal=(
            "in eval mode under no_grad its forward frees the routing's intermediates one "
            "by one; that path is not measured."
        ),
    )


def _sizes(layer: Layer, shape: Shape) -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """Return the tokens T, routed rows T k, experts E, top_k k and expert width f."""
    tokens = sp.sympify(shape[0] * shape[1])
    experts, top_k, width = (
        sp.sympify(getattr(layer, n)) for n in ("experts", "top_k", "ffn_hidden")
    )
    return tokens, tokens * top_k, experts, top_k, width


def _weights_dtype(layer: Layer) -> DType | None:
    """Return the routing weights' dtype: fp32 (Mixtral, or unstated), or None (Qwen-MoE)."""
    return None if getattr(layer, "router", None) == "qwen" else _FP32


def _saved(layer: Layer, shape: Shape) -> tuple[TensorSpec, ...]:
    """Return the storages its backward nodes keep, in the order the forward makes them.

    Without renormalisation the copy of the top-k weights and their sum are
    not made: they are kept as empty (zero-element) tensors, so that the
    positions stay put.
    """
    tokens, routed, experts, top_k, width = _sizes(layer, shape)
    hidden = shape[-1]
    kept = 1 if getattr(layer, "renormalize", True) else 0
    return (
        TensorSpec("input", shape),                                                  # 0
        TensorSpec("intermediate", (tokens, experts), _FP32, label="router softmax"),  # 1
        TensorSpec("indices", (tokens, top_k), _INT64, label="top-k experts"),        # 2
        TensorSpec("intermediate", (tokens * kept, top_k), _FP32, label="top-k weights"),  # 3
        TensorSpec("intermediate", (tokens * kept, 1), _FP32, label="their sum"),     # 4
        TensorSpec("indices", (routed,), _INT64, label="sort permutation"),           # 5
        TensorSpec("indices", (routed,), _INT64, label="row tokens"),                 # 6
        TensorSpec("intermediate", (routed, hidden), label="gathered rows"),          # 7
        TensorSpec("indices", (experts,), _INT32, label="offsets"),                   # 8
        TensorSpec("intermediate", (routed,), _weights_dtype(layer),
                   label="routing weights (sorted)"),                                 # 9
        TensorSpec("intermediate", (routed, 2 * width), label="gate and up"),         # 10
        TensorSpec("intermediate", (routed, width), label="act(gate)"),               # 11
        TensorSpec("intermediate", (routed, width), label="product"),                 # 12
        TensorSpec("intermediate", (routed, hidden), label="expert output"),          # 13
        TensorSpec("indices", (routed,), _INT64, label="inverse permutation"),        # 14
    )


def _spec(dtype: DType | None, *dims: sp.Expr) -> TensorSpec:
    return TensorSpec("intermediate", tuple(dims), dtype)


def _router_stages(layer: Layer, shape: Shape, given: DType) -> list[Stage]:
    """Return the router's nodes: linear map, fp32 cast, softmax, top-k, renormalising, cast."""
    tokens, _, experts, top_k, _ = _sizes(layer, shape)
    low = given != _FP32
    stages = [Stage("router linear", (0,), edges=((-1, _spec(None, *shape)),),
                    parameters=("gate.weight",))]
    if low:  # router_logits.float(), or softmax(..., dtype=torch.float)
        stages.append(Stage("router logits to fp32", edges=((0, _spec(None, tokens, experts)),)))
    stages.append(Stage("softmax", (1,), edges=((len(stages) - 1, _spec(_FP32, tokens, experts)),)))
    stages.append(Stage("topk", (2,), edges=((len(stages) - 1, _spec(_FP32, tokens, experts)),),
                        temporaries=(_spec(_FP32, tokens, experts),)))
    topk = len(stages) - 1
    if getattr(layer, "renormalize", True):
        # the gradient of w.sum(-1, keepdim=True) is an expanded view of its (T, 1) input
        stages.append(Stage("sum of top-k", edges=((topk, _spec(_FP32, tokens, 1)),)))
        stages.append(Stage("renormalise", (3, 4),
                            edges=((topk, _spec(_FP32, tokens, top_k)),
                                   (topk + 1, _spec(_FP32, tokens, 1))),
                            temporaries=(_spec(_FP32, tokens, top_k),) * 2))
    if low and _weights_dtype(layer) is None:  # router_top_value.to(router_logits.dtype)
        stages.append(Stage(f"top-k weights to {given.name}",
                            edges=((len(stages) - 1, _spec(_FP32, tokens, top_k)),)))
    return stages


def _stages(layer: Layer, shape: Shape, given: DType) -> tuple[Stage, ...]:
    """Return its backward nodes in creation order (view nodes, allocating nothing, left out)."""
    tokens, routed, experts, top_k, width = _sizes(layer, shape)
    hidden = shape[-1]
    weights = _weights_dtype(layer)
    promoted = weights == _FP32 and given != _FP32  # 16-bit rows times fp32 weights: fp32
    out = _FP32 if promoted else None
    stages = _router_stages(layer, shape, given)
    at = {"weights in": len(stages) - 1}
    stages.append(Stage("gather rows", (6,), edges=((-1, _spec(None, *shape)),),
                        temporaries=(_spec(None, *shape),)))
    stages.append(Stage("gather weights", (5,), edges=((at["weights in"], _spec(weights, routed)),),
                        temporaries=(_spec(weights, routed),)))
    at["weights"] = len(stages) - 1
    stages.append(Stage("grouped_mm up", (7, 8),
                        edges=((at["weights"] - 1, _spec(None, routed, hidden)),),
                        parameters=("experts.gate_up_proj",)))
    at["up"] = len(stages) - 1
    # chunk's backward concatenates the two halves' gradients, held apart until then
    stages.append(Stage("chunk", edges=((at["up"], _spec(None, routed, 2 * width)),),
                        temporaries=(_spec(None, routed, width),)))
    at["chunk"] = len(stages) - 1
    stages.append(Stage("act", (10,), edges=((at["chunk"], _spec(None, routed, width)),)))
    stages.append(Stage("act(gate) * up", (11, 10),
                        edges=((at["chunk"] + 1, _spec(None, routed, width)),
                               (at["chunk"], _spec(None, routed, width)))))
    at["mul"] = len(stages) - 1
    stages.append(Stage("grouped_mm down", (12, 8),
                        edges=((at["mul"], _spec(None, routed, hidden)),),
                        parameters=("experts.down_proj",)))
    at["down"] = len(stages) - 1
    stages.append(Stage("times routing weights", (13, 9),
                        edges=((at["down"], _spec(None, routed, hidden)),
                               (at["weights"], _spec(weights, routed))),
                        temporaries=_weighting_temporaries(routed, hidden, promoted)))
    at["weigh"] = len(stages) - 1
    rows = _spec(out, routed, hidden)
    stages.append(Stage("unsort", (14,), edges=((at["weigh"], rows),), temporaries=(rows,)))
    stages.append(Stage("reshape", edges=((len(stages) - 1, rows),)))
    stages.append(Stage("sum over k", edges=((len(stages) - 1, _spec(out, *shape)),)))
    if promoted:
        stages.append(Stage(f"to {given.name}", edges=((len(stages) - 1, _spec(_FP32, *shape)),)))
    return tuple(stages)


def _weighting_temporaries(routed: sp.Expr, hidden: sp.Expr, promoted: bool
                           ) -> tuple[TensorSpec, ...]:
    """Return what ``rows * weights``'s backward allocates besides the gradients it hands on.

    Both products have the weighted rows' dtype. The first is the rows'
    gradient and the second is summed to the weights' (T k, 1) while it
    lives. When 16-bit rows are weighted in fp32 (Mixtral's router in a
    16-bit model) the first is cast to the rows' dtype while the second
    lives (that cast is the rows' gradient) and is freed before the sum: its
    bytes, less the (T k, 1) sum allocated after it, are the most alive at once.
    """
    if not promoted:
        return (_spec(None, routed, hidden),)
    return (_spec(_FP32, routed, hidden), _spec(_FP32, routed, hidden - 1))


def _transients(layer: Layer, shape: Shape, given: DType) -> tuple[TensorSpec, ...]:
    """Return the storages its forward frees, as many as live at its forward's highest moment.

    While the weighted rows are put back in token order, the router's logits
    (which the block binds to ``_`` until it returns), the top-k weights,
    the sorted expert ids (int64), their fp32 copy for ``histc`` and the rows
    per expert (fp32) are alive beside the weighted rows and their unsorted
    copy (:math:`T k` rows each). The block's output, which the convention
    adds, is not yet allocated then: one unsorted copy's bytes less the
    output's stand for it. When 16-bit rows are weighted in fp32 and each
    token has one expert, the later moment is higher: the fp32 sum over
    ``k`` and its cast back beside one copy.
    """
    tokens, routed, experts, top_k, width = _sizes(layer, shape)
    hidden = shape[-1]
    weights = _weights_dtype(layer)
    promoted = weights == _FP32 and given != _FP32
    row_bytes = (_FP32 if promoted else given).bytes
    common = (
        TensorSpec("intermediate", (tokens, experts), label="router logits"),
        TensorSpec("intermediate", (tokens, top_k), weights, label="top-k weights"),
        TensorSpec("indices", (routed,), _INT64, label="sorted expert ids"),
        TensorSpec("intermediate", (routed,), _FP32, label="expert ids for histc"),
        TensorSpec("intermediate", (experts,), _FP32, label="rows per expert"),
        TensorSpec("intermediate", (routed, hidden), _FP32 if promoted else None,
                   label="weighted rows"),
    )
    # the rest, in bytes: one more copy less the output, or (promoted, k = 1) the fp32 sum
    copy, out = routed * hidden * row_bytes, tokens * hidden * given.bytes
    extra = sp.Max(copy - out, tokens * hidden * 4) if promoted else copy - out
    return (*common, TensorSpec("intermediate", (extra,), _BYTE, label="unsorted rows"))
