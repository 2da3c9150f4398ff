r"""How tensor (and sequence) parallelism shares a training step among its devices.

:func:`~memtheory.techniques.parallel_memory` asks this module what one of
:math:`t` tensor-parallel devices keeps of each component of a step:

* GPT-style networks (:class:`~memtheory.layers.MultiHeadAttention`): every
  model state divided by :math:`t`, the activations scaled by one layer's
  ratio as Korthikanti et al. 2022 derive it
  (:func:`tensor_parallel_activation_ratio`);
* Llama-style decoders (:class:`~memtheory.layers.GroupedQueryAttention`):
  tensor by tensor, through :mod:`~memtheory.techniques.tensor_parallel`
  (which matrices are split, which replicated).

Examples
--------
>>> from memtheory.models import gpt2
>>> tensor_parallel_activation_ratio(gpt2("small", sequence=1024), 2)
31/57
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy as sp

from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.layers import MultiHeadAttention
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.techniques.tensor_parallel import (
    activation_ratio,
    decoder_split,
    split_activations,
    split_parameters,
    split_storages,
)
from memtheory.transformer_activations import activation_bytes

__all__ = [
    "ACTIVATION_COMPONENTS",
    "MODEL_STATES",
    "TensorShare",
    "tensor_parallel_activation_ratio",
]

MODEL_STATES = (
    "parameters",
    "frozen_parameters",
    "quantization_constants",
    "dequantized_copy",
    "buffers",
    "gradients",
    "optimizer_state",
    "optimizer_step_counters",
    "master_weights",
    "master_gradients",
)
"""The model states: divided by the tensor-parallel degree, and by ZeRO as its stage says."""
ACTIVATION_COMPONENTS = (
    "activations", "activation_gradients", "saved_activations", "weight_copies",
)
"""The activation components: shared among tensor-parallel devices as the network's shape says."""


def _attention_shape(network: Network) -> tuple[sp.Expr, sp.Expr, sp.Expr, bool]:
    """Return ``(sequence, hidden, heads, flash)`` of the network's first attention layer."""
    for row in network.rows:
        layer = getattr(row.layer, "layer", row.layer)  # a frozen or adapted attention
        if isinstance(layer, MultiHeadAttention):
            return row.input_shape[-2], row.input_shape[-1], sp.sympify(layer.heads), layer.flash
    raise UnsupportedError(
        f"tensor and sequence parallelism are modelled for transformers (Korthikanti et al. "
        f"2022): GPT-style ones (MultiHeadAttention) and Llama-style decoders "
        f"(GroupedQueryAttention, built by memtheory.models.decoder or from_config); "
        f"{network.name!r} has neither."
    )


def tensor_parallel_activation_ratio(
    network: Network, tensor: int, *, sequence_parallel: bool = False
) -> sp.Expr:
    """Fraction of a transformer's activations a device keeps under tensor parallelism.

    For a GPT-style network (:class:`~memtheory.layers.MultiHeadAttention`):
    one layer's, derived from the layer's saved tensors
    (:func:`~memtheory.transformer_activations.activation_bytes`) at the
    network's sequence length, width and heads. For a Llama-style decoder
    (:class:`~memtheory.layers.GroupedQueryAttention`): the whole network's,
    tensor by tensor (:func:`~memtheory.techniques.tensor_parallel.activation_ratio`).

    Examples
    --------
    >>> from memtheory.models import gpt2
    >>> tensor_parallel_activation_ratio(gpt2("small", sequence=1024), 2)
    31/57
    >>> tensor_parallel_activation_ratio(gpt2("small", sequence=1024), 4, sequence_parallel=True)
    1/4
    """
    if _is_decoder(network):
        return activation_ratio(network, tensor, sequence_parallel=sequence_parallel)
    sequence, hidden, heads, flash = _attention_shape(network)
    recompute: Literal["none", "selective"] = "selective" if flash else "none"
    shape = {"sequence": sequence, "batch": 1, "hidden": hidden, "heads": heads}
    whole = activation_bytes(**shape, recompute=recompute)
    split = activation_bytes(
        **shape, tensor_parallel=tensor, sequence_parallel=sequence_parallel, recompute=recompute
    )
    return sp.simplify(split / whole)


def _is_decoder(network: Network) -> bool:
    """Whether ``network`` has grouped-query attention (a Llama-style decoder)."""
    return any(
        isinstance(getattr(row.layer, "layer", row.layer), GroupedQueryAttention)
        for row in network.rows
    )


def _per_token(ratio: sp.Expr) -> sp.Expr:
    """Return the ratio as the batch grows (the per-token tensors' share): a readable formula."""
    batch = next((x for x in ratio.free_symbols if x.name == "B"), None)
    return ratio if batch is None else sp.cancel(sp.limit(ratio, batch, sp.oo))


def _split_decoder(
    memory: MemoryBreakdown,
    network: Network,
    tensor: int,
    sequence_parallel: bool,
    base: dict[str, sp.Expr],
    state_share: dict[str, sp.Expr],
    activation_share: dict[str, sp.Expr],
) -> str:
    """Split a Llama-style decoder's step tensor by tensor (:mod:`.tensor_parallel`).

    Fills ``state_share`` (the share of each model state a device keeps) and
    either replaces the autograd convention's kept storages in ``base`` by their
    per-device sums or, for the breakdown convention, puts the saved-tensor
    share of the activations in ``activation_share``. Returns the note.
    """
    split = decoder_split(network, tensor, sequence_parallel=sequence_parallel)
    counts = split_parameters(network, split)
    shares = {
        key: (device / whole if whole else sp.S.One) for key, (whole, device) in counts.items()
    }
    for name in ("parameters", "gradients", "optimizer_state", "master_weights"):
        state_share[name] = shares["trainable"]
    for name in ("frozen_parameters", "quantization_constants"):
        state_share[name] = shares["frozen"]
    for name in ("buffers", "optimizer_step_counters"):  # rotary tables; one counter per tensor
        state_share[name] = sp.S.One
    sums: dict[str, tuple[sp.Expr, sp.Expr]] = {}
    if "saved_activations" in base:
        how = "the autograd convention's kept storages, each split or replicated"
        sums = split_storages(network, split, precision=memory.precision)
    elif "activations" in base:
        how = "the breakdown's activations and their gradients, layer by layer, split or replicated"
        whole, device = split_activations(network, split)
        for name in ("activations", "activation_gradients"):
            size = getattr(memory.precision, name).bytes
            sums[name] = (whole * size, device * size)
    exact = True
    for name, (whole, device) in sums.items():
        if name not in base:
            continue
        if sp.expand(whole - base[name]) == 0:
            base[name] = device
        else:  # the tensors do not add up to the component (checkpointing): scale it
            exact = False
            activation_share[name] = _per_token(
                activation_ratio(network, tensor, sequence_parallel=sequence_parallel)
            )
    if not exact:
        how = (
            "the component scaled by the share of the saved tensors one device keeps, per token "
            "(an approximation: the kept tensors are not those of a plain step)"
        )
    return (
        f"{split.describe()}: per device {float(shares['trainable']):.4%} of the weights, "
        f"gradients and optimizer state; activations from {how}; modelled, not measured (no "
        "GPU), communication buffers not counted"
    )


@dataclass(frozen=True)
class TensorShare:
    """How tensor (and sequence) parallelism shares each component among its devices.

    ``base`` holds the step's components (a Llama-style decoder's kept storages
    replaced by one device's sums), ``states`` each model state's share,
    ``activations`` each activation component's share, ``notes`` how they were
    found. :func:`~memtheory.techniques.parallel_memory` builds one with
    :meth:`of` and applies it stage by stage.

    Examples
    --------
    >>> from memtheory import training_memory
    >>> from memtheory.models import gpt2
    >>> small = gpt2("small", sequence=1024)
    >>> share = TensorShare.of(training_memory(small, optimizer="adam"), small, 2, False)
    >>> share.states["parameters"], share.activations["activations"]
    (1/2, 31/57)
    """

    base: dict[str, sp.Expr]
    states: dict[str, sp.Expr]
    activations: dict[str, sp.Expr]
    notes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, memory: MemoryBreakdown, network: Network | None, tensor: int,
        sequence_parallel: bool,
    ) -> TensorShare:
        """Return the shares for ``tensor`` devices (``network`` says the shape; ``None`` at 1)."""
        base = dict(memory.components)
        states: dict[str, sp.Expr] = {name: sp.Rational(1, tensor) for name in MODEL_STATES}
        activations: dict[str, sp.Expr] = {}
        if tensor == 1 and not sequence_parallel:
            return cls(base, states, activations)
        if network is None:
            raise InvalidArgumentError(
                "tensor/sequence parallelism splits activations as the transformer's shape "
                "says: pass network=... (the Network the memory was computed for)."
            )
        if _is_decoder(network):
            note = _split_decoder(
                memory, network, tensor, sequence_parallel, base, states, activations
            )
        else:
            ratio = tensor_parallel_activation_ratio(
                network, tensor, sequence_parallel=sequence_parallel
            )
            activations = dict.fromkeys(ACTIVATION_COMPONENTS, ratio)
            note = (
                f"tensor parallel over {tensor}"
                + (" with sequence parallelism" if sequence_parallel else "")
                + f": weights / {tensor}, activations x {ratio} (Korthikanti et al. 2022)"
            )
        return cls(base, states, activations, (note,))
