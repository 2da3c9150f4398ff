r"""Tensor and sequence parallelism for Llama-style decoders, tensor by tensor.

Megatron-LM's tensor parallelism over :math:`t` devices (Shoeybi et al. 2019)
splits each attention and MLP block into a *column-parallel* linear map
(every device computes a slice of the output features) followed by a
*row-parallel* one (every device reads its slice and the partial results are
summed by an all-reduce). For the decoders of
:func:`memtheory.models.decoder` (Llama, Mistral, Qwen2, Gemma, Mixtral) the
split is the one transformers' own ``base_model_tp_plan`` names for these
models: ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj`` and ``up_proj``
column-parallel, ``o_proj`` and ``down_proj`` row-parallel; a Mixtral
expert's gate/up and down maps likewise (Megatron's default without expert
parallelism); the token embedding and the output projection are split by
vocabulary rows (Megatron's vocab-parallel embedding and cross entropy).

Each tensor then falls in one of three classes, as Korthikanti et al. 2022
(Section 4.2) reason for the GPT layer:

* **split by** :math:`t`: everything between a column-parallel and its
  row-parallel map (the projections' outputs, the rotated queries and keys,
  the attention's saved copies, scores and probabilities, the gate, its
  activation, the up projection and their product), the weights of the split
  maps and their autocast copies, the logits and the cross entropy's
  log-probabilities;
* **replicated**: the rest, the RMS norms' inputs and statistics, the
  residual stream, the inputs of the column-parallel maps, the norms'
  weights;
* under **sequence parallelism** the replicated activations are split along
  the sequence instead (:math:`1/t` each), the inputs of the column-parallel
  maps included (Megatron keeps them split and gathers them again in the
  backward pass). The token ids, the labels and the rotary tables stay whole.

Grouped-query attention: the key/value heads are split over :math:`t` when
:math:`t` divides them; when :math:`t` is a multiple of them, each device
keeps a copy of the one key/value head its query heads read (the key and
value projections are replicated :math:`t / a_{kv}` times); otherwise the
split is refused. :math:`t` must divide the query heads and the MLP width.

What is derived here is an accounting of the tensors memtheory's layers
keep, split as above; it is modelled, not measured (no GPU was used), and
the communication buffers of the all-reduces and all-gathers are not counted.
Derived in the book's chapter "Distributed training".

Examples
--------
>>> from memtheory.models import DecoderConfig, decoder
>>> config = DecoderConfig(vocabulary=128, hidden=64, layers=1, heads=8, kv_heads=2,
...                        ffn_hidden=256)
>>> net = decoder(config, batch=2, sequence=16, loss=True)
>>> split = decoder_split(net, 4)
>>> split.kv_heads_per_device, split.kv_replicas
(1, 2)
>>> activation_ratio(net, 1), activation_ratio(net, 4, sequence_parallel=True) < 1
(1, True)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sympy as sp

from memtheory.conventions.autograd import forward_storages
from memtheory.dtypes import dtype
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.layers import Dense, Embedding, Input, Unembedding
from memtheory.layers.base import elements
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.moe import MixtureOfExperts
from memtheory.network import LayerRow, Network
from memtheory.precision import PrecisionLike

__all__ = [
    "COLUMN_PARALLEL",
    "ROW_PARALLEL",
    "DecoderSplit",
    "activation_ratio",
    "decoder_split",
    "split_activations",
    "split_parameters",
    "split_storages",
]

COLUMN_PARALLEL = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"
)
"""Column-parallel maps, as transformers' ``LlamaConfig.base_model_tp_plan`` marks them."""

ROW_PARALLEL = ("self_attn.o_proj", "mlp.down_proj")
"""Row-parallel maps (``"rowwise"`` in ``base_model_tp_plan``)."""

_INSIDE = ("self_attn.q_rotary", "self_attn.k_rotary", "self_attn.attention", "mlp.act_fn",
           "mlp.mul")
"""Layers between a column- and a row-parallel map: every tensor they make is split."""

_KEYS = ("self_attn.k_proj", "self_attn.v_proj", "self_attn.k_rotary")
_EXPERT_SPLIT = ("gate", "up", "act(gate)", "product")
"""A mixture of experts' tensors of the experts' width: split like a dense MLP's."""
_WHOLE_ROLES = ("data",)
_VOCAB_LOSS = ("logits cast", "log-probabilities")


def _base_name(name: str) -> str:
    return name.removesuffix(".base_layer")


def _lora(name: str) -> tuple[str, str] | None:
    """``(adapted map, part)`` for a LoRA row (``lora_A``, ``lora_B``, ``scaling``, ...)."""
    head, _, tail = name.rpartition(".")
    if tail in ("lora_A", "lora_B", "scaling", "lora_dropout") and _kind(head) in ("column",
                                                                               "row"):
        return head, tail
    return None


def _kind(name: str) -> str:
    """Return the Megatron role of a layer, by its Hugging Face name."""
    name = _base_name(name)
    if name.endswith(COLUMN_PARALLEL):
        return "column"
    if name.endswith(ROW_PARALLEL):
        return "row"
    if name.endswith(_INSIDE):
        return "inside"
    if name in ("model.embed_tokens", "lm_head", "loss"):
        return "vocabulary"
    if name == "model.rotary_emb" or name.startswith("model.rotary_emb."):  # OLMo 3: per kind
        return "whole"
    return "replicated"


@dataclass(frozen=True)
class DecoderSplit:
    """How tensor parallelism of size ``tensor`` splits one decoder's tensors.

    Attributes
    ----------
    tensor : int
        Tensor-parallel size :math:`t`.
    sequence_parallel : bool
    heads, kv_heads : int
        Query and key/value heads of the model.
    kv_heads_per_device : int
        Key/value heads each device keeps: :math:`a_{kv}/t`, or 1 when they are replicated.
    kv_replicas : int
        Devices that hold a copy of each key/value head (1: no replication).
    vocabulary : int
        Rows of the token embedding and of the output projection.

    Examples
    --------
    Llama-3-8B's 8 key/value heads over 16 devices: each device keeps one, held twice.

    >>> from memtheory.models import preset
    >>> split = decoder_split(preset("llama-3-8b", batch=1, sequence=8), 16)
    >>> split.kv_heads_per_device, split.kv_replicas, split.kv_share
    (1, 2, 1/8)
    >>> split.vocabulary_share  # 128256 rows split evenly over 16 devices
    1/16
    """

    tensor: int
    sequence_parallel: bool
    heads: int
    kv_heads: int
    kv_heads_per_device: int
    kv_replicas: int
    vocabulary: int

    @property
    def kv_share(self) -> sp.Expr:
        """Share of the key/value projections one device keeps."""
        return sp.Rational(self.kv_heads_per_device, self.kv_heads)

    @property
    def vocabulary_share(self) -> sp.Expr:
        """Share of the vocabulary rows one device keeps: ``ceil(V / t) / V``."""
        return sp.Rational(-(-self.vocabulary // self.tensor), self.vocabulary)

    @property
    def _replicated(self) -> sp.Expr:
        return sp.Rational(1, self.tensor) if self.sequence_parallel else sp.S.One

    def split_share(self, layer: str) -> sp.Expr:
        """Share of a split tensor made by ``layer``: :math:`1/t`, or the key/value share."""
        return self.kv_share if _base_name(layer).endswith(_KEYS) else sp.Rational(1, self.tensor)

    def storage_share(self, layer: str, role: str, label: str | None = None) -> sp.Expr:
        """Share of one activation storage (made by ``layer``, of ``role``) a device keeps.

        Examples
        --------
        >>> split = DecoderSplit(4, False, 32, 8, 2, 1, 128256)
        >>> split.storage_share("model.layers.0.mlp.gate_proj", "output")
        1/4
        >>> split.storage_share("model.layers.0.mlp.gate_proj", "input cast")
        1
        >>> split.storage_share("model.layers.0.add_1", "output")
        1
        """
        if role in _WHOLE_ROLES:
            return sp.S.One
        if role in ("weight copy", "bias copy"):
            return self.parameter_share(layer, "bias" if role == "bias copy" else "weight")
        lora = _lora(layer)
        if lora is not None:
            return self._lora_share(*lora)
        kind = _kind(layer)
        if kind == "column":
            return self.split_share(layer) if role == "output" else self._replicated
        if kind == "row":
            return sp.Rational(1, self.tensor) if role == "input cast" else self._replicated
        if kind == "inside":
            return self._inside_share(layer, role)
        if kind == "vocabulary":
            return self._vocabulary_storage_share(layer, role)
        if kind == "whole":
            return sp.S.One
        if label in _EXPERT_SPLIT:
            return sp.Rational(1, self.tensor)
        return self._replicated

    def _lora_share(self, adapted: str, part: str) -> sp.Expr:
        """Return an adapter storage's share: rank-r tensors and a row map's outputs replicate."""
        if part == "lora_A" or _kind(adapted) != "column":
            return self._replicated
        return self.split_share(adapted)

    def _inside_share(self, layer: str, role: str) -> sp.Expr:
        """Return the share of a storage inside attention or the MLP: as its heads or features."""
        if role == "input cast" and layer.endswith("self_attn.attention"):
            # queries', keys' or values' cast: the key/value share, the larger (exact unless
            # key/value heads are replicated, then an upper bound for the queries' cast)
            return self.kv_share
        return self.split_share(layer)

    def _vocabulary_storage_share(self, layer: str, role: str) -> sp.Expr:
        """Return the share of a vocabulary storage: the logits and the loss's are split."""
        if layer == "lm_head" and role == "output" or layer == "loss" and role in _VOCAB_LOSS:
            return self.vocabulary_share
        if layer == "loss":
            return sp.S.One  # the shifted labels, the count, the loss: whole on every device
        return self._replicated

    def parameter_share(self, layer: str, parameter: str) -> sp.Expr:
        """Share of one parameter tensor (``"weight"``, ``"bias"``, ...) a device keeps.

        Examples
        --------
        >>> split = DecoderSplit(16, False, 32, 8, 1, 2, 128256)
        >>> split.parameter_share("model.layers.0.self_attn.k_proj", "weight")
        1/8
        >>> split.parameter_share("model.layers.0.self_attn.o_proj", "bias")
        1
        >>> split.parameter_share("model.layers.0.input_layernorm", "weight")
        1
        """
        lora = _lora(layer)
        if lora is not None:
            adapted, part = lora
            column = _kind(adapted) == "column"
            if part == "lora_B" and column:
                return self.split_share(adapted)
            if part == "lora_A" and not column:
                return sp.Rational(1, self.tensor)
            return sp.S.One
        kind = _kind(layer)
        if kind == "column":
            return self.split_share(layer)
        if kind == "row":
            return sp.S.One if parameter == "bias" else sp.Rational(1, self.tensor)
        if kind == "vocabulary":
            return self.vocabulary_share
        if parameter.startswith("experts."):
            return sp.Rational(1, self.tensor)
        return sp.S.One

    def describe(self) -> str:
        """Return the split in words, for notes."""
        kv = (
            f"key/value heads {self.kv_heads} / {self.tensor} = {self.kv_heads_per_device} per "
            "device"
            if self.kv_replicas == 1
            else f"{self.kv_heads} key/value heads < t: each device keeps a copy of one "
            f"(replicated {self.kv_replicas} times)"
        )
        return (
            f"Megatron-style tensor parallel over {self.tensor} (q/k/v, gate and up "
            f"column-parallel, o and down row-parallel, as transformers' base_model_tp_plan; "
            f"embedding and LM head split by vocabulary, ceil({self.vocabulary}/{self.tensor}) "
            f"rows each; RMS norm weights replicated; {kv})"
            + (
                "; sequence parallel: norms, residual stream and inputs of the column-parallel "
                "maps split along the sequence"
                if self.sequence_parallel
                else ""
            )
        )


def _unwrapped(row: LayerRow) -> object:
    return getattr(row.layer, "layer", row.layer)


def _number(value: object, row: LayerRow) -> int:
    """Return a layer's size as a whole number; a symbolic one cannot be split."""
    size = sp.sympify(value)
    if not size.is_Integer:
        raise UnsupportedError(
            f"{row.name!r} has a symbolic size {size}: tensor parallelism needs its heads and "
            "widths as numbers; build the model with numbers for them."
        )
    return int(size)


def decoder_split(
    network: Network, tensor: int, *, sequence_parallel: bool = False
) -> DecoderSplit:
    """Check that ``tensor`` devices can split ``network`` (a decoder) and return the split.

    Raises
    ------
    UnsupportedError
        When :math:`t` does not divide the query heads or an MLP's width, or
        neither divides nor is a multiple of the key/value heads; or the
        network has no grouped-query attention with Hugging Face's layer names.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> net = decoder(DecoderConfig(vocabulary=100, hidden=48, layers=1, heads=6,
    ...                             ffn_hidden=96))
    >>> decoder_split(net, 4)
    Traceback (most recent call last):
    ...
    memtheory.errors.UnsupportedError: tensor parallel over 4 devices splits the query heads, ...
    """
    if isinstance(tensor, bool) or not isinstance(tensor, int) or tensor < 1:
        raise InvalidArgumentError(f"tensor must be a positive whole number, got {tensor!r}.")
    attention = [row for row in network.rows if isinstance(_unwrapped(row), GroupedQueryAttention)]
    if not attention:
        raise UnsupportedError(
            f"{network.name!r} has no GroupedQueryAttention layer: the Llama-style tensor "
            "parallel split reads a decoder built by memtheory.models.decoder or from_config."
        )
    heads = kv_heads = 0
    vocabulary = 0
    for row in network.rows:
        layer = _unwrapped(row)
        name = _base_name(row.name)
        if isinstance(layer, GroupedQueryAttention):
            heads, kv_heads = _number(layer.heads, row), _number(layer.kv_heads, row)
            if not name.endswith("self_attn.attention"):
                raise UnsupportedError(
                    f"{row.name!r}: the tensor parallel split follows Hugging Face's module "
                    "names (self_attn.q_proj, ..., mlp.down_proj); build the model with "
                    "memtheory.models.decoder or from_config."
                )
            if heads % tensor:
                raise UnsupportedError(
                    f"tensor parallel over {tensor} devices splits the query heads, but "
                    f"{row.name!r} has {heads}; use a tensor-parallel size that divides {heads}."
                )
            if kv_heads % tensor and tensor % kv_heads:
                raise UnsupportedError(
                    f"tensor parallel over {tensor} devices cannot share {kv_heads} key/value "
                    f"heads ({row.name!r}): t must divide them or be a multiple of them; use a "
                    "tensor-parallel size that divides or is a multiple of "
                    f"{kv_heads}."
                )
        elif isinstance(layer, MixtureOfExperts) or (
            isinstance(layer, Dense) and name.endswith(("mlp.gate_proj", "mlp.up_proj"))
        ):
            width = layer.ffn_hidden if isinstance(layer, MixtureOfExperts) else layer.units
            if _number(width, row) % tensor:
                raise UnsupportedError(
                    f"tensor parallel over {tensor} devices splits the MLP's width, but "
                    f"{row.name!r} is {width} wide; use a tensor-parallel size that divides "
                    f"{width}."
                )
        elif isinstance(layer, Embedding | Unembedding):
            vocabulary = _number(layer.num_embeddings, row)
        elif isinstance(layer, Dense) and _kind(name) == "replicated" and _lora(name) is None:
            raise UnsupportedError(
                f"{row.name!r} is a linear map the tensor parallel plan does not name (it "
                "knows q/k/v/o_proj, gate/up/down_proj and lm_head); build the model with "
                "memtheory.models.decoder or from_config."
            )
    per_device = max(kv_heads // tensor, 1)
    return DecoderSplit(
        tensor, sequence_parallel, heads, kv_heads, per_device,
        1 if kv_heads % tensor == 0 else tensor // kv_heads, vocabulary,
    )


def split_storages(
    network: Network, split: DecoderSplit, *, precision: PrecisionLike = "fp32"
) -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """Sum the autograd convention's kept storages, whole and on one device, per component.

    Returns ``{"saved_activations": (whole, per_device), "weight_copies": (...)}``
    from :func:`~memtheory.conventions.autograd.forward_storages`: each storage
    the backward keeps, in bytes, times its :meth:`DecoderSplit.storage_share`.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> config = DecoderConfig(vocabulary=128, hidden=64, layers=1, heads=8, ffn_hidden=256)
    >>> net = decoder(config, batch=2, sequence=16, loss=True)
    >>> whole, device = split_storages(net, decoder_split(net, 1))["saved_activations"]
    >>> whole == device
    True
    """
    sums: dict[str, tuple[sp.Expr, sp.Expr]] = {}
    for storage in forward_storages(network, precision=precision):
        category = storage.category
        if category not in ("saved_activations", "weight_copies"):
            continue
        share = split.storage_share(storage.layer, storage.role)
        whole, device = sums.get(category, (sp.S.Zero, sp.S.Zero))
        sums[category] = (whole + storage.nbytes, device + storage.nbytes * share)
    return {name: (sp.expand(w), sp.expand(d)) for name, (w, d) in sums.items()}


def split_activations(network: Network, split: DecoderSplit) -> tuple[sp.Expr, sp.Expr]:
    """Count the breakdown convention's activation elements, whole and on one device.

    Each row's activations (its output, and the intermediates a layer counts
    with it) times the share of its output; a mixture of experts' intermediates
    by their own share (the experts' width split, the router's whole); the
    loss's per-token log-probabilities by the vocabulary share.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> config = DecoderConfig(vocabulary=128, hidden=64, layers=1, heads=8, ffn_hidden=256,
    ...                        experts=4, top_k=2)
    >>> net = decoder(config, batch=2, sequence=16)
    >>> whole, device = split_activations(net, decoder_split(net, 1))
    >>> whole == device == net.activation_count
    True
    """
    whole = device = sp.S.Zero
    for row in network.rows:
        if isinstance(row.layer, Input):
            continue  # the input batch, counted apart
        count = sp.sympify(row.activations)
        layer = _unwrapped(row)
        whole += count
        if isinstance(layer, MixtureOfExperts):
            kept = [s for s in layer.saved_for_backward(row.input_shape)
                    if s.role == "intermediate" and s.dtype is None]
            inner = sum((s.elements for s in kept), sp.S.Zero)
            device += (count - inner) * split.storage_share(row.name, "output")
            device += sum((s.elements * split.storage_share(row.name, s.role, s.label)
                           for s in kept), sp.S.Zero)
        elif row.name == "loss":  # vocab-parallel cross entropy: the per-token part split
            scalar, per_token = sp.expand(count).as_coeff_Add()
            device += scalar + per_token * split.vocabulary_share
        else:
            device += count * split.storage_share(row.name, "output")
    return sp.expand(whole), sp.expand(device)


def _parameters(row: LayerRow) -> Iterable[tuple[str, sp.Expr, bool]]:
    """``(name, elements, frozen)`` of each parameter tensor of a row."""
    layer = row.layer
    inner = getattr(layer, "layer", None)
    frozen = inner is not None and type(layer).__name__ == "Frozen"
    source = inner if frozen else layer
    for name, shape in source.parameter_shapes(row.input_shape):  # type: ignore[union-attr]
        yield name, elements(shape), frozen


def split_parameters(network: Network, split: DecoderSplit) -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """Count parameter elements, whole and on one device: trainable and frozen.

    Returns ``{"trainable": (whole, per_device), "frozen": (whole, per_device)}``.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> config = DecoderConfig(vocabulary=128, hidden=64, layers=1, heads=8, ffn_hidden=256)
    >>> net = decoder(config)
    >>> whole, device = split_parameters(net, decoder_split(net, 4))["trainable"]
    >>> whole == net.parameter_count, whole - 4 * device   # norms: 3 x 64, replicated
    (True, -576)
    """
    counts = {"trainable": [sp.S.Zero, sp.S.Zero], "frozen": [sp.S.Zero, sp.S.Zero]}
    for row in network.rows:
        for name, count, frozen in _parameters(row):
            entry = counts["frozen" if frozen else "trainable"]
            entry[0] += count
            entry[1] += count * split.parameter_share(row.name, name)
    return {key: (sp.expand(w), sp.expand(d)) for key, (w, d) in counts.items()}


def activation_ratio(network: Network, tensor: int, *, sequence_parallel: bool = False) -> sp.Expr:
    """Share of a decoder's kept activations one device keeps, from its saved tensors.

    Every tensor of :meth:`~memtheory.network.Network.saved_tensors` (each
    storage once), in 16 bits (masks and indices in their own dtype), times its
    :meth:`DecoderSplit.storage_share`, over the same sum undivided: the
    Llama-style counterpart of Korthikanti et al.'s per-layer ratio, for the
    whole network (embedding and logits included). Exactly 1 for :math:`t = 1`
    without sequence parallelism.

    Examples
    --------
    >>> from memtheory.models import DecoderConfig, decoder
    >>> config = DecoderConfig(vocabulary=128, hidden=64, layers=2, heads=8, ffn_hidden=256)
    >>> net = decoder(config, batch=2, sequence=16)
    >>> activation_ratio(net, 1)
    1
    >>> ratio = activation_ratio(net, 2, sequence_parallel=True)
    >>> 0 < ratio - sp.Rational(1, 2) < sp.Rational(1, 100)   # token ids and rotary tables whole
    True
    """
    split = decoder_split(network, tensor, sequence_parallel=sequence_parallel)
    low = dtype("bf16")
    fed = {row.name for row in network.rows if isinstance(row.layer, Input)}
    whole = device = sp.S.Zero
    for saved in network.saved_tensors():
        nbytes = saved.nbytes(low)
        role: str = "output" if saved.spec.role == "input" else saved.spec.role
        role = "data" if saved.owner in fed else role
        whole += nbytes
        device += nbytes * split.storage_share(saved.owner, role, saved.spec.label)
    return sp.cancel(device / whole)
