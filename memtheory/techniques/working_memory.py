r"""Working memory of a language model's prefill and decoding steps, beyond weights and cache.

Generation runs in two phases. The *prefill* pushes the whole prompt of
:math:`P` tokens through the model in one forward pass (under
``torch.no_grad``: each tensor is freed as soon as nothing reads it); a
*decoding step* pushes one token per sequence through it, reading the cache.
What the prefill holds on top of the weights and the prompt's cache is the
largest of three moments, plus what the model keeps for the whole pass:

* **attention** (Hugging Face's eager path, ``flash=False``): at the
  softmax, the masked scores :math:`b a P^2` in the compute dtype, their fp32
  copy (``softmax(..., dtype=float32)`` of a 16-bit input; Llama family only)
  and the fp32 probabilities, beside the residual stream and its normalised
  copy (:math:`2 b P h`), the rotated queries (:math:`b P a d`) and, with
  grouped heads (neither one nor all), ``repeat_kv``'s copies of the keys and
  values (:math:`2 b a P d`); for the
  whole pass, the :math:`(b, 1, P, P)` causal mask in the model's dtype and
  the rotary tables (:math:`2 P d`), and the embeddings and int64 positions,
  which ``LlamaModel.forward`` keeps referenced. With ``flash=True`` (FlashAttention-2 or
  PyTorch's SDPA memory-efficient kernel: an assumption, CUDA only) there is
  no :math:`P^2` tensor and no mask: the queries, keys, values and output;
* **MLP**: the residual stream and its normalised copy, and the gated MLP's
  activated gate, up projection and their product (:math:`3 b P f`; GPT-2's
  MLP: its two :math:`b P f` tensors);
* **logits**: the final hidden states and the logits: :math:`b P V` for a
  plain forward (``logits="all"``), or ``generate()``'s :math:`b V` for the
  last position plus their fp32 copy (``logits="last"``).

After the prefill, Hugging Face's sliding-window cache still holds the
whole prompt's keys and values (its window is a view of them) until the
first decoding step; a paged cache holds the window only.

A *decoding step* (one token per sequence, :math:`S` cached positions, read
in the last layer, where every earlier layer's cache has grown) holds
throughout the token's embeddings, its int64 position, the
:math:`(b, 1, 1, S)` mask and one position's rotary tables, and at its peak
the largest of:

* **cache growth** (``DynamicCache``, ``block_size=None``): the layer's input
  and its normalised copy, the token's query, key and value, and the old
  values, alive until ``torch.cat`` has made the grown ones (a sliding-window
  layer concatenates keys and values before keeping either, so both old
  tensors are alive; before the first step they are views of the whole
  prompt's storage, so with every layer's prompt storage still alive the
  first layer can hold the most); a paged or static cache is written in place;
* **attention**: the layer's input and normalised copy, the query, and
  ``repeat_kv``'s copies of the cached keys and values (:math:`2 b a S d`,
  grouped heads) with the scores (:math:`b a S`, the same per-score bytes as
  the prefill's); with one key/value head ``matmul`` copies the broadcast
  values instead, beside the probabilities and the output;
* **MLP**: the layer's input, the stream after attention and its
  normalised copy, the attention's probabilities (returned beside its
  output, alive until the layer returns) and the MLP's three tensors;
* **logits**: the final hidden states, their normalised copy and the
  logits; after the forward, the next token's logits and their fp32 copy.

DeepSeek's latent attention follows transformers' ``expand_kv`` path
instead (:mod:`memtheory.techniques.latent_memory`).

These are derived from the code paths named, not measured on a GPU;
``tests/pytorch/test_generation_memory.py`` compares the prefill and a
decoding step with transformers' ``LlamaForCausalLM`` (and Mistral with and
without a sliding window, Qwen2, Gemma) measured on CPU, to the byte.

Examples
--------
>>> from memtheory.models import preset
>>> work = working_memory(preset("llama-2-7b", batch=1, sequence=4096), prompt=4096)
>>> work.prompt_cache   # 2 x 32 layers x 32 heads x 128 x 4096 positions x 2 bytes
2147483648
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.dtypes import DType, DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.layers import GELU, Dense, MultiHeadAttention, Multiply, Unembedding
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.latent_attention import LatentAttention
from memtheory.layers.moe import MixtureOfExperts
from memtheory.network import Network
from memtheory.techniques import latent_memory
from memtheory.techniques.cache_layers import CacheLayer, cache_layers

__all__ = ["WorkingMemory", "working_memory"]


@dataclass(frozen=True)
class WorkingMemory:
    """The prompt's cache and the working memory of the prefill and of a decoding step, in bytes.

    Attributes
    ----------
    prompt_cache : sympy expression
        The cache once the prompt is in it.
    prefill, decode : sympy expression
        Bytes beyond the weights and the cache at each phase's peak.
    assumptions : tuple of str

    Examples
    --------
    >>> from memtheory.models import preset
    >>> work = working_memory(preset("llama-2-7b", batch=1, sequence=4096), prompt=4096)
    >>> work.prompt_cache  # 2 x 32 layers x 32 heads x 128 x 4096 positions x 2 bytes
    2147483648
    >>> work.prefill > work.decode
    True
    >>> work.assumptions[0]
    'attention: Hugging Face eager (S^2 scores, fp32 softmax, (B,1,S,S) mask)'
    """

    prompt_cache: sp.Expr
    prefill: sp.Expr
    decode: sp.Expr
    assumptions: tuple[str, ...]


def working_memory(
    model: Network,
    *,
    prompt: SizeLike,
    dtype: DTypeLike = "fp16",
    cache: DTypeLike | None = None,
    flash: bool = False,
    logits: str = "last",
    block_size: SizeLike | None = None,
) -> WorkingMemory:
    """Derive the prefill's and a decoding step's working memory (see the module docstring).

    Parameters
    ----------
    model : Network
        A decoder built over the context to generate (its sequence ``S``).
    prompt : size
        Tokens per sequence the prefill processes.
    dtype : dtype, default "fp16"
        Compute dtype.
    cache : dtype, optional
        The cache's dtype; default ``dtype``.
    flash : bool, default False
    logits : {"last", "all"}, default "last"
    block_size : size, optional
        Paged cache block (no ``torch.cat`` growth; positions round up).

    Examples
    --------
    >>> from memtheory.models import preset
    >>> net = preset("llama-3-8b", batch=1, sequence=8192)
    >>> eager = working_memory(net, prompt=8192).prefill
    >>> flash = working_memory(net, prompt=8192, flash=True).prefill
    >>> eager > 10 * flash
    True
    """
    if logits not in ("last", "all"):
        raise InvalidArgumentError(f"logits must be 'last' or 'all', got {logits!r}.")
    c = as_dtype(dtype)
    kv_dtype = as_dtype(cache) if cache is not None else c
    tokens = sp.sympify(prompt)
    batch, sequence = model.input_shape[0], model.input_shape[1]
    gap = sp.sympify(sequence) - tokens
    if gap.is_number and gap < 0:
        raise InvalidArgumentError(
            f"prompt ({tokens}) is longer than the network's sequence ({sequence}); build the "
            "network over the whole context (prompt plus generated tokens)."
        )
    hidden = model.rows[1].output_shape[-1]
    layers = cache_layers(model)
    if not layers:
        raise UnsupportedError(
            f"{model.name!r} has no attention layer: working_memory describes decoders."
        )
    prompt_cache = _prompt_cache(layers, tokens, kv_dtype, block_size)
    whole_pass = batch * tokens * hidden * c.bytes + 8 * tokens  # the embeddings, int64 positions
    if not flash:
        whole_pass += batch * tokens * tokens * c.bytes  # the (b, 1, P, P) causal mask
    attention, rotary = _prefill_attention(model, batch, tokens, hidden, c, flash)
    whole_pass = sp.sympify(whole_pass + rotary)
    mlp = 2 * batch * tokens * hidden * c.bytes + _mlp(model, batch * tokens, c)
    vocabulary = next(
        (row.layer.num_embeddings for row in model.rows if isinstance(row.layer, Unembedding)),
        None,
    )
    if vocabulary is None:
        raise UnsupportedError(f"{model.name!r} has no output projection (lm_head).")
    fp32 = as_dtype("fp32")
    if logits == "all":
        head = batch * tokens * hidden * c.bytes + batch * tokens * vocabulary * c.bytes
    else:
        head = batch * tokens * hidden * c.bytes + batch * vocabulary * (c.bytes + fp32.bytes)
    prefill = whole_pass + sp.Max(attention, mlp, head)
    decode = _decode(
        model, layers, batch, tokens, hidden, vocabulary, c, kv_dtype, flash, block_size
    )
    assumptions: tuple[str, ...] = (
        "attention: "
        + ("memory-efficient kernel (no S^2 tensor, no mask; CUDA assumption)" if flash
           else "Hugging Face eager (S^2 scores, fp32 softmax, (B,1,S,S) mask)"),
        "prefill logits: " + ("all positions (B x P x V)" if logits == "all"
                              else "last position and its fp32 copy (generate)"),
        "cache: " + ("DynamicCache grown by torch.cat" if block_size is None
                     else f"paged, blocks of {block_size} positions"),
    )
    if any(cached.latent for cached in layers):
        assumptions += (
            "latent attention (DeepSeek MLA): the cache (latent + rotary key) is exact, and "
            "so is the working memory where the attention or the logits hold the peak "
            "(transformers' expand_kv path, measured on CPU); where the experts hold it, an "
            f"estimate, up to {latent_memory.MEASURED_ERROR:.0%} low on a tiny model (not a "
            "bound); a decoding step expands every cached position to each head's keys and "
            "values, which vLLM's absorbed MLA kernels avoid: for vLLM the decode term is "
            "likely high",
        )
    return WorkingMemory(
        sp.expand(prompt_cache), prefill, sp.sympify(decode), assumptions
    )


def _prompt_cache(
    layers: tuple[CacheLayer, ...], tokens: sp.Expr, kv_dtype: DType, block_size: SizeLike | None
) -> sp.Expr:
    """Bytes of the keys and values the prefill caches for the prompt, every layer."""
    prompt_cache = sp.Integer(0)
    for cached in layers:
        # Hugging Face's DynamicSlidingWindowLayer keeps a view of the last window - 1
        # positions of the prompt's keys, whose storage is the whole prompt's, and an int64
        # tensor holding the window; a paged cache holds the window's blocks only.
        positions = tokens
        if cached.window is not None and block_size is not None:
            positions = sp.Min(tokens, cached.window)
        elif cached.window is not None:
            prompt_cache += 8
        shrunk = replace(cached, positions=positions)
        prompt_cache += shrunk.nbytes(kv_dtype, block_size)
    return prompt_cache


def _prefill_attention(
    model: Network, batch: sp.Expr, tokens: sp.Expr, hidden: sp.Expr, c: DType, flash: bool
) -> tuple[sp.Expr, sp.Expr]:
    """Return the largest attention layer's prefill working memory and the rotary tables."""
    attention = sp.Integer(0)
    rotary = sp.Integer(0)
    for row in model.rows:
        layer = row.layer
        if isinstance(layer, LatentAttention):
            attention = sp.Max(
                attention, latent_memory.prefill_attention(layer, batch, tokens, hidden, c, flash)
            )
            rotary = layer.rotary_bytes(tokens, c)
        elif isinstance(layer, GroupedQueryAttention):
            attention = sp.Max(attention, _attention(layer, batch, tokens, hidden, c, flash, True))
            rotary = 2 * tokens * sp.sympify(layer.head_dim) * c.bytes  # cos and sin, shared
        elif isinstance(layer, MultiHeadAttention):
            width = layer.width(row.input_shape)
            attention = sp.Max(
                attention,
                _attention(
                    GroupedQueryAttention(layer.heads, head_dim=width), batch, tokens, hidden, c,
                    flash, False,
                ),
            )
    return attention, rotary


def _decode(
    model: Network,
    layers: tuple[CacheLayer, ...],
    batch: sp.Expr,
    tokens: sp.Expr,
    hidden: sp.Expr,
    vocabulary: sp.Expr,
    c: DType,
    kv_dtype: DType,
    flash: bool,
    block_size: SizeLike | None,
) -> sp.Expr:
    """Bytes a decoding step holds beyond the weights and the full cache, at its peak.

    One token per sequence against :math:`S` cached positions: the largest
    of the moments ``torch.cat`` grows a layer's cache (in each layer; the
    last one, where every earlier cache has grown, unless sliding windows
    still hold the prompt's storages), the last layer's attention, MLP and
    the logits; plus what the step keeps throughout (the token's embeddings,
    its int64 position, the ``(B, 1, 1, S)`` mask and one position's rotary
    tables).
    """
    latent = next((row.layer for row in model.rows if isinstance(row.layer, LatentAttention)), None)
    if latent is not None:
        return latent_memory.decode_step(
            latent, batch=batch, cached=sp.sympify(model.input_shape[1]), hidden=hidden,
            vocabulary=vocabulary, mlp=_mlp(model, batch, c), c=c, flash=flash,
        )
    fp32 = as_dtype("fp32")
    token = batch * hidden * c.bytes
    attention_layers = sum(
        isinstance(row.layer, GroupedQueryAttention | MultiHeadAttention) for row in model.rows
    )
    # the layer's input and its normalised copy; the first layer's input is the embeddings,
    # which are held throughout
    stream = token if attention_layers == 1 else 2 * token
    logits = batch * vocabulary * (c.bytes + fp32.bytes)  # the next token's logits, fp32 copy
    moments: list[sp.Expr] = [stream]
    throughout = token + 8
    query_heads, attended_last = sp.Integer(0), sp.Integer(0)
    for row in model.rows:
        layer = row.layer
        if isinstance(layer, GroupedQueryAttention | MultiHeadAttention):
            grouped = layer if isinstance(layer, GroupedQueryAttention) else GroupedQueryAttention(
                layer.heads, head_dim=layer.width(row.input_shape)
            )
            upcast = isinstance(layer, GroupedQueryAttention)
            attended = grouped.attended(model.input_shape[1])
            width = sp.sympify(grouped.head_dim)
            if not flash:
                throughout += batch * attended * c.bytes  # the (B, 1, 1, S) mask
            if upcast:
                throughout += 2 * width * c.bytes  # cos and sin for one position
            moments.append(stream + _decode_attention(grouped, batch, attended, c, flash, upcast))
            query_heads, attended_last = sp.sympify(grouped.heads), attended
            break
    if block_size is None and layers:  # DynamicCache: the old values live while cat grows them
        heads = [
            sp.sympify(row.layer.heads) for row in model.rows
            if isinstance(row.layer, GroupedQueryAttention | MultiHeadAttention)
        ]
        # per layer, one of its keys or values before and after the step; a sliding window
        # shorter than the context holds, before the first step, a view of the whole prompt's
        # storage, and after it (and in later steps) a storage of the window
        # (the sliding layer concatenates its keys and then its values before it keeps either,
        # so both old tensors are alive at the second cat; the plain layer keeps its keys first)
        olds, news, at_cat = [], [], []
        for cached in layers:
            one = batch * cached.kv_heads * cached.head_dim * kv_dtype.bytes
            windowed = cached.window is not None and cached.positions != model.input_shape[1]
            before = sp.Max(tokens, cached.positions) if windowed else cached.positions - 1
            olds.append(one * before)
            news.append(one * cached.positions)
            at_cat.append((2 if windowed else 1) * one * before)
        for index, cached in enumerate(layers):
            query = heads[index] if index < len(heads) else cached.kv_heads
            new_token = batch * (query + 2 * cached.kv_heads) * cached.head_dim * c.bytes
            later = sum(
                (2 * (o - n) for o, n in zip(olds[index + 1 :], news[index + 1 :], strict=True)),
                sp.Integer(0),
            )
            own = token if index == 0 and len(layers) > 1 else stream  # layer 0 reads embeddings
            moments.append(own + new_token + at_cat[index] + later)
    # the MLP runs while the layer's input, the stream after attention, its normalised copy and
    # the attention's probabilities (returned beside its output) are alive
    probabilities = 0 if flash else batch * query_heads * attended_last * c.bytes
    moments.append(stream + token + probabilities + _mlp(model, batch, c))
    moments.append(2 * token + batch * vocabulary * c.bytes)  # final hidden states, normalised
    return sp.Max(throughout + sp.Max(*moments), logits)


def _decode_attention(
    layer: GroupedQueryAttention,
    batch: sp.Expr,
    attended: sp.Expr,
    c: DType,
    flash: bool,
    upcast: bool,
) -> sp.Expr:
    """Return the attention's largest moment in a decoding step, beside the residual stream."""
    heads, kv, width = (sp.sympify(v) for v in (layer.heads, layer.kv_heads, layer.head_dim))
    query = batch * heads * width * c.bytes
    if flash:
        return query + 2 * batch * kv * width * c.bytes
    fp32 = as_dtype("fp32")
    scores = batch * heads * attended
    per_score = c.bytes + fp32.bytes + (fp32.bytes if c != fp32 else 0) if upcast else 2 * c.bytes
    copy = batch * heads * attended * width * c.bytes  # keys or values for every query head
    if kv != heads and kv != 1:  # repeat_kv copies both before the scores
        return query + 2 * copy + scores * per_score
    at_softmax = query + scores * per_score
    if kv == 1 and heads != 1:  # matmul copies the broadcast keys, then the values
        return sp.Max(at_softmax, query + scores * c.bytes + copy + query)
    return at_softmax


def _attention(
    layer: GroupedQueryAttention,
    batch: sp.Expr,
    prompt: sp.Expr,
    hidden: sp.Expr,
    c: DType,
    flash: bool,
    upcast: bool,
) -> sp.Expr:
    """Bytes alive at the attention's peak of the prefill, beside the weights and cache."""
    heads, kv, width = (sp.sympify(v) for v in (layer.heads, layer.kv_heads, layer.head_dim))
    residual = 2 * batch * prompt * hidden * c.bytes
    if flash:
        return residual + batch * prompt * (2 * heads + 2 * kv) * width * c.bytes
    fp32 = as_dtype("fp32")
    scores = batch * heads * prompt * prompt
    if upcast:
        per_score = c.bytes + fp32.bytes + (fp32.bytes if c != fp32 else 0)
    else:
        per_score = 2 * c.bytes
    # repeat_kv copies the keys and values to every query head; with one key/value head its
    # reshape is a view (and with as many as the queries it returns them as they are)
    grouped = kv != heads and kv != 1
    repeated = 2 * batch * heads * prompt * width * c.bytes if grouped else 0
    return residual + batch * prompt * heads * width * c.bytes + repeated + scores * per_score


def _mlp(model: Network, tokens: sp.Expr, c: DType) -> sp.Expr:
    """Return the feed-forward network's largest moment: a gated MLP's three tensors, or two."""
    best = sp.Integer(0)
    for index, row in enumerate(model.rows):
        layer = row.layer
        if isinstance(layer, Multiply):
            best = sp.Max(best, 3 * tokens * row.output_shape[-1] * c.bytes)
        elif isinstance(layer, MixtureOfExperts):  # every token through one expert: the bound
            best = sp.Max(best, 3 * tokens * sp.sympify(layer.ffn_hidden) * c.bytes)
        elif isinstance(layer, GELU) and index > 0 and isinstance(
            model.rows[index - 1].layer, Dense
        ):
            best = sp.Max(best, 2 * tokens * row.output_shape[-1] * c.bytes)
    return best
