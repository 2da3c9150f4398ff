r"""LoRA: low-rank adapters beside frozen linear maps (Hu et al. 2021).

Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models" (ICLR 2022,
arXiv:2106.09685), Section 4: a frozen weight :math:`W_0` of
:math:`n_\text{out} \times n_\text{in}` gets a trainable update :math:`BA`, with
:math:`A` of ``rank x n_in`` and :math:`B` of ``n_out x rank``, scaled by
:math:`\alpha / r`: :math:`h = W_0 x + \frac{\alpha}{r} B A x`. Only :math:`A`
and :math:`B` have gradients and optimizer state: :math:`r(n_\text{in} +
n_\text{out})` parameters per adapted map.

:func:`apply_lora` rewrites a :class:`~memtheory.network.Network` as Hugging
Face's ``peft`` runs it: every layer with parameters is frozen
(:class:`~memtheory.finetuning.layers.Frozen`); each targeted
:class:`~memtheory.layers.Dense` becomes its frozen ``base_layer``, ``lora_A``,
``lora_B``, the scaling and the sum (named as the original layer, so what read
it reads the sum); a targeted projection inside a
:class:`~memtheory.layers.MultiHeadAttention` (``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``) adapts that layer
(:class:`~memtheory.finetuning.layers.LoRAAttention`).

Examples
--------
>>> from memtheory.models import gpt2
>>> tuned = apply_lora(gpt2("medium"), LoRA(rank=4, targets=("q_proj", "v_proj")))
>>> tuned.parameter_count  # 24 layers x 2 maps x 4 x (1024 + 1024)
393216
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy as sp

from memtheory.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from memtheory.finetuning.layers import (
    ATTENTION_PROJECTIONS,
    AdapterInputCast,
    CastLoRADown,
    CastLoRAUp,
    ConstantScale,
    Frozen,
    LoRAAttention,
    LoRAUp,
)
from memtheory.layers import Add, Dense, Dropout, Layer, MultiHeadAttention, Unembedding
from memtheory.network import Network, Node

__all__ = [
    "PEFT_DEFAULT_TARGETS",
    "PEFT_STAND_INS",
    "LoRA",
    "apply_lora",
    "default_targets",
    "freeze",
    "linear_maps",
    "match_targets",
]

PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "t5": ("q", "v"), "mt5": ("q", "v"), "bart": ("q_proj", "v_proj"), "gpt2": ("c_attn",),
    "bloom": ("query_key_value",), "blip-2": ("q", "v", "q_proj", "v_proj"),
    "opt": ("q_proj", "v_proj"), "gptj": ("q_proj", "v_proj"),
    "gpt_neox": ("query_key_value",), "gpt_neo": ("q_proj", "v_proj"),
    "bert": ("query", "value"), "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"), "electra": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"), "deberta": ("in_proj",),
    "layoutlm": ("query", "value"), "llama": ("q_proj", "v_proj"),
    "llama4": ("q_proj", "v_proj"), "chatglm": ("query_key_value",),
    "gpt_bigcode": ("c_attn",), "mpt": ("Wqkv",), "RefinedWebModel": ("query_key_value",),
    "RefinedWeb": ("query_key_value",), "falcon": ("query_key_value",),
    "btlm": ("c_proj", "c_attn"), "codegen": ("qkv_proj",), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "stablelm": ("q_proj", "v_proj"),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"), "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"), "gemma3_text": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"),
    "nemotron_h": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "rwkv": ("key", "value", "receptance", "output"),
    "rwkv7": ("r_proj", "k_proj", "v_proj", "o_proj", "key", "value"),
}
"""LoRA's default ``target_modules`` by ``model_type``, as peft 0.21.2 chooses them.

Copied from peft 0.21.2 ``utils/constants.py``,
``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`` (``gemma4``'s entry, a
regular expression over a vision-language model's modules, left out);
``tuners/lora/model.py``'s ``_prepare_adapter_config`` takes the model's
``config.model_type`` entry when ``LoraConfig(target_modules=None)`` and
raises ``"Please specify `target_modules`"`` for a family it has none for.
The one table :func:`default_targets` reads.
"""

PEFT_STAND_INS: dict[str, tuple[tuple[str, ...], str]] = {
    "c_attn": (
        ("q_proj", "v_proj"),
        "GPT-2's c_attn is one Conv1D computing query, key and value, and peft puts one "
        "adapter on it (lora_A r x h, lora_B 3h x r); memtheory's GPT-2 attention is one "
        "layer whose adapters it models per projection, so it adapts q_proj and v_proj "
        "instead: the same r x 4h trainable parameters (2 x r x 2h), gradients and optimizer "
        "state, while the activations differ (peft keeps one r-wide lora_A output and one 3h "
        "update per position, these two r-wide outputs and two h-wide updates)",
    ),
    "query": (("q_proj",), "BERT's and RoBERTa's attention.self.query, the same nn.Linear "
              "that memtheory's BERT names q_proj"),
    "value": (("v_proj",), "their attention.self.value, memtheory's v_proj"),
}
"""peft default targets that name a fused projection memtheory models per projection, or
a projection memtheory names otherwise: the targets adapted instead and why, in words
(printed with the answer)."""

MAX_RANK = 2**24
"""Largest LoRA rank taken: beyond the width of any layer (its alpha must stay a float)."""


@dataclass(frozen=True)
class LoRA:
    r"""What to adapt and how: rank, scaling, target linear maps, dropout.

    Parameters
    ----------
    rank : int
        :math:`r`.
    alpha : float, optional
        :math:`\alpha`; defaults to ``2 * rank`` (scaling 2).
    targets : str or sequence of str, default ("q_proj", "v_proj")
        Names of linear maps to adapt (see :func:`linear_maps`): a layer name,
        the end of one after a dot (``"mlp_fc"`` matches ``"h.3.mlp_fc"``), a
        shell pattern (``"h.*.attn.q_proj"``), or ``"all-linear"`` for every
        Dense layer and attention projection. The default is the LoRA paper's
        choice (Section 7.1: adapt the query and value projections).
    dropout : float, default 0.0
        ``lora_dropout`` on the adapters' input (peft's default is 0: no layer).

    Examples
    --------
    >>> LoRA(8).alpha, LoRA(8, 32).scaling
    (16, 4.0)
    """

    rank: int
    alpha: float | None = None
    targets: str | Sequence[str] = ("q_proj", "v_proj")
    dropout: float = 0.0
    patterns: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise InvalidArgumentError(f"LoRA rank must be a positive integer, got {self.rank!r}.")
        if self.rank > MAX_RANK:
            digits = str(self.rank)
            shown = digits if len(digits) <= 20 else f"of {len(digits)} digits"
            raise InvalidArgumentError(
                f"LoRA rank {shown} is beyond any layer's width (at most {MAX_RANK:,}): "
                "give the rank of the adapters, e.g. 8 or 64."
            )
        if self.alpha is None:
            object.__setattr__(self, "alpha", 2 * self.rank)
        if not 0 <= self.dropout < 1:
            raise InvalidArgumentError(f"LoRA dropout must be in [0, 1), got {self.dropout!r}.")
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        if not targets:
            raise InvalidArgumentError("LoRA needs at least one target, e.g. targets=('q_proj',).")
        object.__setattr__(self, "patterns", targets)

    @property
    def scaling(self) -> float:
        r""":math:`\alpha / r`."""
        return float(self.alpha or 0) / self.rank


def linear_maps(network: Network) -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """Every linear map LoRA can adapt, by name: ``(inputs, outputs)``.

    Dense layers by their name; the projections of an attention layer as
    ``{layer}.q_proj``, ``.k_proj``, ``.v_proj``, ``.o_proj``.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> maps = linear_maps(gpt2("small"))
    >>> maps["h.0.attn.q_proj"], maps["h.0.mlp_fc"], len(maps)
    ((768, 768), (768, 3072), 72)
    """
    found: dict[str, tuple[sp.Expr, sp.Expr]] = {}
    for row in network.rows[1:]:
        layer = row.layer
        if isinstance(layer, Dense):
            found[row.name] = (row.input_shape[-1], layer.units)
        elif isinstance(layer, MultiHeadAttention):
            every = LoRAAttention(layer, ATTENTION_PROJECTIONS, 1, 1.0)
            for projection, sizes in every.projection_shapes(row.input_shape).items():
                found[f"{row.name}.{projection}"] = sizes
    return found


def default_targets(network: Network, family: str | None) -> tuple[tuple[str, ...], str]:
    """Return peft's default LoRA targets for ``family`` (a ``model_type``) and their source.

    From :data:`PEFT_DEFAULT_TARGETS`; a fused projection memtheory models
    per projection is replaced as :data:`PEFT_STAND_INS` says, and said so.
    Without a family (a builder or a traced module) the LoRA paper's query
    and value projections (Section 7.1).

    Raises
    ------
    UnsupportedError
        For a family peft 0.21 has no default for (``get_peft_model`` raises
        then too), or whose default names no linear map of ``network``: the
        message lists the maps that can be named.

    Examples
    --------
    >>> from memtheory.estimate.resolve import resolve_model
    >>> falcon = {"model_type": "falcon", "vocab_size": 64, "hidden_size": 32,
    ...           "num_hidden_layers": 1, "num_attention_heads": 4}
    >>> default_targets(resolve_model(falcon, batch=1, sequence=8).network, "falcon")[0]
    ('query_key_value',)
    """
    if family is None:
        return ("q_proj", "v_proj"), "the LoRA paper's query and value projections"
    names = list(linear_maps(network))
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    if family not in PEFT_DEFAULT_TARGETS:
        raise UnsupportedError(
            f"peft 0.21 has no default LoRA target_modules for model_type {family!r} "
            "(get_peft_model raises 'Please specify `target_modules`'): name them with "
            f"--lora-targets (lora_targets=), e.g. q_proj,v_proj or all-linear; this model's "
            f"linear maps are {shown}."
        )
    source = f"peft 0.21's default for {family} (utils/constants.py)"
    targets: list[str] = []
    for target in PEFT_DEFAULT_TARGETS[family]:
        if any(_matches(name, target) for name in names):
            targets.append(target)
        elif target in PEFT_STAND_INS:
            instead, why = PEFT_STAND_INS[target]
            targets += instead
            source += f" is {target}: {why}"
        else:
            raise UnsupportedError(
                f"peft 0.21's default LoRA target for {family}, {target!r}, names no linear "
                f"map memtheory models for it: name targets with --lora-targets "
                f"(lora_targets=), e.g. all-linear; this model's linear maps are {shown}."
            )
    return tuple(dict.fromkeys(targets)), source


def _matches(name: str, pattern: str) -> bool:
    return (
        pattern == "all-linear"
        or name == pattern
        or name.endswith("." + pattern)
        or fnmatch.fnmatchcase(name, pattern)
    )


def match_targets(network: Network, patterns: str | Sequence[str]) -> tuple[str, ...]:
    """Return the linear maps of ``network`` that ``patterns`` name, in network order.

    Raises
    ------
    UnknownNameError
        When a pattern matches nothing: the message lists some names it could match.

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> match_targets(gpt2("small"), "h.1*.mlp_proj")
    ('h.1.mlp_proj', 'h.10.mlp_proj', 'h.11.mlp_proj')
    """
    names = list(linear_maps(network))
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    for pattern in patterns:
        if not any(_matches(name, pattern) for name in names):
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise UnknownNameError(
                f"LoRA target {pattern!r} matches no linear map of {network.name!r}. Its linear "
                f"maps are named {shown} (end of a name, a shell pattern such as 'h.*.mlp_fc', "
                "or 'all-linear')."
            )
    return tuple(n for n in names if any(_matches(n, p) for p in patterns))


def freeze(network: Network, patterns: str | Sequence[str] = "*") -> Network:
    """Return ``network`` with the parameters of the layers named by ``patterns`` frozen.

    Patterns match layer names as in :func:`match_targets` (``"*"`` freezes
    every layer, ``"h.0.*"`` the first block).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> net = Network([Input((8,)), Dense(4, name="body"), Dense(2, name="head")])
    >>> freeze(net, "body").parameter_count  # only the head trains
    10
    """
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    chosen = {
        row.name
        for row in network.rows[1:]
        if row.parameters != 0 and any(_matches(row.name, p) for p in patterns)
    }
    if not chosen:
        raise UnknownNameError(
            f"freeze: {list(patterns)} names no layer with parameters in {network.name!r}."
        )
    items: list[Layer | Node] = [network.rows[0].layer]
    for row in network.rows[1:]:
        layer = Frozen(row.layer) if row.name in chosen else row.layer
        items.append(Node(layer, inputs=row.inputs))
    return Network(
        items, name=f"{network.name} (frozen: {', '.join(patterns)})",
        parameter_order=network.parameter_order, calls=network.calls,
    )


def apply_lora(network: Network, lora: LoRA, *, wider: str | None = None) -> Network:
    """Return ``network`` as LoRA fine-tunes it: every weight frozen, adapters on the targets.

    Parameters
    ----------
    network : Network
    lora : LoRA
    wider : str, optional
        The adapters' dtype when peft keeps them wider than the step computes
        (``"fp32"`` adapters on a bf16 base under ``torch.autocast``: peft's
        default with the Trainer's ``bf16=True``). The network is still
        planned in the compute dtype, with what the wider adapters add there:
        peft's cast of each adapted layer's input
        (:class:`~memtheory.finetuning.layers.AdapterInputCast`: the
        adapter's own copy of its input) and autocast's copy of each adapter
        weight (:class:`~memtheory.finetuning.layers.CastLoRADown`,
        :class:`~memtheory.finetuning.layers.CastLoRAUp`). Only adapted
        Dense layers follow it; :func:`~memtheory.finetuning.finetune_memory`
        (``adapter_dtype``) counts the adapters' own bytes. Not with
        ``lora.dropout`` (peft drops out the wide cast, not modelled).

    Raises
    ------
    UnsupportedError
        ``wider`` with LoRA dropout.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> net = Network([Input((16,)), Dense(32, name="fc1"), Dense(8, name="fc2")])
    >>> tuned = apply_lora(net, LoRA(rank=4, targets="fc1"))
    >>> [row.name for row in tuned.rows]
    ['input', 'fc1.base_layer', 'fc1.lora_A', 'fc1.lora_B', 'fc1.scaling', 'fc1', 'fc2']
    >>> tuned.parameter_count  # 4 x (16 + 32); fc2 is frozen
    192
    >>> [row.name for row in apply_lora(net, LoRA(4, targets="fc1"), wider="fp32").rows][1:4]
    ['fc1.base_layer', 'fc1.input_cast', 'fc1.lora_A']
    """
    if wider and lora.dropout:
        raise UnsupportedError(
            f"LoRA dropout on adapters kept in {wider}: peft drops out the {wider} cast of the "
            "input, which is not modelled; use dropout=0.0 (peft's default) or leave wider unset."
        )
    targets = set(match_targets(network, lora.patterns))
    items: list[Layer | Node] = [network.rows[0].layer]
    first: dict[str, str] = {}  # an adapted layer's first row, where a call into it starts
    for row in network.rows[1:]:
        layer, name = row.layer, row.name
        if isinstance(layer, Dense) and name in targets:
            block = _adapted_dense(layer, name, row.inputs, lora, wider)
            first[name] = (block[0].layer if isinstance(block[0], Node) else block[0]).name or name
            items += block
        elif isinstance(layer, MultiHeadAttention) and any(
            f"{name}.{p}" in targets for p in ATTENTION_PROJECTIONS
        ):
            projections = tuple(p for p in ATTENTION_PROJECTIONS if f"{name}.{p}" in targets)
            adapted = LoRAAttention(layer, projections, lora.rank, float(lora.alpha or 0))
            items.append(Node(adapted, inputs=row.inputs))
        elif row.parameters != 0 or _tied(layer):
            items.append(Node(Frozen(layer), inputs=row.inputs))
        else:
            items.append(Node(layer, inputs=row.inputs))
    return Network(  # an adapter 'fc1.lora_A' is registered where 'fc1' is
        items, name=f"{network.name} (LoRA r={lora.rank})",
        parameter_order=network.parameter_order,
        calls=[(first.get(start, start), end) for start, end in network.calls],
    )


def _tied(layer: Layer) -> bool:
    """Whether ``layer`` reads another layer's matrix as its weight (a tied ``lm_head``).

    It has no parameters of its own, but what it reads is frozen with the
    embedding that owns it: peft freezes the shared matrix, so the head
    makes no gradient for it.
    """
    return isinstance(layer, Unembedding) and layer.tied


def _adapted_dense(
    layer: Dense, name: str, inputs: tuple[str, ...], lora: LoRA, wider: str | None = None
) -> list[Layer | Node]:
    """Peft's ``lora.Linear``: ``base_layer(x) + lora_B(lora_A(dropout(x))) * scaling``.

    With ``wider`` (the adapters' dtype, wider than the compute dtype) ``x``
    is first cast to it (peft's ``_cast_input_dtype``) and the adapters keep
    their weights' autocast copies.
    """
    source = inputs[0]
    items: list[Layer | Node] = [
        Node(
            Frozen(Dense(layer.units, bias=layer.bias, name=f"{name}.base_layer"), transient=True),
            inputs=inputs,
        )
    ]
    down, up = (CastLoRADown, CastLoRAUp) if wider else (Dense, LoRAUp)
    if wider:
        items.append(Node(AdapterInputCast(wider, name=f"{name}.input_cast"), inputs=(source,)))
        source = f"{name}.input_cast"
    if lora.dropout:
        items.append(Node(Dropout(lora.dropout, name=f"{name}.lora_dropout"), inputs=(source,)))
        source = f"{name}.lora_dropout"
    items += [
        Node(down(lora.rank, bias=False, name=f"{name}.lora_A"), inputs=(source,)),
        up(layer.units, bias=False, name=f"{name}.lora_B"),
        ConstantScale(lora.scaling, name=f"{name}.scaling"),
        Node(Add(name=name), inputs=(f"{name}.base_layer", f"{name}.scaling")),
    ]
    return items
