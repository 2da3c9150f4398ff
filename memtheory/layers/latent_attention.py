r"""DeepSeek's multi-head latent attention (MLA): queries and keys wider than the values.

DeepSeek V2 and V3 project the layer's input to a small latent (``kv_lora_rank``
features) plus one rotary key shared by every head (``qk_rope_head_dim``), and
expand the latent to each head's non-rotary key (``qk_nope_head_dim``) and
value (``v_head_dim``). Each head's query and key are the non-rotary part
followed by the rotary part, :math:`d_{qk} = d_{nope} + d_{rope}` wide; the
values are :math:`d_v` wide, so the output is ``(B, S, heads * v_head_dim)``.

A merge of five inputs: the queries ``(B, S, a d_qk)``, the non-rotary keys
``(B, S, a d_nope)``, the shared rotary key ``(B, S, d_rope)``, the values
``(B, S, a d_v)`` and the rotary tables ``(1, S, 2 d_rope)`` of a
:class:`~memtheory.layers.RotaryTable` (four, without the tables, where only
its shapes and its cache are asked). It has no parameters (the projections
around it hold them); the rotation of the queries' and the key's rotary
features, the queries' concatenation and the keys' expansion happen inside it,
as in transformers' ``DeepseekV3Attention``. What its backward keeps is its
kernel plan's to say
(:func:`memtheory.conventions.autograd.kernels.torch_2_13.latent_attention.latent_attention`):
DeepSeek V3's eager attention is measured exact on CPU
(``tests/pytorch/test_deepseek_autograd.py``); V2's complex rotary
(``complex_rotary=True``) is not, and the autograd convention refuses it.

Examples
--------
>>> from memtheory.symbols import B, S
>>> mla = LatentAttention(16, nope_dim=128, rope_dim=64, value_dim=128)
>>> mla.merged_shape(((B, S, 16 * 192), (B, S, 16 * 128), (B, S, 64), (B, S, 16 * 128)))
(B, S, 2048)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidArgumentError, ShapeError
from memtheory.layers.base import Autograd, Shape, describe_shape
from memtheory.layers.kernel_plans import planned_autograd
from memtheory.layers.merge import Merge

__all__ = ["LatentAttention"]


@dataclass(frozen=True)
class LatentAttention(Merge):
    """DeepSeek's MLA attention: heads of ``nope_dim + rope_dim`` keys, ``value_dim`` values.

    Parameters
    ----------
    heads : size
        Attention heads :math:`a` (``num_attention_heads``).
    nope_dim, rope_dim : size
        Non-rotary and rotary features of each query and key head
        (``qk_nope_head_dim``, ``qk_rope_head_dim``).
    value_dim : size
        Features of each value head (``v_head_dim``).
    flash : bool, default False
        Memory-efficient attention (no :math:`S^2` tensors kept).
    name : str, optional
    latent_dim : size, optional
        Features of the compressed key/value latent (``kv_lora_rank``): what a
        generating model caches per position, beside the shared rotary key.
        Needed by :func:`~memtheory.techniques.cache_layers.cache_layers`; None:
        unknown, and the cache is refused.
    device : {"cuda", "cpu"} or None, default None
        Where ``flash`` (transformers' ``attn_implementation="sdpa"``) runs:
        None or ``"cuda"``, the memory-efficient kernel (an assumption, not
        measured); ``"cpu"``, where ``scaled_dot_product_attention`` takes
        values narrower than the queries only on its math path, which keeps
        fp32 copies and the :math:`S^2` probabilities (measured).
    complex_rotary : bool, default False
        DeepSeek V2's rotary table: transformers' ``freqs_cis``, one complex64
        per pair of rotary features, rather than V3's cos and sin in the
        compute dtype (what a generating model holds for the whole pass).
    """

    heads: SizeLike
    nope_dim: SizeLike
    rope_dim: SizeLike
    value_dim: SizeLike
    flash: bool = False
    name: str | None = None
    latent_dim: SizeLike | None = None
    complex_rotary: bool = False
    device: Literal["cuda", "cpu"] | None = None
    kind = "LatentAttention"
    autograd_inference_checked = False
    autograd_refusal = (
        "DeepSeek V2's latent attention rotates its rotary features as complex numbers "
        "(freqs_cis, view_as_complex in fp32), which has not been measured; DeepSeek V3's "
        "(cosine and sine tables) has."
    )

    @property
    def autograd_checked(self) -> bool:  # type: ignore[override]
        """Checked (measured) for V3's cosine and sine rotary, not V2's complex one.

        Examples
        --------
        >>> LatentAttention(16, 128, 64, 128).autograd_checked
        True
        >>> LatentAttention(16, 128, 64, 128, complex_rotary=True).autograd_checked
        False
        """
        return not self.complex_rotary

    def __post_init__(self) -> None:
        for field_name in ("heads", "nope_dim", "rope_dim", "value_dim"):
            object.__setattr__(
                self, field_name, as_size(getattr(self, field_name), field_name, self.label)
            )
        if self.device not in (None, "cuda", "cpu"):
            raise InvalidArgumentError(
                f"{self.label}: device must be 'cuda' or 'cpu', got {self.device!r}."
            )
        if self.latent_dim is not None:
            object.__setattr__(
                self, "latent_dim", as_size(self.latent_dim, "latent_dim", self.label)
            )

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return ``(B, S, heads * value_dim)`` after checking the inputs' widths."""
        if len(input_shapes) not in (4, 5):
            raise ShapeError(
                f"{self.label}: reads four tensors (queries, non-rotary keys, the shared rotary "
                f"key, values) and the rotary tables, got {len(input_shapes)}."
            )
        heads = sp.sympify(self.heads)
        query_width = heads * (sp.sympify(self.nope_dim) + sp.sympify(self.rope_dim))
        wanted: tuple[sp.Expr, ...] = (query_width, heads * sp.sympify(self.nope_dim),
                                       sp.sympify(self.rope_dim),
                                       heads * sp.sympify(self.value_dim))
        if len(input_shapes) == 5:
            wanted += (2 * sp.sympify(self.rope_dim),)
        for shape, width in zip(input_shapes, wanted, strict=True):
            gap = sp.expand(shape[-1] - width) if len(shape) == 3 else sp.Integer(1)
            if gap.is_number and gap != 0:
                raise ShapeError(
                    f"{self.label}: expected (batch, sequence, {width}), got "
                    f"{describe_shape(tuple(shape))}. Check the heads and head widths."
                )
        query, value = tuple(input_shapes[0]), tuple(input_shapes[3])
        return (*query[:-1], value[-1])

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return the storages its backward keeps, as its kernel plan says (eager, CPU)."""
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def rotary_bytes(self, positions: SizeLike, dtype: DTypeLike) -> sp.Expr:
        """Bytes of the rotary table for ``positions``: cos and sin, or V2's complex64 one.

        Examples
        --------
        >>> LatentAttention(16, 128, 64, 128).rotary_bytes(10, "fp32")
        5120
        >>> LatentAttention(16, 128, 64, 128, complex_rotary=True).rotary_bytes(10, "fp32")
        2560
        """
        rope = sp.sympify(self.rope_dim)
        if self.complex_rotary:
            return sp.sympify(positions) * rope / 2 * 8
        return 2 * sp.sympify(positions) * rope * as_dtype(dtype).bytes

    def describe(self) -> str:
        """Heads and head widths."""
        return (f"{self.heads} heads, q/k {self.nope_dim}+{self.rope_dim}, "
                f"v {self.value_dim}")
