"""Which loop is traced: a Hugging Face model given a tokenizer's batch, against track() of it.

A tokenizer's batch is ``{"input_ids", "attention_mask", "labels"}`` with a
mask of ones where nothing is padded. Two loops run it: one keeps the model's
output through the backward pass (``out = model(**batch);
out.loss.backward()``), one keeps only the loss (``model(**batch).loss``, as
``Trainer`` does). ``trace(..., keeps_outputs=)`` must give the peak of the
loop asked for, to the byte of :func:`memtheory.torch.track` wrapped around
that very loop, at sizes the trace never saw; the model skips an all-ones
mask, and so must the trace. Tiny GPT-2 and Llama configs, built with no
download.
"""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memtheory.errors import InvalidArgumentError  # noqa: E402
from memtheory.torch import measure, torch_optimizer, trace, track  # noqa: E402
from memtheory.torch.loop import Loop  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_VOCABULARY = 97


def _build(kind: str, attention: str = "sdpa"):
    torch.manual_seed(0)
    small = {"vocab_size": _VOCABULARY, "attn_implementation": attention}
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                         bos_token_id=0, eos_token_id=0, **small)
        return transformers.GPT2LMHeadModel(config).train()
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64,
                                      max_position_embeddings=64, **small)
    return transformers.LlamaForCausalLM(config).train()


def _batch(batch: int, sequence: int, padded: bool = False):
    ids = torch.randint(0, _VOCABULARY, (batch, sequence))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, : sequence // 2] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def _tracked_loop(model, batch, keeps_outputs: bool) -> int:
    """Peak of the user's own loop (two warm-up steps, then one step inside track())."""
    optimizer = torch_optimizer("adamw", model.parameters())

    def step():
        optimizer.zero_grad(set_to_none=True)
        if keeps_outputs:
            out = model(**batch)
            out.loss.backward()
        else:
            loss = model(**batch).loss
            loss.backward()
        optimizer.step()

    for _ in range(2):
        step()
    with track(model, optimizer, inputs=batch) as tracker:
        step()
    return tracker.peak


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("keeps_outputs", [True, False])
def test_traced_loop_is_the_tracked_loop(kind, keeps_outputs):
    """The trace of the loop asked for is 0 bytes off track() of that loop, at unseen sizes."""
    model = _build(kind)
    memory = trace(model, _batch(5, 11), {"B": 5, "S": 11}, keeps_outputs=keeps_outputs)
    assert memory.loop == Loop(keeps_outputs=keeps_outputs, loss_inside=True)
    assert any("attention_mask all ones" in c for c in memory.conditions)
    batch = _batch(3, 16)
    assert memory.evaluate(B=3, S=16).peak == _tracked_loop(model, batch, keeps_outputs)
    measured = measure(model, batch, keeps_outputs=keeps_outputs)
    assert memory.evaluate(B=3, S=16).peak == measured.peak
    assert measured.loop == memory.loop


@pytest.mark.slow
def test_keeping_the_outputs_costs_the_logits():
    """On GPT-2 the loop that keeps its outputs peaks higher than the loss-only loop."""
    model = _build("gpt2")
    kept = trace(model, _batch(5, 11), {"B": 5, "S": 11}).evaluate(B=3, S=16).peak
    dropped = trace(model, _batch(5, 11), {"B": 5, "S": 11},
                    keeps_outputs=False).evaluate(B=3, S=16).peak
    assert kept > dropped
    assert "outputs kept" in str(trace(model, _batch(5, 11), {"B": 5, "S": 11}))


@pytest.mark.slow
def test_padded_mask_is_traced_with_the_mask():
    """A mask with padding is followed as given: no all-ones condition, exact against track()."""
    model = _build("llama", "eager")
    memory = trace(model, _batch(5, 11, padded=True), {"B": 5, "S": 11}, keeps_outputs=False)
    assert not any("all ones" in c for c in memory.conditions)
    assert any("attention_mask with padding" in c for c in memory.conditions)
    batch = _batch(3, 16, padded=True)
    assert memory.evaluate(B=3, S=16).peak == _tracked_loop(model, batch, False)


def test_measure_takes_the_older_form_and_refuses_a_mixed_one():
    """measure(module, x, loss, optimizer) still works; loss given twice is refused with the fix."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    loss = torch.nn.CrossEntropyLoss()
    old = measure(model, x, loss, torch.optim.AdamW(model.parameters()), target=y)
    new = measure(model, x, {"B": 16}, loss=loss, target=y, optimizer="adamw")
    assert old.components == new.components and old.peak == new.peak
    with pytest.raises(InvalidArgumentError, match="optimizer=\"adamw\""):
        measure(model, x, loss, loss=loss, target=y)


def test_loop_survives_pickling():
    """A Loop is a plain value: pickled and back, it is equal and prints the same."""
    loop = Loop(keeps_outputs=False, loss_inside=True)
    assert pickle.loads(pickle.dumps(loop)) == loop
    with pytest.raises(InvalidArgumentError, match="keeps_outputs"):
        Loop(keeps_outputs="no")  # type: ignore[arg-type]


class _Wrapped(torch.nn.Module):
    """A model of one's own around a transformers model, passing the mask on (as PEFT does)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, labels=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


class _WrappedPositionally(_Wrapped):
    """The same wrapper passing the mask by position, as ``inner(input_ids, mask)`` does."""

    def forward(self, input_ids, attention_mask=None, labels=None):
        return self.inner(input_ids, attention_mask, labels=labels)


@pytest.mark.slow
@pytest.mark.parametrize("wrapper", [_Wrapped, _WrappedPositionally])
def test_a_wrapped_model_skips_an_all_ones_mask_as_its_inner_model_does(wrapper):
    """A wrapper's inner Llama skips an all-ones mask: the trace too, 0 bytes off track().

    Before, the trace followed the masked path inside the wrapper and was 18,432 bytes
    (3.1%) above measure at B=3, S=16, with no condition or note. The mask is dropped
    whether the wrapper passes it by keyword or by position.
    """
    model = wrapper(_build("llama"))
    memory = trace(model, _batch(5, 11), {"B": 5, "S": 11}, keeps_outputs=False)
    assert any("attention_mask all ones" in c for c in memory.conditions)
    batch = _batch(3, 16)
    assert memory.evaluate(B=3, S=16).peak == _tracked_loop(model, batch, False)
    assert not model.inner._forward_pre_hooks  # the hook is gone once the trace ends
