r"""How PyTorch 2.13 keeps the storages of DeepSeek V3's latent attention (eager, on CPU).

transformers 5.24 ``DeepseekV3Attention.forward`` after its projections: the
rotary part of each query head and the shared rotary key are rotated with the
model's cosine and sine tables (``apply_rotary_pos_emb_interleave``, or
``apply_rotary_pos_emb`` when ``rope_interleave`` is false); ``torch.cat``
puts each query head back together (a new ``(B, H, S, d_qk)`` tensor);
``expand_kv`` builds the keys in a new ``(B, H, S, d_qk)`` tensor
(``new_empty`` and two ``copy_``: the non-rotary keys, then the rotary key
broadcast to every head); then Hugging Face's eager attention, as Llama's
(:func:`~memtheory.conventions.autograd.kernels.torch_2_13.attention.grouped_query_attention`),
but with values of ``v_head_dim``: ``matmul`` copies the values, a strided
slice of ``kv_b_proj``'s output, into a contiguous ``(B H, S, d_v)`` tensor
which its ``bmm`` keeps.

Measured on CPU (``tests/pytorch/test_deepseek_autograd.py``): the backward
keeps the cosine and sine tables (the rotations' products save the tables,
which need no gradient), the concatenated queries, the keys, the fp32 softmax
(and its cast in a 16-bit model) and the values' copy.

Examples
--------
>>> from memtheory.symbols import B, S
>>> from memtheory.layers.latent_attention import LatentAttention
>>> mla = LatentAttention(4, nope_dim=4, rope_dim=4, value_dim=6)
>>> plan = latent_attention(mla, ((B, S, 32), (B, S, 16), (B, S, 4), (B, S, 24), (1, S, 8)))
>>> [(t.label, t.shape) for t in plan.saved]  # doctest: +NORMALIZE_WHITESPACE
[('cos and sin', (1, S, 8)), ('queries', (B, 4, S, 8)), ('keys', (B, 4, S, 8)),
 ('softmax', (B, 4, S, S)), ('values', (B, 4, S, 6))]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import sympy as sp

from memtheory.conventions.autograd.kernels.torch_2_13.attention import cuda_flash
from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec
from memtheory.layers.kernel_plans import register_plan

if TYPE_CHECKING:  # the layer's module loads when a network uses it
    from memtheory.layers.latent_attention import LatentAttention

__all__ = ["latent_attention"]

_FP32 = as_dtype("fp32")


@register_plan("memtheory.layers.latent_attention.LatentAttention")
def latent_attention(
    layer: Layer,
    input_shapes: tuple[Shape, ...],
    *,
    training: bool = True,
    input_dtype: DTypeLike | None = None,
    autocast: DTypeLike | None = None,
) -> Autograd:
    """Return what the backward of DeepSeek V3's eager latent attention keeps, with dtypes.

    Its inputs: the queries ``(B, S, H d_qk)``, the non-rotary keys
    ``(B, S, H d_nope)``, the shared rotary key ``(B, S, d_rope)``, the
    values ``(B, S, H d_v)`` and the rotary tables ``(1, S, 2 d_rope)``. As
    for Llama's attention, the formulas assume at least two positions; with
    one sequence (a batch of 1) ``matmul`` views the values rather than
    copying them, and its ``bmm`` keeps ``kv_b_proj``'s whole output.
    Without the tables (four inputs: a layer built by hand for its shapes)
    the rotations keep nothing here.
    DeepSeek V2's complex rotary (``complex_rotary=True``) is described as
    V3's, unmeasured: the autograd convention refuses it
    (:attr:`LatentAttention.autograd_checked`).
    """
    mla = cast("LatentAttention", layer)  # registered for this class (and subclasses)
    query, rope = tuple(input_shapes[0]), tuple(input_shapes[2])
    if mla.flash and not _math_path(mla):
        return _flash(mla, query, tuple(input_shapes[3]))
    given = as_dtype(input_dtype) if input_dtype is not None else None
    if autocast is not None:  # matmul is on autocast's low-precision list
        given = as_dtype(autocast)
    batch, sequence = query[0], query[1]
    heads = mla.heads
    width = mla.nope_dim + mla.rope_dim
    per_head = (batch, heads, sequence, width)
    values = (batch, heads, sequence, mla.value_dim)
    scores = (batch, heads, sequence, sequence)
    low = given not in (None, _FP32)
    if mla.flash:
        return _sdpa_math(mla, input_shapes, given)
    saved = [
        *(TensorSpec("input", tuple(shape), operand=4, label="cos and sin")
          for shape in input_shapes[4:]),
        TensorSpec("intermediate", per_head, given, label="queries"),
        TensorSpec("intermediate", per_head, given, label="keys"),
        TensorSpec("intermediate", scores, _FP32 if given is not None else None,
                   label="softmax"),
    ]
    if low:
        saved.append(TensorSpec("intermediate", scores, given, label="probabilities"))
    if sp.sympify(batch) == 1:  # matmul views the one sequence's values: kv_b_proj's output
        saved.append(TensorSpec("input", tuple(input_shapes[3]), operand=3, label="values"))
    else:
        saved.append(TensorSpec("intermediate", values, given, label="values"))
    rotated_q = (batch, heads, sequence, mla.rope_dim)
    rotated_k = (batch, 1, sequence, mla.rope_dim)
    return Autograd(
        saved=tuple(saved),
        autocast="low",
        stages=_stages(tuple(saved), per_head, values, rotated_q, rope, given),
        transients=(
            TensorSpec("intermediate", rotated_q, given, label="rotated queries"),
            TensorSpec("intermediate", rotated_k, given, label="rotated key"),
            TensorSpec("intermediate", scores, _FP32, label="fp32 scores"),
        ),
    )


def _math_path(mla: LatentAttention) -> bool:
    """Whether SDPA runs its math path: on the CPU, with values narrower than the queries.

    The CPU flash kernel takes one head size for Q, K and V
    (``check_head_dim_size_cpp``); DeepSeek's values are ``v_head_dim`` wide,
    its queries and keys ``qk_nope_head_dim + qk_rope_head_dim``.
    """
    width = sp.sympify(mla.nope_dim) + sp.sympify(mla.rope_dim)
    return mla.device == "cpu" and sp.simplify(width - sp.sympify(mla.value_dim)) != 0


def _sdpa_math(
    mla: LatentAttention, input_shapes: tuple[Shape, ...], given: DType | None
) -> Autograd:
    """Describe transformers' SDPA call on the CPU: ``_scaled_dot_product_attention_math``.

    In a 16-bit model it casts Q, K and V to fp32 (``allowFP16BF16ReductionMathSDP``
    is off by default); it multiplies Q and the transposed K by the square
    root of the scale (two new fp32 tensors, which the first ``matmul``
    keeps), adds the causal mask in place, keeps the fp32 softmax, and the
    second ``matmul`` keeps an fp32 contiguous copy of V (``.to(float)`` of
    the strided slice, or in fp32 ``matmul``'s own copy); its output is cast
    back. The causal mask is made by SDPA itself (transformers passes
    ``is_causal``): ``(S, S)`` bool, then fp32, freed in the forward.
    """
    query, rope = tuple(input_shapes[0]), tuple(input_shapes[2])
    batch, sequence, heads = query[0], query[1], mla.heads
    per_head = (batch, heads, sequence, mla.nope_dim + mla.rope_dim)
    values = (batch, heads, sequence, mla.value_dim)
    scores = (batch, heads, sequence, sequence)
    saved = (
        *(TensorSpec("input", tuple(shape), operand=4, label="cos and sin")
          for shape in input_shapes[4:]),
        TensorSpec("intermediate", per_head, _FP32, label="scaled queries"),
        TensorSpec("intermediate", per_head, _FP32, label="scaled keys"),
        TensorSpec("intermediate", scores, _FP32, label="softmax"),
        TensorSpec("intermediate", values, _FP32, label="values"),
    )
    label = {spec.label: position for position, spec in enumerate(saved)}
    low = given not in (None, _FP32)
    rotated_q = (batch, heads, sequence, mla.rope_dim)

    def grad(shape: Shape, kind: DType | None = given) -> TensorSpec:
        return TensorSpec("intermediate", shape, kind)

    stages = _rotation_stages(label, per_head, rotated_q, rope, given)
    q_to, k_to, v_to = 2, 3, -4
    if low:
        stages += [
            Stage("queries to fp32", edges=((2, grad(per_head)),)),
            Stage("keys to fp32", edges=((3, grad(per_head)),)),
            Stage("values to fp32", edges=((-4, grad(values)),)),
        ]
        q_to, k_to, v_to = 4, 5, 6
    stages += [
        Stage("scale queries", edges=((q_to, grad(per_head, _FP32)),)),
        Stage("scale keys", edges=((k_to, grad(per_head, _FP32)),)),
    ]
    q_scaled, k_scaled = len(stages) - 2, len(stages) - 1
    stages.append(
        Stage(
            "q @ k^T",
            (label["scaled queries"], label["scaled keys"]),
            edges=((q_scaled, grad(per_head, _FP32)), (k_scaled, grad(per_head, _FP32))),
            kept_for=((label["scaled queries"], k_scaled), (label["scaled keys"], q_scaled)),
        )
    )
    stages.append(
        Stage("softmax", (label["softmax"],), edges=((len(stages) - 1, grad(scores, _FP32)),))
    )
    stages.append(
        Stage(
            "p @ v",
            (label["softmax"], label["values"]),
            edges=((len(stages) - 1, grad(scores, _FP32)), (v_to, grad(values, _FP32))),
            kept_for=((label["softmax"], v_to), (label["values"], len(stages) - 1)),
        )
    )
    if low:
        stages.append(Stage("output to low", edges=((len(stages) - 1, grad(values, _FP32)),)))
    stages.append(Stage("merge heads", edges=((len(stages) - 1, grad(values)),)))
    # What its forward holds at its peak besides what it keeps: the rotated parts and the
    # built queries and keys (transformers' locals), SDPA's fp32 causal mask; at 16 bits, the
    # fp32 casts of Q, K and V, the probabilities' cast back and the fp32 output as the output
    # is cast back (measured); in fp32, the scores as the mask is added (an upper bound).
    transients: tuple[TensorSpec, ...] = (
        TensorSpec("intermediate", rotated_q, given, label="rotated queries"),
        TensorSpec("intermediate", (batch, 1, sequence, mla.rope_dim), given,
                   label="rotated key"),
        TensorSpec("intermediate", per_head, given, label="queries"),
        TensorSpec("intermediate", per_head, given, label="keys"),
        TensorSpec("intermediate", (sequence, sequence), _FP32, label="causal mask"),
    )
    if low:
        transients += (
            TensorSpec("intermediate", per_head, _FP32, label="fp32 queries"),
            TensorSpec("intermediate", per_head, _FP32, label="fp32 keys"),
            TensorSpec("intermediate", values, _FP32, label="fp32 values"),
            TensorSpec("intermediate", scores, given, label="probabilities cast back"),
            TensorSpec("intermediate", values, _FP32, label="fp32 output"),
        )
    else:
        transients += (TensorSpec("intermediate", scores, _FP32, label="fp32 scores"),)
    return Autograd(saved=saved, autocast="low", stages=tuple(stages), transients=transients)


def _flash(mla: LatentAttention, query: Shape, value: Shape) -> Autograd:
    """Return the CUDA flash kernel's assumption (:func:`cuda_flash`) on the built Q and K."""
    batch, heads, sequence = query[0], mla.heads, query[1]
    per_head = (batch, heads, sequence, mla.nope_dim + mla.rope_dim)
    return Autograd(
        saved=cuda_flash(
            TensorSpec("intermediate", per_head, label="queries"),
            TensorSpec("intermediate", per_head, label="keys"),
            TensorSpec("input", value, operand=3),
            TensorSpec("output", (batch, sequence, heads * mla.value_dim)),
            (batch, heads, sequence),
        ),
        autocast="low",
    )


def _rotation_stages(
    label: dict[str | None, int], per_head: Shape, rotated_q: Shape, rope: Shape,
    given: DType | None,
) -> list[Stage]:
    """Return the first backward nodes of either path: the rotations, the cat, the keys' copy.

    Each rotation keeps the cos/sin tables (where the layer was given them); ``cat``'s
    gradient is a view of the incoming one.
    """
    def grad(shape: Shape) -> TensorSpec:
        return TensorSpec("intermediate", shape, given)

    tables = (label["cos and sin"],) if "cos and sin" in label else ()
    return [
        Stage("rotate queries", tables, edges=((-1, grad(rotated_q)),)),
        Stage("rotate key", tables, edges=((-3, grad(rope)),)),
        Stage("cat queries", gradient_is_view=True, edges=((0, grad(rotated_q)),)),
        Stage("copy keys", edges=((-2, grad(per_head)), (1, grad(rope)))),
    ]


def _stages(
    saved: tuple[TensorSpec, ...],
    per_head: Shape,
    values: Shape,
    rotated_q: Shape,
    rope: Shape,
    given: DType | None,
) -> tuple[Stage, ...]:
    r"""Its backward nodes in creation order, with what each allocates.

    The rotations (each keeps the tables), the queries' ``cat`` and the keys'
    copies (views of the incoming gradient), then the eager attention:
    :math:`QK^\top`, the scale, the fp32 softmax (with its casts in a 16-bit
    model), :math:`PV` and the merge of the heads.
    """
    label = {spec.label: position for position, spec in enumerate(saved)}
    scores = saved[label["softmax"]].shape
    low = given not in (None, _FP32)

    def grad(shape: Shape, kind: DType | None = given) -> TensorSpec:
        return TensorSpec("intermediate", shape, kind)

    stages = _rotation_stages(label, per_head, rotated_q, rope, given)
    queries, keys = len(stages) - 2, len(stages) - 1
    stages.append(
        Stage(
            "q @ k^T",
            (label["queries"], label["keys"]),
            edges=((queries, grad(per_head)), (keys, grad(per_head))),
            kept_for=((label["queries"], keys), (label["keys"], queries)),
        )
    )
    stages.append(Stage("scale", edges=((len(stages) - 1, grad(scores)),)))
    if low:
        stages.append(Stage("softmax input to fp32", edges=((len(stages) - 1, grad(scores)),)))
    stages.append(
        Stage("softmax", (label["softmax"],), edges=((len(stages) - 1, grad(scores, _FP32)),))
    )
    if low:
        stages.append(Stage("to low", edges=((len(stages) - 1, grad(scores, _FP32)),)))
    probabilities = label.get("probabilities", label["softmax"])
    stages.append(
        Stage(
            "p @ v",
            (probabilities, label["values"]),
            edges=((len(stages) - 1, grad(scores)), (-4, grad(values))),
            kept_for=((probabilities, -4), (label["values"], len(stages) - 1)),
        )
    )
    stages.append(Stage("merge heads", edges=((len(stages) - 1, grad(values)),)))
    return tuple(stages)
