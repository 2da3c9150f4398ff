"""Hugging Face models built from configs trace to formulas in B and S, equal to measure().

Tiny configs (2 layers, width 32) of ``GPT2LMHeadModel``, ``BertForMaskedLM`` and
``LlamaForCausalLM`` (grouped-query attention, RMSNorm, rotary positions) are
traced at batch 5 and sequence 11 and compared with
:func:`memtheory.torch.measure` at a size used nowhere else, with Hugging
Face's own loss (``model.loss_function``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memtheory.symbols import B, S  # noqa: E402
from memtheory.torch import measure, torch_optimizer, trace  # noqa: E402

_VOCABULARY = 97


def _build(kind: str):
    torch.manual_seed(0)
    small = {"vocab_size": _VOCABULARY}
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                         bos_token_id=0, eos_token_id=0, **small)
        return transformers.GPT2LMHeadModel(config)
    if kind == "bert":
        config = transformers.BertConfig(num_hidden_layers=2, hidden_size=32,
                                         num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=64, **small)
        return transformers.BertForMaskedLM(config)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64,
                                      max_position_embeddings=64, **small)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_hugging_face_model_traces_to_an_exact_formula(kind):
    """The trace is symbolic in B and S and equals measure at B=3, S=16, to the byte."""
    model = _build(kind).train()

    def loss(output, labels):
        return model.loss_function(output.logits, labels, vocab_size=_VOCABULARY)

    tokens = torch.randint(0, _VOCABULARY, (5, 11))
    memory = trace(model, tokens, {"B": 5, "S": 11}, loss=loss, target=tokens, optimizer="adamw")
    assert memory.method == "symbolic" and memory.free_symbols == {B, S}
    tokens = torch.randint(0, _VOCABULARY, (3, 16))
    measured = measure(model, tokens, loss, torch_optimizer("adamw", model.parameters()),
                       target=tokens)
    at = memory.evaluate(B=3, S=16)
    assert {k: int(v) for k, v in at.components.items()} == measured.components
    assert at.peak == measured.peak and at.inference_peak == measured.inference_peak


@pytest.mark.slow
def test_meta_llama_with_labels_traces_without_weights():
    """A Llama built on the meta device, given labels, traces its own loss; nothing is allocated."""
    with torch.device("meta"):
        model = _build("llama")
    tokens = torch.randint(0, _VOCABULARY, (5, 11))
    memory = trace(model, {"input_ids": tokens, "labels": tokens}, {"B": 5, "S": 11})
    assert memory.free_symbols == {B, S}
    assert memory["parameters"] == 4 * sum(p.numel() for p in model.parameters())
    assert all(p.is_meta for p in model.parameters())
    assert "S <= 64" not in memory.conditions  # rotary positions are computed, not looked up
