r"""Serving a language model with vLLM: weights, paged KV cache, working memory, concurrency.

:func:`serving_memory` answers the inference questions ``memtheory estimate``
(one training step) does not: how much a served model's weights take per GPU,
how much key/value cache one sequence of :math:`L` tokens needs, what a
prefill and a decoding step need on top, and how many sequences of
:math:`L` tokens fit the card at once.

What is modelled is vLLM's documented behaviour (https://docs.vllm.ai, engine
arguments ``gpu_memory_utilization``, ``block_size``, ``max_num_batched_tokens``
and ``max_num_seqs``; the startup log's "# GPU blocks" and "Maximum
concurrency"), not measured, and not read from vLLM's source:

* vLLM may use ``gpu_memory_utilization`` (default 0.9) of the GPU's memory.
  From that it subtracts the weights, the peak of a profiling forward pass of
  ``max_num_batched_tokens`` tokens (default 8192 here) and the memory outside
  PyTorch's tensors (CUDA context, NCCL, CUDA graphs: ``reserve``, default
  1.5 GiB as :data:`memtheory.gpus.DEFAULT_RESERVE`), and pre-allocates all of
  the rest as KV-cache blocks of ``block_size`` (16) tokens each, in every
  attention layer;
* a sequence of :math:`L` tokens takes :math:`\lceil L/16 \rceil` blocks, so
  at most :math:`\lfloor \text{blocks} / \lceil L/16 \rceil \rfloor` such
  sequences are cached at once (vLLM's log prints the same ratio unrounded);
* with tensor parallelism over :math:`t` GPUs each GPU keeps :math:`1/t` of
  the query heads, of the MLP width and of the vocabulary rows (vLLM's
  column/row-parallel layers and vocab-parallel embedding, as
  :mod:`memtheory.techniques.tensor_parallel` splits them), the key/value
  heads :math:`a_{kv}/t` (or one copy when :math:`t > a_{kv}`), and a whole
  residual stream; every figure here is per GPU;
* the profiling pass is modelled by
  :func:`~memtheory.techniques.working_memory.working_memory` with a
  memory-efficient attention kernel (no :math:`S^2` tensor; vLLM runs
  FlashAttention) over one chunk of ``max_num_batched_tokens`` tokens, and the
  sampler's ``max_num_seqs`` (256) rows of logits in the model's dtype, their
  fp32 copy and fp32 probabilities; a decoding step's working memory is the
  same function's, for the batch of one token per sequence.

Weights come in 16-bit, int8, GPTQ (``int4``, ``gptq``), AWQ or NF4
(:data:`~memtheory.estimate.serving_model.WEIGHT_FORMATS`); only the linear
maps inside the decoder layers are quantised, the embedding, the norms and
``lm_head`` stay 16-bit. GGUF mixes (``gguf-q4_k_m``, ``gguf-q8_0``, ...)
count every tensor as llama.cpp stores it in the file
(:mod:`~memtheory.estimate.serving_gguf`), the runtime by vLLM's rule.
Each model's share of a GPU is derived by
:func:`~memtheory.estimate.serving_model.served_model`, which says where each
format's layout comes from.

A draft model for speculative decoding (``draft=``) adds its weights (in the
compute dtype), its KV cache per sequence (same context, same cache dtype,
same tensor-parallel split) and its profiling pass (run after the target's,
so the larger of the two counts).

Examples
--------
>>> answer = serving_memory("llama-3.1-70b", context=32768, weights="bf16", gpu="H200", tensor=2)
>>> answer.kv_per_sequence == 2 * 80 * (8 // 2) * 128 * 2 * 32768   # per GPU: 4 KV heads
True
>>> answer.format("GiB", name="weights")
'65.71 GiB'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import sympy as sp

from memtheory.errors import InvalidArgumentError
from memtheory.estimate.serving_model import ServedModel, kv_format, served_model, weight_format
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.gpus import DEFAULT_RESERVE, ReserveLike, usable_memory
from memtheory.symbols import B
from memtheory.units import format_bytes, parse_bytes

__all__ = [
    "DEFAULT_BATCHED_TOKENS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MAX_SEQUENCES",
    "DEFAULT_UTILIZATION",
    "ServingMemory",
    "serving_memory",
]

DEFAULT_UTILIZATION = sp.Rational(9, 10)
"""vLLM's default ``gpu_memory_utilization``."""

DEFAULT_BLOCK_SIZE = 16
"""vLLM's default ``block_size``: tokens per KV-cache block."""

DEFAULT_BATCHED_TOKENS = 8192
"""Tokens of the profiling forward pass (``max_num_batched_tokens``; vLLM's value varies)."""

DEFAULT_MAX_SEQUENCES = 256
"""vLLM's default ``max_num_seqs``: rows of logits the profiled sampler holds."""

@dataclass(frozen=True)
class ServingMemory(Footprint):
    """One GPU's memory serving a language model: weights, KV cache, working memory.

    A :class:`~memtheory.footprint.Footprint` with components ``weights``,
    ``kv_cache`` (``batch`` sequences of ``context`` tokens, in whole blocks)
    and ``activations`` (the larger of the profiled prefill pass and a
    decoding step); its timeline has the two moments ``prefill`` and
    ``decode``. Every figure is per GPU.

    Attributes
    ----------
    model : str
    context : int
        Tokens per sequence :math:`L` (prompt plus generated).
    batch : int
        Concurrent sequences counted: the one asked, or :attr:`max_concurrency`.
    weights : sympy.Integer
        Bytes of the weights (the draft's included).
    kv_per_sequence : sympy.Integer
        Bytes of one sequence's cache, in whole blocks (the draft's included).
    block_bytes : sympy.Integer
        Bytes of one block of ``block_size`` tokens over every attention layer.
    prefill : sympy.Integer
        The profiled forward pass's (and sampler's) working memory.
    decode : sympy.Expr
        A decoding step's working memory, in the batch ``B``.
    device, memory : str and sympy.Rational or None
        The card (or limit) and its bytes; None without one.
    utilization, reserve : sympy.Rational
    block_size, tensor, batched_tokens, max_sequences : int
    weights_format, kv_format, compute : str
    draft : str or None
    max_concurrency, blocks : int or None
        vLLM's largest number of sequences of ``context`` tokens, and its
        number of KV-cache blocks; None without a card.
    assumptions : tuple of str

    Examples
    --------
    >>> small = serving_memory("llama-3-8b", context=4096, gpu="L4")
    >>> small.fits, small.batch == small.max_concurrency
    (True, True)
    """

    model: str
    context: int
    batch: int
    weights: sp.Expr
    kv_per_sequence: sp.Expr
    block_bytes: sp.Expr
    prefill: sp.Expr
    decode: sp.Expr
    device: str | None
    memory: sp.Rational | None
    utilization: sp.Rational
    reserve: sp.Rational
    block_size: int
    tensor: int
    batched_tokens: int
    max_sequences: int
    weights_format: str
    kv_format: str
    compute: str
    draft: str | None = None
    max_concurrency: int | None = None
    blocks: int | None = None
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def components(self) -> Mapping[str, sp.Expr]:
        """``weights``, ``kv_cache`` and ``activations`` in bytes, per GPU."""
        return {
            "weights": self.weights,
            "kv_cache": self.batch * self.kv_per_sequence,
            "activations": sp.Max(self.prefill, self._decode_now),
        }

    @property
    def timeline(self) -> Mapping[str, sp.Expr]:  # type: ignore[override]
        """The profiled prefill pass and a decoding step, beside the weights and the cache."""
        held = self.weights + self.batch * self.kv_per_sequence
        return {"prefill": held + self.prefill, "decode": held + self._decode_now}

    @property
    def _decode_now(self) -> sp.Expr:
        return sp.sympify(self.decode).subs(B, self.batch)

    @property
    def budget(self) -> sp.Rational | None:
        """What vLLM may use: ``utilization x memory - reserve``; None without a card."""
        if self.memory is None:
            return None
        return self.utilization * self.memory - self.reserve

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the budget (and ``batch`` >= 1); None without a card."""
        budget = self.budget
        if budget is None:
            return None
        return bool(self.batch >= 1 and self.peak <= budget)

    def evaluate(self, **values: object) -> ServingMemory:
        """Return itself: every figure is a number already."""
        return self

    def report(self, unit: str = "GiB") -> str:
        """Return the answer as text: settings, table, blocks, concurrency, assumptions.

        Examples
        --------
        >>> print(serving_memory("llama-3-8b", context=4096, gpu="L4").report())
        ... # doctest: +ELLIPSIS
        llama-3-8b serving 4096-token sequences on L4 (vLLM's rule, modelled)
        ...
        """
        lines = [
            f"{self.model} serving {self.context}-token sequences"
            + (f" on {self.device}" if self.device else " (no card named)")
            + (f" x {self.tensor} (tensor parallel)" if self.tensor > 1 else "")
            + " (vLLM's rule, modelled)",
            f"weights {self.weights_format}, KV cache {self.kv_format}, compute {self.compute}, "
            f"block size {self.block_size}"
            + (f", draft {self.draft}" if self.draft else ""),
            "",
            "per GPU:",
            _row("weights", _size(self.weights, unit)),
            _row("KV cache per sequence", _size(self.kv_per_sequence, unit),
                 f"{-(-self.context // self.block_size)} blocks of {self.block_size} tokens"),
            _row(f"KV cache, {self.batch} sequences",
                 _size(self.batch * self.kv_per_sequence, unit)),
            _row("prefill working memory", _size(self.prefill, unit),
                 f"profiled pass of {self.batched_tokens} tokens"),
            _row("decode working memory", _size(self._decode_now, unit),
                 f"{self.batch} tokens, one per sequence"),
            _row(f"peak ({self.peak_moment})", _size(self.peak, unit)),
        ]
        budget = self.budget
        if budget is not None and self.memory is not None:
            lines += [
                "",
                f"budget: {float(self.utilization):g} x {_size(self.memory, unit)} - "
                f"{_size(self.reserve, unit)} reserve = {_size(budget, unit)}",
                f"KV-cache blocks: {self.blocks} of {format_bytes(self.block_bytes, 'MiB')} each",
                f"max concurrency at {self.context} tokens: {self.max_concurrency} sequences",
                "fits" if self.fits else "does NOT fit: " + self._why_not(),
            ]
        lines += ["", "assumed:", *(f"  {a}" for a in self.assumptions)]
        return "\n".join(lines)

    def _why_not(self) -> str:
        if self.max_concurrency == 0:
            # tensor-parallel serving of latent attention is refused (serving_model)
            latent = any(a.startswith("latent attention") for a in self.assumptions)
            return (
                "the weights and the working memory leave no room for one sequence's KV "
                "cache; use a smaller weight format, "
                + ("" if latent else "more GPUs (--tp), ")
                + "a shorter context or a larger card"
            )
        return (
            f"{self.batch} sequences need more than the budget; at most "
            f"{self.max_concurrency} fit"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary: bytes as integers, per GPU."""
        budget = self.budget
        return {
            "model": self.model,
            "context": self.context,
            "batch": self.batch,
            "settings": {
                "weights": self.weights_format,
                "kv_cache": self.kv_format,
                "compute": self.compute,
                "block_size": self.block_size,
                "tensor": self.tensor,
                "utilization": float(self.utilization),
                "max_num_batched_tokens": self.batched_tokens,
                "max_num_seqs": self.max_sequences,
                "draft": self.draft,
            },
            "components": {name: int(value) for name, value in self.components.items()},
            "component_titles": {n: COMPONENT_TITLES.get(n, n) for n in self.components},
            "weights_bytes": int(self.weights),
            "kv_per_sequence_bytes": int(self.kv_per_sequence),
            "kv_cache_bytes": int(self.batch * self.kv_per_sequence),
            "prefill_bytes": int(self.prefill),
            "decode_bytes": int(self._decode_now),
            "peak_bytes": int(self.peak),
            "peak_moment": self.peak_moment,
            "budget": None
            if budget is None or self.memory is None
            else {
                "device": self.device,
                "memory_bytes": int(self.memory),
                "reserve_bytes": int(self.reserve),
                "usable_bytes": int(budget),
            },
            "block_bytes": int(self.block_bytes),
            "blocks": self.blocks,
            "blocks_per_sequence": -(-self.context // self.block_size),
            "max_concurrency": self.max_concurrency,
            "fits": self.fits,
            "assumptions": list(self.assumptions),
        }


def _row(label: str, size: str, note: str = "") -> str:
    return f"  {label:<28}{size:>28}" + (f"  {note}" if note else "")


def _size(value: object, unit: str) -> str:
    return f"{format_bytes(sp.sympify(value), unit)} ({format_bytes(sp.sympify(value), 'GB')})"


def serving_memory(
    model: str | Mapping[str, Any],
    *,
    context: int,
    batch: int | str | None = "auto",
    weights: str | None = None,
    kv_cache: str | None = None,
    gpu: str | None = None,
    limit: ReserveLike | None = None,
    utilization: float | str | sp.Expr = DEFAULT_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    tensor: int = 1,
    reserve: ReserveLike = DEFAULT_RESERVE,
    batched_tokens: int = DEFAULT_BATCHED_TOKENS,
    max_sequences: int = DEFAULT_MAX_SEQUENCES,
    draft: str | Mapping[str, Any] | None = None,
) -> ServingMemory:
    """Per-GPU memory of serving ``model`` with vLLM, and how many sequences fit (module doc).

    Parameters
    ----------
    model : str or mapping
        A preset (``"llama-3.1-70b"``), a ``config.json`` path or a config
        dict, or a built-in model, as :func:`~memtheory.estimate.resolve_model`.
    context : int
        Tokens per sequence (``max_model_len``).
    batch : int or "auto", default "auto"
        Concurrent sequences; "auto" (or None): the most that fit (needs a card).
    weights : str, optional
        A :data:`~memtheory.estimate.serving_model.WEIGHT_FORMATS` name;
        default the checkpoint's dtype (bf16), else fp16 (vLLM's ``--dtype
        auto`` runs fp32 checkpoints in fp16).
    kv_cache : {"bf16", "fp16", "fp8"}, optional
        Default the compute dtype (vLLM's ``--kv-cache-dtype auto``).
    gpu, limit : optional
        A card (``"H100"``) or a memory size (``"24 GiB"``); one at most.
    utilization : number in (0, 1], default 0.9
        vLLM's ``gpu_memory_utilization``.
    block_size : int, default 16
    tensor : int, default 1
        Tensor-parallel GPUs (Llama-style decoders).
    reserve : bytes or str, default 1.5 GiB
        Non-tensor memory inside the budget (CUDA context, NCCL, CUDA graphs).
    batched_tokens, max_sequences : int
        vLLM's ``max_num_batched_tokens`` (of the profiling pass, at most
        ``context`` x ``max_sequences``) and ``max_num_seqs``.
    draft : str or mapping, optional
        A draft model for speculative decoding.

    Raises
    ------
    InvalidArgumentError
        A context, batch, block size, tensor size or token count below 1, a
        utilization outside (0, 1], a card and a limit both, or "auto" without either.
    UnknownNameError
        An unknown weight or KV-cache format.
    UnsupportedError
        A context beyond the model's positions; tensor parallelism of a model
        that is not a Llama-style decoder, or that the heads do not divide.

    Examples
    --------
    >>> answer = serving_memory("llama-3.1-70b", context=8192, weights="awq", gpu="H100",
    ...                         tensor=2)
    >>> answer.fits, answer.max_concurrency > 0
    (True, True)
    """
    context = _whole(context, "context", "the tokens per sequence, e.g. context=8192")
    block_size = _whole(block_size, "block_size", "vLLM's default is 16")
    tensor = _whole(tensor, "tensor", "the tensor-parallel GPUs, e.g. tensor=2")
    batched_tokens = _whole(batched_tokens, "batched_tokens", "vLLM's default is 8192")
    max_sequences = _whole(max_sequences, "max_sequences", "vLLM's default is 256")
    share = _utilization(utilization)
    spare = _reserve(reserve)
    if batch is None or (isinstance(batch, str) and batch.strip().lower() == "auto"):
        wanted: int | None = None
    else:
        wanted = _whole(batch, "batch", "a number of sequences, or 'auto' for the most that fit")
    memory, device = _memory(gpu, limit)
    if wanted is None and memory is None:
        raise InvalidArgumentError(
            "batch='auto' (the most sequences that fit) needs a card: pass gpu='H100' or "
            "limit='80 GiB', or a batch."
        )
    chosen = weight_format(weights)
    kv_name = kv_format(kv_cache)
    tokens = min(batched_tokens, context * max_sequences)

    def served(spec: str | Mapping[str, Any], form: str | None, compute: str | None) -> ServedModel:
        return served_model(spec, context=context, tensor=tensor, weights=form,
                            kv_cache=kv_name, block_size=block_size, batched_tokens=tokens,
                            max_sequences=max_sequences, compute=compute)

    target = served(model, chosen, None)
    sides = [target]
    if draft is not None:
        sides.append(served(draft, None, target.compute))
    weights_bytes = sp.Add(*(s.weights for s in sides))
    per_sequence = sp.Add(*(s.kv_per_sequence for s in sides))
    block_bytes = sp.Add(*(s.block_bytes for s in sides))
    prefill = sp.Max(*(s.prefill for s in sides))
    decode = sp.Max(*(s.decode for s in sides))
    answer = ServingMemory(
        model=target.name,
        context=context,
        batch=wanted if wanted is not None else 0,
        weights=weights_bytes,
        kv_per_sequence=per_sequence,
        block_bytes=block_bytes,
        prefill=prefill,
        decode=decode,
        device=device,
        memory=memory,
        utilization=share,
        reserve=spare,
        block_size=block_size,
        tensor=tensor,
        batched_tokens=tokens,
        max_sequences=max_sequences,
        weights_format=chosen or target.compute,
        kv_format=kv_name or target.compute,
        compute=target.compute,
        draft=None if draft is None else sides[1].name,
        assumptions=_assumptions(tensor, chosen, tokens, max_sequences, spare)
        + tuple(dict.fromkeys(note for side in sides for note in side.notes)),
    )
    if memory is None:
        return answer
    budget = share * memory - spare
    free = budget - weights_bytes - prefill
    blocks = max(0, int(sp.floor(free / block_bytes)))
    most = max(0, int(sp.floor(free / per_sequence)))

    def fits(count: int) -> bool:
        held = weights_bytes + count * per_sequence
        return bool(held + sp.Max(prefill, decode.subs(B, count)) <= budget)

    if most > 0 and not fits(most):  # a decoding step larger than the profiled pass
        low, high = 0, most  # fits(low) holds (0 sequences), fits(high) does not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        most = low
    return replace(answer, batch=most if wanted is None else wanted, max_concurrency=most,
                   blocks=blocks)


def _whole(value: object, name: str, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a whole number of at least 1 ({hint}), "
                                   f"got {value!r}.")
    return value


def _utilization(value: object) -> sp.Rational:
    try:
        share = (
            sp.Rational(str(value).strip()) if isinstance(value, float | str) else sp.sympify(value)
        )
    except (sp.SympifyError, TypeError, ValueError):
        share = None
    if isinstance(value, bool) or share is None or not share.is_Rational or not 0 < share <= 1:
        raise InvalidArgumentError(
            f"utilization (vLLM's gpu_memory_utilization) must be a share of the GPU's memory "
            f"above 0 and at most 1, such as 0.9, got {value!r}."
        )
    return sp.Rational(share)


def _reserve(value: ReserveLike) -> sp.Rational:
    amount = parse_bytes(value) if isinstance(value, str) else sp.sympify(value)
    if not amount.is_number or amount < 0:
        raise InvalidArgumentError(
            f"reserve must be a non-negative number of bytes or a size such as '1.5 GiB', "
            f"got {value!r}."
        )
    return sp.Rational(amount)


def _memory(gpu: str | None, limit: ReserveLike | None) -> tuple[sp.Rational | None, str | None]:
    if gpu is None and limit is None:
        return None, None
    if gpu is not None and limit is not None:
        raise InvalidArgumentError("give a card (gpu='H100') or a limit ('80 GiB'), not both.")
    card = usable_memory(gpu, limit=limit, reserve=0)
    return sp.Rational(card.memory), card.device


def _assumptions(
    tensor: int, chosen: str | None, tokens: int, max_sequences: int, reserve: sp.Rational
) -> tuple[str, ...]:
    found = [
        "vLLM's rule, modelled from its documentation: KV blocks = floor((utilization x memory "
        "- reserve - weights - profiled peak) / block bytes); sequences = floor(blocks / "
        "ceil(context / block_size))",
        f"profiled peak: one forward pass of {tokens} tokens (max_num_batched_tokens) with a "
        "memory-efficient attention kernel, or the sampler's "
        f"{max_sequences} rows of logits (model dtype, fp32 copy, fp32 probabilities)",
        f"reserve {format_bytes(reserve, 'GiB')}: CUDA context, NCCL and CUDA graphs, outside "
        "PyTorch's tensors",
        "card memory: the vendor's GB read as GiB (memtheory.gpus); vLLM takes its share of "
        "the total the driver reports, which can be lower: pass that total as limit=",
        "decode: one token per sequence through working_memory's decoding step (Hugging "
        "Face's code paths with a memory-efficient kernel and a paged cache), not vLLM's",
        "sliding-window layers cache at most their window per sequence",
        "scheduler limit not applied: vLLM also runs at most max_num_seqs sequences at once",
    ]
    if chosen is not None and chosen.startswith("gguf-"):
        found.append(
            f"{chosen}: weights counted as the GGUF file stores them, each tensor in the type "
            "llama.cpp's llama-quantize picks for this mix (llama-quant.cpp, no importance "
            "matrix; norms and biases F32; the file's metadata and tokenizer not counted)"
        )
        found.append(
            f"{chosen}: the runtime modelled by vLLM's rule (vLLM loads GGUF with dequantizing "
            "kernels); llama.cpp, where most GGUF is served, allocates its KV cache and compute "
            "buffers differently"
        )
    if chosen in ("int4", "gptq", "awq", "int8", "nf4"):
        found.append(
            f"{chosen}: only the linear maps inside the decoder layers quantised; embeddings, "
            "norms and lm_head 16-bit"
        )
    if tensor > 1:
        found.append(
            f"tensor parallel over {tensor}: heads, MLP width and vocabulary split, residual "
            "stream whole; communication buffers not counted"
        )
    return tuple(found)
