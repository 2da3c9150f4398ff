"""DeepSeek V2 and V3: multi-head latent attention and a mixture of experts with shared experts.

:func:`deepseek` builds the layout of Hugging Face's ``DeepseekV2ForCausalLM``
and ``DeepseekV3ForCausalLM``: token embeddings; the rotary tables of
``qk_rope_head_dim`` (computed once per forward pass,
:class:`~memtheory.layers.RotaryTable`); per layer an RMS norm, the
latent attention (queries through a low-rank ``q_a_proj``, ``q_a_layernorm``
and ``q_b_proj``, or one ``q_proj``; ``kv_a_proj_with_mqa`` to the latent and
the shared rotary key, ``kv_a_layernorm`` and ``kv_b_proj`` to each head's key
and value; :class:`~memtheory.layers.latent_attention.LatentAttention`;
``o_proj``), a residual sum, an RMS norm and a gated MLP: dense in the first
``first_k_dense_replace`` layers, else ``n_routed_experts`` experts
(``num_experts_per_tok`` per token) beside a shared gated MLP of
``n_shared_experts * moe_intermediate_size``; a final norm and the head.

The parameter count is checked tensor for tensor against transformers on
the ``meta`` device (``tests/pytorch/test_family_parameter_counts.py``).
transformers keeps the router's weight in fp32 whatever the model's dtype;
memtheory counts it in the model's. V3's latent attention is measured exact
under the autograd convention (``tests/pytorch/test_deepseek_autograd.py``, all
layers dense); V2's (complex rotary) and the routed experts are not: the
autograd convention refuses a model that has them, naming the layer.

Examples
--------
>>> config = deepseek_config({"model_type": "deepseek_v3", "vocab_size": 96,
...     "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
...     "num_attention_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4,
...     "num_experts_per_tok": 2, "kv_lora_rank": 8, "q_lora_rank": 12,
...     "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6,
...     "first_k_dense_replace": 1})
>>> deepseek(config).parameter_count
23240
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError, UnsupportedError
from memtheory.layers import (
    Add,
    Dense,
    Embedding,
    Layer,
    Multiply,
    SiLU,
)
from memtheory.layers.latent_attention import LatentAttention
from memtheory.layers.moe import MixtureOfExperts
from memtheory.layers.rms_norm import RMSNorm
from memtheory.layers.rotary import RotaryTable
from memtheory.layers.split import Slice
from memtheory.models._config_keys import (
    config_activation,
    config_flag,
    optional_int,
    required_value,
)
from memtheory.models.decoder_stack import decoder_stack
from memtheory.network import Network, Node
from memtheory.symbols import B, S

__all__ = ["DeepSeekConfig", "deepseek", "deepseek_config"]


@dataclass(frozen=True)
class DeepSeekConfig:
    """Hyperparameters of a DeepSeek V2 or V3 decoder, named as in its ``config.json``.

    Examples
    --------
    >>> DeepSeekConfig(vocab_size=8, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, kv_lora_rank=4, q_lora_rank=None,
    ...     qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4, moe_intermediate_size=8,
    ...     n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
    ...     first_k_dense_replace=1).qk_head_dim
    6
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    kv_lora_rank: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    moe_intermediate_size: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int | None
    first_k_dense_replace: int
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    family: str = "deepseek_v3"
    max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        if self.num_experts_per_tok > self.n_routed_experts:
            raise InvalidSizeError(
                f"DeepSeekConfig: num_experts_per_tok ({self.num_experts_per_tok}) exceeds "
                f"n_routed_experts ({self.n_routed_experts})."
            )

    @property
    def qk_head_dim(self) -> int:
        """Width of one query or key head: non-rotary plus rotary features."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def deepseek_config(config: Mapping[str, Any]) -> DeepSeekConfig:
    """Read a ``deepseek_v2`` or ``deepseek_v3`` configuration (transformers 5's defaults).

    ``hidden_act`` other than SiLU is refused; ``q_lora_rank`` null means one
    ``q_proj``; ``first_k_dense_replace`` defaults to 0 (V2) or 3 (V3),
    ``n_shared_experts`` to 2 (V2) or 1 (V3).
    """
    family = str(config.get("model_type"))
    v3 = family == "deepseek_v3"
    if config_activation(config, "silu") != "silu":
        raise UnsupportedError(
            "from_config: DeepSeek with an activation other than SiLU is not modelled."
        )
    first = config.get("first_k_dense_replace", 3 if v3 else 0)
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        first = required_value(config, "first_k_dense_replace")
    return DeepSeekConfig(
        vocab_size=required_value(config, "vocab_size"),
        hidden_size=required_value(config, "hidden_size"),
        intermediate_size=required_value(config, "intermediate_size"),
        num_hidden_layers=required_value(config, "num_hidden_layers"),
        num_attention_heads=required_value(config, "num_attention_heads"),
        kv_lora_rank=optional_int(config, "kv_lora_rank", 512) or 512,
        q_lora_rank=optional_int(config, "q_lora_rank", None)
        if "q_lora_rank" in config else 1536,
        qk_nope_head_dim=optional_int(config, "qk_nope_head_dim", 128) or 128,
        qk_rope_head_dim=optional_int(config, "qk_rope_head_dim", 64) or 64,
        v_head_dim=optional_int(config, "v_head_dim", 128) or 128,
        moe_intermediate_size=optional_int(
            config, "moe_intermediate_size", 2048 if v3 else 1407) or 1,
        n_routed_experts=optional_int(config, "n_routed_experts", 256 if v3 else 64) or 1,
        num_experts_per_tok=required_value(config, "num_experts_per_tok") if not v3 else (
            optional_int(config, "num_experts_per_tok", 8) or 8),
        n_shared_experts=optional_int(config, "n_shared_experts", 1 if v3 else 2),
        first_k_dense_replace=first,
        attention_bias=config_flag(config, "attention_bias", False),
        tie_word_embeddings=config_flag(config, "tie_word_embeddings", False),
        family=family,
        max_position_embeddings=optional_int(config, "max_position_embeddings", None),
    )


def deepseek(
    config: DeepSeekConfig,
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
    name: str | None = None,
    device: Literal["cuda", "cpu"] | None = None,
) -> Network:
    """Build the DeepSeek decoder for ``batch`` sequences of ``sequence`` tokens.

    ``flash``: transformers' SDPA attention; ``device="cpu"`` says it runs on
    the CPU, where it takes the math path
    (:class:`~memtheory.layers.latent_attention.LatentAttention`).
    """
    c = config
    return decoder_stack(
        "deepseek",
        embedded=[Embedding(c.vocab_size, c.hidden_size, name="model.embed_tokens")],
        layers=c.num_hidden_layers,
        layer=partial(_layer, c, flash=flash, device=device),
        tables=[Node(RotaryTable(c.qk_rope_head_dim, positions=c.max_position_embeddings,
                                 name="model.rotary_emb"), inputs=("input_ids",))],
        final_norm=RMSNorm(name="model.norm"),
        vocabulary=c.vocab_size,
        tied=c.tie_word_embeddings,
        batch=batch,
        sequence=sequence,
        lm_head=lm_head,
        loss=loss,
        name=name or c.family,
        block_order=_ORDER,
    )


_ORDER = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")
"""The order ``DeepseekV3DecoderLayer`` (and V2's) registers its parameters: the norms after the
attention and the MLP (transformers 5.24), which torch.optim's for-loop step follows."""


def _layer(
    c: DeepSeekConfig, index: int, source: str, *, flash: bool,
    device: Literal["cuda", "cpu"] | None = None,
) -> list[Layer | Node]:
    """One layer reading ``source``; its last item is its output."""
    prefix = f"model.layers.{index}"
    attn = f"{prefix}.self_attn"
    ln_1 = f"{prefix}.input_layernorm"
    items: list[Layer | Node] = [Node(RMSNorm(name=ln_1), inputs=(source,))]
    heads = c.num_attention_heads
    if c.q_lora_rank is None:
        items.append(Dense(heads * c.qk_head_dim, bias=False, name=f"{attn}.q_proj"))
    else:
        items += [
            Dense(c.q_lora_rank, bias=c.attention_bias, name=f"{attn}.q_a_proj"),
            RMSNorm(name=f"{attn}.q_a_layernorm"),
            Dense(heads * c.qk_head_dim, bias=False, name=f"{attn}.q_b_proj"),
        ]
    query = items[-1].name or ""
    latent, rope = c.kv_lora_rank, c.qk_rope_head_dim
    kv_a, kv_b = f"{attn}.kv_a_proj_with_mqa", f"{attn}.kv_b_proj"
    keys, values = heads * c.qk_nope_head_dim, heads * c.v_head_dim
    items += [
        Node(Dense(latent + rope, bias=c.attention_bias, name=kv_a), inputs=(ln_1,)),
        Slice(0, latent, name=f"{attn}.kv_latent"),
        RMSNorm(name=f"{attn}.kv_a_layernorm"),
        Dense(keys + values, bias=False, name=kv_b),
        Node(Slice(0, keys, name=f"{attn}.k_nope"), inputs=(kv_b,)),
        Node(Slice(keys, keys + values, name=f"{attn}.v"), inputs=(kv_b,)),
        Node(Slice(latent, latent + rope, name=f"{attn}.k_rope"), inputs=(kv_a,)),
        Node(
            LatentAttention(heads, c.qk_nope_head_dim, rope, c.v_head_dim, flash=flash,
                            name=f"{attn}.attention", latent_dim=latent,
                            complex_rotary=c.family == "deepseek_v2", device=device),
            inputs=(query, f"{attn}.k_nope", f"{attn}.k_rope", f"{attn}.v", "model.rotary_emb"),
        ),
        Dense(c.hidden_size, bias=c.attention_bias, name=f"{attn}.o_proj"),
        Node(Add(name=f"{prefix}.add_1"), inputs=(source, f"{attn}.o_proj")),
        RMSNorm(name=f"{prefix}.post_attention_layernorm"),
    ]
    mlp_out = _mlp(c, index, f"{prefix}.post_attention_layernorm", items)
    items.append(Node(Add(name=f"{prefix}.add_2"), inputs=(f"{prefix}.add_1", mlp_out)))
    return items


def _mlp(c: DeepSeekConfig, index: int, source: str, items: list[Layer | Node]) -> str:
    """Append the dense MLP, or the experts beside the shared experts; return the output."""
    mlp = f"model.layers.{index}.mlp"
    if index < c.first_k_dense_replace:
        return _gated(mlp, source, c.intermediate_size, c.hidden_size, items)
    items.append(Node(MixtureOfExperts(c.n_routed_experts, c.num_experts_per_tok,
                                       c.moe_intermediate_size, name=mlp), inputs=(source,)))
    if not c.n_shared_experts:
        return mlp
    shared = _gated(f"{mlp}.shared_experts", source,
                    c.moe_intermediate_size * c.n_shared_experts, c.hidden_size, items)
    items.append(Node(Add(name=f"{mlp}.add"), inputs=(mlp, shared)))
    return f"{mlp}.add"


def _gated(mlp: str, source: str, width: int, hidden: int, items: list[Layer | Node]) -> str:
    """Append a SwiGLU MLP of ``width`` reading ``source``; return its output's name."""
    items += [
        Node(Dense(width, bias=False, name=f"{mlp}.gate_proj"), inputs=(source,)),
        SiLU(name=f"{mlp}.act_fn"),
        Node(Dense(width, bias=False, name=f"{mlp}.up_proj"), inputs=(source,)),
        Node(Multiply(name=f"{mlp}.mul"), inputs=(f"{mlp}.act_fn", f"{mlp}.up_proj")),
        Dense(hidden, bias=False, name=f"{mlp}.down_proj"),
    ]
    return f"{mlp}.down_proj"
