r"""Llama-family decoders: Llama, Mistral, Qwen2/3 (and MoE), Phi-3/4, Gemma 1-3, OLMo, Mixtral.

One builder, :func:`decoder`, for the architecture these share, as Hugging
Face's ``LlamaForCausalLM`` and its relatives lay it out: token embeddings
(Gemma scales them by :math:`\sqrt{h}`); rotary position tables computed once
(:class:`~memtheory.layers.RotaryTable`); per layer, an RMS norm, separate
query, key and value projections (Qwen2 gives them biases), rotary embedding
of queries and keys, grouped-query causal attention (optionally with a
sliding window) and an output projection, a residual sum, a second RMS norm
and a gated MLP (SwiGLU: ``down(act(gate(x)) * up(x))``), or for Mixtral a
mixture of experts, and a second residual sum; a final RMS norm and the output
projection to the vocabulary, tied to the embedding or not. Layers carry
Hugging Face's names (``model.layers.0.self_attn.q_proj``), so a parameter
listing lines up with ``model.named_parameters()``.

Under the autograd convention a training step is exact, component by
component and at its peak, against ``memtheory.torch.measure`` on
transformers 5.23's eager models (``tests/pytorch/test_llama_autograd.py``),
run with ``use_cache=False``: with transformers' default ``use_cache=True``
the training forward also fills a ``DynamicCache`` with a copy of every
layer's keys and values until the forward returns, which is not modelled.
Mixtral's experts are not measured: the autograd convention refuses them.
Qwen3's per-head query/key norms
(:class:`~memtheory.layers.head_norm.HeadRMSNorm`) are measured: its step is
exact (transformers 5.24, ``tests/pytorch/test_family_autograd.py``), and so
are Gemma 1, 2 and 3's: the scaled embedding, the ``(1 + w)`` norms scaled
in fp32 (Gemma 3's per head too), Gemma 2's four norms per layer and its
soft-capping (:mod:`memtheory.layers.softcap`) under eager attention. Phi-3's fused ``qkv_proj`` and
``gate_up_proj``, sliced by :class:`~memtheory.layers.split.Slice`, are
exact too; the network carries Phi-3's parameter registration order
(``_PHI3_ORDER``), which torch.optim's for-loop step follows.

Most users start from a ``config.json``
(:func:`memtheory.models.from_config`) or a preset
(:func:`memtheory.models.preset`).

Examples
--------
>>> config = DecoderConfig(vocabulary=32000, hidden=4096, layers=32, heads=32,
...                        ffn_hidden=11008)
>>> decoder(config).parameter_count   # Llama-2-7B
6738415616
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers import (
    GELU,
    Add,
    Dense,
    Embedding,
    Layer,
    Multiply,
    Sigmoid,
    SiLU,
)
from memtheory.layers.causal_mask import CausalMask, Positions
from memtheory.layers.clamp import Clamp
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.head_norm import HeadRMSNorm
from memtheory.layers.merge import BroadcastMultiply
from memtheory.layers.moe import MixtureOfExperts
from memtheory.layers.rms_norm import GemmaRMSNorm, RMSNorm
from memtheory.layers.rotary import Rotary, RotaryTable
from memtheory.layers.scale import TensorScale
from memtheory.layers.softcap import SoftCap, SoftCappedAttention
from memtheory.layers.split import Slice
from memtheory.layers.upcast_norm import UpcastLayerNorm, UpcastRMSNorm
from memtheory.models.decoder_stack import decoder_stack, fused_projection
from memtheory.network import Network, Node
from memtheory.symbols import B, S

__all__ = ["DecoderConfig", "active_parameter_count", "decoder"]

Activation = Literal["silu", "gelu", "gelu_tanh"]


@dataclass(frozen=True)
class DecoderConfig:
    r"""Hyperparameters of a Llama-family decoder, named after what they are.

    Parameters
    ----------
    vocabulary : int
        ``vocab_size``.
    hidden : int
        Model width :math:`h` (``hidden_size``).
    layers : int
        Decoder layers (``num_hidden_layers``).
    heads : int
        Query heads (``num_attention_heads``).
    ffn_hidden : int
        Width of the gated MLP, or of each expert (``intermediate_size``).
    kv_heads : int, optional
        Key/value heads (``num_key_value_heads``); default ``heads``.
    head_dim : int, optional
        Width of one head (``head_dim``); default ``hidden // heads``.
    positions : int or None
        Longest context the model was trained for (``max_position_embeddings``);
        rotary models have no table of that size, so it only bounds what-if answers.
    tied : bool, default False
        Output projection tied to the token embedding (``tie_word_embeddings``).
    qkv_bias, output_bias, mlp_bias : bool, default False
        Biases of the query/key/value projections (Qwen2: True; Llama's
        ``attention_bias`` sets both attention ones), of the output projection
        and of the MLP (``mlp_bias``).
    activation : {"silu", "gelu", "gelu_tanh"}, default "silu"
        The gate's activation (``hidden_act``; Gemma: ``gelu_pytorch_tanh``).
    windows : tuple of (int or None), optional
        Sliding window of each layer (None: full attention); default all None.
    experts, top_k : int, optional
        Mixture of experts (Mixtral's ``num_local_experts`` and
        ``num_experts_per_tok``): every layer's MLP is one.
    gemma : bool, default False
        Gemma's embedding scale by :math:`\sqrt{h}` and ``(1 + w)`` RMS norms.
    attention_dropout : float, default 0.0
    qk_norm : bool, default False
        Qwen3: an RMS norm of ``head_dim`` on each query and key head
        (``q_norm``, ``k_norm``) before the rotary embedding.
    fused : bool, default False
        Phi-3: one ``qkv_proj`` for the queries, keys and values and one
        ``gate_up_proj`` for the MLP's two halves, sliced (views).
    sandwich_norms : bool, default False
        Gemma 2: RMS norms after the attention (``post_attention_layernorm``)
        and before and after the MLP (``pre_feedforward_layernorm``,
        ``post_feedforward_layernorm``), four per layer.
    attention_softcap, final_softcap : float, optional
        Gemma 2's ``attn_logit_softcapping`` and ``final_logit_softcapping``.
    family : str, default "llama"
        For names and messages (``model_type``).
    norm : {"rms", "plain", "upcast"}, default "rms"
        ``"plain"``: OLMo's layer norm without weight or bias; ``"upcast"``:
        OLMo 2's RMS norm (:mod:`memtheory.layers.upcast_norm`).
    post_norms : bool, default False
        OLMo 2: no norm before the attention and the MLP; an RMS norm of each
        one's output (``post_attention_layernorm``, ``post_feedforward_layernorm``).
    qk_norm_width : {"head", "full"}, default "head"
        With ``qk_norm``: one norm per head of ``head_dim`` (Qwen3, Gemma 3)
        or one over all the query (key) features (OLMo 2, OLMoE).
    sparse_layers : tuple of bool, optional
        With experts: which layers' MLP is the mixture (default all); the others
        are gated MLPs of ``dense_ffn_hidden`` (Qwen-MoE's ``mlp_only_layers``).
    dense_ffn_hidden : int, optional
        Width of those dense MLPs (Qwen-MoE's ``intermediate_size``).
    shared_expert : int, optional
        Qwen2-MoE: width of a gated MLP every token also goes through, scaled by
        a sigmoid gate (``shared_expert_intermediate_size``).
    rotary_fp32 : bool, default False
        OLMo 1, 2 and 3: the rotary tables stay fp32 and the rotation computes
        in fp32 before the cast back (:class:`~memtheory.layers.RotaryTable`).
    rotary_per_attention : bool, default False
        OLMo 3 and Gemma 3: one pair of rotary tables (and of ``inv_freq``
        buffers) for each kind of attention the layers use, sliding and full.
    clip_qkv : float, optional
        OLMo and OLMoE: the query, key and value projections are clamped in
        place to ``[-clip_qkv, clip_qkv]`` (:class:`~memtheory.layers.clamp.Clamp`).
    moe_router : {"mixtral", "qwen"}, default "mixtral"
        With experts: the router (:class:`~memtheory.layers.MixtureOfExperts`'s
        ``router``): Mixtral's fp32 routing weights, or Qwen-MoE's and OLMoE's
        cast back to the model's dtype.
    moe_renormalize : bool, default True
        With experts: whether the top-k weights are renormalised
        (``norm_topk_prob``; always for Mixtral).

    Examples
    --------
    >>> DecoderConfig(vocabulary=8, hidden=16, layers=1, heads=4, ffn_hidden=32).head_width
    4
    """

    vocabulary: int
    hidden: int
    layers: int
    heads: int
    ffn_hidden: int
    kv_heads: int | None = None
    head_dim: int | None = None
    positions: int | None = None
    tied: bool = False
    qkv_bias: bool = False
    output_bias: bool = False
    mlp_bias: bool = False
    activation: Activation = "silu"
    windows: tuple[int | None, ...] = field(default=())
    experts: int | None = None
    top_k: int | None = None
    gemma: bool = False
    attention_dropout: float = 0.0
    qk_norm: bool = False
    fused: bool = False
    sandwich_norms: bool = False
    attention_softcap: float | None = None
    final_softcap: float | None = None
    family: str = "llama"
    norm: Literal["rms", "plain", "upcast"] = "rms"
    post_norms: bool = False
    qk_norm_width: Literal["head", "full"] = "head"
    sparse_layers: tuple[bool, ...] = field(default=())
    dense_ffn_hidden: int | None = None
    shared_expert: int | None = None
    rotary_fp32: bool = False
    rotary_per_attention: bool = False
    clip_qkv: float | None = None
    moe_router: Literal["mixtral", "qwen"] = "mixtral"
    moe_renormalize: bool = True

    def __post_init__(self) -> None:
        for name in ("vocabulary", "hidden", "layers", "heads", "ffn_hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSizeError(
                    f"DecoderConfig: {name} must be a positive whole number, got {value!r}."
                )
        if self.sparse_layers and len(self.sparse_layers) != self.layers:
            raise InvalidSizeError(
                f"DecoderConfig: sparse_layers lists {len(self.sparse_layers)} layers, the model "
                f"has {self.layers}; give one flag per layer."
            )
        if self.windows and len(self.windows) != self.layers:
            raise InvalidSizeError(
                f"DecoderConfig: windows lists {len(self.windows)} layers, the model has "
                f"{self.layers}; give one window (or None) per layer."
            )
        if (self.experts is None) != (self.top_k is None):
            raise InvalidSizeError(
                "DecoderConfig: a mixture of experts needs both experts and top_k "
                "(num_local_experts and num_experts_per_tok)."
            )
        if self.activation not in ("silu", "gelu", "gelu_tanh"):
            raise InvalidSizeError(
                f"DecoderConfig: activation must be 'silu', 'gelu' or 'gelu_tanh', "
                f"got {self.activation!r}."
            )
        if self.fused and self.experts is not None:
            raise InvalidSizeError(
                "DecoderConfig: fused projections (Phi-3) with a mixture of experts are not "
                "modelled; set fused=False or experts=None."
            )
        for name in ("attention_softcap", "final_softcap", "clip_qkv"):
            cap = getattr(self, name)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int | float)
                                    or not cap > 0):
                raise InvalidSizeError(
                    f"DecoderConfig: {name} must be a positive number or None, got {cap!r}."
                )
        if self.head_dim is None and self.hidden % self.heads:
            raise InvalidSizeError(
                f"DecoderConfig: hidden ({self.hidden}) does not split into {self.heads} heads; "
                "give head_dim."
            )

    @property
    def key_value_heads(self) -> int:
        """Key/value heads: ``kv_heads``, or ``heads``."""
        return self.kv_heads or self.heads

    @property
    def head_width(self) -> int:
        """Width of one head: ``head_dim``, or ``hidden // heads``."""
        return self.head_dim or self.hidden // self.heads

    def is_sparse(self, layer: int) -> bool:
        """Whether layer ``layer``'s MLP is the mixture of experts (when there is one)."""
        return self.sparse_layers[layer] if self.sparse_layers else True

    def window(self, layer: int) -> int | None:
        """Return the sliding window of layer ``layer`` (None: full attention)."""
        return self.windows[layer] if self.windows else None


def decoder(
    config: DecoderConfig,
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
    name: str | None = None,
    vision: Sequence[Layer | Node] = (),
) -> Network:
    """Build the decoder for ``batch`` sequences of ``sequence`` tokens.

    Parameters
    ----------
    config : DecoderConfig
    batch, sequence : size, default ``B`` and ``S``
    flash : bool, default False
        Memory-efficient attention (no :math:`S^2` tensors kept; a CUDA
        assumption, see :class:`~memtheory.layers.GroupedQueryAttention`).
        False: Hugging Face's eager attention, as measured on CPU.
    lm_head : bool, default True
        End with the output projection to ``(B, S, vocabulary)`` logits.
    loss : bool, default False
        End with the causal-LM loss over the logits (Hugging Face upcasts
        them to fp32 first); needs ``lm_head``.
    name : str, optional
        The network's name; default from the family.
    vision : sequence of Layer or Node, optional
        A vision-language model's image path, placed after the token
        embeddings (``model.embed_tokens``): the first layer reads its last
        item, which puts the image features into the sequence
        (:mod:`memtheory.models.vision_language`).

    Examples
    --------
    >>> config = DecoderConfig(vocabulary=100, hidden=32, layers=2, heads=4, kv_heads=2,
    ...                        ffn_hidden=64)
    >>> net = decoder(config, batch=2, sequence=8)
    >>> net.output_shape, net.parameter_count
    ((2, 8, 100), 24992)
    """
    c = config
    embedded: list[Layer | Node] = [Embedding(c.vocabulary, c.hidden, name="model.embed_tokens")]
    if c.gemma:
        embedded.append(TensorScale(float(c.hidden) ** 0.5, name="model.embed_scale"))
    embedded += vision
    tables = [
        Node(RotaryTable(c.head_width, positions=c.positions, fp32=c.rotary_fp32, name=table),
             inputs=("input_ids",))
        for table in sorted({_table(c, index) for index in range(c.layers)})
    ]
    calls: list[tuple[str, str]] = []
    if _one_mask(c) and not vision and not flash:
        # LlamaModel.forward (and its kin) keeps inputs_embeds, the positions and the eager
        # causal mask, one (B, 1, S, S), in variables until it returns. With SDPA (flash) not
        # yet: TRL's fused-head step (finetuning/trl_head.py) reads the norm's moment as what
        # lies beneath its head's backward, after the model's call returned.
        made: list[Layer] = [Positions(name="position_ids"), CausalMask(name="causal_mask")]
        tables = [Node(layer, inputs=("input_ids",)) for layer in made] + tables
        calls.append(("position_ids", "model.norm"))
    after_head: list[Layer | Node] = []
    if c.final_softcap is not None:
        after_head.append(SoftCap(c.final_softcap, name="final_logit_softcapping"))
    return decoder_stack(
        "decoder",
        embedded=embedded,
        tables=tables,
        layers=c.layers,
        layer=partial(_layer, c, flash=flash),
        final_norm=_norm(c)(name="model.norm"),
        vocabulary=c.vocabulary,
        tied=c.tied,
        after_head=after_head,
        batch=batch,
        sequence=sequence,
        lm_head=lm_head,
        loss=loss,
        name=name or c.family,
        block_order=_PHI3_ORDER if c.fused else (),
        calls=calls,
    )


def _one_mask(c: DecoderConfig) -> bool:
    """Whether the model's forward makes one causal mask for every layer, from its embeddings.

    Gemma scales its embeddings (Gemma 1 and 2 keep the unscaled ones) and
    Gemma 2 always makes a full and a sliding-window mask; a model whose
    layers mix full and sliding-window attention makes one mask of each
    kind: neither is modelled yet (their model call holds nothing).
    """
    return not c.gemma and len({c.window(index) is None for index in range(c.layers)}) == 1


_PHI3_ORDER = ("self_attn.o_proj", "self_attn", "mlp", "input_layernorm",
              "post_attention_layernorm")
"""The order ``Phi3DecoderLayer`` registers its parameters: ``Phi3Attention`` registers
``o_proj`` before ``qkv_proj``, and the layer its norms after its MLP (transformers 5.24
``models/phi3/modeling_phi3.py``)."""


def _norm(c: DecoderConfig) -> Callable[..., Layer]:
    """Return the family's norm: RMS, Gemma's ``(1 + w)`` RMS, or OLMo's weightless one."""
    if c.gemma:
        return GemmaRMSNorm
    if c.norm == "plain":
        return partial(UpcastLayerNorm, elementwise_affine=False, bias=False)
    return UpcastRMSNorm if c.norm == "upcast" else RMSNorm


def _table(c: DecoderConfig, index: int) -> str:
    """Name the rotary tables layer ``index`` reads: OLMo 3 and Gemma 3 have one per kind."""
    if not c.rotary_per_attention:
        return "model.rotary_emb"
    kind = "full" if c.window(index) is None else "sliding"
    return f"model.rotary_emb.{kind}_attention"


def _layer(c: DecoderConfig, index: int, source: str, *, flash: bool) -> list[Layer | Node]:
    """One decoder layer reading ``source``; its last item is its output."""
    prefix = f"model.layers.{index}"
    attn = f"{prefix}.self_attn"
    norm = _norm(c)
    items: list[Layer | Node] = []
    attn_in = source
    if not c.post_norms:
        attn_in = f"{prefix}.input_layernorm"
        items.append(Node(norm(name=attn_in), inputs=(source,)))
    query, key, value = _projections(c, attn, attn_in, items)
    query, key = _qk_norms(c, attn, query, key, items)
    attention = (
        SoftCappedAttention if c.attention_softcap is not None else GroupedQueryAttention
    )
    options = {} if c.attention_softcap is None else {"softcap": c.attention_softcap}
    items += [
        Node(Rotary(c.head_width, upcast=c.rotary_fp32, name=f"{attn}.q_rotary"),
             inputs=(query, _table(c, index))),
        Node(Rotary(c.head_width, upcast=c.rotary_fp32, name=f"{attn}.k_rotary"),
             inputs=(key, _table(c, index))),
        Node(
            attention(
                c.heads,
                kv_heads=c.key_value_heads,
                head_dim=c.head_width,
                window=c.window(index),
                dropout=c.attention_dropout,
                flash=flash,
                name=f"{attn}.attention",
                **options,
            ),
            inputs=(f"{attn}.q_rotary", f"{attn}.k_rotary", value),
        ),
        Dense(c.hidden, bias=c.output_bias, name=f"{attn}.o_proj"),
    ]
    attended = f"{attn}.o_proj"
    if c.sandwich_norms or c.post_norms:
        items.append(norm(name=f"{prefix}.post_attention_layernorm"))
        attended = f"{prefix}.post_attention_layernorm"
    items.append(Node(Add(name=f"{prefix}.add_1"), inputs=(source, attended)))
    mlp_in = f"{prefix}.add_1"
    if not c.post_norms:
        mlp_in = f"{prefix}.pre_feedforward_layernorm" if c.sandwich_norms else (
            f"{prefix}.post_attention_layernorm"
        )
        items.append(norm(name=mlp_in))
    mlp_out = _mlp(c, index, mlp_in, items)
    if c.sandwich_norms or c.post_norms:
        items.append(norm(name=f"{prefix}.post_feedforward_layernorm"))
        mlp_out = f"{prefix}.post_feedforward_layernorm"
    items.append(Node(Add(name=f"{prefix}.add_2"), inputs=(f"{prefix}.add_1", mlp_out)))
    return items


def _qk_norms(
    c: DecoderConfig, attn: str, query: str, key: str, items: list[Layer | Node]
) -> tuple[str, str]:
    """Append the query and key norms, if the family has them; return what the rotary reads."""
    if not c.qk_norm:
        return query, key
    if c.qk_norm_width == "full":
        norm = _norm(c)
        items += [
            Node(norm(name=f"{attn}.q_norm"), inputs=(query,)),
            Node(norm(name=f"{attn}.k_norm"), inputs=(key,)),
        ]
    else:
        items += [
            Node(HeadRMSNorm(c.head_width, gemma=c.gemma, name=f"{attn}.q_norm"),
                 inputs=(query,)),
            Node(HeadRMSNorm(c.head_width, gemma=c.gemma, name=f"{attn}.k_norm"),
                 inputs=(key,)),
        ]
    return f"{attn}.q_norm", f"{attn}.k_norm"


def _projections(
    c: DecoderConfig, attn: str, source: str, items: list[Layer | Node]
) -> tuple[str, str, str]:
    """Append the query, key and value projections of ``source``; return their names."""
    width, kv = c.head_width, c.key_value_heads
    queries, keys = c.heads * width, kv * width
    if c.fused:
        return fused_projection(f"{attn}.qkv_proj", attn, source, queries, keys, c.qkv_bias, items)
    items += [
        Node(Dense(queries, bias=c.qkv_bias, name=f"{attn}.q_proj"), inputs=(source,)),
        Node(Dense(keys, bias=c.qkv_bias, name=f"{attn}.k_proj"), inputs=(source,)),
        Node(Dense(keys, bias=c.qkv_bias, name=f"{attn}.v_proj"), inputs=(source,)),
    ]
    names = (f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj")
    if c.clip_qkv is None:
        return names
    # OLMo's clip_qkv: each projection clamped in place, after all three ran
    items += [Node(Clamp(c.clip_qkv, name=f"{name}.clamp"), inputs=(name,)) for name in names]
    return f"{names[0]}.clamp", f"{names[1]}.clamp", f"{names[2]}.clamp"


def _mlp(
    c: DecoderConfig, index: int, source: str, items: list[Layer | Node]
) -> str:
    """Append the MLP (gated, fused or experts) reading ``source``; return its output's name."""
    mlp = f"model.layers.{index}.mlp"
    if c.experts is not None and c.top_k is not None and c.is_sparse(index):
        moe = MixtureOfExperts(c.experts, c.top_k, c.ffn_hidden, router=c.moe_router,
                               renormalize=c.moe_renormalize, name=mlp)
        if c.shared_expert is None:
            items.append(Node(moe, inputs=(source,)))
            return mlp
        # Qwen2-MoE runs the shared expert first, then the router and experts
        shared = _gated(c, f"{mlp}.shared_expert", source, c.shared_expert, items)
        items.append(Node(moe, inputs=(source,)))
        gate = f"{mlp}.shared_expert_gate"
        items += [
            Node(Dense(1, bias=False, name=gate), inputs=(source,)),
            Sigmoid(name=f"{gate}.sigmoid"),
            Node(BroadcastMultiply(name=f"{gate}.mul"), inputs=(shared, f"{gate}.sigmoid")),
            Node(Add(name=f"{mlp}.add"), inputs=(mlp, f"{gate}.mul")),
        ]
        return f"{mlp}.add"
    width = c.dense_ffn_hidden if c.experts is not None and c.dense_ffn_hidden else c.ffn_hidden
    return _gated(c, mlp, source, width, items)


def _gated(
    c: DecoderConfig, mlp: str, source: str, width: int, items: list[Layer | Node]
) -> str:
    """Append a gated MLP of ``width`` reading ``source`` (fused for Phi-3); return its output."""
    activation: Layer = (
        SiLU(name=f"{mlp}.act_fn")
        if c.activation == "silu"
        else GELU(
            approximate="tanh" if c.activation == "gelu_tanh" else "none",
            name=f"{mlp}.act_fn",
        )
    )
    if c.fused:  # Phi-3: gate, up = gate_up_proj(x).chunk(2); up * act(gate)
        fused = f"{mlp}.gate_up_proj"
        items += [
            Node(Dense(2 * width, bias=c.mlp_bias, name=fused), inputs=(source,)),
            Slice(0, width, name=f"{mlp}.gate"),
            activation,
            Node(Slice(width, 2 * width, name=f"{mlp}.up"), inputs=(fused,)),
            Node(Multiply(name=f"{mlp}.mul"), inputs=(f"{mlp}.up", f"{mlp}.act_fn")),
        ]
    else:
        items += [
            Node(Dense(width, bias=c.mlp_bias, name=f"{mlp}.gate_proj"), inputs=(source,)),
            activation,
            Node(Dense(width, bias=c.mlp_bias, name=f"{mlp}.up_proj"), inputs=(source,)),
            Node(Multiply(name=f"{mlp}.mul"), inputs=(f"{mlp}.act_fn", f"{mlp}.up_proj")),
        ]
    items.append(Dense(c.hidden, bias=c.mlp_bias, name=f"{mlp}.down_proj"))
    return f"{mlp}.down_proj"


def active_parameter_count(network: Network) -> sp.Expr:
    """Return the parameters one token goes through: all of them, less unrouted experts.

    For a dense model it is the parameter count; for a mixture of experts,
    each :class:`~memtheory.layers.MixtureOfExperts` counts its router and
    ``top_k`` experts only.

    Examples
    --------
    >>> config = DecoderConfig(vocabulary=10, hidden=4, layers=1, heads=1, ffn_hidden=8,
    ...                        experts=4, top_k=1)
    >>> net = decoder(config)
    >>> net.parameter_count - active_parameter_count(net)   # 3 experts of 3 * 4 * 8
    288
    """
    total = sp.sympify(network.parameter_count)
    for row in network.rows:
        if isinstance(row.layer, MixtureOfExperts):
            total -= row.layer.parameter_count(row.input_shape)
            total += row.layer.active_parameter_count(row.input_shape)
    return sp.expand(total)
