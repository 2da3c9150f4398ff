"""Context parallelism: the sequence split across devices, attention as a ring over them.

PyTorch's ``torch.distributed.tensor.experimental.context_parallel`` (PyTorch
2.13, ``torch/distributed/tensor/experimental/_context_parallel/``; the same
scheme as Megatron-LM's ``--context-parallel-size`` and torchtitan's CP)
shards the input, the labels and the position buffers along the sequence:
each of the ``N`` ranks runs every layer on ``S/N`` tokens, so each activation,
saved tensor and activation gradient is that of the step at sequence ``S/N``.
The model states stay whole on every rank (CP alone shards no weight,
gradient or optimizer state; torchtitan folds the CP ranks into FSDP's
sharding group, which is not modelled here). Only attention needs the other
ranks' tokens: ``_templated_ring_attention`` concatenates the local keys and
values (``torch.cat([key.flatten(), value.flatten()])``) and, with the default
``_RotateMethod.ALL_GATHER`` (``_attention.py:77``), all-gathers them once, so
the whole sequence's keys and values are in flight during one attention
layer's forward; its output is merged in fp32 (``convert_to_f32 = True``,
``_attention.py:74``). The backward gathers the keys and values again and
accumulates ``grad_query``, ``grad_key``, ``grad_value`` in fp32, rotating the
key/value gradients (a send and a receive buffer, fp32) with all-to-all.

The default load balancer (``_HeadTailLoadBalancer``, ``_load_balancer.py:148``)
cuts the sequence into ``2N`` chunks, which needs ``S`` divisible by ``2N``;
it balances causal attention only (``"Load balancing requires is_causal=True"``),
and the ring runs SDPA's flash, memory-efficient or cuDNN kernels, so eager
attention is not split.

Modelled, not measured (no multi-GPU run on CPU).

Examples
--------
>>> ring_buffers(heads_width=4096, activation_bytes=2, size=4)["backward"]
49152*B*S
>>> ring_buffers(heads_width=4096, activation_bytes=2, size=1)
{'forward': 0, 'backward': 0}
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.symbols import B, S

__all__ = ["FP32", "attention_width", "context_parallel", "ring_buffers"]

FP32 = 4
"""Bytes of the fp32 accumulators ring attention keeps (``convert_to_f32 = True``)."""

NOTE = (
    "context parallel (torch.distributed.tensor.experimental.context_parallel, ring attention "
    "with its default all-gather of keys and values and head-tail load balancing; Megatron's "
    "CP): each GPU runs every layer on S/N tokens, the model states stay whole, and one "
    "attention layer at a time holds the whole sequence's keys and values and fp32 "
    "accumulators (ring_attention_buffers); modelled, not measured"
)


def attention_width(network: Network) -> int:
    """Return the widest query/key width (heads x head_dim) of the network's attention layers.

    Keys and values are counted at the query heads' width: an upper bound for
    grouped-query attention whose keys and values are repeated to every head
    before the kernel.

    Raises
    ------
    UnsupportedError
        Without a Llama-style attention layer run by SDPA's fused kernels.

    Examples
    --------
    >>> from memtheory.models import from_config
    >>> attention_width(from_config("llama-3-8b", flash=True))  # 32 heads of 128
    4096
    """
    widths = []
    for row in network.rows:
        layer = row.layer
        heads, head_dim = getattr(layer, "heads", None), getattr(layer, "head_dim", None)
        if heads is None:
            continue
        if head_dim is None or not getattr(layer, "flash", False):
            raise UnsupportedError(
                f"context parallelism is modelled for Llama-style attention run by SDPA's "
                f"fused kernels (ring attention splits those); {row.name} is "
                f"{type(layer).__name__}{'' if getattr(layer, 'flash', False) else ' (eager)'}. "
                "Use a Llama-family model with --attention sdpa, or drop --cp."
            )
        widths.append(int(heads) * int(head_dim))
    if not widths:
        raise UnsupportedError(
            "context parallelism splits attention over the sequence, and this network has no "
            "attention layer: drop --cp."
        )
    return max(widths)


def ring_buffers(*, heads_width: int, activation_bytes: int, size: int) -> dict[str, sp.Expr]:
    """Return ring attention's buffers in one attention layer's forward and backward, in B, S.

    Forward: the all-gathered keys and values of the whole sequence, the local
    concatenation sent, and the fp32 merged output. Backward: the keys and
    values gathered again with the local concatenation, the fp32
    ``grad_query``/``grad_key``/``grad_value``, and the fp32 key/value
    gradients sent and received. Zero for ``size`` 1 (no ring).

    Examples
    --------
    >>> ring_buffers(heads_width=64, activation_bytes=2, size=2)["forward"]
    512*B*S
    """
    if size == 1:
        return {"forward": sp.Integer(0), "backward": sp.Integer(0)}
    w, b = sp.Integer(heads_width), sp.Integer(activation_bytes)
    local = B * S / size
    gathered = 2 * w * B * S * b + 2 * w * local * b
    forward = gathered + w * local * FP32
    backward = gathered + 3 * w * local * FP32 + 2 * (2 * w * local * FP32)
    return {"forward": sp.expand(forward), "backward": sp.expand(backward)}


def context_parallel(memory: MemoryBreakdown, network: Network, size: int) -> MemoryBreakdown:
    """Return one device's step under context parallelism of ``size`` (itself for 1).

    ``memory`` is one replica's step in ``B`` and ``S`` (the whole sequence);
    the result is the step at ``S/size`` with ring attention's buffers added
    at the attention layers' moments (:func:`ring_buffers`).

    Examples
    --------
    >>> from memtheory import training_memory
    >>> from memtheory.models import from_config
    >>> net = from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
    ...     "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 1,
    ...     "vocab_size": 256}, flash=True, loss=True)
    >>> step = training_memory(net, optimizer="adamw", precision="bf16", convention="autograd")
    >>> split = context_parallel(step, net, 4)
    >>> split["parameters"] == step["parameters"], "ring_attention_buffers" in split.components
    (True, True)
    """
    if size == 1:
        return memory
    buffers = ring_buffers(heads_width=attention_width(network),
                           activation_bytes=memory.precision.activations.bytes, size=size)
    attention = [row.name for row in network.rows if getattr(row.layer, "heads", None)]
    local = {S: S / size}

    def at_local(value: object) -> sp.Expr:
        return sp.sympify(value).subs(local)

    timeline = {}
    for moment, value in memory.timeline.items():
        phase, _, name = moment.partition(" ")
        extra = buffers[phase] if phase in buffers and name in attention else 0
        timeline[moment] = at_local(value) + extra
    components = {name: at_local(v) for name, v in memory.components.items()}
    components["ring_attention_buffers"] = buffers["backward"]
    parts = {moment: {k: at_local(v) for k, v in alive.items()}
             for moment, alive in memory.timeline_parts.items()}
    return replace(memory, components=components, timeline=timeline, timeline_parts=parts,
                   constraints={k: at_local(v) for k, v in memory.constraints.items()},
                   notes=(*memory.notes, NOTE))
