"""GPT-2 (Radford et al. 2019) in its four sizes, as Hugging Face's ``GPT2LMHeadModel``.

Token and position embeddings (vocabulary 50,257, 1,024 positions), a stack
of pre-norm transformer blocks, a final layer norm, and an output projection
tied to the token embedding (so it adds no parameters), optionally followed
by the next-token loss (``loss=True``). Dropout is 0.1 everywhere. Layers
carry Hugging Face's names (``wte``, ``h.0.attn``, ``ln_f``).

The textbook's GPT-2 (:data:`GPT2_SIZES`) counts one fused GELU. A
:class:`GPT2Config` can say what a Hugging Face configuration says
(:func:`~memtheory.models.from_config` reads it): the activation
(``activation_function``: transformers' default ``gelu_new`` is seven
element-wise operations, :class:`~memtheory.layers.NewGELU`) and the three
dropout probabilities.

Examples
--------
>>> gpt2("small").parameter_count
124439808
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from memtheory._validation import SizeLike
from memtheory.errors import InvalidArgumentError, InvalidSizeError, UnknownNameError
from memtheory.layers import (
    GELU,
    Dropout,
    Embedding,
    Input,
    LanguageModelLoss,
    Layer,
    LayerNorm,
    MultiHeadAttention,
    NewGELU,
    PositionEmbedding,
    Unembedding,
)
from memtheory.models.decoder_stack import HEAD_AND_LOSS
from memtheory.models.transformer import block_calls, transformer_block
from memtheory.network import Network, Node
from memtheory.symbols import B, S

__all__ = ["GPT2_ACTIVATIONS", "GPT2_SIZES", "GPT2Config", "gpt2"]

GPT2Activation = Literal["gelu", "gelu_pytorch_tanh", "gelu_new"]

GPT2_ACTIVATIONS: tuple[str, ...] = ("gelu", "gelu_pytorch_tanh", "gelu_new")
"""The ``activation_function`` values modelled: exact GELU, fused tanh GELU, ``gelu_new``."""


@dataclass(frozen=True)
class GPT2Config:
    """Hyperparameters of one GPT-2 size.

    Parameters
    ----------
    layers : int
        Transformer blocks (``n_layer``).
    hidden : int
        Model width (``n_embd``).
    heads : int
        Attention heads (``n_head``).
    vocabulary : int, default 50257
    positions : int, default 1024
        Longest sequence (``n_positions``).
    activation : {"gelu", "gelu_pytorch_tanh", "gelu_new"}, default "gelu"
        The MLP's activation (``activation_function``): one fused GELU
        (``"gelu"``, the textbook's; ``"gelu_pytorch_tanh"``, its tanh
        approximation, keeps the same bytes), or ``"gelu_new"``,
        transformers' default for GPT-2, which runs as seven element-wise
        operations and keeps three more input-sized tensors
        (:class:`~memtheory.layers.NewGELU`).
    dropout : float, default 0.1
        After the attention projection and after the MLP (``resid_pdrop``).
    attention_dropout : float, default 0.1
        On the attention probabilities (``attn_pdrop``).
    embedding_dropout : float, default 0.1
        On the summed embeddings (``embd_pdrop``).

    Examples
    --------
    >>> GPT2_SIZES["xl"].hidden // GPT2_SIZES["xl"].heads
    64
    """

    layers: int
    hidden: int
    heads: int
    vocabulary: int = 50257
    positions: int = 1024
    activation: GPT2Activation = "gelu"
    dropout: float = 0.1
    attention_dropout: float = 0.1
    embedding_dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.activation not in GPT2_ACTIVATIONS:
            raise InvalidArgumentError(
                f"GPT2Config: activation must be one of {', '.join(GPT2_ACTIVATIONS)}, "
                f"got {self.activation!r}."
            )
        for name in ("dropout", "attention_dropout", "embedding_dropout"):
            p = getattr(self, name)
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p < 1:
                raise InvalidArgumentError(f"GPT2Config: {name} must be in [0, 1), got {p!r}.")


GPT2_SIZES: dict[str, GPT2Config] = {
    "small": GPT2Config(layers=12, hidden=768, heads=12),
    "medium": GPT2Config(layers=24, hidden=1024, heads=16),
    "large": GPT2Config(layers=36, hidden=1280, heads=20),
    "xl": GPT2Config(layers=48, hidden=1600, heads=25),
}
"""The four released sizes, from their Hugging Face configurations."""


def _size_name(config: GPT2Config) -> str:
    """Return the released size a configuration has (activation and dropout aside), or "custom"."""
    shape = (config.layers, config.hidden, config.heads, config.vocabulary, config.positions)
    for name, released in GPT2_SIZES.items():
        if shape == (released.layers, released.hidden, released.heads, released.vocabulary,
                     released.positions):
            return name
    return "custom"


def gpt2(
    size: str | GPT2Config = "small",
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
    device: Literal["cuda", "cpu"] | None = None,
) -> Network:
    """Build GPT-2 for ``batch`` sequences of ``sequence`` tokens.

    Parameters
    ----------
    size : {"small", "medium", "large", "xl"} or GPT2Config
    batch : size, default ``B``
    sequence : size, default ``S``
        Tokens per sequence; at most 1,024 when a number.
    flash : bool, default False
        Memory-efficient attention (no :math:`s^2` tensors kept).
    lm_head : bool, default True
        End with the tied output projection to vocabulary logits.
    loss : bool, default False
        End with the language-model loss over those logits
        (:class:`~memtheory.layers.LanguageModelLoss`, as ``GPT2LMHeadModel``
        computes it when given labels); needs ``lm_head``.
    device : {"cuda", "cpu"} or None, default None
        Whose dropout kernel runs: CUDA's fused dropout keeps a ``bool``
        mask (the default), the CPU's keeps its scaled noise in the
        activation dtype (:class:`~memtheory.layers.Dropout`); the eager
        attention's dropout likewise.

    Examples
    --------
    >>> net = gpt2("medium", sequence=1024)
    >>> net.parameter_count, net.output_shape
    (354823168, (B, 1024, 50257))
    >>> gpt2(loss=True).output_shape
    ()
    >>> hf = GPT2Config(layers=2, hidden=32, heads=4, vocabulary=96, activation="gelu_new")
    >>> gpt2(hf, device="cpu")["h.0.mlp_act"].layer.kind
    'NewGELU'
    """
    if loss and not lm_head:
        raise InvalidSizeError("gpt2: loss=True needs the logits; keep lm_head=True.")
    config = _config(size)
    layers: list[Layer | Node] = [
        Input((sequence,), batch=batch, name="input_ids"),
        Embedding(config.vocabulary, config.hidden, name="wte"),
        PositionEmbedding(config.positions, name="wpe"),
        Dropout(config.embedding_dropout, name="drop"),
    ]
    source = "drop"
    # Hugging Face's GPT2Model.forward keeps inputs_embeds (wte's output) until it returns.
    calls = [("wpe", "ln_f")]
    for index in range(config.layers):
        block = transformer_block(
            f"h.{index}", source, hidden=config.hidden, heads=config.heads, flash=flash,
            dropout=config.dropout, attention_dropout=config.attention_dropout,
        )
        layers += block
        calls += block_calls(block, "gpt2")
        source = block[-1].name or ""
    layers.append(LayerNorm(name="ln_f"))
    if lm_head:
        layers.append(Unembedding(config.vocabulary, name="lm_head"))
    if loss:
        layers.append(LanguageModelLoss(name="loss"))
        # GPT2LMHeadModel.forward keeps hidden_states (ln_f's output) until its loss has run.
        calls.append(HEAD_AND_LOSS)
    layers = [_as_run(item, config.activation, device) for item in layers]
    name = size if isinstance(size, str) else _size_name(config)
    return Network(layers, name=f"GPT-2 {name}", calls=calls)


def _as_run(
    item: Layer | Node, activation: GPT2Activation, device: Literal["cuda", "cpu"] | None
) -> Layer | Node:
    """Return a block's item with the configured activation and the device's dropout kernel."""
    layer = item.layer if isinstance(item, Node) else item
    if isinstance(layer, GELU) and activation != "gelu":
        changed: Layer = (
            NewGELU(name=layer.name)
            if activation == "gelu_new"
            else GELU(approximate="tanh", name=layer.name)
        )
    elif isinstance(layer, Dropout | MultiHeadAttention) and device is not None:
        changed = replace(layer, device=device)
    else:
        return item
    return Node(changed, inputs=item.inputs) if isinstance(item, Node) else changed


def _config(size: str | GPT2Config) -> GPT2Config:
    if isinstance(size, GPT2Config):
        return size
    try:
        return GPT2_SIZES[str(size).lower().removeprefix("gpt2-").removeprefix("gpt-2 ")]
    except KeyError:
        raise UnknownNameError(
            f"unknown GPT-2 size {size!r}. Known sizes: {', '.join(GPT2_SIZES)} "
            "(or pass a GPT2Config)."
        ) from None
