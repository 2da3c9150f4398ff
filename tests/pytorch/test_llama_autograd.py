"""Llama-family decoders under the autograd convention against measure() on Hugging Face's models.

transformers 5.23 builds ``LlamaForCausalLM`` (and Qwen2, Mistral) from a tiny
configuration with ``attn_implementation="eager"``; ``memtheory.torch.measure``
runs its training step on CPU (the module returns the logits, the loss is
Hugging Face's causal-LM loss, ``memtheory.torch.hf_losses.causal_lm_loss``), and
memtheory predicts the same step from ``from_config(config, loss=True)``.
Every component and the step's peak must agree to the byte.

The forward runs with ``use_cache=False`` (what gradient checkpointing and
training scripts set): with transformers' default ``use_cache=True`` the
training forward also fills a ``DynamicCache`` with a copy of every layer's
keys and values, alive until the forward returns, which memtheory does not model.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import compared, decoder_step  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TINY = {"vocab_size": 50, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 128, "tie_word_embeddings": False}


def _compare(config: dict, precision: str, optimizer: str, batch: int, sequence: int):
    """Return (predicted, measured): components, peak and forward peak; the peak's moment."""
    predicted, measured = decoder_step(config, precision, optimizer, batch, sequence)
    got, want = compared(predicted, measured)
    got["forward"] = max(int(v) for k, v in predicted.timeline.items() if k.startswith("forward"))
    want["forward"] = max(live for phase, _, live in measured.timeline if phase == "forward")
    return got, want, predicted.peak_moment


MATRIX = [
    # (model_type and extra keys, precision, optimizer, batch, sequence)
    ({"model_type": "llama", "num_key_value_heads": 2}, "fp32", "adam", 2, 6),
    ({"model_type": "llama", "num_key_value_heads": 1}, "bf16", "sgd", 2, 6),
    ({"model_type": "llama", "num_key_value_heads": 4}, "autocast", "adamw", 2, 8),
    ({"model_type": "llama", "num_key_value_heads": 2, "tie_word_embeddings": True},
     "autocast", "sgd", 2, 6),
    ({"model_type": "llama", "num_key_value_heads": 2, "attention_bias": True,
      "mlp_bias": True}, "bf16", "sgd", 2, 6),
    ({"model_type": "qwen2", "num_key_value_heads": 2}, "fp32", "sgd", 3, 5),
    ({"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": 4},
     "bf16", "adam", 2, 6),
]


@pytest.mark.parametrize(("extra", "precision", "optimizer", "batch", "sequence"), MATRIX)
def test_decoder_training_step_is_exact(extra, precision, optimizer, batch, sequence):
    """Every component and the training-step peak equal what PyTorch keeps, byte for byte."""
    got, want, _ = _compare({**TINY, **extra}, precision, optimizer, batch, sequence)
    del got["forward"], want["forward"]
    assert got == want


@pytest.mark.parametrize(("kv_heads", "precision"), [(2, "bf16"), (4, "fp32")])
def test_peak_inside_attention_backward_is_exact(kv_heads, precision):
    """At 64 positions the step peaks in the softmax's backward; the attention stages get it."""
    config = {**TINY, "model_type": "llama", "num_key_value_heads": kv_heads}
    got, want, moment = _compare(config, precision, "sgd", 2, 64)
    del got["forward"], want["forward"]
    assert moment == "backward model.layers.1.self_attn.attention (softmax)"
    assert got == want


def test_forward_moment_gap_is_two_head_tensors():
    """Known gap, stated exactly: the forward's highest moment, in the last attention.

    memtheory's single forward moment of the attention holds the values' copy
    and the output (2 x B x H x S x d elements), which the real forward peak,
    at the scores, precedes: high by those. What ``LlamaModel.forward`` keeps
    alive for its whole duration, the eager causal mask (B x 1 x S x S in the
    model's dtype) and the positions (S int64), is held (it was missing:
    low by those). The training peak itself (in the backward) is exact.
    """
    batch, sequence, heads, width = 2, 96, 4, 8
    config = {**TINY, "model_type": "llama", "num_key_value_heads": heads, "vocab_size": 8,
              "intermediate_size": 8}
    got, want, _ = _compare(config, "fp32", "sgd", batch, sequence)
    forward = (got.pop("forward"), want.pop("forward"))
    assert got == want
    two_head_tensors = 2 * batch * heads * sequence * width * 4
    assert forward[0] - forward[1] == two_head_tensors


@pytest.mark.parametrize(("family", "precision", "sequence"), [
    ("llama", "bf16", 9), pytest.param("mistral", "bf16", 9, marks=pytest.mark.slow),
    pytest.param("llama", "fp32", 5, marks=pytest.mark.slow)])
def test_one_sequence_keeps_the_padded_labels_storage(family, precision, sequence):
    """B=1: every component and the peak, exactly (the shifted labels are the padded storage).

    ``ForCausalLMLoss``'s ``labels[..., 1:].contiguous()`` of a single row is
    already contiguous: NLL keeps a view of the padded ``(1, S + 1)`` labels,
    one int64 more than a copy of ``S`` (8 B off before the loss's plan said so).
    """
    config = {**TINY, "model_type": family, "num_key_value_heads": 2}
    got, want, _ = _compare(config, precision, "sgd", 1, sequence)
    del got["forward"], want["forward"]
    assert got == want


@pytest.mark.parametrize("batch", [1, 2])
def test_shifted_labels_share_the_padded_storage_only_for_one_row(batch):
    """The cause, in PyTorch itself: the shift copies the labels unless there is one row."""
    from memtheory.conventions.autograd.kernels.torch_2_13.losses import language_model_loss
    from memtheory.layers.softmax import LanguageModelLoss

    sequence, vocabulary = 7, 11
    labels = torch.nn.functional.pad(torch.zeros(batch, sequence, dtype=torch.long), (0, 1),
                                     value=-100)
    shifted = labels[..., 1:].contiguous()
    shares = shifted.untyped_storage().data_ptr() == labels.untyped_storage().data_ptr()
    assert shares == (batch == 1)
    plan = language_model_loss(LanguageModelLoss(), ((batch, sequence, vocabulary),))
    kept = plan.saved[2].nbytes(plan.saved[2].dtype)
    made = sum(t.nbytes(t.dtype) for t in plan.transients)
    assert kept == shifted.untyped_storage().nbytes()
    assert made == (0 if shares else labels.untyped_storage().nbytes())
