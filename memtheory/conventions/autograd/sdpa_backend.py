r"""Which kernel ``scaled_dot_product_attention`` runs on a CUDA GPU, and whether it keeps S x S.

``torch.nn.functional.scaled_dot_product_attention`` is one call with
several kernels behind it. On a CUDA device PyTorch picks the first backend
in its priority order whose checks all pass (``select_sdp_backend`` in
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``); the fused ones
(flash, cuDNN, memory-efficient) keep Q, K, V, the output and one fp32
log-sum-exp per row and head, and the math fallback keeps the S x S
probabilities as eager attention does. Which one runs depends on the call,
not only on ``attn_implementation="sdpa"``:

* **flash** (``can_use_flash_attention``): fp16 or bf16 only
  (``check_dtypes_flash_attention``, ``check_dtypes_low_precision``: at::kHalf,
  at::kBFloat16 from sm80), no ``attn_mask`` (``check_for_attn_mask``),
  q, k, v of one head size of at most 256 (``check_head_dim_size_flash``),
  grouped key/value heads when ``enable_gqa=True``
  (``check_batch_size_and_num_heads_dense<true, ...>``).
* **cuDNN** (``can_use_cudnn_attention``; first in the order on sm90/sm100
  with cuDNN newer than 9.15, ``check_prefer_cudnn_attention``): fp16 or
  bf16, a mask allowed, a head size that is a multiple of 8 and at most 128
  (``check_cudnn_tensor_shapes``; 256 with newer cuDNN on sm90), dropout in
  steps of 1/16 (``check_cudnn_dropout``), grouped heads allowed.
* **memory-efficient** (``can_use_mem_efficient_attention``): fp32 as well
  as fp16 and bf16 from sm80, a mask allowed, a head size divisible by the
  GEMM alignment (4 elements in fp32, 8 in 16 bits,
  ``check_head_dim_size_mem_efficient`` and ``minimum_gemm_alignment``),
  and, up to PyTorch 2.11, the **same number of query and key/value heads**:
  its dense checks instantiate
  ``check_batch_size_and_num_heads_dense<false /*supports_grouped_query_attention*/>``.
  pytorch/pytorch#191085 (July 2026) adds grouped heads to this kernel in
  a later release (:data:`MEM_EFFICIENT_GQA`).
* **math** otherwise: ``_scaled_dot_product_attention_math``
  (``aten/src/ATen/native/transformers/attention.cpp``) repeats K and V to
  the query heads for ``enable_gqa`` (as transformers' ``repeat_kv`` does),
  multiplies Q and K by the square root of the scale, keeps the softmax of
  the S x S scores and multiplies it by V: in fp32 without dropout the same
  bytes as Hugging Face's eager attention.

transformers 5 asks for ``enable_gqa=True`` rather than repeating K and V
itself when the model has grouped heads, no mask is passed and the head size
is at most 256 (``integrations/sdpa_attention.py`` ``use_gqa_in_sdpa``,
transformers 5.24, :func:`transformers_enable_gqa`). So a grouped-query
model (Llama 3, Mistral, Qwen) trained in **fp32** gets no fused kernel on
CUDA up to PyTorch 2.11: flash and cuDNN refuse fp32, memory-efficient
refuses ``enable_gqa``, and the math path keeps S x S. The first GPU recording
(``book/data/gpu/nvidia-h200-torch-2-11-0-cu130-2026-11-27-0209.json``, an H200 with
PyTorch 2.11) shows it: the ``pytorch-fp32`` recipe's SDPA step kept, to
the byte, what its eager step kept, on the tiny and the mid-size Llama. A
second recording on another H200 (``...-2026-11-27-1508.json``), made with
this plan in place, measured the peaks it had predicted, to the byte, and so
did two later ones, on a third H200 and on an H100 80GB HBM3
(``...-2026-11-27-2056.json`` and ``nvidia-h100-80gb-hbm3-...-2058.json``).

On the CPU (where memtheory's exact figures are measured) SDPA runs its CPU
flash kernel for fp32 too, except with dropout: ``use_flash_attention_cpp``
(``aten/src/ATen/native/transformers/sdp_utils_cpp.cpp``) gates the CPU flash
kernel on ``check_for_dropout`` (``dropout_p > 0`` refuses it), and the only
other CPU backend is the math path (``priority_order_cpp``: flash, math).
transformers passes the attention dropout in training only
(``dropout=self.attn_dropout.p if self.training else 0.0``, GPT-2's
attention, transformers 5.24), so GPT-2 with its default ``attn_pdrop=0.1``
trains on the math path (S x S probabilities and the dropout mask kept) and
evaluates on the flash kernel: :func:`cpu_sdpa_backend`. On CUDA the flash
and memory-efficient kernels take dropout; cuDNN takes it in steps of 1/16.

Examples
--------
>>> cuda_sdpa_backend("fp32", heads=8, kv_heads=2, head_dim=64, enable_gqa=True)
'math'
>>> cuda_sdpa_backend("fp32", heads=8, kv_heads=8, head_dim=64)
'efficient'
>>> cuda_sdpa_backend("bf16", heads=8, kv_heads=2, head_dim=64, enable_gqa=True)
'flash'
"""

from __future__ import annotations

from typing import Literal

import sympy as sp

from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidArgumentError

__all__ = [
    "FUSED",
    "MEM_EFFICIENT_GQA",
    "SDPABackend",
    "cpu_sdpa_backend",
    "cuda_sdpa_backend",
    "keeps_scores",
    "layer_sdpa_backend",
    "transformers_enable_gqa",
]

SDPABackend = Literal["flash", "cudnn", "efficient", "math"]

FUSED: tuple[SDPABackend, ...] = ("flash", "cudnn", "efficient")
"""The backends that keep no S x S tensor (Q, K, V, output, an fp32 log-sum-exp per row)."""

MEM_EFFICIENT_GQA = False
"""Whether the memory-efficient kernel takes grouped key/value heads (``enable_gqa=True``).

False up to PyTorch 2.11, which the H200 recordings ran (its dense checks
instantiate ``check_batch_size_and_num_heads_dense<false>``); true from the
release that carries pytorch/pytorch#191085. Pass ``mem_efficient_gqa=True``
to :func:`cuda_sdpa_backend` for such a release.
"""

_LOW = ("fp16", "bf16")
_MAX_FLASH_HEAD = 256
_MAX_CUDNN_HEAD = 128


def _number(value: object, name: str) -> int | None:
    """Return ``value`` as an int, None when it is symbolic; refuse what is not a size."""
    size = sp.sympify(value)
    if not size.is_number:
        return None
    if not (size.is_integer and size > 0):
        raise InvalidArgumentError(f"{name} must be a positive whole number, got {value!r}.")
    return int(size)


def transformers_enable_gqa(heads: int, kv_heads: int, head_dim: int, masked: bool) -> bool:
    """Return whether transformers 5 calls SDPA with ``enable_gqa=True`` for this attention.

    ``sdpa_attention_forward`` (transformers 5.24, ``integrations/sdpa_attention.py``)
    passes ``enable_gqa=True`` when the layer has grouped key/value heads and
    ``use_gqa_in_sdpa`` holds on CUDA: no attention mask and key and value
    head sizes at most 256. Otherwise it repeats K and V to the query heads
    (``repeat_kv``) and SDPA sees as many key/value heads as query heads.

    Examples
    --------
    >>> transformers_enable_gqa(8, 2, 64, masked=False), transformers_enable_gqa(8, 2, 64, True)
    (True, False)
    >>> transformers_enable_gqa(8, 8, 64, masked=False)
    False
    """
    return heads != kv_heads and not masked and head_dim <= _MAX_FLASH_HEAD


def cuda_sdpa_backend(
    dtype: DTypeLike,
    *,
    heads: int,
    kv_heads: int | None = None,
    head_dim: int,
    masked: bool = False,
    dropout: float = 0.0,
    enable_gqa: bool = False,
    prefer_cudnn: bool = False,
    mem_efficient_gqa: bool = MEM_EFFICIENT_GQA,
) -> SDPABackend:
    """Return the backend CUDA SDPA selects for one call, on an sm80 or newer GPU.

    Follows ``select_sdp_backend`` (``cuda/sdp_utils.cpp``) in PyTorch's
    default order, flash, memory-efficient, math, or with cuDNN first
    (``prefer_cudnn``, what ``check_prefer_cudnn_attention`` chooses on
    sm90/sm100 with cuDNN newer than 9.15). Only the checks a dense training
    call of a decoder can fail are modelled: the query's ``dtype``, the head
    counts and ``enable_gqa``, the head size (q, k and v of one size), an
    explicit ``attn_mask`` (``masked``) and the dropout probability. Nested
    tensors, strides, sequence lengths and the GPU generation are taken to
    pass (sm80 or newer: A100, H100, H200, B200).

    Parameters
    ----------
    dtype : dtype
        The query's dtype (under ``torch.autocast`` the low dtype: SDPA is on
        autocast's low-precision list).
    heads, kv_heads : int
        Query heads and the key/value heads SDPA receives (``kv_heads``
        defaults to ``heads``; a model that repeats K and V itself passes
        ``heads``).
    head_dim : int
    masked : bool, default False
        Whether an ``attn_mask`` tensor is passed (``is_causal=True`` is not a mask).
    dropout : float, default 0.0
    enable_gqa : bool, default False
    prefer_cudnn : bool, default False
    mem_efficient_gqa : bool, default :data:`MEM_EFFICIENT_GQA`

    Returns
    -------
    {"flash", "cudnn", "efficient", "math"}

    Raises
    ------
    InvalidArgumentError
        For grouped heads without ``enable_gqa`` (SDPA itself refuses them)
        or query heads that are not a multiple of the key/value heads.

    Examples
    --------
    >>> cuda_sdpa_backend("bf16", heads=8, head_dim=64, masked=True)
    'efficient'
    >>> cuda_sdpa_backend("bf16", heads=8, head_dim=64, masked=True, prefer_cudnn=True)
    'cudnn'
    >>> cuda_sdpa_backend("fp32", heads=8, kv_heads=2, head_dim=64, enable_gqa=True,
    ...                   mem_efficient_gqa=True)
    'efficient'
    >>> cuda_sdpa_backend("fp16", heads=8, head_dim=320)
    'efficient'
    """
    kind = as_dtype(dtype).name
    kv = heads if kv_heads is None else kv_heads
    if heads % kv:
        raise InvalidArgumentError(
            f"SDPA needs query heads that are a multiple of the key/value heads, got "
            f"{heads} and {kv}."
        )
    grouped = kv != heads
    if grouped and not enable_gqa:
        raise InvalidArgumentError(
            f"SDPA refuses {heads} query heads with {kv} key/value heads without "
            "enable_gqa=True: pass enable_gqa=True, or repeat K and V to the query heads "
            "and pass kv_heads=heads."
        )
    low = kind in _LOW
    flash = low and not masked and head_dim <= _MAX_FLASH_HEAD
    cudnn = (low and head_dim <= _MAX_CUDNN_HEAD and head_dim % 8 == 0
             and float(dropout * 16).is_integer())
    alignment = 8 if low else 4
    efficient = (kind in (*_LOW, "fp32") and head_dim % alignment == 0
                 and (not grouped or mem_efficient_gqa))
    order: tuple[tuple[SDPABackend, bool], ...] = (
        ("flash", flash), ("efficient", efficient), ("math", True))
    if prefer_cudnn:
        order = (("cudnn", cudnn), *order)
    return next(name for name, usable in order if usable)


def cpu_sdpa_backend(layer: object, *, training: bool = True) -> SDPABackend:
    """Return the backend CPU SDPA selects for an attention ``layer``: flash, or math with dropout.

    PyTorch 2.13's ``use_flash_attention_cpp`` refuses a call with
    ``dropout_p > 0`` (``check_for_dropout``); the math path
    (``_scaled_dot_product_attention_math``) then runs, keeping the S x S
    probabilities and the dropout mask. transformers passes the layer's
    dropout in training only. The layer's ``dropout`` (0 when it has none)
    is read; its other checks (head sizes, strides, dtypes fp32, bf16, fp16)
    pass for the decoders memtheory builds.

    Examples
    --------
    >>> from memtheory.layers import MultiHeadAttention
    >>> cpu_sdpa_backend(MultiHeadAttention(4, dropout=0.1))
    'math'
    >>> cpu_sdpa_backend(MultiHeadAttention(4, dropout=0.1), training=False)
    'flash'
    >>> cpu_sdpa_backend(MultiHeadAttention(4))
    'flash'
    """
    dropout = float(getattr(layer, "dropout", 0.0) or 0.0)
    return "math" if training and dropout > 0 else "flash"


def keeps_scores(backend: str) -> bool:
    """Return whether ``backend`` keeps the S x S probabilities for the backward (math does).

    Examples
    --------
    >>> [keeps_scores(b) for b in ("flash", "cudnn", "efficient", "math")]
    [False, False, False, True]
    """
    return backend not in FUSED


def layer_sdpa_backend(layer: object, dtype: DTypeLike) -> SDPABackend | None:
    """Return the CUDA backend transformers' SDPA call selects for an attention ``layer``.

    Reads the layer's ``heads``, ``kv_heads``, ``head_dim`` and ``dropout``;
    a sliding ``window`` (transformers passes a sliding-window mask) or an
    ``additive_mask`` counts as a mask, otherwise the training forward is
    taken to pass none (no padding: transformers then uses ``is_causal``).
    ``enable_gqa`` is :func:`transformers_enable_gqa`'s. None for a layer
    that is not such an attention layer or whose sizes are symbolic.

    Examples
    --------
    >>> from memtheory.layers.grouped_attention import GroupedQueryAttention
    >>> layer_sdpa_backend(GroupedQueryAttention(4, kv_heads=2, head_dim=8), "fp32")
    'math'
    >>> layer_sdpa_backend(GroupedQueryAttention(4, kv_heads=2, head_dim=8), "bf16")
    'flash'
    """
    if not all(hasattr(layer, a) for a in ("heads", "kv_heads", "head_dim")):
        return None
    given = {a: getattr(layer, a) for a in ("heads", "kv_heads", "head_dim")}
    if given["head_dim"] is None:  # nn.MultiheadAttention's, known from the input only
        return None
    heads = _number(given["heads"], "heads")
    kv = _number(given["kv_heads"] or given["heads"], "kv_heads")
    head_dim = _number(given["head_dim"], "head_dim")
    if heads is None or kv is None or head_dim is None:
        return None
    masked = getattr(layer, "window", None) is not None or bool(
        getattr(layer, "additive_mask", False))
    gqa = transformers_enable_gqa(heads, kv, head_dim, masked)
    return cuda_sdpa_backend(
        dtype, heads=heads, kv_heads=kv if gqa else heads, head_dim=head_dim,
        masked=masked, dropout=float(getattr(layer, "dropout", 0.0) or 0.0), enable_gqa=gqa,
    )
