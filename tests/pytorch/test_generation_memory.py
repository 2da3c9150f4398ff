"""The prefill's peak against transformers' LlamaForCausalLM measured on CPU, to the byte.

transformers 5.23 runs a tiny Llama/Mistral/Qwen2 configuration
(``attn_implementation="eager"``) forward over a prompt in eval mode under
``torch.no_grad`` with its default ``DynamicCache``, as ``generate()``'s
prefill does (``logits="last"``: ``logits_to_keep=1`` and the fp32 copy of
the next-token logits) or as a plain forward does (``logits="all"``).
``StorageTracker`` follows every tensor storage; memtheory's prefill moment
(weights, the prompt's cache, the working memory) plus the model's buffers
and the token ids must equal the measured peak.

A decoding step after the prompt (one token per sequence, reading the
``DynamicCache`` the prefill filled) is exact too, at sizes and settings that
move its peak between the cache's growth, the attention, the MLP and the
logits, with and without a sliding window shorter than the context (before
the first step its cache holds a view of the whole prompt's storage).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import eval_model  # noqa: E402

from memtheory.models import from_config  # noqa: E402
from memtheory.techniques import generation_memory  # noqa: E402
from memtheory.torch.measurement import StorageTracker  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TINY = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 512, "tie_word_embeddings": False}


def _tracker(model, *tensors) -> StorageTracker:
    tracker = StorageTracker()
    tracker.track(*model.parameters(), *model.buffers(), *tensors)
    tracker.start()
    return tracker


def _resident(model) -> int:
    """Parameters and buffers, as measured: memtheory counts the buffers apart from weights."""
    return sum(b.untyped_storage().nbytes() for b in model.buffers())


MATRIX = [
    ({"model_type": "llama", "num_key_value_heads": 2}, "fp32", "all", 2, 64),
    ({"model_type": "llama", "num_key_value_heads": 2}, "bf16", "all", 2, 64),
    ({"model_type": "llama", "num_key_value_heads": 4}, "bf16", "last", 2, 64),
    ({"model_type": "llama", "num_key_value_heads": 1}, "fp32", "last", 3, 48),
    ({"model_type": "llama", "num_key_value_heads": 4}, "fp32", "all", 2, 96),
    ({"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": 16},
     "fp32", "last", 2, 64),
    ({"model_type": "qwen2", "num_key_value_heads": 2}, "bf16", "all", 2, 64),
]


@pytest.mark.parametrize(("extra", "precision", "logits", "batch", "prompt"), MATRIX)
def test_prefill_peak_is_exact(extra, precision, logits, batch, prompt):
    """Weights + prompt cache + prefill working memory = the measured forward peak."""
    config = {**TINY, **extra}
    model = eval_model(config, precision)
    ids = torch.randint(0, config["vocab_size"], (batch, prompt))
    tracker = _tracker(model, ids)
    with torch.no_grad(), tracker:
        if logits == "last":
            out = model(input_ids=ids, logits_to_keep=1)
            next_logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
            del next_logits
        else:
            out = model(input_ids=ids)
        del out
    network = from_config(config, batch=batch, sequence=prompt)
    memory = generation_memory(network, weights=precision, prompt=prompt, logits=logits)
    predicted = int(memory.timeline["prefill"]) + _resident(model) + ids.numel() * 8
    assert predicted == tracker.peak


def _decode_step(config: dict, precision: str, batch: int, prompt: int) -> tuple[int, int]:
    """Measured and predicted peak of the first decoding step after a ``prompt``-token prefill."""
    model = eval_model(config, precision)
    ids = torch.randint(0, config["vocab_size"], (batch, prompt))
    with torch.no_grad():
        out = model(input_ids=ids, logits_to_keep=1)
    cache = out.past_key_values
    del out
    token = torch.randint(0, config["vocab_size"], (batch, 1))
    tracker = _tracker(model, token, *[t for layer in cache.layers for t in
                                       (layer.keys, layer.values)])
    with torch.no_grad(), tracker:
        out = model(input_ids=token, past_key_values=cache, logits_to_keep=1)
        next_logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
        del out, next_logits
    network = from_config(config, batch=batch, sequence=prompt + 1)
    memory = generation_memory(network, weights=precision, prompt=prompt)
    predicted = int(memory.timeline["decode"]) + _resident(model) + token.numel() * 8
    return tracker.peak, predicted


DECODE = [  # (config changes, precision, batch, prompt): where the peak falls, measured
    ({"model_type": "llama", "num_key_value_heads": 2}, "fp32", 2, 64),  # repeat_kv's copies
    ({"model_type": "llama", "num_key_value_heads": 2}, "bf16", 1, 200),  # the fp32 softmax
    ({"model_type": "llama", "num_key_value_heads": 4}, "bf16", 2, 64),  # the cache's growth
    ({"model_type": "llama", "num_key_value_heads": 1}, "fp32", 3, 17),  # matmul's value copy
    ({"model_type": "llama", "num_key_value_heads": 2, "intermediate_size": 1000}, "bf16", 2,
     20),  # the MLP
    ({"model_type": "llama", "num_key_value_heads": 2, "vocab_size": 3000,
      "num_hidden_layers": 3}, "fp32", 2, 64),  # the logits
    ({"model_type": "llama", "num_key_value_heads": 1, "num_hidden_layers": 1}, "bf16", 2, 33),
    ({"model_type": "qwen2", "num_key_value_heads": 2}, "bf16", 2, 64),
    ({"model_type": "gemma", "num_key_value_heads": 1, "head_dim": 8}, "bf16", 2, 30),
    ({"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": 16}, "fp32", 2,
     40),  # the first layer, with every layer's old prompt storage still alive
    ({"model_type": "mistral", "num_key_value_heads": 1, "sliding_window": 16}, "bf16", 3, 100),
    ({"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": 16}, "bf16", 2,
     16),  # the window just reached
]


@pytest.mark.parametrize(("extra", "precision", "batch", "prompt"), DECODE)
def test_decode_step_peak_is_exact(extra, precision, batch, prompt):
    """Weights + the grown cache + the step's working memory = the measured step's peak."""
    measured, predicted = _decode_step({**TINY, **extra}, precision, batch, prompt)
    assert predicted == measured
