r"""One device's peak under Megatron-style tensor and pipeline parallelism (1F1B): an estimate.

For a GPT-style transformer of :math:`L` layers, width :math:`h`, :math:`a`
heads, a vocabulary of :math:`V`, micro-batches of :math:`b` sequences of
:math:`s` tokens, split over :math:`t` tensor-parallel devices and :math:`p`
pipeline stages (Megatron-LM), the device of stage :math:`i` (from 0) holds,
at the start of its first backward pass of a step:

* **model states**: its :math:`L/p` layers' parameters, the matrices and the
  biases of the column-parallel maps split by :math:`t`, the row-parallel
  maps' biases and the layer norms replicated, per layer
  :math:`(12h^2 + 7h)/t + 6h` (Shoeybi et al. 2019, Section 3); the first
  stage also the vocabulary-parallel word embedding (:math:`Vh/t`) and the
  position embedding (:math:`sh`, replicated), the last stage its own copy of
  the word embedding for the output projection and the final layer norm
  (:math:`2h`) (Narayanan et al. 2021, Section 2.2). Each parameter costs
  ``state_bytes`` (16 by default: fp16 weight and gradient, fp32 master copy
  and Adam's two moments, Rajbhandari et al. 2020);
* **kept activations**: under the 1F1B schedule (Narayanan et al. 2021,
  Section 2.2.1) stage :math:`i` has run the forward pass of
  :math:`\min(p - i, m)` micro-batches before its first backward, and keeps
  each one's activations of its :math:`L/p` layers, per layer and
  micro-batch Korthikanti et al. 2022's bytes (Table 2:
  :math:`sbh(10 + 24/t + 5as/(ht))`, :math:`sbh/t\,(34 + 5as/h)` with
  sequence parallelism, selective or full recomputation;
  :func:`~memtheory.transformer_activations.activation_bytes` derives them).
  The first stage thus keeps :math:`L` layers' worth whatever :math:`p`
  (their Section 4.2.3);
* **the backward's working memory** of the layer being differentiated: the
  gradient of the layer's output (:math:`2sbh`, :math:`/t` with sequence
  parallelism), and gradients of its kept tensors, taken as at most as large
  as the tensors themselves (one layer's kept bytes, for one micro-batch);
  under full recomputation the recomputed layer's tensors (kept as without
  recomputation) as well;
* **communication buffers**: the tensor-parallel all-reduces run in place on
  their output (none); with sequence parallelism the backward gathers the
  column-parallel maps' input again to form the weight gradients
  (:math:`2sbh` whole, Korthikanti et al. 2022, Section 4.2.2).

The sum is an **estimate**, not a bound: it assumes an even split of the
layers (refused otherwise), 16-bit activations, the working-memory rule
above, no interleaved schedule, and leaves out the embeddings' and the
output layer's activations (the logits and the cross entropy on the last
stage, the embedding's dropout mask on the first), the framework's
workspaces and the CUDA context. Modelled from the papers, not measured (no
multi-GPU run).

Examples
--------
>>> peak = megatron_device_peak(layers=24, hidden=1024, heads=16, sequence=1024,
...                             micro_batch=1, vocabulary=50304, tensor=2, pipeline=4)
>>> peak.in_flight, peak.parts["kept activations"] == 4 * 6 * 1024 * 1024 * (10 + 12 + 40)
(4, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.errors import InvalidArgumentError
from memtheory.transformer_activations import Recompute, activation_bytes

__all__ = ["MegatronPeak", "STATE_BYTES", "megatron_device_peak"]

STATE_BYTES = 16
"""Bytes per parameter of mixed-precision Adam: fp16 weight and gradient, fp32 copy, m, v."""

_PEAK_PARTS = ("model states", "kept activations", "backward working memory",
               "communication buffers")


@dataclass(frozen=True)
class MegatronPeak:
    """One device's estimated peak under tensor and pipeline parallelism, in bytes.

    Attributes
    ----------
    peak : int
        The sum of the parts of :data:`_PEAK_PARTS` (an estimate).
    parts : dict of str to int
        ``"model states"``, ``"kept activations"``, ``"backward working
        memory"``, ``"communication buffers"``, and for reference
        ``"parameters"`` (the device's count) and ``"activations per layer"``
        (one layer, one micro-batch, on this device).
    in_flight : int
        Micro-batches whose activations the stage keeps at once.
    assumed : tuple of str
        What the estimate takes for granted, one line each.

    Examples
    --------
    >>> found = megatron_device_peak(layers=2, hidden=8, heads=2, sequence=4, micro_batch=1,
    ...                              vocabulary=16)
    >>> isinstance(found, MegatronPeak), found.in_flight
    (True, 1)
    """

    peak: int
    parts: dict[str, int]
    in_flight: int
    assumed: tuple[str, ...]


def _whole(name: str, value: object, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidArgumentError(
            f"{name} must be a whole number of at least {least}, got {value!r}.")
    return value


def _stage_parameters(layers: int, hidden: int, vocabulary: int, sequence: int, tensor: int,
                      pipeline: int, stage: int) -> int:
    """Parameters one device of ``stage`` holds: its layers, and the embeddings at the ends."""
    split, replicated = 12 * hidden * hidden + 7 * hidden, 6 * hidden
    count = layers // pipeline * (split // tensor + replicated)
    if stage == 0:
        count += vocabulary * hidden // tensor + sequence * hidden
    if stage == pipeline - 1:
        count += (vocabulary * hidden // tensor if pipeline > 1 else 0) + 2 * hidden
    return count


def megatron_device_peak(
    *,
    layers: int,
    hidden: int,
    heads: int,
    sequence: int,
    micro_batch: int,
    vocabulary: int,
    tensor: int = 1,
    pipeline: int = 1,
    micro_batches: int | None = None,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
    stage: int = 0,
    state_bytes: int = STATE_BYTES,
) -> MegatronPeak:
    """Return the estimated peak of one device of ``stage`` (1F1B, Megatron-style splits).

    Parameters
    ----------
    layers, hidden, heads, sequence, micro_batch, vocabulary : int
        The papers' :math:`L, h, a, s, b, V`.
    tensor : int, default 1
        Tensor-parallel devices :math:`t`; must divide ``hidden``, ``heads``
        and ``vocabulary``.
    pipeline : int, default 1
        Pipeline stages :math:`p`; must divide ``layers``.
    micro_batches : int, optional
        Micro-batches per step :math:`m` (default :math:`p`).
    sequence_parallel : bool, default False
    recompute : {"none", "selective", "full"}, default "none"
    stage : int, default 0
        Which stage (0: the first, which keeps the most activations).
    state_bytes : int, default :data:`STATE_BYTES`
        Bytes per parameter of the model states.

    Returns
    -------
    MegatronPeak

    Raises
    ------
    InvalidArgumentError
        A size that is not a positive whole number, a split that does not
        divide what it splits, or a stage outside the pipeline.

    Examples
    --------
    >>> one = megatron_device_peak(layers=2, hidden=8, heads=2, sequence=4, micro_batch=1,
    ...                            vocabulary=16)
    >>> one.peak == sum(one.parts[k] for k in ("model states", "kept activations",
    ...     "backward working memory", "communication buffers"))
    True
    """
    sizes = {"layers": layers, "hidden": hidden, "heads": heads, "sequence": sequence,
             "micro_batch": micro_batch, "vocabulary": vocabulary, "tensor": tensor,
             "pipeline": pipeline, "state_bytes": state_bytes}
    for name, value in sizes.items():
        _whole(name, value)
    for name, value, by in (("layers", layers, pipeline), ("hidden", hidden, tensor),
                            ("heads", heads, tensor), ("vocabulary", vocabulary, tensor)):
        if value % by:
            raise InvalidArgumentError(
                f"{name}={value} is not divisible by {by}: the estimate assumes an even split "
                "(Megatron refuses an uneven one); choose sizes that divide.")
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pipeline:
        raise InvalidArgumentError(f"stage must be a whole number from 0 to {pipeline - 1}, "
                                   f"got {stage!r}.")
    if recompute not in ("none", "selective", "full"):
        raise InvalidArgumentError(
            f"recompute must be 'none', 'selective' or 'full', got {recompute!r}.")
    chosen = pipeline if micro_batches is None else _whole("micro_batches", micro_batches)
    in_flight = min(pipeline - stage, chosen)
    def kept(how: Recompute) -> int:
        return int(activation_bytes(sequence=sequence, batch=micro_batch, hidden=hidden,
                                    heads=heads, tensor_parallel=tensor,
                                    sequence_parallel=sequence_parallel, recompute=how))

    per_layer, kept_whole = kept(recompute), kept("none")
    hidden_state = 2 * sequence * micro_batch * hidden
    working = (kept_whole if recompute == "full" else per_layer) + (
        hidden_state // tensor if sequence_parallel else hidden_state)
    if recompute == "full":
        working += kept_whole  # the recomputed layer's tensors, alive with their gradients
    buffers = hidden_state if sequence_parallel and tensor > 1 else 0
    parameters = _stage_parameters(layers, hidden, vocabulary, sequence, tensor, pipeline,
                                   stage)
    parts = {
        "model states": parameters * state_bytes,
        "kept activations": in_flight * (layers // pipeline) * per_layer,
        "backward working memory": working,
        "communication buffers": buffers,
        "parameters": parameters,
        "activations per layer": per_layer,
    }
    assumed = (
        f"Megatron-style tensor parallel over {tensor}"
        + (" with sequence parallelism" if sequence_parallel else "")
        + f", pipeline of {pipeline} stages (1F1B, not interleaved), stage {stage}: "
        f"{in_flight} micro-batch(es) in flight (Narayanan et al. 2021)",
        f"activations per layer: Korthikanti et al. 2022, recompute {recompute}, 16-bit "
        "activations; the embeddings' and output layer's activations not counted",
        f"model states: {state_bytes} bytes per parameter",
        "backward working memory: the layer output's gradient and at most one layer's kept "
        "bytes of gradients (an assumption, not a bound)",
        "all-reduces in place; with sequence parallelism one all-gathered layer input",
        "an estimate, modelled from the papers, not measured: no workspace, no CUDA context",
    )
    peak = sum(parts[name] for name in _PEAK_PARTS)
    return MegatronPeak(peak=peak, parts=parts, in_flight=in_flight, assumed=assumed)
