"""The real Lightning ``Trainer(precision="bf16-mixed")`` under ``track()``, beside its recipe.

Two steps of ``Trainer.fit`` (CPU, one device, ``max_steps=2``) train
transformers' tiny Llama (:data:`memtheory.torch.recipe_steps.TINY_LLAMA`,
built from its config, SDPA) wrapped in a ``LightningModule`` whose
``training_step`` returns ``model(**batch).loss`` and whose
``configure_optimizers`` returns ``torch.optim.AdamW(foreach=True)``: the
implementation PyTorch picks on CUDA, which the recipe assumes. The whole
``fit`` runs inside :func:`memtheory.torch.track`; the second step is the
steady one (the AdamW state and the previous step's gradients exist).

What Lightning 2.6.6 does, read from its source
(``lightning/pytorch/...``):

- ``plugins/precision/amp.py:113-114`` ``torch.autocast(device, bfloat16,
  cache_enabled=False)`` around ``training_step`` (``forward_context``):
  no cache of weight casts (``measure`` keeps torch's cache). On this model
  every cast weight is saved for the backward pass, so the cache changes no
  byte: the equalities below hold across the two.
- ``plugins/precision/precision.py:122-123``: ``optimizer.step(closure=...)``:
  the forward, ``zero_grad`` and the backward all run inside the
  optimizer's ``step()`` (so ``track`` labels them "optimizer step").
- ``loops/optimization/automatic.py:130-142`` ``Closure.closure``: first
  ``training_step``, *then* ``zero_grad`` (``core/module.py:1391``
  ``optimizer.zero_grad()``, ``set_to_none=True``), then ``backward``. The
  previous step's gradients are therefore alive through the whole forward
  pass and the loss, where the recipe's step zeroes them first.
- ``loops/optimization/automatic.py:56-59, 80-83``: ``ClosureResult`` keeps
  ``closure_loss = loss / accumulate_grad_batches`` and a detached clone of
  it (``loss.detach().clone()``) until ``consume_result`` after the
  optimizer step (``automatic.py:194``): two 0-dim tensors where a plain
  loop holds the loss alone. They live after the forward's peak.
- ``loops/fetchers.py:104-108``: a DataLoader with a length is not
  prefetched, so only the current batch is alive.

On a plain ``nn.Sequential`` classifier (an MLP whose step peaks in the
forward, a CNN whose step peaks in the backward; each at two batch sizes)
``loop="lightning"`` is 0 bytes off the real Trainer, and the plain loop is
not: there the cache matters (every bias cast, and the first layer's weight
cast, are freed at once instead of at the forward's end).

On the tiny Llama, Lightning's step peaks in the forward: the recipe step's most before
its backward plus every gradient; after the forward it holds the recipe
step's bytes and one fp32 scalar. Both are checked to the byte against
``measure`` under the recipe, at two sizes the conventions were not checked
at. ``loop="lightning"`` (:mod:`memtheory.conventions.autograd.loops`),
which the recipe now uses, models both: its prediction is exact after the
forward and at the forward's peak, where a Hugging Face model holds two
tensors while its loss runs (the final norm's output and the padded labels,
which a plain loop's peak never showed):
:func:`test_the_lightning_loop_is_exact_at_its_peak_in_the_loss`.
A model built from a config with ``use_cache=True`` (transformers' default)
also fills a key/value cache in the training forward, sized in the last test.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")
lightning = pytest.importorskip("lightning.pytorch",
                                reason="needs PyTorch Lightning (the 'torch' extra)")

from memtheory import training_memory  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch import measure, track  # noqa: E402
from memtheory.torch.convert import from_module  # noqa: E402
from memtheory.torch.recipe_steps import TINY_LLAMA, recipe_model  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")

SIZES = [(2, 7), (3, 12)]
"""(batch, sequence): not the sizes the conventions or the Trainer test were checked at."""

_BEFORE_BACKWARD = ("zero_grad", "forward", "loss")
"""``measure``'s phases up to the backward pass (memtheory/torch/measurement.py ``_step``)."""


class _Llama(lightning.LightningModule):
    """A Hugging Face causal LM as a LightningModule: the loss is the model's own."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.model = recipe_model("lightning-bf16", config, checkpoint_dtype="fp32")

    def training_step(self, batch, batch_idx):
        return self.model(**batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, foreach=True)


class _Marks(lightning.Callback):
    """Note where in the recorded timeline each batch and each ``zero_grad`` start."""

    def __init__(self) -> None:
        self.tracker = None
        self.batches: list[int] = []
        self.zero_grads: list[int] = []
        self.ends: list[int] = []
        self.backwards: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append(len(self.tracker.timeline))

    def on_before_zero_grad(self, trainer, pl_module, optimizer) -> None:
        self.zero_grads.append(len(self.tracker.timeline))

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.backwards.append(len(self.tracker.timeline))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.ends.append(len(self.tracker.timeline))


@dataclass(frozen=True)
class _Run:
    """The real Trainer's steady step, tracked: its peak and its two halves."""

    peak: int
    before_zero_grad: int  # the most alive from the step's start to zero_grad (the forward)
    after_forward: int  # the most alive from the backward's start to the step's end
    gradients: int  # bytes of every parameter's gradient


def _fit(module, rows, batch: int) -> _Run:
    """Track two steps of the real Lightning Trainer over ``rows``; the second is the steady one.

    The rows are separate tensors made before the block, as a dataset's are.
    """
    marks = _Marks()
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[marks],
    )
    loader = torch.utils.data.DataLoader(rows, batch_size=batch)
    with track(module, record=True) as tracker:
        marks.tracker = tracker
        trainer.fit(module, loader)
    assert trainer.global_step == 2 and len(marks.zero_grads) == len(marks.backwards) == 2
    live = [bytes_ for _, _, bytes_ in tracker.timeline]
    start, zero_grad = marks.batches[1], marks.zero_grads[1]
    backward, end = marks.backwards[1], marks.ends[1]
    gradients = sum(p.numel() * p.element_size() for p in module.parameters())
    return _Run(tracker.peak, max(live[start:zero_grad]), max(live[backward:end]), gradients)


def _lightning(batch: int, sequence: int, **config) -> _Run:
    """The tiny Llama's two steps under the real Trainer."""
    torch.manual_seed(0)
    module = _Llama({**TINY_LLAMA, **config})
    assert module.model.config._attn_implementation == "sdpa"
    assert all(p.dtype == torch.float32 for p in module.parameters())
    ids = torch.randint(0, int(TINY_LLAMA["vocab_size"]), (2 * batch, sequence))
    rows = [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]
    return _fit(module, rows, batch)


def _recipe_step(batch: int, sequence: int):
    """The recipe's own step, as ``check_recipe`` measures it, every operation recorded."""
    setup = Setup.recipe("lightning-bf16")
    model = recipe_model(setup, TINY_LLAMA, checkpoint_dtype="fp32")
    ids = torch.randint(0, int(TINY_LLAMA["vocab_size"]), (batch, sequence))
    return measure(model, {"input_ids": ids, "labels": ids.clone()}, setup=setup,
                   warmup_steps=1, record=True)


def _predicted(batch: int, sequence: int, loop: str):
    """training_memory under lightning-bf16 (foreach AdamW, as configured), with ``loop``."""
    network = from_config(dict(TINY_LLAMA), batch=batch, sequence=sequence, loss=True,
                          flash=True)
    setup = Setup.recipe("lightning-bf16", optimizer_implementation="foreach", loop=loop)
    return training_memory(network, setup=setup, precision="autocast-bf16")


def _most(timeline, phases) -> int:
    return max(live for phase, _, live in timeline if phase in phases)


@pytest.fixture(scope="module", params=SIZES, ids=lambda size: f"B{size[0]}-S{size[1]}")
def runs(request):
    """At one size: the real Trainer, the recipe's own step measured, and the predictions."""
    batch, sequence = request.param
    return {
        "size": (batch, sequence),
        "lightning": _lightning(batch, sequence),
        "recipe_step": _recipe_step(batch, sequence),
        "plain": _predicted(batch, sequence, "plain"),
        "predicted": _predicted(batch, sequence, "lightning"),
    }


def test_the_recipe_step_is_exact_and_is_what_lightning_configures(runs):
    """The recipe's own step: autocast bf16 over fp32, foreach AdamW, predicted to the byte."""
    step = runs["recipe_step"]
    assert step.autocast == "bfloat16" and step.implementation == "foreach"
    assert step.peak == int(runs["plain"].peak)


def test_lightning_peaks_in_training_step_before_its_zero_grad(runs):
    """The steady step's peak comes in the forward and the loss, before zero_grad."""
    run = runs["lightning"]
    assert run.peak == run.before_zero_grad > run.after_forward


def test_in_the_forward_lightning_is_the_recipe_step_plus_every_gradient(runs):
    """Up to the loss, Lightning holds what the recipe's step holds and every fp32 gradient.

    The recipe's step frees the gradients before the forward; Lightning's
    closure frees them after ``training_step`` returns
    (``loops/optimization/automatic.py:136-137``).
    """
    run = runs["lightning"]
    assert run.before_zero_grad == _most(runs["recipe_step"].timeline,
                                         _BEFORE_BACKWARD) + run.gradients


def test_after_the_forward_lightning_holds_one_loss_scalar_more(runs):
    """From the backward on, Lightning holds the recipe step's bytes and one fp32 scalar.

    ``ClosureResult`` (``automatic.py:56-59, 80-83``) keeps ``loss / 1`` and
    its clone where a plain loop keeps the loss; the loss is fp32 (Hugging
    Face upcasts the logits, ``loss/loss_utils.py:61``).
    """
    fp32 = torch.finfo(torch.float32).bits // 8
    after = _most(runs["recipe_step"].timeline, ("backward", "optimizer step"))
    assert runs["lightning"].after_forward == after + fp32


def test_the_lightning_loop_is_exact_after_the_forward(runs):
    """loop="lightning"'s backward and optimizer-step moments are the real Trainer's, exactly."""
    predicted = runs["predicted"].timeline
    after = max(v for k, v in predicted.items() if k.startswith(("backward", "optimizer")))
    assert int(after) == runs["lightning"].after_forward


def test_the_lightning_loop_is_exact_at_its_peak_in_the_loss(runs):
    """loop="lightning"'s peak is the real Trainer's, 0 bytes off, at the model's loss.

    While ``LlamaForCausalLM.forward`` computes its loss (transformers 5.24
    ``models/llama/modeling_llama.py:469-475``), ``outputs.last_hidden_state``
    (the final norm's fp32 output, B x S x hidden) is still held, and
    ``ForCausalLMLoss`` holds the labels padded by one position
    (``loss/loss_utils.py:65``: B x (S + 1) int64) while the cross-entropy
    runs: the convention's "forward loss" moment holds both. Without
    ``loop="lightning"`` the prediction misses every gradient there, so the
    plain loop's peak is elsewhere and lower.
    """
    predicted, run = runs["predicted"], runs["lightning"]
    assert predicted.peak_moment == "forward loss"
    assert int(predicted.peak) == run.peak
    assert int(predicted.peak) - int(runs["plain"].peak) > 0


def test_the_loss_moment_holds_the_norm_output_and_the_padded_labels(runs):
    """From "forward lm_head" to "forward loss" the prediction adds the loss's storages only.

    Sized here from the shapes: the fp32 logits cast, the fp32
    log-probabilities, the total weight, the shifted labels, the loss scalar,
    and the B x (S + 1) int64 padded labels; nothing is freed between the two
    moments, so the final norm's fp32 output, alive at lm_head, is alive in
    the loss too.
    """
    batch, sequence = runs["size"]
    vocabulary = int(TINY_LLAMA["vocab_size"])
    fp32, int64 = torch.finfo(torch.float32).bits // 8, torch.iinfo(torch.int64).bits // 8
    loss_storages = (2 * batch * sequence * vocabulary * fp32 + fp32
                     + batch * sequence * int64 + fp32)
    padded_labels = batch * (sequence + 1) * int64
    moments = runs["predicted"].timeline
    assert int(moments["forward loss"] - moments["forward lm_head"]) == (
        loss_storages + padded_labels)


def test_a_default_config_also_fills_a_kv_cache_in_training():
    """With the config's default ``use_cache=True`` the forward fills a ``DynamicCache``.

    ``LlamaModel.forward`` makes one (``modeling_llama.py:374-375``) and
    keeps each layer's keys and values (bf16 under autocast, B x kv_heads x
    S x head_dim) until the forward returns: at Lightning's peak, in its
    loss, all of them are alive. ``recipe_model`` sets ``use_cache=False``.
    """
    batch, sequence = SIZES[0]
    cached = _lightning(batch, sequence, use_cache=True)
    plain = _lightning(batch, sequence)
    heads, hidden = int(TINY_LLAMA["num_attention_heads"]), int(TINY_LLAMA["hidden_size"])
    keys_and_values = (2 * int(TINY_LLAMA["num_hidden_layers"]) * batch
                       * int(TINY_LLAMA["num_key_value_heads"]) * sequence * (hidden // heads))
    bf16 = torch.finfo(torch.bfloat16).bits // 8
    assert cached.peak - plain.peak == keys_and_values * bf16


class _Classifier(lightning.LightningModule):
    """A plain ``nn.Sequential`` classifier: ``training_step`` applies the loss to its output."""

    def __init__(self, net, foreach: bool) -> None:
        super().__init__()
        self.net, self.loss, self.foreach = net, torch.nn.CrossEntropyLoss(), foreach

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, foreach=self.foreach)


def _mlp():
    """Seven narrow layers: at a large batch the forward, holding every gradient, peaks."""
    nn = torch.nn
    hidden = [m for _ in range(5) for m in (nn.ReLU(), nn.Linear(128, 128))]
    return nn.Sequential(nn.Linear(64, 128), *hidden, nn.ReLU(), nn.Linear(128, 10))


def _cnn():
    """A small CNN: its step peaks in the backward pass (max pooling's gradient)."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


CLASSIFIERS = {
    # name -> (builder, one sample's shape, AdamW's implementation, two batch sizes)
    "mlp for-loop": (_mlp, (64,), "for-loop", (256, 384)),
    "cnn foreach": (_cnn, (3, 16, 16), "foreach", (4, 10)),
}


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_a_plain_module_under_lightning_is_the_lightning_loop_to_the_byte(name):
    """The real Trainer's peak is loop="lightning"'s prediction, 0 bytes off, at two batches.

    A plain module has no loss inside its forward, so nothing is held past
    the convention's moments: the gradients through the forward (the MLP
    peaks there), autocast without its cache (every bias cast freed at once)
    and the kept clone of the loss (the CNN peaks in its backward, 4 bytes
    above the plain loop) are the whole difference from the plain recipe.
    """
    build, sample, implementation, batches = CLASSIFIERS[name]
    for batch in batches:
        torch.manual_seed(0)
        x, y = torch.randn(2 * batch, *sample), torch.randint(0, 10, (2 * batch,))
        rows = [(features.clone(), label.clone()) for features, label in zip(x, y, strict=True)]
        run = _fit(_Classifier(build(), foreach=implementation == "foreach"), rows, batch)
        network = from_module(build(), (batch, *sample), loss=torch.nn.CrossEntropyLoss())
        setup = Setup.recipe("lightning-bf16", optimizer_implementation=implementation)
        predicted = training_memory(network, setup=setup, precision="autocast-bf16")
        plain = training_memory(network, setup=setup.changed(loop="plain"),
                                precision="autocast-bf16")
        assert run.peak == int(predicted.peak), (batch, predicted.peak_moment)
        assert run.peak != int(plain.peak)
        if name.startswith("mlp"):
            assert predicted.peak_moment.startswith("forward")
            assert run.peak == run.before_zero_grad > run.after_forward


def _fit_accumulating(batch: int, sequence: int, steps: int):
    """Track two optimizer steps of ``steps`` micro-batches each under the real Trainer.

    Returns the tracker's live bytes and the marks; the second window is the steady one.
    """
    torch.manual_seed(0)
    module = _Llama(dict(TINY_LLAMA))
    ids = torch.randint(0, int(TINY_LLAMA["vocab_size"]), (2 * steps * batch, sequence))
    rows = [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]
    marks = _Marks()
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[marks], accumulate_grad_batches=steps,
    )
    with track(module, record=True) as tracker:
        marks.tracker = tracker
        trainer.fit(module, torch.utils.data.DataLoader(rows, batch_size=batch))
    assert trainer.global_step == 2 and len(marks.batches) == 2 * steps
    # Lightning zeroes the gradients once per window, in its first micro-batch
    # (loops/optimization/automatic.py ``_make_zero_grad_fn``)
    assert len(marks.zero_grads) == 2 and len(marks.backwards) == 2 * steps
    return [bytes_ for _, _, bytes_ in tracker.timeline], marks


def test_accumulating_under_lightning_adds_no_gradient_to_its_forward():
    """With ``accumulate_grad_batches=2`` every forward holds every gradient, counted once.

    Each micro-batch's forward and loss run with all the gradients alive: the
    previous window's in the first (Lightning zeroes them after ``training_step``),
    the window's own sum in the others. ``accumulated()`` on the lightning loop's
    prediction, whose forward already holds them, must not add them again: its
    forward moments are the real Trainer's to the byte, in both micro-batches of
    the steady window, and its peak bounds the window's from above.
    """
    from memtheory.estimate.accumulation import accumulated

    batch, sequence, steps = 2, 9, 2
    live, marks = _fit_accumulating(batch, sequence, steps)
    predicted = accumulated(_predicted(batch, sequence, "lightning"), steps)
    forward = max(v for k, v in predicted.timeline.items() if k.startswith(("forward", "loss")))
    first, second = marks.batches[steps], marks.batches[steps + 1]
    assert max(live[first:marks.zero_grads[1]]) == int(forward)
    assert max(live[second:marks.backwards[steps + 1]]) == int(forward)
    assert max(live[first:]) <= int(predicted.peak)
