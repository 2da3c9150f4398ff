r"""Decoders with layer norms and a fused query/key/value projection: GPT-NeoX and Falcon.

One builder, :func:`parallel_decoder`, for the layout Hugging Face's
``GPTNeoXForCausalLM`` and ``FalconForCausalLM`` share: token embeddings;
per layer, layer norms (with bias), one fused ``query_key_value`` projection
sliced into queries, keys and values, rotary embedding of (a leading part of)
each query and key head, causal attention and an output ``dense`` projection,
and a plain MLP (``dense_h_to_4h``, GELU, ``dense_4h_to_h``). With
``parallel`` (GPT-NeoX's ``use_parallel_residual``, Falcon's
``parallel_attn``) the attention and the MLP both read the layer's input and
their outputs are added to it; otherwise the MLP reads the attention's
residual sum. A final layer norm and the output projection close the model.

The parameter count is checked tensor for tensor against transformers on
the ``meta`` device (``tests/pytorch/test_family_parameter_counts.py``).
Under the autograd convention a GPT-NeoX training step is exact against
``measure`` (``tests/pytorch/test_family_autograd.py``; the network carries
the order the layers register their parameters, :func:`registration_endings`).
Falcon's attention is its own eager code
(:class:`~memtheory.layers.falcon_attention.FalconAttention`); its model
call makes the positions and the causal mask once for every layer
(:mod:`memtheory.layers.causal_mask`), and the 40B layout copies its keys and
values to every head (:class:`~memtheory.layers.falcon_attention.FalconSplit`):
a Falcon step is exact too, its peak at the forward's softmax included, with eager
attention (``flash=False``) and with its SDPA call (``flash=True``, transformers' default).

Examples
--------
>>> config = ParallelDecoderConfig(vocabulary=100, hidden=32, layers=2, heads=4,
...                                ffn_hidden=128, rotary_dim=2)
>>> parallel_decoder(config).parameter_count
31872
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

from memtheory._validation import SizeLike
from memtheory.errors import InvalidSizeError
from memtheory.layers import (
    GELU,
    Add,
    Dense,
    Embedding,
    Layer,
    LayerNorm,
)
from memtheory.layers.causal_mask import CausalMask, Positions
from memtheory.layers.falcon_attention import FalconAttention, FalconSplit
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.rotary import Rotary, RotaryTable
from memtheory.models.decoder_stack import decoder_stack, fused_projection
from memtheory.network import Network, Node
from memtheory.symbols import B, S

__all__ = ["ParallelDecoderConfig", "parallel_decoder", "registration_endings"]


@dataclass(frozen=True)
class ParallelDecoderConfig:
    """Hyperparameters of a GPT-NeoX or Falcon decoder.

    Parameters
    ----------
    vocabulary, hidden, layers, heads, ffn_hidden : int
        ``vocab_size``, ``hidden_size``, ``num_hidden_layers``,
        ``num_attention_heads``, the MLP's width (GPT-NeoX ``intermediate_size``,
        Falcon ``ffn_hidden_size``).
    kv_heads : int, optional
        Key/value heads (Falcon's multi-query: 1); default ``heads``.
    rotary_dim : int, optional
        Features of each head that are rotated (GPT-NeoX: a quarter); default all.
    positions : int, optional
        ``max_position_embeddings``.
    tied : bool, default False
        Output projection tied to the embedding (Falcon: True).
    qkv_bias, bias : bool
        Biases of the fused projection, and of the output projection and the MLP.
    parallel : bool, default True
        Attention and MLP read the same input (parallel residual).
    norms : {1, 2}, default 2
        With ``parallel``: one norm shared by both branches, or one each.
    broadcast_kv : bool, default False
        Falcon's ``new_decoder_architecture``: the keys and values are copied
        to every query head before the rotary embedding
        (:class:`~memtheory.layers.falcon_attention.FalconSplit`).
    family : str, default "gpt_neox"

    Examples
    --------
    >>> ParallelDecoderConfig(vocabulary=8, hidden=16, layers=1, heads=4, ffn_hidden=64).head_width
    4
    """

    vocabulary: int
    hidden: int
    layers: int
    heads: int
    ffn_hidden: int
    kv_heads: int | None = None
    rotary_dim: int | None = None
    positions: int | None = None
    tied: bool = False
    qkv_bias: bool = True
    bias: bool = True
    parallel: bool = True
    norms: Literal[1, 2] = 2
    family: str = "gpt_neox"
    broadcast_kv: bool = False

    def __post_init__(self) -> None:
        for name in ("vocabulary", "hidden", "layers", "heads", "ffn_hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSizeError(
                    f"ParallelDecoderConfig: {name} must be a positive whole number, got "
                    f"{value!r}."
                )
        if self.hidden % self.heads:
            raise InvalidSizeError(
                f"ParallelDecoderConfig: hidden ({self.hidden}) does not split into "
                f"{self.heads} heads."
            )
        rotary = self.rotary
        if rotary < 1 or self.head_width % rotary or rotary % 2:
            raise InvalidSizeError(
                f"ParallelDecoderConfig: rotary_dim {rotary} must be an even divisor of the "
                f"head width {self.head_width}; other partial rotations are not modelled."
            )

    @property
    def head_width(self) -> int:
        """Width of one head: ``hidden // heads``."""
        return self.hidden // self.heads

    @property
    def rotary(self) -> int:
        """Rotated features of each head: ``rotary_dim``, or the head width."""
        return self.head_width if self.rotary_dim is None else self.rotary_dim


def parallel_decoder(
    config: ParallelDecoderConfig,
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
    name: str | None = None,
) -> Network:
    """Build the GPT-NeoX or Falcon decoder for ``batch`` sequences of ``sequence`` tokens.

    Parameters
    ----------
    config : ParallelDecoderConfig
    batch, sequence : size, default ``B`` and ``S``
    flash : bool, default False
        Memory-efficient attention (no :math:`S^2` tensors kept).
    lm_head : bool, default True
        End with the output projection to ``(B, S, vocabulary)`` logits.
    loss : bool, default False
        End with the causal-LM loss (needs ``lm_head``).
    name : str, optional

    Examples
    --------
    >>> config = ParallelDecoderConfig(vocabulary=100, hidden=32, layers=1, heads=4,
    ...                                ffn_hidden=64, kv_heads=1, parallel=True, norms=1)
    >>> parallel_decoder(config, batch=2, sequence=8).output_shape
    (2, 8, 100)
    """
    c = config
    table = RotaryTable(c.rotary, positions=c.positions, name="rotary_emb")
    tables = [Node(table, inputs=("input_ids",))]
    calls: list[tuple[str, str]] = []
    if c.family == "falcon":  # FalconModel.forward's positions and eager mask, for every layer
        made: list[Layer] = [
            Positions(name="position_ids"), CausalMask(boolean=flash, name="causal_mask")
        ]
        tables = [Node(layer, inputs=("input_ids",)) for layer in made] + tables
        calls.append(("position_ids", "final_layer_norm"))
        # FalconDecoderLayer.forward keeps its norm's output (attention_layernorm_out), the
        # argument of its attention call, until it returns
        calls += [(f"layers.{i}.attention.query_key_value", f"layers.{i}.add_2")
                  for i in range(c.layers)]
        if not c.parallel:  # sequential: attention_output and mlp_layernorm_out too
            calls += [(f"layers.{i}.{first}", f"layers.{i}.add_2")
                      for i in range(c.layers) for first in ("add_1", "mlp.dense_h_to_4h")]
    return decoder_stack(
        "parallel_decoder",
        embedded=[Embedding(c.vocabulary, c.hidden, name="embed_in")],
        tables=tables,
        calls=calls,
        layers=c.layers,
        layer=partial(_layer, c, flash=flash),
        final_norm=LayerNorm(name="final_layer_norm"),
        vocabulary=c.vocabulary,
        tied=c.tied,
        batch=batch,
        sequence=sequence,
        lm_head=lm_head,
        loss=loss,
        name=name or c.family,
        block_order=registration_endings(c),
    )


def registration_endings(config: ParallelDecoderConfig) -> tuple[str, ...]:
    """Return the order the family's decoder layer registers its parameters.

    ``GPTNeoXLayer`` registers its two norms, then the attention and the MLP;
    ``FalconDecoderLayer`` the attention and the MLP, then its norms: without
    ``parallel_attn`` ``post_attention_layernorm`` before ``input_layernorm``,
    with two parallel norms ``ln_attn`` (here ``input_layernorm``) before
    ``ln_mlp`` (``post_attention_layernorm``) (transformers 5.24
    ``models/gpt_neox/modeling_gpt_neox.py``, ``models/falcon/modeling_falcon.py``).

    Examples
    --------
    >>> config = ParallelDecoderConfig(vocabulary=8, hidden=16, layers=1, heads=4,
    ...                                ffn_hidden=32, family="falcon", parallel=False)
    >>> registration_endings(config)
    ('attention', 'mlp', 'post_attention_layernorm', 'input_layernorm')
    """
    norms = ("input_layernorm", "post_attention_layernorm")
    if config.family == "gpt_neox":
        return (*norms, "attention", "mlp")
    if not config.parallel:
        norms = norms[::-1]
    return ("attention", "mlp", *norms)


def _layer(
    c: ParallelDecoderConfig, index: int, source: str, *, flash: bool
) -> list[Layer | Node]:
    """One layer reading ``source``; its last item is its output."""
    prefix = f"layers.{index}"
    ln_attn = f"{prefix}.input_layernorm"
    items: list[Layer | Node] = [Node(LayerNorm(name=ln_attn), inputs=(source,))]
    ln_mlp = ln_attn
    two = c.parallel and c.norms == 2
    if two:
        ln_mlp = f"{prefix}.post_attention_layernorm"
    # FalconDecoderLayer runs its two parallel norms (ln_attn, ln_mlp) before the attention,
    # GPTNeoXLayer its second after it (transformers 5.24)
    if two and c.family == "falcon":
        items.append(Node(LayerNorm(name=ln_mlp), inputs=(source,)))
    attended = _attention(c, f"{prefix}.attention", ln_attn, items, flash=flash)
    if two and c.family != "falcon":
        items.append(Node(LayerNorm(name=ln_mlp), inputs=(source,)))
    if c.parallel:
        mlp_out = _mlp(c, f"{prefix}.mlp", ln_mlp, items)
        items += [
            Node(Add(name=f"{prefix}.add_1"), inputs=(attended, mlp_out)),
            Node(Add(name=f"{prefix}.add_2"), inputs=(f"{prefix}.add_1", source)),
        ]
        return items
    items += [
        Node(Add(name=f"{prefix}.add_1"), inputs=(source, attended)),
        LayerNorm(name=f"{prefix}.post_attention_layernorm"),
    ]
    mlp_out = _mlp(c, f"{prefix}.mlp", f"{prefix}.post_attention_layernorm", items)
    items.append(Node(Add(name=f"{prefix}.add_2"), inputs=(f"{prefix}.add_1", mlp_out)))
    return items


def _attention(
    c: ParallelDecoderConfig, attn: str, source: str, items: list[Layer | Node], *, flash: bool
) -> str:
    """Append the fused projection, the rotary, attention and ``dense``; return the output."""
    width, kv = c.head_width, c.kv_heads or c.heads
    queries, keys = c.heads * width, kv * width
    query, key, value = fused_projection(
        f"{attn}.query_key_value", attn, source, queries, keys, c.qkv_bias, items
    )
    options = {}
    if c.family == "falcon":
        options["broadcast"] = c.broadcast_kv
    if c.broadcast_kv:  # Falcon-40B's _split_heads: copies of every head
        parts = [FalconSplit(part, c.heads // kv, name=f"{attn}.{part}")
                 for part in ("query", "key", "value")]
        items += [Node(part, inputs=(source_,))
                  for part, source_ in zip(parts, (query, key, value), strict=True)]
        query, key, value = (f"{attn}.{part.part}" for part in parts)
    attention = FalconAttention if c.family == "falcon" else GroupedQueryAttention
    items += [
        Node(Rotary(c.rotary, name=f"{attn}.q_rotary"), inputs=(query, "rotary_emb")),
        Node(Rotary(c.rotary, name=f"{attn}.k_rotary"), inputs=(key, "rotary_emb")),
        Node(
            attention(c.heads, kv_heads=kv, head_dim=width, flash=flash,
                      name=f"{attn}.attention", **options),
            inputs=(f"{attn}.q_rotary", f"{attn}.k_rotary", value),
        ),
        Dense(c.hidden, bias=c.bias, name=f"{attn}.dense"),
    ]
    return f"{attn}.dense"


def _mlp(c: ParallelDecoderConfig, mlp: str, source: str, items: list[Layer | Node]) -> str:
    """Append ``dense_h_to_4h``, GELU and ``dense_4h_to_h`` reading ``source``."""
    items += [
        Node(Dense(c.ffn_hidden, bias=c.bias, name=f"{mlp}.dense_h_to_4h"), inputs=(source,)),
        GELU(name=f"{mlp}.act"),
        Dense(c.hidden, bias=c.bias, name=f"{mlp}.dense_4h_to_h"),
    ]
    return f"{mlp}.dense_4h_to_h"
