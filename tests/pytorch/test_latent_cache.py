"""DeepSeek's latent-attention KV cache on CPU: exact; its working memory: an estimate.

transformers 5's ``DeepseekV3Attention`` (and V2's) caches, per layer, the
normalised latent ``(B, 1, S, kv_lora_rank)`` and the rotary key
``(B, 1, S, qk_rope_head_dim)`` in a ``DynamicCache``. A prefill with
``use_cache=True`` on tiny configurations (built with no download) fills it;
the bytes of its tensors must equal :func:`kv_cache_bytes` to the byte. The
prefill's and a decoding step's working memory, measured with
``StorageTracker``, equal memtheory's to the byte where the attention or the
logits hold the peak; where the routed experts do, they lie within
``latent_memory.MEASURED_ERROR`` of it (a stated tolerance, not a bound).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import eval_model  # noqa: E402

from memtheory.models import from_config  # noqa: E402
from memtheory.techniques import latent_memory  # noqa: E402
from memtheory.techniques.kv_cache import kv_cache_bytes  # noqa: E402
from memtheory.techniques.working_memory import working_memory  # noqa: E402
from memtheory.torch.measurement import StorageTracker  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

# The tiny DeepSeek of tests/pytorch/test_family_parameter_counts.py; transformers reads
# num_key_value_heads (default 128) for repeat_kv, so it is the heads here.
_DEEPSEEK = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
             "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
             "n_shared_experts": 1, "kv_lora_rank": 8, "q_lora_rank": 12,
             "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6,
             "first_k_dense_replace": 1, "max_position_embeddings": 512}
V3 = {"model_type": "deepseek_v3", **_DEEPSEEK, "n_group": 2, "topk_group": 1}
V2 = {"model_type": "deepseek_v2", **_DEEPSEEK}


def _cache_tensors(cache) -> list:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def _bytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def _tracker(model, *tensors) -> StorageTracker:
    tracker = StorageTracker()
    tracker.track(*model.parameters(), *model.buffers(), *tensors)
    tracker.start()
    return tracker


@pytest.mark.parametrize("config", [V3, V2], ids=lambda c: c["model_type"])
@pytest.mark.parametrize(("batch", "prompt"), [(1, 16), (3, 37)])
def test_prefill_cache_is_exact(config, batch, prompt):
    """The DynamicCache a prefill fills holds kv_cache_bytes, to the byte (V2 and V3)."""
    model = eval_model(config, "bf16")
    ids = torch.randint(0, config["vocab_size"], (batch, prompt))
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    network = from_config(config, batch=batch, sequence=prompt)
    assert _bytes(_cache_tensors(cache)) == kv_cache_bytes(network, dtype="bf16")


def _measured(config: dict, precision: str, batch: int, prompt: int) -> tuple[int, int]:
    """The prefill's and the first decoding step's working memory, as measured."""
    model = eval_model(config, precision)
    resident = _bytes([*model.parameters(), *model.buffers()])
    ids = torch.randint(0, config["vocab_size"], (batch, prompt))
    tracker = _tracker(model, ids)
    with torch.no_grad(), tracker:
        out = model(input_ids=ids, logits_to_keep=1)
        next_logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
        del next_logits
    cache = out.past_key_values
    del out
    prefill = tracker.peak - resident - ids.numel() * 8 - _bytes(_cache_tensors(cache))
    token = torch.randint(0, config["vocab_size"], (batch, 1))
    tracker = _tracker(model, token, *_cache_tensors(cache))
    with torch.no_grad(), tracker:
        out = model(input_ids=token, past_key_values=cache, logits_to_keep=1)
        next_logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
        del out, next_logits
    decode = tracker.peak - resident - token.numel() * 8 - _bytes(_cache_tensors(cache))
    return prefill, decode


def _predicted(config: dict, precision: str, batch: int, prompt: int) -> tuple[int, int]:
    """Return memtheory's prefill and first decoding step working memory (checks the label)."""
    before = working_memory(from_config(config, batch=batch, sequence=prompt), prompt=prompt,
                            dtype=precision)
    after = working_memory(from_config(config, batch=batch, sequence=prompt + 1),
                           prompt=prompt, dtype=precision)
    assert any("latent attention" in text and "estimate" in text for text in before.assumptions)
    return int(before.prefill), int(after.decode)


EXACT = [  # (config, precision, batch, prompt): the attention or logits hold the peak
    ({**V3, "first_k_dense_replace": 2}, "fp32", 2, 64),  # no experts; matmul copies values
    ({**V3, "first_k_dense_replace": 2}, "bf16", 1, 200),  # one sequence: values stay a view
    (V3, "fp32", 2, 64),  # with experts in layer 1, the attention's peak
    (V3, "bf16", 2, 64),
    ({**V3, "vocab_size": 3000}, "fp32", 2, 64),  # the logits
    ({**V2, "first_k_dense_replace": 2}, "fp32", 2, 64),  # V2: a complex64 rotary table
    (V2, "bf16", 1, 200),
]


@pytest.mark.parametrize(("config", "precision", "batch", "prompt"), EXACT,
                         ids=lambda v: v["model_type"] if isinstance(v, dict) else str(v))
def test_working_memory_is_exact_where_attention_or_logits_peak(config, precision, batch,
                                                                 prompt):
    """Prefill and a decoding step (V2, V3): the measured working memory, to the byte."""
    assert _predicted(config, precision, batch, prompt) == _measured(config, precision, batch,
                                                                     prompt)


@pytest.mark.parametrize(("extra", "precision", "batch", "prompt"), [
    ({}, "fp32", 3, 17),  # the prefill's peak in the experts
    ({"intermediate_size": 1000, "moe_intermediate_size": 504}, "fp32", 2, 20),
])
def test_working_memory_where_the_experts_peak_is_within_the_stated_error(extra, precision,
                                                                          batch, prompt):
    """Where transformers' routed experts hold the peak: within MEASURED_ERROR, and low."""
    config = {**V3, **extra}
    predicted = _predicted(config, precision, batch, prompt)
    measured = _measured(config, precision, batch, prompt)
    assert predicted != measured  # the gap the estimate states
    for estimated, actual in zip(predicted, measured, strict=True):
        assert abs(estimated - actual) <= latent_memory.MEASURED_ERROR * actual
