"""A size of 1, where the traced formulas do not hold, is answered by a trace taken there.

PyTorch treats a size of 1 apart (a transpose of a ``1 x F`` tensor is already
contiguous, so ``.contiguous()`` copies nothing), so a formula traced at
sizes >= 2 can be off at 1. Every expected number here is measured with
:func:`memtheory.torch.measure` at the same sizes, in the test.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from memtheory.errors import EvaluationError  # noqa: E402
from memtheory.symbols import B, S  # noqa: E402
from memtheory.torch import measure, torch_optimizer, trace  # noqa: E402
from memtheory.whatif import max_batch  # noqa: E402


class _Transposed(nn.Module):
    """Copies its input's transpose: no copy at B = 1, where the transpose is contiguous."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x.t().contiguous().t() * 2)


def _step(model, batch):
    torch.manual_seed(batch)
    return dict(loss=nn.CrossEntropyLoss(), target=torch.randint(0, 3, (batch,)), optimizer="sgd")


def _traced(model, **kwargs):
    return trace(model, torch.randn(4, 6), {"B": 4}, **_step(model, 4), **kwargs)


def _bytes(result):
    components = {k: int(v) for k, v in result.components.items() if int(v)}
    return components, int(result.peak), int(result.inference_peak)


def _same(at, measured):
    assert {k: int(v) for k, v in at.components.items()} == measured.components
    assert at.peak == measured.peak and at.inference_peak == measured.inference_peak


def test_batch_of_one_equals_measure_where_the_formula_does_not():
    """At B = 1 the result equals measure to the byte; the B >= 2 formula put at 1 does not."""
    model = _Transposed()
    memory = _traced(model)
    measured = measure(model, torch.randn(1, 6), **_step(model, 1))
    assert B in memory.at_one and not memory.constraints
    _same(memory.evaluate(B=1), measured)
    general = replace(memory, at_one={}).evaluate(B=1)  # the B >= 2 formulas, put at 1
    assert _bytes(general) != _bytes(measured)  # the trace at 1 is needed
    _same(memory.evaluate(B=5), measure(model, torch.randn(5, 6), **_step(model, 5)))


def test_peak_and_max_batch_take_a_batch_of_one_from_its_trace():
    """The peak is piecewise, and max_batch answers 1 where only B = 1 fits."""
    model = _Transposed()
    memory = _traced(model)
    measured = measure(model, torch.randn(1, 6), **_step(model, 1)).peak
    assert memory.peak.subs(B, 1) == measured
    assert memory.evaluate(B=2).peak > measured  # so a limit of the B = 1 peak fits B = 1 only
    assert max_batch(memory, measured) == 1
    at_two = memory.evaluate(B=2).peak
    assert max_batch(memory, at_two) == 2


def test_printed_and_pickled_result_keeps_the_trace_at_one():
    """str() names the size answered at 1, and a pickled result still answers B = 1."""
    model = _Transposed()
    memory = _traced(model)
    shown = str(memory)
    assert "answered from it: B = 1" in shown and "holds for B >= 2" not in shown
    loaded = pickle.loads(pickle.dumps(memory))
    _same(loaded.evaluate(B=1), measure(model, torch.randn(1, 6), **_step(model, 1)))


@pytest.mark.parametrize("switch", ["check_conditions", "at_one"])
def test_without_the_trace_at_one_a_batch_of_one_is_refused(switch):
    """check_conditions=False or at_one=False: B = 1 stays refused, with a clear error."""
    memory = _traced(_Transposed(), **{switch: False})
    assert not memory.at_one and "B >= 2" in memory.constraints
    with pytest.raises(EvaluationError, match="B >= 2"):
        memory.evaluate(B=1)


def test_a_model_exact_at_one_records_no_extra_trace():
    """Where the formula holds at B = 1 (checked harmless), nothing is recorded there."""
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    memory = _traced(model)
    assert not memory.at_one
    _same(memory.evaluate(B=1), measure(model, torch.randn(1, 6), **_step(model, 1)))


_VOCABULARY = 97


def _hugging_face(kind):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                         bos_token_id=0, eos_token_id=0, vocab_size=_VOCABULARY)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64,
                                      max_position_embeddings=64, vocab_size=_VOCABULARY)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hugging_face_batch_and_length_of_one_equal_measure(kind):
    """Traced at B=3, S=11, tiny GPT-2 and Llama equal measure at B=1, S=1 and both, to the byte."""
    model = _hugging_face(kind).train()

    def loss(output, labels):
        return model.loss_function(output.logits, labels, vocab_size=_VOCABULARY)

    tokens = torch.randint(0, _VOCABULARY, (3, 11))
    memory = trace(model, tokens, {"B": 3, "S": 11}, loss=loss, target=tokens, optimizer="adamw")
    assert not memory.constraints
    for batch, length in [(1, 7), (2, 1), (1, 1)]:
        tokens = torch.randint(0, _VOCABULARY, (batch, length))
        measured = measure(model, tokens, loss, torch_optimizer("adamw", model.parameters()),
                           target=tokens)
        _same(memory.evaluate(B=batch, S=length), measured)
        assert memory.peak.subs({B: batch, S: length}) == measured.peak
